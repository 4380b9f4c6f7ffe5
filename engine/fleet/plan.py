"""`plan`: search a grid of deployments for the cheapest one that serves a workload within its SLOs.

A plan is a pure function mapped over a grid: `evaluate(point, base, slo)` builds the deployment the
point names on top of the base configuration (the workload, runtime and dtypes), serves the workload
to the end and returns plain numbers. The same point, base and seed give the same numbers in any
process, so a local process pool and Ray tasks (engine/fleet/plan_ray.py) return the same plan.

What cannot fit (weights over memory, heads that do not split over tp, one request whose KV cache
overflows the pool, a price over the budget) is pruned before anything is simulated, with the reason.
"""

from __future__ import annotations

import gc
import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from engine import budget
from engine.config import MAX_BATCHED_TOKENS, EngineConfig
from engine.errors import InputError
from engine.fleet import pool
from engine.fleet.autoscale import POLICIES
from engine.fleet.fleet import Fleet, FleetSpec, StepModels, engine_for, parse_pd, scripted
from engine.fleet.routers import ROUTERS
from engine.fleet.spec import ScaleSpec, parse_autoscale
from engine.physics import energy
from engine.physics.batch import Batch
from engine.physics.specs import load_hardware
from engine.serving.accounting import L, Totals, finite_percentiles, totals, uncount_itl
from engine.serving.engine import Engine
from engine.traffic.workload import parse_dist

MAX_POINTS = 100_000  # a grid larger than this is a typo (e.g. --replicas 1-100000), not a plan


@dataclass(frozen=True, slots=True)
class Point:
    """One deployment: which GPU and model, tensor parallelism, how many replicas split how, scheduler knobs."""

    hardware: str
    model: str
    tp: int
    replicas: int  # engines in the fleet (P + D with disaggregation)
    pd: tuple[int, int] | None  # (prefill replicas, decode replicas), or None: every replica does both
    max_num_seqs: int
    max_num_batched_tokens: int
    router: str
    # Expert parallel with DP attention (ep ranks of tp GPUs per replica) and pipeline stages (pp of tp GPUs).
    ep: int = 1
    pp: int = 1
    scale: ScaleSpec | None = None  # autoscaling between scale.lo and scale.hi = replicas (None: a fixed fleet)

    @property
    def replica_gpus(self) -> int:
        """GPUs one replica runs on: tp per stage, pp stages, ep data-parallel ranks."""
        return self.tp * self.pp * self.ep

    @property
    def gpus(self) -> int:
        """GPUs the deployment rents (at most, when it autoscales): every GPU of every replica."""
        return self.replica_gpus * self.replicas

    def as_dict(self) -> dict[str, Any]:
        """The point's fields for JSON (pd as "P:D" or null; autoscale bounds and policy only when it scales)."""
        d = {"hardware": self.hardware, "model": self.model, "tp": self.tp, "replicas": self.replicas,
             "pd": None if self.pd is None else f"{self.pd[0]}:{self.pd[1]}", "gpus": self.gpus,
             "max_num_seqs": self.max_num_seqs, "max_num_batched_tokens": self.max_num_batched_tokens,
             "router": self.router, "ep": self.ep, "pp": self.pp}
        if self.scale is not None:
            d["autoscale"] = f"{self.scale.lo}:{self.scale.hi}"
            d["scale_policy"] = self.scale.policy
        return d

    def label(self) -> str:
        """A short human name: 'h100-sxm tp2 x4 (1:3) rr seqs256 tok8192' ('x1:4 queue' when it autoscales)."""
        split = f" ({self.pd[0]}:{self.pd[1]})" if self.pd else ""
        par = (f" ep{self.ep}" if self.ep > 1 else "") + (f" pp{self.pp}" if self.pp > 1 else "")
        reps = f"{self.replicas}" if self.scale is None else f"{self.scale.lo}:{self.scale.hi} {self.scale.policy}"
        return (f"{self.hardware} {self.model} tp{self.tp}{par} x{reps}{split} {self.router}"
                f" seqs{self.max_num_seqs} tok{self.max_num_batched_tokens}")


