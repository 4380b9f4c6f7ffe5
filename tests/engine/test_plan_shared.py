"""plan's per-point savings against the general paths they skip: the headline totals read without the whole
metrics."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.fleet import plan as pl
from engine.fleet.fleet import engine_for
from engine.serving.accounting import Totals

BASE = EngineConfig(rate=3, users=0, requests=150, prompt="lognormal:800,0.6", output="lognormal:120,0.6")
SLO = pl.Slo(ttft=0.5, tpot=0.04)
POINTS = [  # one engine, dealt, lazy (both routers), P:D, autoscaled, a two-row batch cap
    pl.Point("h100-sxm", "generic-14b", 1, 1, None, 256, 8192, "round-robin"),
    pl.Point("h100-sxm", "generic-14b", 1, 3, None, 256, 8192, "round-robin"),
    pl.Point("a100-80g", "generic-14b", 2, 4, None, 64, 8192, "least-loaded"),
    pl.Point("h100-sxm", "generic-14b", 1, 5, None, 2, 8192, "kv-aware"),
    pl.Point("h100-sxm", "generic-14b", 1, 2, (1, 1), 256, 8192, "least-loaded"),
]


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.label())
def test_read_totals_are_the_metrics_figures(point: pl.Point) -> None:
    """_read's totals and replicas used, without metrics(), are the figures metrics() reports for the same run."""
    dep = engine_for(pl.fleet_spec(point, BASE))
    dep.run()
    tot, used, m = pl._read(dep, point, BASE)
    full = dep.metrics()
    assert tot == Totals(*(full[k] for k in Totals._fields))
    assert all(type(getattr(tot, k)) is type(full[k]) for k in Totals._fields)
    reps = full.get("replicas")
    assert used == (point.replicas if reps is None else pl._used(reps))
    assert (m is None) == (point.pd is None and point.scale is None and not BASE.energy)
    if point.replicas > 1:
        assert 1 <= used <= point.replicas
