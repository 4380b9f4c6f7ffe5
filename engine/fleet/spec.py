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
class FleetSpec:
    """A fleet: the per-replica configuration (workload included), how many replicas, router, P/D split."""

    config: EngineConfig
    replicas: int = 1
    router: str = "round-robin"
    pd: tuple[int, int] | None = None  # (prefill replicas, decode replicas); their sum is `replicas`
    kv_link_gbps: float | None = None  # P/D KV transfer link (default: the GPU's interconnect)
