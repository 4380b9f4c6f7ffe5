"""Runs driven by a workload file or a trace are estimated before they start, as --rate and --users runs are
(issue 30, class 3): the largest rate a file may give (1e6/s) for minutes, a 1e9-second stage, 10,000 busy stages
or a trace of many rows are refused with the estimate and the limit, and an ordinary file is not."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine import budget
from engine.config import EngineConfig
from engine.errors import InputError
from engine.fleet.fleet import Fleet, FleetSpec
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions
from engine.serving.engine import Engine
from engine.traffic.workload import Dist
from engine.traffic.workload_file import parse_workload

CFG = EngineConfig(model="llama-3.1-8b")
SM = StepModel(load_hardware("h100-sxm"), load_model("llama-3.1-8b"), StepOptions())
BLOCKS = 30_000


def _est(toml: dict, **cfg: object) -> budget.Estimate:
    wl = parse_workload(toml, "w.toml")
    c = EngineConfig(**{**{"model": "llama-3.1-8b"}, **cfg})  # type: ignore[arg-type]
    return budget.estimate_loads(c, SM, BLOCKS, budget.stage_loads(wl.stages))


def _stage(**kw: object) -> dict:
    return {"stage": [kw], "prompt": {"tokens": 500}, "output": {"tokens": 100}}


def test_an_ordinary_workload_passes_and_its_steps_grow_with_its_length() -> None:
    small = _est(_stage(rate=4, duration=60))
    budget.check(small, bounded=True, force=False)
    big = _est(_stage(rate=4, duration=600))
    assert 5 * small.steps < big.steps < 20 * small.steps


@pytest.mark.parametrize("stage", [{"rate": 1e6, "duration": 100}, {"rate": 5, "duration": 1e9},
                                   {"users": 1000, "duration": 1e8}])
def test_a_workload_that_would_not_finish_is_refused_with_its_estimate(stage: dict) -> None:
    est = _est(_stage(**stage))
    with pytest.raises(InputError, match="simulated steps, over the limit|would hold about"):
        budget.check(est, bounded=True, force=False)
    budget.check(est, bounded=True, force=True)  # --force runs it anyway


def test_many_stages_add_up_and_requests_cut_them_short() -> None:
    many = {"stage": [{"rate": 50, "duration": 100}] * 10_000, "prompt": {"tokens": 500}, "output": {"tokens": 100}}
    est = _est(many)
    assert est.steps > budget.STEPS_LIMIT
    with pytest.raises(InputError, match="simulated steps"):
        budget.check(est, bounded=True, force=False)
    cut = _est(many, requests=200)
    assert cut.steps < budget.STEPS_LIMIT / 100
    budget.check(cut, bounded=True, force=False)


def test_a_quiet_stage_costs_nothing_however_long() -> None:
    est = _est({"stage": [{"rate": 0, "duration": 5e8}, {"rate": 2, "duration": 10}]})
    assert math.isfinite(est.steps) and est.steps < 1e4


def test_a_trace_is_charged_its_rows() -> None:
    def est(n: int) -> budget.Estimate:
        load = budget.trace_load(np.linspace(0.0, 3600.0, n), np.full(n, 800), np.full(n, 300))
        return budget.estimate_loads(CFG, SM, BLOCKS, [load])

    small, big = est(20_000), est(200_000)
    # An hour of traffic is at least an hour of steps (about 500,000 decode steps of 7 ms), plus a tick per arrival.
    assert 3600 / small.step_s < small.steps < big.steps and big.steps - small.steps > 170_000
    budget.check(small, bounded=True, force=False)
    huge = budget.estimate_loads(CFG, SM, BLOCKS, [budget.Load(3600.0, 5e6 / 3600, 0, *big_lengths(), requests=5e6)])
    with pytest.raises(InputError, match="simulated steps"):
        budget.check(huge, bounded=True, force=False)


def big_lengths() -> tuple[Dist, Dist, Dist, Dist]:
    return Dist("fixed", 800.0), Dist("fixed", 300.0), Dist("fixed", 0.0), Dist("fixed", 0.0)


# ---- wired: every way work enters a run is estimated before it starts ------------------------------------------

def _trace(tmp_path: Path, rows: int) -> str:
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i * 0.01},800,300\n" for i in range(rows)))
    return str(p)


@pytest.mark.parametrize("replicas", [1, 3])
def test_a_trace_and_a_workload_file_are_refused_by_the_engine_and_the_fleet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replicas: int) -> None:
    """Before, a run driven by a file skipped the estimate: a trace or workload of any size started running."""
    monkeypatch.setattr(budget, "STEPS_LIMIT", 2e3)
    wl = tmp_path / "w.toml"
    wl.write_text("[[stage]]\nrate = 20\nduration = 600\n[prompt]\ntokens = 800\n[output]\ntokens = 300\n")
    for src in ({"trace": _trace(tmp_path, 2000)}, {"workload": str(wl)}):
        cfg = EngineConfig(model="llama-3.1-8b", **src)  # type: ignore[arg-type]
        with pytest.raises(InputError, match="simulated steps, over the limit of 2.0e\\+03"):
            build(cfg, replicas)
        build(replace(cfg, force=True), replicas)  # --force builds it anyway


def test_the_largest_fleet_is_refused_by_its_memory_before_its_replicas_are_built() -> None:
    """4,096 replicas of an 8B model hold ~5 GB of pool tables: refused in about a second, not built until the
    machine runs out of memory."""
    cfg = EngineConfig(model="llama-3.1-8b", rate=10.0, duration=60.0)
    with pytest.raises(InputError, match="would hold about 5.3 GB"):
        build(cfg, 4096)
    assert build(cfg, 64).estimate.steps < budget.STEPS_LIMIT


def test_a_fleet_is_charged_no_more_steps_than_its_requests_alone() -> None:
    one = budget.Estimate(1e6, 8e4, 0.007, alone=1.2e5)
    assert budget.for_fleet(one, 4096, 1000, 256).steps == 1.2e5
    assert budget.for_fleet(one, 1, 1000, 256).steps == 8e4
    assert budget.for_fleet(one, 2, 1000, 256).memory_bytes == 1e6 + budget.POOL_BLOCK_BYTES * 1000 + 8 * 256


def build(cfg: EngineConfig, replicas: int) -> Any:
    """An Engine (1) or a Fleet."""
    if replicas == 1:
        return Engine(cfg)
    return Fleet(FleetSpec(cfg, replicas))
