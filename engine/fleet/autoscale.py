"""Autoscaling in the loop: a policy that reads the serving replicas every decision interval and starts or drains
replicas between a minimum and a maximum, with a cold start before a new replica serves.

The fleet holds MAX replicas; each is off, starting (its weights loading), serving, or draining (no new request,
finishing what it holds). The first MIN serve from the start. A started replica serves after its cold start: its
weights (per GPU) over the GPU's host link (hardware host_link_gbps: loaded from host memory, each GPU of the tp
group over its own link at once), plus --cold-start-s for what the link time leaves out (process start, CUDA graph
capture). A drained replica is switched off at the first decision after it has emptied.

Policies are classes in a registry (POLICIES), as routers are. Each turns what the serving replicas hold into the
replicas it wants, the way Kubernetes' horizontal pod autoscaler does: desired = ceil(sum of the metric / target).
The fleet scales up at once (to the wanted count, replicas on their way counted) and down one replica per
interval, so a brief lull does not throw away warm replicas.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, NamedTuple

import numpy as np

from engine.errors import InputError
from engine.fleet.spec import ScaleSpec

TIMELINE_POINTS = 240  # decisions kept for the JSON's timeline (every k-th when a run makes more)


class ScaleView(NamedTuple):
    """What a policy reads at a decision: the serving replicas' totals."""

    serving: int
    starting: int
    in_flight: int  # requests queued, preempted or running on the serving replicas
    kv_used: float  # KV blocks used over the serving replicas' pools (0..1)


class Policy:
    """A scaling policy: the replicas it wants (fractional, before rounding up and clamping to the bounds)."""

    name: ClassVar[str]
    default_target: ClassVar[float]
    unit: ClassVar[str]

    def wanted(self, v: ScaleView, target: float) -> float:
        raise NotImplementedError


class InFlight(Policy):
    """Requests in flight per replica (queued, preempted or running): a queue-length target. 32 by default: a
    decode batch that size still streams each answer near its batch-1 speed on a mid-size model (weights dominate
    the step's bytes), so a fleet held there keeps TPOT low."""

    name = "queue"
    default_target = 32.0
    unit = "requests in flight per replica"

    def wanted(self, v: ScaleView, target: float) -> float:
        return v.in_flight / target


class KvUse(Policy):
    """KV cache use per replica: scale out before the pool fills and requests queue for blocks (0.7 by default)."""

    name = "kv"
    default_target = 0.7
    unit = "KV pool fraction used"

    def wanted(self, v: ScaleView, target: float) -> float:
        return v.serving * v.kv_used / target


POLICIES: dict[str, type[Policy]] = {p.name: p for p in (InFlight, KvUse)}


