"""plan's per-point savings against the general paths they skip: the headline totals read without the whole
metrics, and step models shared by a fleet's replicas and by a plan's points (the same numbers as fresh ones)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.config import EngineConfig
from engine.fleet import plan as pl
from engine.fleet.fleet import Fleet, FleetSpec, StepModels, engine_for
from engine.physics.calibration import register
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepOptions
from engine.serving.accounting import Totals, uncount_itl

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


def test_step_models_share_by_hardware_model_and_options() -> None:
    hw, m = load_hardware("h100-sxm"), load_model("generic-14b")
    models = StepModels(keep=2)
    a = models(hw, m, StepOptions(tp=1))
    assert models(hw, m, StepOptions(tp=1)) is a
    b = models(hw, m, StepOptions(tp=2))
    assert b is not a and models(hw, load_model("generic-14b"), StepOptions(tp=2)) is b
    models(hw, m, StepOptions(tp=1, max_batch=64))  # a third: the least recently used (tp=1) goes
    assert models(hw, m, StepOptions(tp=2)) is b and models(hw, m, StepOptions(tp=1)) is not a
    fresh = StepModels(keep=0)
    assert fresh(hw, m, StepOptions()) is not fresh(hw, m, StepOptions())


@pytest.mark.parametrize(("router", "users"), [("round-robin", 0), ("least-loaded", 0), ("kv-aware", 0),
                                               ("prefix-aware", 0), ("least-loaded", 12)])
def test_fleet_replicas_sharing_a_step_model_run_as_with_their_own(router: str, users: int) -> None:
    """A fleet's replicas share one step model (its price memo and quiet-run tables filled once for all): every
    figure is the one of replicas each pricing with its own, on each loop (dealt, lazy, events: a closed loop)."""
    cfg = replace(BASE, requests=300, rate=6, max_batch=8, users=users)
    shared = Fleet(FleetSpec(cfg, replicas=4, router=router))
    own = Fleet(FleetSpec(cfg, replicas=4, router=router), step_models=StepModels(keep=0))
    assert all(r.step_model is shared.reps[0].step_model for r in shared.reps)
    assert len({id(r.step_model) for r in own.reps}) == 4
    shared.run()
    own.run()
    assert shared.metrics() == own.metrics()
    assert (shared.latencies() == own.latencies()).all()


def test_plan_points_sharing_step_models_give_the_results_of_fresh_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan's points share step models across points of one replica configuration (pl._STEP_MODELS), in an
    order that leaves tables from earlier points behind: the results are those of fresh step models everywhere."""
    points = [p for p in POINTS if p.pd is None] + [replace(POINTS[2], replicas=2), replace(POINTS[1], router="kv-aware")]
    points += points[::-1]
    monkeypatch.setattr(pl, "_STEP_MODELS", StepModels(keep=4))
    shared = [pl.evaluate(p, BASE, SLO) for p in points]
    monkeypatch.setattr(pl, "_STEP_MODELS", StepModels(keep=0))
    fresh = [pl.evaluate(p, BASE, SLO) for p in points]
    assert [r.as_dict() for r in shared] == [r.as_dict() for r in fresh]
    assert [r.served for r in shared] == [r.served for r in fresh]


def test_points_counting_no_itl_give_the_results_of_counting(monkeypatch: pytest.MonkeyPatch) -> None:
    """A point reading only totals counts no inter-token latencies (accounting.uncount_itl): its results are those
    of a run that counts them, and its metrics refuse to report a histogram they never kept."""
    points = POINTS + [replace(POINTS[2], router="round-robin", max_num_seqs=2)]
    skipped = [pl.evaluate(p, BASE, SLO) for p in points]
    monkeypatch.setattr(pl, "uncount_itl", lambda lanes: None)
    counted = [pl.evaluate(p, BASE, SLO) for p in points]
    assert [r.as_dict() for r in skipped] == [r.as_dict() for r in counted]
    assert [r.served for r in skipped] == [r.served for r in counted]
    dep = engine_for(pl.fleet_spec(POINTS[2], BASE))
    uncount_itl(pl._lanes(dep))
    dep.run()
    with pytest.raises(RuntimeError, match="no inter-token latencies"):
        dep.metrics()


def test_step_models_follow_a_runtime_profile_registered_again() -> None:
    """A profile registered again under its name (a calibrate file loaded again) is a new key: the held step model
    priced with the old profile is not handed out for it."""
    hw, m = load_hardware("h100-sxm"), load_model("generic-14b")
    section = {"description": "test (calibrated)", "bw_eff": 0.5, "flops_eff": 0.5, "step_overhead_s": 0.001,
               "layer_overhead_s": 1e-5}
    register("test-shared-models", section)
    models = StepModels(keep=4)
    a = models(hw, m, StepOptions(runtime="test-shared-models"))
    assert models(hw, m, StepOptions(runtime="test-shared-models")) is a
    register("test-shared-models", {**section, "bw_eff": 0.25})
    b = models(hw, m, StepOptions(runtime="test-shared-models"))
    assert b is not a and b.runtime.bw_eff == 0.25 and a.runtime.bw_eff == 0.5
