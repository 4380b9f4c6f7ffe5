"""Autoscaling in the loop (engine.fleet.autoscale): replicas follow a staged load, a new replica serves only
after its cold start, and GPU-hours fall below a fixed fleet's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.errors import InputError
from engine.fleet.autoscale import POLICIES, cold_start_s
from engine.fleet.fleet import Fleet, FleetSpec
from engine.fleet.spec import ScaleSpec, parse_autoscale
from engine.serving.accounting import T

DAY = """
[prompt]
tokens = "lognormal:600,0.5"
[output]
tokens = "lognormal:120,0.5"
[[stage]]
rate = 2
duration = 120
[[stage]]
rate = 24
duration = 120
[[stage]]
rate = 2
duration = 240
"""


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> EngineConfig:
    p = Path(tmp_path_factory.mktemp("wl")) / "day.toml"
    p.write_text(DAY)
    return EngineConfig(workload=str(p), users=0, slo_ttft=0.3)


def _fleet(cfg: EngineConfig, scale: ScaleSpec | None, n: int = 4, router: str = "round-robin") -> Fleet:
    f = Fleet(FleetSpec(cfg, replicas=n, router=router, scale=scale))
    f.run()
    return f


@pytest.fixture(scope="module")
def scaled(day: EngineConfig) -> Fleet:
    return _fleet(day, ScaleSpec(1, 4, "queue", 10.0, 8.0, cold_extra_s=20.0))


def test_replicas_follow_the_load_and_save_gpu_hours(scaled: Fleet) -> None:
    a = scaled.metrics()["autoscale"]
    tl = np.array(a["timeline"])
    on = tl[:, 1] + tl[:, 2]  # serving + starting
    busy = (tl[:, 0] > 130) & (tl[:, 0] < 240)
    assert on[busy].max() >= 3 and on[tl[:, 0] < 110].max() == 1  # the burst scales out, the quiet start does not
    assert on[-1] == 1 and a["scale_downs"] >= 2  # and the quiet end drains back to MIN
    assert 0.3 < a["gpu_hours_saved_fraction"] < 0.75
    assert a["gpu_hours"] >= scaled.metrics()["sim_time_s"] / 3600.0  # never below MIN replicas all the time
    # requests that arrive while replicas load wait on too few replicas: slower first tokens, SLO misses
    up, rest = a["during_scale_up"], a["otherwise"]
    assert up["requests"] > 0 and up["ttft_p90_s"] > rest["ttft_p90_s"]
    assert up["ttft_slo_misses"] / up["requests"] > rest["ttft_slo_misses"] / rest["requests"]


def test_a_started_replica_serves_only_after_its_cold_start(scaled: Fleet) -> None:
    sm = scaled.step_model
    cold = scaled.scaler.cold_s  # type: ignore[union-attr]
    assert cold == pytest.approx(sm.weight_bytes_per_gpu / (sm.hw.host_link_gbps * 1e9) + 20.0)
    first_start = min(t for t, _ in scaled.scaler.starts)  # type: ignore[union-attr]
    for r in scaled.reps[1:]:
        arr = r.lane.stats.times.last()[:, T.ARRIVAL]
        assert arr.size and arr.min() >= first_start + cold


def test_bounds_equal_to_the_fleet_change_nothing(day: EngineConfig) -> None:
    """MIN = MAX = replicas: every replica serves throughout, so the numbers are the fixed fleet's."""
    cfg = EngineConfig(rate=6, users=0, requests=300, prompt="lognormal:600,0.5", output="lognormal:120,0.5")
    fixed = _fleet(cfg, None, 3).metrics()
    same = _fleet(cfg, ScaleSpec(3, 3), 3).metrics()
    assert same.pop("autoscale")["scale_ups"] == 0
    assert same == fixed


def test_policies_and_cold_start_arithmetic() -> None:
    assert set(POLICIES) == {"queue", "kv"}
    assert cold_start_s(28e9, 64.0, 0.0) == pytest.approx(0.4375)  # 28 GB over PCIe 5 x16's 64 GB/s
    assert parse_autoscale("2:8") == (2, 8)


@pytest.mark.parametrize("text", ["3:2", "0:4", "4", "a:b"])
def test_bad_bounds_are_one_line(text: str) -> None:
    with pytest.raises(InputError, match="--autoscale takes MIN:MAX"):
        parse_autoscale(text)


def test_bounds_must_match_the_fleet() -> None:
    cfg = EngineConfig(rate=6, users=0, requests=10)
    with pytest.raises(InputError, match="MAX = --replicas"):
        Fleet(FleetSpec(cfg, replicas=4, scale=ScaleSpec(1, 3)))
    with pytest.raises(InputError, match="without --pd"):
        Fleet(FleetSpec(cfg, replicas=4, pd=(1, 3), scale=ScaleSpec(1, 4)))