class Autoscaler:
    """The replicas' scaling states and the decisions' record. Times in the fleet's simulated seconds."""

    def __init__(self, spec: ScaleSpec, n: int, cold_s: float) -> None:
        if spec.hi > n or spec.lo > spec.hi:
            raise InputError(f"--autoscale {spec.lo}:{spec.hi} needs MIN <= MAX <= the fleet's replicas ({n})")
        self.spec, self.n, self.cold_s = spec, n, cold_s
        self.policy = POLICIES[spec.policy]()
        self.target = spec.target if spec.target is not None else self.policy.default_target
        self.up_at = np.full(n, math.inf)  # when each replica serves (inf: off)
        self.up_at[: spec.lo] = 0.0
        self.on_since = np.full(n, np.nan)  # when each replica was switched on (nan: off)
        self.on_since[: spec.lo] = 0.0
        self.draining = np.zeros(n, dtype=bool)
        self.gpu_s = 0.0  # replica-seconds of the spells already switched off
        self.next_t = spec.interval_s
        self.ups = self.downs = 0
        self.starts: list[tuple[float, float]] = []  # (start, serving) of each replica started
        self.timeline: list[tuple[float, int, int, int, int]] = []

    def serving(self, i: int, t: float) -> bool:
        """Replica i takes new requests at t: started and loaded, not draining."""
        return self.up_at[i] <= t and not self.draining[i]

    def phase(self, i: int, t: float) -> tuple[str, float]:
        """Replica i at t for the app's rows: "serving", "starting" (with the seconds until it serves), "draining"
        or "off"."""
        up = float(self.up_at[i])
        if self.draining[i]:
            return "draining", 0.0
        if up == math.inf:
            return "off", 0.0
        return ("starting", up - t) if up > t else ("serving", 0.0)

    def decide(self, t: float, reps: list[Any]) -> None:
        """One decision at t over the fleet's replicas (engine.fleet.replica.Replica): switch off drained ones, read
        the serving ones, start or drain to the policy's count."""
        for i in np.flatnonzero(self.draining):
            if not reps[i].busy:
                self._off(int(i), t)
        on = [i for i in range(self.n) if self.serving(i, t)]
        starting = int(((self.up_at > t) & (self.up_at < math.inf)).sum())
        used = sum(reps[i].lane.pool.used for i in on)
        pool = sum(reps[i].lane.pool.total for i in on)
        v = ScaleView(len(on), starting, sum(reps[i].load for i in on), used / pool if pool else 0.0)
        want = min(self.spec.hi, max(self.spec.lo, math.ceil(self.policy.wanted(v, self.target) - 1e-9)))
        if want > v.serving + starting:
            self._scale_up(want - v.serving - starting, t)
        elif want < v.serving and not starting and len(on) > 1:
            self._drain(min(on, key=lambda i: (reps[i].load, -i)))
        self.timeline.append((t, len(on), starting, int(self.draining.sum()), v.in_flight))
        self.next_t = t + self.spec.interval_s

    def _scale_up(self, k: int, t: float) -> None:
        """k more replicas: warm draining ones first (they serve at once), then cold ones (after the load time)."""
        for i in np.flatnonzero(self.draining)[:k]:
            self.draining[i] = False
            k -= 1
        for i in np.flatnonzero(np.isnan(self.on_since))[:k]:
            self.up_at[i] = t + self.cold_s
            self.on_since[i] = t
            self.starts.append((t, t + self.cold_s))
            self.ups += 1

    def _drain(self, i: int) -> None:
        self.draining[i] = True
        self.downs += 1

    def _off(self, i: int, t: float) -> None:
        self.gpu_s += t - float(self.on_since[i])
        self.up_at[i] = math.inf
        self.on_since[i] = np.nan
        self.draining[i] = False

    def replica_seconds(self, end: float) -> float:
        """Replica-seconds switched on up to `end`: the switched-off spells and every replica still on."""
        on = self.on_since[~np.isnan(self.on_since)]
        return self.gpu_s + float(np.clip(end - on, 0.0, None).sum())

    def report(self, end: float, tp: int, arrival: np.ndarray, ttft: np.ndarray, slo_ttft: float | None) -> dict:
        """The run's scaling: counts, GPU-hours against a fixed fleet of MAX, TTFT of the requests that arrived
        while a replica was starting (and SLO misses among them) against the rest, and the timeline."""
        s = self.spec
        gpu_h = self.replica_seconds(end) * tp / 3600.0
        fixed_h = s.hi * tp * end / 3600.0
        during = np.zeros(arrival.size, dtype=bool)
        for a, b in self.starts:
            during |= (arrival >= a) & (arrival < b)
        step = max(1, math.ceil(len(self.timeline) / TIMELINE_POINTS))
        return {
            "min": s.lo, "max": s.hi, "policy": s.policy, "target": self.target, "target_unit": self.policy.unit,
            "interval_s": s.interval_s, "cold_start_s": self.cold_s, "scale_ups": self.ups, "scale_downs": self.downs,
            "gpu_hours": gpu_h, "gpu_hours_fixed_max": fixed_h,
            "gpu_hours_saved_fraction": 1.0 - gpu_h / fixed_h if fixed_h else None,
            "during_scale_up": _ttft_block(ttft[during], slo_ttft),
            "otherwise": _ttft_block(ttft[~during], slo_ttft),
            "timeline_columns": ["time_s", "serving", "starting", "draining", "in_flight"],
            "timeline": [list(p) for p in self.timeline[::step]],
        }


def _ttft_block(ttft: np.ndarray, slo: float | None) -> dict[str, Any]:
    """Finished requests, their TTFT p90, and how many missed the TTFT SLO (None without one)."""
    ok = np.isfinite(ttft)
    return {"requests": int(ttft.size), "ttft_p90_s": float(np.percentile(ttft[ok], 90)) if ok.any() else None,
            "ttft_slo_misses": int((ttft > slo).sum()) if slo is not None else None}


def cold_start_s(weight_bytes_per_gpu: float, host_link_gbps: float, extra_s: float) -> float:
    """Seconds from a start to serving: each GPU's weights over its host link, plus the fixed extra."""
    return weight_bytes_per_gpu / (host_link_gbps * 1e9) + extra_s
