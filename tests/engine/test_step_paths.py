"""A step's Python paths for a few rows are the array paths' arithmetic: the same plans, stamps and runs.

Lane._plan_running counts a decode plan's new blocks in a list for up to lane._FEW_ROWS rows (and hands the shared
all-False mask when no row opens a block), above that reads them from the lane's kept aggregates (steps.CacheAggs,
checked against the table by Lane.check in these debug runs), join_step's _stamp_first checks up to steps._FEW_ADMITTED admitted rows
in a list, and admission._candidates finds the async cut of up to admission._FEW_QUEUED queued rows by bisecting a
list. Here each plan of varied runs is checked call by call against the array rule, and whole runs with every
threshold at 0 (arrays only) or very large (lists only) must give the same numbers bit for bit.
"""

from __future__ import annotations

import bisect
import json
from typing import Any

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.serving import admission, lane, steps
from engine.serving.engine import Engine
from engine.serving.tables import BLOCK

CONFIGS: dict[str, dict[str, Any]] = {
    "open": dict(users=0, rate=15.0, requests=150, prompt="uniform:50,1500", output="exp:100"),
    "busy-open": dict(users=0, rate=40.0, requests=300, prompt="uniform:10,300", output="uniform:5,60"),
    "closed": dict(users=24, requests=120, output="uniform:20,200"),
    "preempting": dict(users=32, kv_pool_blocks=300, prompt="uniform:50,400", output="uniform:50,500",
                       requests=100),
    "thinking": dict(users=12, think="uniform:5,40", requests=80, output="uniform:50,120"),
    "fast-lane": dict(users=20, fast_share=0.25, requests=120, output="uniform:10,150"),
}
_THRESHOLDS = ((lane, "_FEW_ROWS"), (steps, "_FEW_ADMITTED"), (steps, "_RUN_AGGS"), (steps, "_FEW_RUN"),
               (admission, "_FEW_QUEUED"), (steps, "_FEW_INC"))


def debug_engine(**kw: Any) -> Engine:
    base: dict[str, Any] = {"prompt": "200", "output": "100", "seed": 5, "debug": True}
    base.update(kw)
    return Engine(EngineConfig(**base))


def run_figures(kw: dict[str, Any]) -> tuple[str, bytes]:
    """An engine of these options run to the end: its metrics as JSON and its latencies' bytes (tests/engine/
    test_lone_join.py compares runs the same way)."""
    e = debug_engine(**kw)
    e.run()
    return json.dumps(e.metrics(), sort_keys=True), e.latencies().tobytes()


def _run(name: str) -> tuple[str, bytes]:
    return run_figures(CONFIGS[name])


@pytest.mark.parametrize("name", list(CONFIGS))
def test_decode_plans_match_the_array_rule_call_by_call(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = lane.Lane._plan_running
    seen: list[int] = []
    big: list[int] = []

    def checked(ln: lane.Lane) -> tuple[np.ndarray | None, np.ndarray | None, int]:
        new, nb, need = plan(ln)
        n = ln.R.n
        if n and new is None and not ln.spec_k:
            want = (ln.R.cols.cached[:n] & (BLOCK - 1)) == 0
            if nb is None:  # many rows: the count comes from the lane's kept aggregates (steps.CacheAggs)
                assert n > lane._FEW_ROWS and ln.aggs.at == (ln.clock, n)
                big.append(need)
            else:
                assert nb.dtype == want.dtype and nb.tolist() == want.tolist()
            assert need == int(np.count_nonzero(want))
            seen.append(need)
        return new, nb, need

    monkeypatch.setattr(lane.Lane, "_plan_running", checked)
    debug_engine(**CONFIGS[name]).run()
    assert seen and 0 in seen  # plans were checked, some with no new block
    if name == "busy-open":  # (a batch of tens of rows: plans read the kept aggregates, some with new blocks)
        assert big and max(big) > 0


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("limit", [0, 10**9])
def test_runs_are_bit_for_bit_the_same_on_either_path(name: str, limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    default = _run(name)
    for mod, attr in _THRESHOLDS:
        monkeypatch.setattr(mod, attr, limit)
    assert _run(name) == default


def test_the_async_cut_bisects_as_searchsorted() -> None:
    rng = np.random.default_rng(7)
    for _ in range(300):
        k = int(rng.integers(1, 20))
        arrival = np.sort(rng.choice([0.5, 1.0, 1.25, 2.0, 3.5], size=k) + rng.integers(0, 3, size=k))
        for cut in (0.0, 1.0, 1.25, 2.5, 3.5, 10.0, float(arrival[k // 2])):
            assert bisect.bisect_right(arrival.tolist(), cut) == int(arrival.searchsorted(cut, side="right"))


def test_kept_cache_aggregates_are_the_counts_of_the_rows() -> None:
    """steps.CacheAggs kept through steps (every row one token more), quiet runs (k more), rows joining and rows
    leaving (a few: Python ints; many: numpy) are what counting the rows afresh gives, and their count of rows opening
    a block (at the next step, or at each of a run's steps: lags) is the mask's."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        cached = rng.integers(0, 5000, size=int(rng.integers(0, 300)))
        aggs = steps.CacheAggs()
        aggs.count(cached, (0.0, cached.size))
        for _ in range(int(rng.integers(1, 40))):
            op = int(rng.integers(4))
            if op == 0:
                cached = cached + 1
                aggs.step(cached.size)
            elif op == 3:  # a quiet run of k steps: its rows by the steps to their next block, then k tokens each
                assert aggs.lags() == [int(np.count_nonzero((cached + j) % BLOCK == 0)) for j in range(BLOCK)]
                k = int(rng.integers(1, 70))
                cached = cached + k
                aggs.step(cached.size, k)
            elif op == 1:
                add = rng.integers(0, 5000, size=int(rng.choice([1, 3, 40])))
                aggs.tally(add, 1)
                cached = np.concatenate([cached, add])
            elif cached.size:
                idx = np.sort(rng.choice(cached.size, size=min(cached.size, int(rng.choice([1, 2, 30]))),
                                         replace=False))
                aggs.tally(cached[idx], -1)
                cached = np.delete(cached, idx)
        fresh = steps.CacheAggs()
        fresh.count(cached, (0.0, cached.size))
        assert aggs.total == fresh.total == int(cached.sum())
        assert [aggs.opens[(j - aggs.phase) % BLOCK] for j in range(BLOCK)] == fresh.opens
        assert aggs.need() == int(np.count_nonzero(cached % BLOCK == 0))
