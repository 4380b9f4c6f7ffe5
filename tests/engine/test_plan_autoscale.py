"""plan searches autoscale bounds: each bound (and policy) is a point, reports the GPU-hours it kept on, and the best
line ranks by cost among the points that meet the SLOs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.errors import InputError
from engine.fleet import plan as pl

# A day squeezed into a minute: 1 req/s, a burst of 40 req/s (more than one replica serves), quiet again.
DAY = """
[[stage]]
rate = 1
duration = 20
[[stage]]
rate = 40
duration = 20
[[stage]]
rate = 1
duration = 20
[prompt]
tokens = 800
[output]
tokens = 150
"""


def test_parse_scale_list_crosses_bounds_and_policies() -> None:
    sc = pl.parse_scale_list("1:4,2:6,1:4", "queue,kv", 10.0, None, 0.0)
    assert [(s.lo, s.hi, s.policy) for s in sc] == [(1, 4, "queue"), (1, 4, "kv"), (2, 6, "queue"), (2, 6, "kv")]
    with pytest.raises(InputError, match="MIN:MAX"):
        pl.parse_scale_list("4:1", "queue", 10.0, None, 0.0)
    with pytest.raises(InputError, match="not a policy"):
        pl.parse_scale_list("1:4", "slo", 10.0, None, 0.0)


def test_autoscaled_points_sit_beside_fixed_ones() -> None:
    sc = pl.parse_scale_list("1:2,1:4", "queue", 5.0, None, 0.0)
    pts = pl.Space(hardware=("h100-sxm",), model=("generic-14b",), tp=(1,), replicas=(4,), scale=sc).points()
    assert [(p.replicas, p.scale) for p in pts] == [(4, None), (2, sc[0]), (4, sc[1])]
    assert pts[1].as_dict()["autoscale"] == "1:2" and "autoscale" not in pts[0].as_dict()
    assert "x1:2 queue" in pts[1].label() and len(set(pts)) == 3


def test_best_is_the_cheapest_bound_meeting_the_slo(tmp_path: Path) -> None:
    f = tmp_path / "day.toml"
    f.write_text(DAY, encoding="utf-8")
    base = replace(EngineConfig(), users=0, workload=str(f), requests=None)
    sc = pl.parse_scale_list("1:3", "queue", 4.0, None, 0.0)
    space = pl.Space(hardware=("h100-sxm",), model=("generic-14b",), tp=(1,), replicas=(3,), scale=sc)
    slo = pl.Slo(ttft=3.0)
    res = [pl.evaluate(pt, base, slo) for pt in space.points()]
    fixed, scaled = res
    # The fixed fleet keeps 3 GPUs on the whole run; the autoscaler switches two off while it is quiet.
    assert fixed.gpu_hours == pytest.approx(3 * fixed.sim_time_s / 3600, rel=1e-9)
    assert scaled.gpu_hours < 0.9 * fixed.gpu_hours
    assert scaled.cost_per_hour == pytest.approx(2.5 * scaled.gpu_hours / (scaled.sim_time_s / 3600), rel=1e-9)
    out = pl.summarize(res, [], slo)
    assert out["best"]["autoscale"] == "1:3" and out["best"]["gpu_hours"] == scaled.gpu_hours
    # The burst queues while new replicas load their weights: a TTFT target that lag misses leaves the fixed fleet.
    assert scaled.ttft_s > 2 * fixed.ttft_s
    tight = pl.Slo(ttft=(fixed.ttft_s + scaled.ttft_s) / 2)
    best = pl.summarize(res, [], tight)["best"]
    assert best["replicas"] == 3 and "autoscale" not in best