@dataclass(frozen=True, slots=True)
class Space:
    """The search space: every combination of these values is one Point (with pd splits adding their own)."""

    hardware: tuple[str, ...]
    model: tuple[str, ...]
    tp: tuple[int, ...]
    replicas: tuple[int, ...]
    pd: tuple[tuple[int, int], ...] = ()  # P:D splits tried besides plain replicas (their replicas = P + D)
    pd_only: bool = False  # only the splits, no colocated replicas
    max_num_seqs: tuple[int, ...] = (256,)
    max_num_batched_tokens: tuple[int, ...] = (MAX_BATCHED_TOKENS,)
    router: tuple[str, ...] = ("round-robin",)
    ep: tuple[int, ...] = (1,)
    pp: tuple[int, ...] = (1,)
    scale: tuple[ScaleSpec, ...] = ()  # autoscaled layouts tried besides the fixed replica counts (and P:D)

    def points(self) -> list[Point]:
        """Every point, in a fixed order (hardware, model, tp, layout, knobs, router, then ep and pp)."""
        layouts: list[tuple[int, tuple[int, int] | None, ScaleSpec | None]] = \
            [] if self.pd_only else [(r, None, None) for r in self.replicas]
        layouts += [(p + d, (p, d), None) for p, d in self.pd]
        layouts += [(sc.hi, None, sc) for sc in self.scale]
        n = (len(self.hardware) * len(self.model) * len(self.tp) * len(layouts) * len(self.max_num_seqs)
             * len(self.max_num_batched_tokens) * len(self.router) * len(self.ep) * len(self.pp))
        if n > MAX_POINTS:
            raise InputError(f"the search space has {n:,} points, more than {MAX_POINTS:,}: narrow a range")
        out = []
        for hw, m, tp, (reps, pd, sc), seqs, mbt, router, ep, pp in itertools.product(
                self.hardware, self.model, self.tp, layouts, self.max_num_seqs, self.max_num_batched_tokens,
                self.router, self.ep, self.pp):
            # A router only matters with more than one engine to choose from: one point, not one per router.
            if reps * ep == 1 and router != self.router[0]:
                continue
            out.append(Point(hw, m, tp, reps, pd, seqs, mbt, router, ep, pp, sc))
        return out


class Served(NamedTuple):
    """What a point's run served beyond its figures: tokens in and out (its $/Mtok's divisor), and how many of its
    replicas, counted from the first, received any request (the rest stayed untouched the whole run)."""

    tokens: int
    replicas_used: int


@dataclass(frozen=True, slots=True)
class PointResult:
    """One point served to the end: its cost, latency percentiles, goodput and volume (plain numbers).

    `as_dict()` is its JSON row (the point's fields under "config"); `flat()` the shape of plan's best and
    Pareto rows (the point's fields at the top level). Field order is the JSON's key order.
    """

    point: Point
    cost_per_hour: float  # dollars per hour of the run: with autoscaling, the mean over it (GPUs on x price)
    ttft_s: float | None  # at the SLO's percentile (None: no request finished)
    tpot_s: float | None
    ttft_p99_s: float | None
    tpot_p99_s: float | None
    goodput_rps: float  # requests meeting the SLOs per second of the whole run, drain included (vLLM's definition)
    goodput_per_dollar: float | None
    slo_met: float  # the share of finished requests that met the SLOs: what goodput alone hides when a run drains
    usd_per_mtok: float | None
    throughput_out_tok_s: float
    requests_completed: int
    sim_time_s: float
    preemptions: int
    gpu_hours: float | None = None  # GPU-hours the run kept on: every GPU the whole run, or what an autoscaler had on
    # With --energy (engine.physics.energy); absent from the JSON without it.
    joules_per_output_token: float | None = None
    kw_per_replica: float | None = None
    output_tok_s_per_mw: float | None = None
    energy_share_of_cost: float | None = None
    # What the run served that no figure shows, for pricing the same run as a larger fleet (run_grid's idle chains):
    # not in the JSON, not compared.
    served: Served | None = field(default=None, compare=False, repr=False)

    def figures(self) -> dict[str, Any]:
        """Every field but the point, in order (the energy figures only when the plan priced energy)."""
        return {f: getattr(self, f) for f in _FIGURES if f not in _ENERGY or self.kw_per_replica is not None}

    def as_dict(self) -> dict[str, Any]:
        """The JSON row: {"config": the point's fields, then every figure}."""
        return {"config": self.point.as_dict(), **self.figures()}

    def flat(self) -> dict[str, Any]:
        """The point's fields and the figures in one mapping (plan's best and Pareto rows)."""
        d = self.point.as_dict()
        d.update(self.figures())
        return d


