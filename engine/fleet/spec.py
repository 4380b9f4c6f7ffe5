"""What a deployment is: one replica's configuration, how many replicas, the router and the P/D split.

Its own module, importing only the configuration, so that an Engine can describe itself as a one-replica
deployment (Engine.spec, for the app's one simulator handle) without importing the fleet that builds on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.config import EngineConfig
from engine.errors import InputError


def parse_pd(text: str) -> tuple[int, int]:
    """'P:D' -> (P, D) with P, D >= 1 (a split with no prefill or no decode replica is an error)."""
    p, sep, d = text.partition(":")
    try:
        pp, dd = int(p), int(d)
    except ValueError:
        raise InputError(f"--pd takes P:D, prefill and decode replica counts such as 1:3, got {text!r}") from None
    if not sep:
        raise InputError(f"--pd takes P:D, prefill and decode replica counts such as 1:3, got {text!r}")
    if dd < 1:
        raise InputError(f"--pd {text} leaves no decode replica: every answer needs one; try {max(pp, 1)}:1")
    if pp < 1:
        raise InputError(f"--pd {text} leaves no prefill replica: every prompt needs one; try 1:{dd}")
    return pp, dd


@dataclass(frozen=True, slots=True)
class ScaleSpec:
    """Autoscaling (engine.fleet.autoscale): replicas between lo and hi, a policy and its target (None: the
    policy's default), a decision every interval_s, and cold_extra_s added to a new replica's weight-load time."""

    lo: int
    hi: int
    policy: str = "queue"
    interval_s: float = 30.0
    target: float | None = None
    cold_extra_s: float = 0.0


def parse_autoscale(text: str) -> tuple[int, int]:
    """'MIN:MAX' -> (MIN, MAX) with 1 <= MIN <= MAX."""
    lo, sep, hi = text.partition(":")
    try:
        a, b = int(lo), int(hi)
    except ValueError:
        a, b = 0, 0
    if not sep or a < 1 or b < a:
        raise InputError(f"--autoscale takes MIN:MAX replica counts with 1 <= MIN <= MAX, such as 1:4, got {text!r}")
    return a, b


@dataclass(frozen=True, slots=True)
class FleetSpec:
    """A fleet: the per-replica configuration (workload included), how many replicas, router, P/D split."""

    config: EngineConfig
    replicas: int = 1
    router: str = "round-robin"
    pd: tuple[int, int] | None = None  # (prefill replicas, decode replicas); their sum is `replicas`
    kv_link_gbps: float | None = None  # P/D KV transfer link (default: the GPU's interconnect)
    scale: ScaleSpec | None = None  # autoscaling between its bounds (None: every replica serves throughout)

    @property
    def single(self) -> bool:
        """One replica without P/D or autoscaling: an Engine alone serves it (engine.fleet.fleet.engine_for)."""
        return self.replicas == 1 and self.pd is None and self.scale is None
