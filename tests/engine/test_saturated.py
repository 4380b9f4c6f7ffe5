"""Saturated stretches (engine.serving.saturated) against step-by-step runs: every metric, table row, total, history
row, latency record and user send time must come out the same, bit for bit, with the stretch on and off."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.serving import saturated
from engine.serving.engine import Engine

# The bench's varied row (tui.commands.bench_cmd: 1,000 users who never pause, batch cap 256), smaller.
BASE = EngineConfig(hardware="h100-sxm", model="qwen2.5-14b", users=300, prompt="uniform:256,768",
                    output="uniform:128,384", scheduler="continuous", max_batch=64, seed=0, duration=1e9, force=True)
VARIANTS = {
    "varied": {},
    "fixed lengths": {"prompt": "512", "output": "256"},
    "short outputs": {"output": "uniform:1,40", "users": 120},
    "batch cap 16": {"max_batch": 16, "users": 60},
    "short queue": {"users": 72},  # the queue's few rows: admission reaches the requests drawn at a stretch's start
    "think time": {"think_time": "exp:0.05", "users": 200},
    "token budget": {"max_batched_tokens": 1200, "users": 200},
    "small pool": {"kv_pool_blocks": 2600, "users": 200, "prefix_caching": False},  # preempts now and then
    "no prefix caching": {"prefix_caching": False},
    "moe": {"model": "qwen3-30b-a3b"},  # array pricing's expert terms (a power of T) as the scalar path's
    "tp and pp": {"tp": 2, "pp": 2},  # collectives, micro-batches
    "sync scheduling": {"ideal": True},
    "duration bound": {"duration": 9.0},
    "request limit": {"requests": 1500, "duration": None},
}


def _state(eng: Engine) -> list[tuple[str, Any]]:
    """Everything a run leaves that a reader could see, as comparable values."""
    out: list[tuple[str, Any]] = [("metrics", repr(eng.metrics())), ("clock", eng._clock), ("tick", eng._tick)]
    for x, lane in enumerate(eng._lanes):
        lane.check(0.0)
        st = lane.stats
        R, Q, P = lane.R, lane.Q, lane.P
        out += [(f"{x}.R", R.cols.b[:, :R.n].tobytes()), (f"{x}.Q", Q.cols.b[:, Q.head:Q.n].tobytes()),
                (f"{x}.P", P.cols.b[:, :P.n].tobytes()),
                (f"{x}.lane", (lane.clock, lane.chosen_at, lane.seq, lane.n_pf, repr(lane.last_cost))),
                (f"{x}.pool", (lane.pool.private, lane.pool.peak, lane.pool.cached, lane.pool.used)),
                (f"{x}.sends", (list(lane.source.arrivals._send_at), lane.source.arrivals.next_user,
                                lane.source.budget.next_id, lane.source.budget.accepted)),
                (f"{x}.itl", (st.itl.counts.tobytes(), list(st.itl.sum), st.itl.n.tobytes())),
                (f"{x}.hist", st.hist.last().tobytes()), (f"{x}.lat", st.lat.last().tobytes()),
                (f"{x}.times", st.times.last().tobytes()), (f"{x}.recent", st.recent.last().tobytes()),
                (f"{x}.slo", (st.slo_ok, st.slo_ok_tokens))]
        for f in dataclasses.fields(st):
            v = getattr(st, f.name)
            if isinstance(v, (int, float, np.ndarray)) and not f.name.startswith("_"):
                out.append((f"{x}.stats.{f.name}", v.tobytes() if isinstance(v, np.ndarray) else v))
    return out


def _run(cfg: EngineConfig, on: bool, ticks: int) -> tuple[list[tuple[str, Any]], int]:
    saturated.ENABLED = on
    taken = [0]
    real = saturated._Stretch.apply

    def counted(self: saturated._Stretch) -> None:
        taken[0] += self.k
        real(self)

    saturated._Stretch.apply = counted  # type: ignore[method-assign]
    try:
        eng = Engine(cfg)
        for _ in range(300):
            eng.step()
        eng.run(max_ticks=ticks)
        return _state(eng), taken[0]
    finally:
        saturated.ENABLED = True
        saturated._Stretch.apply = real  # type: ignore[method-assign]


@pytest.mark.parametrize("name", list(VARIANTS))
def test_stretch_matches_steps(name: str) -> None:
    cfg = replace(BASE, **VARIANTS[name])
    off, none = _run(cfg, False, 3000)
    on, taken = _run(cfg, True, 3000)
    assert none == 0
    # (equal lengths leave long quiet gaps, taken by quiet runs; a duration bound ends the run early)
    least = 50 if name in ("fixed lengths", "duration bound") else 1000
    assert taken > least, f"{name}: the stretch took only {taken} of 3,000 ticks"
    for (k, a), (_, b) in zip(off, on, strict=True):
        assert a == b, f"{name}: {k} differs with saturated stretches"


def same_under_advance(module: Any, cfg: EngineConfig, frames: int, what: str) -> None:
    """`frames` frames of Engine.advance (0.37 s and 97 ticks each) with `module`'s stretches off, then on: every
    figure the same (test_open_loop asks it of the open-loop stretches too)."""
    states = []
    for on in (False, True):
        module.ENABLED = on
        try:
            eng = Engine(cfg)
            for _ in range(frames):
                eng.advance(0.37, max_ticks=97)
            states.append(_state(eng))
        finally:
            module.ENABLED = True
    for (k, a), (_, b) in zip(*states, strict=True):
        assert a == b, f"{k} differs with {what} stretches"


def test_stretch_in_steps_of_advance() -> None:
    """Engine.advance's bounds (a wall-clock frame's seconds and ticks) cut stretches as they cut step runs."""
    same_under_advance(saturated, replace(BASE, **VARIANTS["varied"]), 40, "saturated")
