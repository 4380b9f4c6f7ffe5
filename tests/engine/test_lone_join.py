"""The lone join (Lane.step's admission.admit_lone and steps.join_lone) is the general path's arithmetic.

At low load a step usually admits the one queued request next to at most one running row: Lane.step plans, admits
and runs that join on Python numbers in two calls instead of _plan_running, admit, _admit_queued, run, join_step,
join_batch, price, _join_inputs, _stamp_first and finish. Here every lone join of varied runs is checked against
the general path run on a copy of the lane (the same tables, clock, totals, pool and priced step), and whole runs
(engines and fleets) with the lone join off (lane._LONE_ROWS = -1) must give the same numbers bit for bit.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.fleet.fleet import Fleet, FleetSpec
from engine.serving import admission, lane, steps
from tests.engine.test_step_paths import debug_engine, run_figures

CONFIGS: dict[str, dict[str, Any]] = {
    "open": dict(users=0, rate=3.0, requests=120, prompt="uniform:50,1500", output="uniform:1,60"),
    "open-exp": dict(users=0, rate=4.0, requests=150, prompt="uniform:50,1500", output="exp:40"),
    "thinking": dict(users=3, think="uniform:0,20", think_time="exp:0.5", requests=60, output="uniform:1,60"),
    "preempting": dict(users=2, kv_pool_blocks=30, prompt="uniform:50,300", output="uniform:50,300", requests=40,
                       think_time="exp:1"),
    "chunked": dict(users=0, rate=4.0, requests=80, prompt="uniform:50,3000", output="uniform:1,40",
                    scheduler="chunked", max_batched_tokens=1024),
    "static": dict(users=1, requests=20, output="uniform:1,50", scheduler="static", think_time="exp:0.3"),
    "caching-unshared": dict(users=0, rate=3.0, requests=80, prefix_caching=True, output="uniform:1,60"),
}


def _run(name: str) -> tuple[str, bytes]:
    return run_figures(CONFIGS[name])


def _state(ln: lane.Lane) -> tuple[Any, ...]:
    """What a step changes: the tables, the clock, the pool, the totals and the priced step's record."""
    st = ln.stats
    tables = tuple(t.cols.b[:, :t.n].tobytes() for t in (ln.R, ln.P)) + (ln.Q.cols.b[:, ln.Q.head:ln.Q.n].tobytes(),)
    pool = ln.pool
    totals = (st.ticks, st.out_tokens, st.visible_tokens, st.in_tokens, st.recomputed_tokens, st.busy_s,
              st.charge_in_s, st.charge_cached_s, st.charge_out_s, st.flops, st.flops_useful, st.bytes,
              st.completed, st.batch_hist.tolist(), st.last_batch, st.hist.last().tobytes())
    return (tables, ln.clock, ln.seq, ln.n_pf, ln.aggs.at, ln.chosen_at, (pool.private, pool.used, pool.available),
            totals, repr(ln.last_cost))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_lone_join_is_the_general_paths_step(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    joins: list[int] = []
    lone = steps.join_lone
    step = lane.Lane.step

    def counted(*a: Any) -> Any:
        joins.append(a[1])
        return lone(*a)

    def checked(ln: lane.Lane, limit: float, tick: int, want: bool = True) -> Any:
        twin = copy.deepcopy(ln)
        before = len(joins)
        got = step(ln, limit, tick, want)
        if len(joins) > before:  # the lone join ran: the general path on the copy must do the same
            monkeypatch.setattr(lane, "_LONE_ROWS", -1)
            expect = step(twin, limit, tick, want)
            monkeypatch.setattr(lane, "_LONE_ROWS", 1)
            assert _state(ln) == _state(twin)
            if want:
                assert repr(got) == repr(expect)
        return got

    monkeypatch.setattr(steps, "join_lone", counted)
    monkeypatch.setattr(lane.Lane, "step", checked)
    debug_engine(**CONFIGS[name]).run()
    assert len(joins) >= 10
    if name != "static":  # (a static batch admits only into an empty one)
        assert 0 < joins.count(1) < len(joins)  # joins into an idle lane and next to one row


@pytest.mark.parametrize("name", list(CONFIGS))
def test_runs_are_bit_for_bit_the_same_with_the_lone_join_off(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    default = _run(name)
    monkeypatch.setattr(lane, "_LONE_ROWS", -1)
    assert _run(name) == default


@pytest.mark.parametrize("router", ["least-loaded", "round-robin"])
def test_a_fleets_runs_are_the_same_with_the_lone_join_off(router: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def run() -> tuple[str, bytes]:
        cfg = EngineConfig(users=0, rate=4.0, requests=300, prompt="lognormal:1000,0.8", output="lognormal:200,0.8",
                           seed=3)
        f = Fleet(FleetSpec(cfg, replicas=4, router=router))
        f.run()
        return json.dumps(f.metrics(), sort_keys=True), f.latencies().tobytes()

    ran: list[int] = []
    lone = steps.join_lone
    monkeypatch.setattr(steps, "join_lone", lambda *a: (ran.append(1), lone(*a))[1])
    default = run()
    assert ran
    monkeypatch.undo()
    monkeypatch.setattr(lane, "_LONE_ROWS", -1)
    assert run() == default


def test_the_lone_join_leaves_a_split_prompt_to_the_mixed_step() -> None:
    # A chunked scheduler splitting a long prompt: admit_lone refuses (None) and changes nothing.
    e = debug_engine(users=0, rate=1.0, requests=3, prompt="4000", scheduler="chunked", max_batched_tokens=512)
    ln = e._lanes[0]
    ln.draw_due(100.0)
    before = (ln.R.n, ln.Q.size, ln.pool.used, ln.seq)
    assert admission.admit_lone(ln, 0, ln.clock, np.inf) is None
    assert (ln.R.n, ln.Q.size, ln.pool.used, ln.seq) == before
