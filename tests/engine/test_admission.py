"""Admission's few-candidate path (plain ints) is the array path's arithmetic: the same rows, blocks and results.

admission._admit_queued serves the usual admissions, one or a few queued requests, without numpy's per-call
cost; every other admission takes _admit_rows. Here each such admission of varied runs (three schedulers, a tight
pool that preempts, a fast lane, an open loop) is replayed through _admit_rows on copies of the tables and pool,
and the two must agree exactly; whole runs with the path switched off must give the same numbers bit for bit.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.serving import admission
from engine.serving.engine import Engine
from engine.serving.lane import Lane

CONFIGS: dict[str, dict[str, Any]] = {
    "open": dict(users=0, rate=15.0, requests=150, prompt="uniform:50,1500", output="exp:100"),
    "closed": dict(users=24, requests=120, output="uniform:20,200"),
    "static": dict(users=12, scheduler="static", requests=60, output="uniform:10,120"),
    "chunked": dict(users=40, scheduler="chunked", max_batched_tokens=1024, prompt="uniform:200,3000",
                    requests=120),
    "tight-budget": dict(users=0, rate=30.0, requests=150, max_batched_tokens=600, prompt="uniform:50,900"),
    "preempting": dict(users=32, kv_pool_blocks=300, prompt="uniform:50,400", output="uniform:50,500",
                       requests=100),
    "fast-lane": dict(users=20, fast_share=0.25, requests=120, output="uniform:10,150"),
    "small-batch": dict(users=16, max_batch=4, requests=80, output="uniform:10,100"),
    "crowded": dict(users=64, max_batch=6, requests=200, output="uniform:10,100"),  # several join at once
}


def _engine(**kw: Any) -> Engine:
    base: dict[str, Any] = {"prompt": "200", "output": "100", "seed": 5, "debug": True}
    base.update(kw)
    return Engine(EngineConfig(**base))


def _state(lane: Lane) -> dict[str, Any]:
    """What admission changes: the three tables' live rows, the pool's counts, the lane's counters."""
    out: dict[str, Any] = {"seq": lane.seq, "n_pf": lane.n_pf, "pool": (lane.pool.available, lane.pool.used)}
    for name in ("R", "Q", "P"):
        t = getattr(lane, name)
        live = slice(t.start, t.n)
        out[name] = (t.start, t.n, t.cols.i[:, live].tolist(), t.cols.f[:, live].tobytes())
    return out


def _twin(lane: Lane) -> Lane:
    """A lane sharing everything but what admission changes (tables, pool, counters), which are copies."""
    twin = copy.copy(lane)
    for name in ("R", "Q", "P", "pool"):
        setattr(twin, name, copy.deepcopy(getattr(lane, name)))
    return twin


@pytest.mark.parametrize("name", list(CONFIGS))
def test_queued_admission_matches_the_array_path_call_by_call(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    few = admission._admit_queued
    seen: list[int] = []

    def checked(lane: Lane, mq: int, free: int, tokens_planned: int, prefill_planned: bool,
                t: float) -> tuple[np.ndarray, bool]:
        twin = _twin(lane)
        want = admission._admit_rows(twin, admission._EMPTY, mq, False, free, tokens_planned, prefill_planned, t,
                                     twin.Q.col("target")[:mq])
        got = few(lane, mq, free, tokens_planned, prefill_planned, t)
        assert got[0].tolist() == want[0].tolist() and got[0].dtype == want[0].dtype and got[1] == want[1]
        assert _state(lane) == _state(twin)
        seen.append(len(got[0]))
        return got

    monkeypatch.setattr(admission, "_admit_queued", checked)
    _engine(**CONFIGS[name]).run()
    assert name == "static" or max(seen) > 0  # the path was taken, admitting (a static batch forms all at once)
    assert name != "crowded" or max(seen) > 1  # several at once


@pytest.mark.parametrize("name", ["open", "chunked", "preempting", "fast-lane", "closed"])
def test_runs_are_bit_for_bit_the_same_without_the_few_path(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    on = _engine(**CONFIGS[name])
    on.run()
    monkeypatch.setattr(admission, "_admit_queued", lambda lane, mq, *a: admission._admit_rows(
        lane, admission._EMPTY, mq, False, *a, lane.Q.col("target")[:mq]))
    off = _engine(**CONFIGS[name])
    off.run()
    assert json.dumps(on.metrics(), sort_keys=True) == json.dumps(off.metrics(), sort_keys=True)
    assert on.latencies().tobytes() == off.latencies().tobytes()