_FIGURES = tuple(f for f in PointResult.__dataclass_fields__ if f not in ("point", "served"))
_ENERGY = ("joules_per_output_token", "kw_per_replica", "output_tok_s_per_mw", "energy_share_of_cost")


@dataclass(frozen=True, slots=True)
class Slo:
    """Latency targets on one percentile of completed requests (None: no target on that metric)."""

    ttft: float | None = None
    tpot: float | None = None
    percentile: float = 90.0

    @property
    def key(self) -> str:
        return f"p{self.percentile:g}"


# ---- parsing the search-space flags (one-line InputErrors) ------------------------------------------

def parse_names(text: str, what: str) -> tuple[str, ...]:
    """'a,b' -> ('a', 'b'); empty items are an error."""
    items = tuple(s.strip() for s in text.split(","))
    if not all(items):
        raise InputError(f"{what}: empty item in {text!r}; give names separated by commas")
    return tuple(dict.fromkeys(items))


def parse_ints(text: str, what: str) -> tuple[int, ...]:
    """'1,2,4' or '1-16' or '1-16,32' -> sorted unique whole numbers >= 1."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        try:
            a, _, b = part.partition("-")
            lo, hi = int(a), int(b or a)
        except ValueError:
            raise InputError(f"{what}: expected whole numbers like 1,2,4 or a range like 1-16, got {text!r}") from None
        if lo > hi:
            raise InputError(f"{what}: range {part!r} runs backwards; write {hi}-{lo}")
        if hi - lo >= MAX_POINTS:
            raise InputError(f"{what}: {text!r} names more than {MAX_POINTS:,} values")
        out.update(range(lo, hi + 1))
    if not out or min(out) < 1:
        raise InputError(f"{what}: values must be whole numbers >= 1, got {text!r}")
    return tuple(sorted(out))


def parse_pd_list(text: str, replicas: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """'1:1,1:3' -> those splits; 'all' -> every split P + D = R (P, D >= 1) of each replica count R."""
    if text.strip() == "all":
        return tuple((p, r - p) for r in replicas for p in range(1, r))
    return tuple(dict.fromkeys(parse_pd(s.strip()) for s in text.split(",")))


def parse_scale_list(text: str, policies: str, interval_s: float, target: float | None,
                     cold_extra_s: float) -> tuple[ScaleSpec, ...]:
    """'1:4,2:6' with policies 'queue,kv' -> every bounds x policy as a ScaleSpec (the other knobs shared)."""
    bounds = tuple(dict.fromkeys(parse_autoscale(b.strip()) for b in text.split(",")))
    names = parse_names(policies, "--scale-policy")
    for n in names:
        if n not in POLICIES:
            raise InputError(f"--scale-policy {n!r} is not a policy; choose from {', '.join(POLICIES)}")
    return tuple(ScaleSpec(lo, hi, n, interval_s, target, cold_extra_s) for lo, hi in bounds for n in names)


def parse_routers(text: str) -> tuple[str, ...]:
    """'round-robin,kv-aware' or 'all' -> router names, each one of ROUTERS."""
    if text.strip() == "all":
        return tuple(ROUTERS)
    names = parse_names(text, "--router")
    for n in names:
        if n not in ROUTERS:
            raise InputError(f"--router {n!r} is not a router; choose from {', '.join(ROUTERS)}")
    return names


# ---- one point ------------------------------------------------------------------------------------

def fleet_spec(point: Point, base: EngineConfig, kv_link_gbps: float | None = None) -> FleetSpec:
    """The fleet a point describes on top of the base configuration (workload, runtime, dtypes, seed).

    Under expert parallel each replica is ep data-parallel ranks, each an engine of its own that serves the
    requests routed to it (the step model prices the ranks' shared expert traffic as if all were as busy): the
    fleet runs replicas x ep engines, so the point's throughput and bill are the whole deployment's."""
    cfg = replace(base, hardware=point.hardware, model=point.model, tp=point.tp, max_batch=point.max_num_seqs,
                  max_batched_tokens=point.max_num_batched_tokens, ep=point.ep, pp=point.pp)
    return FleetSpec(cfg, replicas=point.replicas * point.ep, router=point.router, pd=point.pd,
                     kv_link_gbps=kv_link_gbps, scale=point.scale)


def cost_per_hour(point: Point, base: EngineConfig) -> float:
    """Dollars per hour for every GPU of the point (the base's price per GPU-hour, or the preset's)."""
    price = base.price_per_hour if base.price_per_hour is not None else load_hardware(point.hardware).price_per_hour
    return price * point.gpus


def prune(point: Point, base: EngineConfig, budget_per_hour: float | None = None,
          work: dict[Point, float] | None = None) -> str | None:
    """Why the point cannot run (weights, heads, one request's KV, its fleet's cost estimate, the budget), or None
    if it can; `work` gets the point's estimated simulated steps (engine.budget) when it can run.

    Building one replica's engine runs every fit check the engine has, without simulating a single step
    (every replica of a point is the same, so one stands for all); the fleet's estimate scales it to the
    point's replicas, so a point of 4,000 replicas is refused here rather than in a worker.
    """
    if point.pd is not None and point.ep > 1:
        return "prefill/decode splits with expert parallel are not modelled: give --pd or --ep, not both"
    if point.scale is not None and point.ep > 1:
        return ("autoscaling an expert-parallel deployment (whole EP groups at a time) is not modelled:"
                " give --autoscale or --ep, not both")
    try:
        cfg = fleet_spec(point, base).config
        fit = (_fit if not scripted(cfg) else _fit.__wrapped__)(cfg)
        if isinstance(fit, str):
            return fit
        est = budget.for_fleet(fit[0], point.replicas * point.ep, fit[1], cfg.max_batch)
        budget.check(est, bounded=True, force=base.force)
    except InputError as e:
        return str(e)
    if work is not None:
        work[point] = est.steps + point.replicas * budget.REPLICA_STEPS
    cost = cost_per_hour(point, base)
    if budget_per_hour is not None and cost > budget_per_hour + 1e-9:
        return f"costs ${cost:,.2f}/h for {point.gpus} GPUs, over the budget of ${budget_per_hour:,.2f}/h"
    return None


@lru_cache(maxsize=256)
def _fit(cfg: EngineConfig) -> str | tuple[budget.Estimate, int]:
    """One replica's engine built for its fit checks: why it cannot be, or its run's estimate and its KV blocks.

    The engine depends on the point only through `cfg`, which points differing in replicas or router share: one
    engine per cfg, not per point. Not cached with a workload file or trace (scripted), which the engine reads
    each time; hardware and model files are cached by name anyway (engine.physics.specs)."""
    try:
        eng = Engine(cfg)
    except InputError as e:
        return str(e)
    return eng.estimate, eng.kv_blocks_total


def beyond_slo(point: Point, base: EngineConfig, slo: Slo) -> str | None:
    """Why no run of a point that fits can meet the SLOs, from bounds no simulation can beat (None if it might)."""
    ttft, tpot = slo_bounds(point, base, slo.percentile)
    out = []
    if slo.tpot is not None and tpot is not None and tpot > slo.tpot:
        out.append(f"{slo.key} TPOT is at least {tpot * 1e3:.3g} ms (one decode step alone) > {slo.tpot:g} s")
    if slo.ttft is not None and ttft is not None and ttft > slo.ttft:
        out.append(f"{slo.key} TTFT is at least {ttft * 1e3:.3g} ms (each prompt computed alone) > {slo.ttft:g} s")
    return "; ".join(out) or None


def slo_bounds(point: Point, base: EngineConfig, percentile: float) -> tuple[float | None, float | None]:
    """Lower bounds on a run's TTFT and TPOT at `percentile` (None where there is none to give).

    TPOT: every token after a request's first takes a step of its own, and no step is cheaper than one token
    on an empty cache (every cost term grows with tokens and context). TTFT: a request's first token waits at
    least for its whole prompt computed alone in one step (chunks and batch-mates only add time), plus the
    request path; the percentile of those bounds over the very prompts the run draws bounds the run's.
    Speculative decoding (several tokens a step) and scripted workloads (cached prefixes skip prefill) are left
    to the simulation.
    """
    if base.spec_tokens or scripted(base):
        return None, None
    return _slo_bounds(fleet_spec(point, base).config, percentile)


@lru_cache(maxsize=256)
def _slo_bounds(cfg: EngineConfig, percentile: float) -> tuple[float | None, float | None]:
    """slo_bounds for one replica's configuration (not scripted, no speculation): the points differing only in
    replicas or router share it, so a grid builds its engine and draws its prompts once per cfg."""
    eng = Engine(cfg)
    sm = eng.step_model
    out, think = parse_dist(cfg.output, "--output", 1), parse_dist(cfg.think, "--think", 0)
    tpot = None
    if not (out.is_fixed and think.is_fixed and round(out.a) + round(think.a) <= 1):  # else no request has a TPOT
        tpot = min(sm.price(Batch(tokens=1, seqs=1, sum_ctx=0.0, sum_win=0.0, attn_full=0.5, attn_win=0.5, logits=1,
                                  attn_decode=ad)).time for ad in (0.5, 0.0))
    ttft = None
    if cfg.requests is not None:
        # The run's own prompts: the lane's seeded sampler, clipped as the lane clips them (this engine never runs).
        prompts = eng.lanes[0].source.s_prompt.take(int(cfg.requests)).astype(np.float64)
        one, zero = np.ones_like(prompts), np.zeros_like(prompts)
        t = sm.price(Batch(tokens=prompts, seqs=one, sum_ctx=zero, sum_win=zero, attn_full=prompts * prompts / 2,
                           attn_win=sm.model.local_pairs(zero, prompts), logits=one, attn_decode=zero)).time
        ttft = _pct(t + (0.0 if sm.opts.ideal else sm.runtime.request_overhead_s), percentile)
    return ttft, tpot


# The step models of the latest points' replica configurations (hardware, model, tp, batch caps ...), shared by the
# points that differ only in replicas or router (a grid's neighbours: its order puts them together), so each quiet-run
# price table is priced once per configuration, not once per replica of every point. A few kept: each holds up to
# ~9 MB of tables (engine.physics.run_table).
_STEP_MODELS = StepModels(keep=4)


def evaluate(point: Point, base: EngineConfig, slo: Slo, kv_link_gbps: float | None = None) -> PointResult:
    """Serve the workload on the point's deployment to the end and return its numbers.

    One replica runs on the engine itself (a fleet of one gives the same numbers; the engine also replays
    --workload files and --trace); more run as a fleet.
    """
    dep = engine_for(fleet_spec(point, base, kv_link_gbps), step_models=_STEP_MODELS)
    if _brief(point, base):
        uncount_itl(_lanes(dep))  # (nothing the point reads is an inter-token latency)
    dep.run()
    tot, used, m = _read(dep, point, base)
    lat = dep.latencies()
    ttft, tpot = lat[:, L.TTFT], lat[:, L.TPOT]
    q = slo.percentile
    sim = tot.sim_time_s
    tokens = tot.input_tokens + tot.output_tokens
    ok = np.ones(ttft.size, dtype=bool)
    if slo.ttft is not None:
        ok &= ttft <= slo.ttft
    if slo.tpot is not None:
        ok &= ~(tpot > slo.tpot)  # a one-token answer has no TPOT: it cannot miss it
    good = int(ok.sum())
    goodput = good / sim if sim else 0.0
    scaled = m["autoscale"]["gpu_hours"] if m is not None and point.scale is not None else None
    cost_h, per_dollar, per_mtok, gpu_h = _costs(point, base, sim, tokens, goodput, scaled)
    watts = energy.run_energy(m, dep.step_model, point.gpus, point.replica_gpus, base.price_per_kwh,
                              cost_h / point.gpus) \
        if m is not None and base.energy else {}
    return PointResult(point, cost_h, _pct(ttft, q), _pct(tpot, q), _pct(ttft, 99), _pct(tpot, 99), goodput,
                       per_dollar, good / ttft.size if ttft.size else 0.0, per_mtok,
                       tot.throughput_out_tok_s, tot.requests_completed, sim, tot.preemptions, gpu_h,
                       **{k: watts[k] for k in _ENERGY if k in watts}, served=Served(tokens, used))


def _read(dep: Engine | Fleet, point: Point, base: EngineConfig) -> tuple[Totals, int, dict[str, Any] | None]:
    """What evaluate reads of a finished run: its totals, how many of its replicas (from the first) received a
    request, and its whole metrics where a figure needs them (P:D reads answers from its decode replicas alone, an
    autoscaler's GPU-hours, energy), else None: the metrics' percentiles, histograms and rates (~3 ms a point,
    2-3 % of one) are not built for a plan point that reads none of them. Both ways read the same numbers:
    run_metrics takes its totals from accounting.totals and its replicas' rows from Replica.summary."""
    if _brief(point, base):
        tot = totals(_lanes(dep))
        if isinstance(dep, Fleet):
            return tot, _used([r.summary(tot.sim_time_s) for r in dep.reps]), None
        return tot, point.replicas, None
    m = dep.metrics()
    reps = m.get("replicas")
    return Totals(*(m[k] for k in Totals._fields)), point.replicas if reps is None else _used(reps), m


def _brief(point: Point, base: EngineConfig) -> bool:
    """Whether a point's figures come from its run's totals and latency rows alone (no P:D, autoscaling or energy:
    see _read), so its run need count no inter-token latencies."""
    return point.pd is None and point.scale is None and not base.energy


def _lanes(dep: Engine | Fleet) -> list[Any]:
    """Every lane of an engine or a fleet (a replica's one lane each)."""
    return [r.lane for r in dep.reps] if isinstance(dep, Fleet) else list(dep.lanes)


def _used(reps: list[dict[str, Any]]) -> int:
    """A fleet's replicas from the first up to the last one that received a request (a replica that never did has
    neither an answer nor a queue peak), from their metrics rows (Replica.summary)."""
    return 1 + max((i for i, r in enumerate(reps) if r["requests_completed"] or r["queue_peak"]), default=-1)


def _costs(point: Point, base: EngineConfig, sim: float, tokens: int, goodput: float,
           gpu_h: float | None = None) -> tuple[float, float | None, float | None, float]:
    """What a run of `sim` seconds serving `tokens` costs on the point's GPUs: $/h, goodput per $, $/Mtok, GPU-hours.

    Plan rents every GPU for the whole run, idle or not: $/Mtok is the fleet's bill over all tokens. An autoscaled
    fleet pays for the GPU-hours its replicas were on (`gpu_h`, loading or serving), so its $/h is their mean over
    the run."""
    if gpu_h is None:
        gpu_h = point.gpus * sim / 3600.0
    cost_h = cost_per_hour(point, base)
    if point.scale is not None and sim:
        cost_h *= gpu_h / (point.gpus * sim / 3600.0)
    usd = cost_h * sim / 3600.0
    return cost_h, goodput * 3600.0 / cost_h if cost_h else None, usd / tokens * 1e6 if tokens else None, gpu_h


def as_point(r: PointResult, point: Point, base: EngineConfig) -> PointResult:
    """`r`'s run as another point's result, for a point that provably runs the same simulation (see idle_chains):
    the same figures, priced on the point's GPUs."""
    assert r.served is not None and point.scale is None and not base.energy
    cost_h, per_dollar, per_mtok, gpu_h = _costs(point, base, r.sim_time_s, r.served.tokens, r.goodput_rps)
    return replace(r, point=point, cost_per_hour=cost_h, goodput_per_dollar=per_dollar, usd_per_mtok=per_mtok,
                   gpu_hours=gpu_h)


def _pct(x: np.ndarray, q: float) -> float | None:
    """The q-th percentile of the finite values (None if there are none)."""
    v = finite_percentiles(x, (q,))
    return None if v is None else v[0]


def misses(r: PointResult, slo: Slo) -> list[str]:
    """The SLO terms a result fails, as 'p90 TTFT 0.31 s > 0.2 s' (empty: it meets them all)."""
    out = []
    for name, v, target in (("TTFT", r.ttft_s, slo.ttft), ("TPOT", r.tpot_s, slo.tpot)):
        if target is not None and v is not None and v > target:
            out.append(f"{slo.key} {name} {v:.3g} s > {target:g} s")
    if slo.ttft is not None and r.ttft_s is None:
        out.append("no request finished")
    return out


# ---- the whole grid -------------------------------------------------------------------------------

Job = tuple[Point, EngineConfig, Slo, float | None]  # what evaluate() takes: one grid point and its context


def _evaluate_job(job: Job) -> PointResult:
    """evaluate() on a packed job (what a worker process or a Ray task runs), then the point's engines freed.

    A lane and its request source refer to each other, so a finished fleet is freed only by the cycle collector,
    which counts objects, not bytes: a few hundred large arrays never trigger it, and a serial plan of 97 points
    held every finished fleet (9.9 GB at its peak). Collecting after each point keeps one point's memory.
    """
    try:
        return evaluate(*job)
    finally:
        gc.collect()


def serial_map(jobs: list[Any], fn: Callable[[Any], Any] = _evaluate_job) -> Iterator[tuple[int, Any]]:
    """Run `fn` (by default evaluate) on jobs one after another in this process, yielding (index, result)."""
    return pool.serial_map(jobs, fn)


def pool_map(jobs: list[Any], workers: int, fn: Callable[[Any], Any] = _evaluate_job) -> Iterator[tuple[int, Any]]:
    """Run `fn` (by default evaluate) on jobs in a local process pool, yielding (index, result) as they finish
    (any order); in this process when there is one worker or one job (engine.fleet.pool)."""
    return pool.pool_map(jobs, workers, fn)


def run_grid(jobs: list[Job], mapper: Callable[[list[Job]], Iterable[tuple[int, PointResult]]],
             on_result: Callable[[int, PointResult], None] | None = None, share: bool = True) -> list[PointResult]:
    """Every job's result in grid order, whichever order the mapper finished them in.

    Points that provably run the same simulation as a larger fleet (idle_chains) are not simulated again: the grid
    runs in waves, the first every point but those that might, each later one the next of each chain that the
    previous runs did not settle (`share` False: one wave, every point simulated; for a mapper that costs much to
    call again).

    The heap as the grid starts is frozen for the grid's length (gc.freeze; a local pool's forked workers inherit
    it): each job ends with a full collection (_evaluate_job), which then walks only the objects the jobs made,
    not the ~30,000 of the imports and the caller's (~5-10 ms a point, 1-2% of one). Unfrozen after, so a
    long-lived caller's garbage is collected as before.
    """
    out: list[PointResult | None] = [None] * len(jobs)
    chains = idle_chains(jobs) if share else []
    later = {i for c in chains for i in c[1:]}
    wave = [i for i in range(len(jobs)) if i not in later]
    gc.freeze()
    try:
        while wave:
            for k, r in mapper([jobs[i] for i in wave]):
                out[wave[k]] = r
                if on_result is not None:
                    on_result(wave[k], r)
            wave = _settle(chains, jobs, out, on_result)
    finally:
        gc.unfreeze()
    missing = [i for i, r in enumerate(out) if r is None]
    if missing:
        raise RuntimeError(f"{len(missing)} grid points returned no result")
    return [r for r in out if r is not None]


# Routers that send a request to the lowest-numbered replica with nothing to do whenever one has nothing: each picks
# the least replica of an order that ends in the index, and a replica that never received a request is least in every
# other term (load 0, its whole pool free, nothing cached).
IDLE_FIRST = ("least-loaded", "kv-aware", "prefix-aware")


def idle_chains(jobs: list[Job]) -> list[list[int]]:
    """Groups of jobs (indices, most replicas first) that differ only in their replica count, where a run that
    never sent a request to its replicas from the u-th on is provably the run of every count from u up to its own.

    Under an IDLE_FIRST router, a fleet of R whose replicas u.. never received a request routed every request as a
    fleet of R' in [u, R] does (the least of a set is the least of any subset that holds it), so those fleets run
    the same replicas through the same steps and report the same figures (idle replicas add nothing: no answer,
    no token, a clock no later than the last arrival). Left out, where an untouched replica is not so plainly
    inert or a figure counts it: one replica (the engine's own loop), P:D, autoscaling, expert parallel, energy
    (idle replicas draw power), KV tiers below the GPU, closed loops, scripted workloads and a --duration bound."""
    groups: dict[Any, list[int]] = {}
    for i, (point, base, slo, kv) in enumerate(jobs):
        if not isinstance(point, Point) or point.router not in IDLE_FIRST or point.replicas < 2 \
                or point.pd is not None or point.scale is not None or point.ep != 1:
            continue
        if base.energy or base.kv_offload_gb or base.kv_disk_gb or base.kv_remote_gb or base.users \
                or base.duration is not None or scripted(base):
            continue
        groups.setdefault((replace(point, replicas=1), base, slo, kv), []).append(i)
    return [sorted(g, key=lambda i: -jobs[i][0].replicas) for g in groups.values() if len(g) > 1]


def _settle(chains: list[list[int]], jobs: list[Job], out: list[PointResult | None],
            on_result: Callable[[int, PointResult], None] | None) -> list[int]:
    """Fill each chain's points that its latest run provably ran (as_point), and return the next wave: the first
    point of each chain that is left (fewer replicas than that run used)."""
    wave = []
    for chain in chains:
        ran = None
        for i in chain:
            r = out[i]
            if r is not None:
                ran = r
                continue
            point, base = jobs[i][0], jobs[i][1]
            if ran is None or ran.served is None or point.replicas < ran.served.replicas_used:
                if ran is not None:
                    wave.append(i)
                break
            out[i] = as_point(ran, point, base)
            if on_result is not None:
                on_result(i, out[i])
    return wave


def pareto(results: list[PointResult]) -> list[PointResult]:
    """Results no other result beats on $/Mtok, TTFT and TPOT at once (sorted by $/Mtok)."""
    pts = [(r, (r.usd_per_mtok, r.ttft_s, r.tpot_s)) for r in results]
    pts = [(r, a) for r, a in pts if None not in a]
    front = []
    for r, a in pts:
        dominated = any(all(x <= v for x, v in zip(b, a, strict=True)) and any(x < v for x, v in
                        zip(b, a, strict=True)) for _, b in pts)
        if not dominated:
            front.append(r)
    return sorted(front, key=lambda r: (r.usd_per_mtok, r.ttft_s, r.tpot_s))


def summarize(results: list[PointResult], pruned: list[dict[str, Any]], slo: Slo) -> dict[str, Any]:
    """Best (cheapest per hour meeting the SLOs; ties by goodput), the Pareto front, and everything infeasible:
    plan's JSON report (results as rows, see PointResult)."""
    ok = [r for r in results if not misses(r, slo)]
    infeasible = list(pruned) + [{"config": r.point.as_dict(), "why": "; ".join(misses(r, slo))}
                                 for r in results if misses(r, slo)]
    best = min(ok, key=lambda r: (r.cost_per_hour, -r.goodput_rps, r.usd_per_mtok or 0.0)) if ok else None
    out: dict[str, Any] = {
        "best": None if best is None else best.flat(),
        "pareto": [r.flat() for r in pareto(results)],
        "evaluated": len(results),
        "pruned": len(pruned),
        "feasible": len(ok),
        "infeasible": infeasible,
        "slo": {"ttft_s": slo.ttft, "tpot_s": slo.tpot, "percentile": slo.percentile},
    }
    if best is None and results:
        out["binding"] = binding(results, slo)
    return out


def binding(results: list[PointResult], slo: Slo) -> dict[str, Any]:
    """When nothing meets the SLOs: which target binds and the nearest point (smallest worst ratio to target)."""
    terms = [(n, k, t) for n, k, t in (("TTFT", "ttft_s", slo.ttft), ("TPOT", "tpot_s", slo.tpot)) if t is not None]

    def worst(r: PointResult) -> float:
        return max((getattr(r, k) / t if getattr(r, k) is not None else math.inf) for _, k, t in terms)

    near = min(results, key=lambda r: (worst(r), r.cost_per_hour))
    lowest = {n: min((getattr(r, k) for r in results if getattr(r, k) is not None), default=None)
              for n, k, _ in terms}
    alone = [n for n, k, t in terms if lowest[n] is None or lowest[n] > t]
    # A target binds alone if no point meets it; otherwise the pair binds together (each is met somewhere).
    binds = " and ".join(alone) if alone else " + ".join(n for n, _, _ in terms) + " together"
    need = {n: getattr(near, k) for n, k, t in terms if getattr(near, k) is None or getattr(near, k) > t}
    return {"binds": binds, "lowest": lowest, "nearest": near.flat(), "would_need": need}


def binding_line(b: dict[str, Any], slo: Slo) -> str:
    """One line for stderr: what binds, how close anything came, and the nearest point."""
    n = b["nearest"]
    lows = ", ".join(f"lowest {slo.key} {k} anywhere {v:.3g} s" for k, v in b["lowest"].items() if v is not None)
    need = " and ".join(f"--slo-{k.lower()} {v:.3g}" for k, v in b["would_need"].items() if v is not None) \
        or "no request to finish"
    par = (f" ep{n['ep']}" if n["ep"] > 1 else "") + (f" pp{n['pp']}" if n["pp"] > 1 else "")
    where = (f"{n['hardware']} {n['model']} tp{n['tp']}{par} x{n['replicas']}" + (f" ({n['pd']})" if n["pd"] else "")
             + f" {n['router']}")
    return (f"no configuration meets the SLOs: {b['binds']} binds ({lows}); nearest: {where} at"
            f" ${n['cost_per_hour']:,.2f}/h, which would need {need}")
