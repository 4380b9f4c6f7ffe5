"""Skipping quiet ticks changes nothing: run() and advance() with skip_quiet on and off give the same metrics.

A quiet run of decode steps is priced in one vectorised call (Lane.jump); these tests run each config both
ways and compare every metric (and the per-tick history the UI draws) to a tight relative tolerance.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from engine.config import EngineConfig
from engine.serving import steps
from engine.serving.accounting import H
from engine.serving.engine import Engine
from engine.serving.lane import Lane
from engine.serving.scheduler import Chunked

CONFIGS: dict[str, dict[str, Any]] = {
    "closed": dict(users=24, requests=120, output="uniform:20,200"),
    "open": dict(users=0, rate=15.0, requests=150, prompt="uniform:50,1500", output="exp:100"),
    "static": dict(users=12, scheduler="static", requests=60, output="uniform:10,120"),
    "chunked": dict(users=40, scheduler="chunked", max_batched_tokens=1024, prompt="uniform:200,3000",
                    requests=120),
    "fast-lane": dict(users=20, fast_share=0.25, requests=120, output="uniform:10,150"),
    "preempting": dict(users=32, kv_pool_blocks=300, prompt="uniform:50,400", output="uniform:50,500",
                       requests=100),
    "think": dict(users=10, think="uniform:20,200", think_time="exp:1", requests=60, slo_ttft=1.0, slo_tpot=0.05),
    "sliding": dict(model="gpt-oss-20b", users=12, prompt="uniform:100,3000", output="uniform:50,400",
                    requests=40),
    "chunked-attention": dict(model="llama-4-maverick", hardware="b200", tp=8, users=8,
                              prompt="uniform:7000,9000", output="uniform:100,2000", requests=16),
    "moe": dict(model="qwen3-30b-a3b", users=30, requests=80, output="uniform:10,300"),
    "duration": dict(users=8, duration=12.0, output="uniform:10,300", requests=None),
}


def _engine(skip: bool, **kw: Any) -> Engine:
    base: dict[str, Any] = {"prompt": "200", "output": "100", "seed": 3, "debug": True}
    base.update(kw)
    e = Engine(EngineConfig(**base))
    e.skip_quiet = skip
    return e


def _same(a: Any, b: Any, path: str = "", exact: bool = False) -> None:
    """Every number equal to 1e-12 relative (bit for bit if `exact`; NaN matches NaN), every other value equal."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _same(a[k], b[k], f"{path}.{k}", exact)
    elif isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or a == (b if exact else pytest.approx(b, rel=1e-12, abs=1e-300)), \
            path
    elif isinstance(a, tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{path}[{i}]", exact)
    else:
        assert a == b, path


def _compare(on: Engine, off: Engine, exact: bool = False) -> None:
    _same(on.metrics(), off.metrics(), exact=exact)
    if on.config.fast_share:
        _same(on.metrics(fast=True), off.metrics(fast=True), exact=exact)
    s_on, s_off = on.snapshot(), off.snapshot()
    _same(s_on.history, s_off.history, exact=exact)
    assert s_on.last_step == s_off.last_step and s_on.tick == s_off.tick
    assert s_on.kv_blocks_used == s_off.kv_blocks_used and s_on.requests.generated.tolist() == \
        s_off.requests.generated.tolist()


@pytest.mark.parametrize("name", list(CONFIGS))
def test_run_is_the_same_with_quiet_ticks_skipped(name: str) -> None:
    on, off = _engine(True, **CONFIGS[name]), _engine(False, **CONFIGS[name])
    assert on.run() == off.run()
    _compare(on, off)


@pytest.mark.parametrize("name", ["closed", "fast-lane", "think"])
def test_advance_is_the_same_with_quiet_ticks_skipped(name: str) -> None:
    kw = dict(CONFIGS[name], requests=None)
    on, off = _engine(True, **kw), _engine(False, **kw)
    for dt in (0.37, 2.0, 5.5, 0.01, 9.0):
        assert on.advance(dt) == off.advance(dt)
        assert on.clock == off.clock
        _compare(on, off)


def test_quiet_runs_take_one_call_and_step_stays_one_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    stepped: list[int] = []
    one_step = Lane.step

    def counted(self: Lane, limit: float, tick: int, want: bool = True) -> Any:
        stepped.append(tick)
        return one_step(self, limit, tick, want)

    monkeypatch.setattr(Lane, "step", counted)
    e = _engine(True, users=4, requests=40, output="300")
    e.run()
    # 40 answers of 300 tokens at batch 4 are ~3,000 ticks; only ticks with an event go one by one.
    assert e.tick >= 3000 and len(stepped) < e.tick / 20
    # One tick at a time is still there for slow motion: step() moves the tick count by exactly one.
    e2 = _engine(True, users=4, requests=None, output="300")
    for i in range(1, 200):
        e2.step()
        assert e2.tick == i


@pytest.mark.parametrize("name", ["closed", "static", "chunked", "preempting", "think", "sliding", "fast-lane",
                                  "moe", "open"])
def test_join_steps_price_as_mixed_steps(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The join step kind (decodes plus whole prompts joining) is a shortcut through the mixed kind: the same run."""
    joins: list[int] = []
    kinds = list(steps.STEP_KINDS)
    join = next(k for k in kinds if k.name == "join")

    def counted(lane: Lane, s: steps.StepPlan) -> Any:
        joins.append(s.n - s.n_run)
        return join.run(lane, s)

    monkeypatch.setattr(steps, "STEP_KINDS", [k._replace(run=counted) if k.name == "join" else k for k in kinds])
    fast = _engine(True, **CONFIGS[name])
    fast.run()
    assert joins, "no step took the shortcut: the comparison would prove nothing"
    # Without the join kind its plans fall through to the general mixed step.
    monkeypatch.setattr(steps, "STEP_KINDS", [k for k in kinds if k.name != "join"])
    slow = _engine(True, **CONFIGS[name])
    slow.run()
    _compare(fast, slow, exact=True)  # its sums are of whole and half tokens: exact in any order


@pytest.mark.parametrize("name", ["closed", "chunked", "preempting", "think", "moe"])
def test_ticks_stepped_for_their_results_or_for_totals_give_one_run(name: str) -> None:
    """Engine.step() builds every TickResult (ids, StepCost); run() builds none and prices the last step's record
    only when asked: the same run, bit for bit, and each result's cost is the step the lane reports as its last."""
    by_step, by_run = _engine(False, **CONFIGS[name]), _engine(False, **CONFIGS[name])
    while not by_step.finished:
        r = by_step.step()
        if r.cost is not None:
            lane = by_step.lanes[1 if r.fast_lane else 0]
            assert r.cost == lane.last_cost
            # The record is the step that was accounted: its time is the tick's, its bytes the history's.
            assert r.cost.time_s == r.dt and r.cost.bytes_total == lane.stats.hist.last(1)[0, H.BYTES]
    by_run.run()
    assert by_run.tick == by_step.tick
    _compare(by_step, by_run, exact=True)


def test_a_policy_claiming_whole_prompts_that_splits_one_is_caught_under_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    """whole_prompts sends admissions down the join path unchecked; under debug a policy that claims it and
    splits a prompt anyway stops the run instead of silently under-counting prefill."""
    monkeypatch.setattr(Chunked, "whole_prompts", True)
    e = _engine(False, **CONFIGS["chunked"])
    with pytest.raises(AssertionError, match="whole_prompts"):
        e.run()


def test_runs_take_the_step_after_an_arrival_under_async_scheduling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under async scheduling a request arriving mid-step cannot join the next step: the quiet run takes that
    step too, drawing the arrival at its start, and still matches stepping tick by tick."""
    drawn: list[tuple[float, float]] = []
    orig = steps._arrive_in_run

    def spy(lane: Lane, t: float) -> None:
        chosen = lane.chosen_at
        orig(lane, t)
        drawn.append((t, float(lane.Q.col("arrival")[-1])) if lane.Q.size else (t, math.nan))
        assert chosen is not None and chosen == t  # the run's last step starts where it drew

    monkeypatch.setattr(steps, "_arrive_in_run", spy)
    on, off = _engine(True, **CONFIGS["open"]), _engine(False, **CONFIGS["open"])
    assert on._lanes[0].async_sched
    assert on.run() == off.run()
    assert len(drawn) > 10
    assert all(a <= t for t, a in drawn)  # what it drew had arrived by the step's start
    _compare(on, off)
