"""Open-loop stretches (engine.serving.open_loop) against step-by-step runs: every metric, table row, total, history
row, latency record and arrival must come out the same, bit for bit, with the stretch on and off, at the run's end
and at tick boundaries along the way."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest

from engine.config import EngineConfig
from engine.serving import open_loop
from engine.serving.engine import Engine
from tests.engine.test_saturated import _state, same_under_advance

# `run --model llama-3.1-8b --rate 10` (issue 26's busy open loop), fewer requests.
BASE = EngineConfig(model="llama-3.1-8b", rate=10.0, prompt="uniform:500,1500", output="uniform:100,300",
                    requests=1200, users=0, seed=0, force=True)
VARIANTS = {
    "rate 10": {},
    "overloaded": {"rate": 60.0, "requests": 2500},  # a queue builds: admission takes several rows a step
    "sync scheduling": {"ideal": True},
    "fixed lengths": {"prompt": "512", "output": "256"},
    "varied lengths": {"prompt": "lognormal:800,0.8", "output": "lognormal:150,0.9", "seed": 3},
    "short outputs": {"output": "uniform:1,12", "rate": 40.0, "requests": 2500},  # admitted rows end stretches
    "duration bound": {"duration": 45.0, "requests": None},
    "small pool": {"kv_pool_blocks": 3000, "rate": 15.0},  # preempts now and then: stretches stop short of it
    "token budget": {"max_batched_tokens": 2048, "rate": 40.0, "requests": 2000},  # the budget turns heads away
    "batch cap": {"max_batch": 16, "rate": 30.0},  # no free slot until a row finishes
    "tp 2": {"tp": 2, "rate": 25.0},
    "moe": {"model": "qwen3-30b-a3b"},
}


@contextmanager
def stretches(on: bool) -> Iterator[list[int]]:
    """Open-loop stretches switched on or off inside the block; yields a counter whose [0] is the steps they took."""
    open_loop.ENABLED = on
    taken = [0]
    real = open_loop._Open.apply

    def counted(self: open_loop._Open) -> None:
        taken[0] += self.k
        real(self)

    open_loop._Open.apply = counted  # type: ignore[method-assign]
    try:
        yield taken
    finally:
        open_loop.ENABLED = True
        open_loop._Open.apply = real  # type: ignore[method-assign]


def _run(cfg: EngineConfig, on: bool, chunk: int | None) -> tuple[list[list[tuple[str, Any]]], int]:
    """The run's states every `chunk` ticks (None: at its end only), and the steps stretches took."""
    with stretches(on) as taken:
        eng = Engine(cfg)
        states = []
        while not eng.finished:
            eng.run(max_ticks=chunk)
            states.append(_state(eng))
    return states, taken[0]


@pytest.mark.parametrize("name", list(VARIANTS))
def test_stretch_matches_steps(name: str) -> None:
    cfg = replace(BASE, **VARIANTS[name])
    off, none = _run(cfg, False, None)
    on, taken = _run(cfg, True, None)
    assert none == 0
    assert taken > 1000, f"{name}: stretches took only {taken} steps"
    for (k, a), (_, b) in zip(off[-1], on[-1], strict=True):
        assert a == b, f"{name}: {k} differs with open-loop stretches"


@pytest.mark.parametrize("name", ["rate 10", "overloaded", "sync scheduling"])
def test_stretch_at_tick_bounds(name: str) -> None:
    """Engine.run's max_ticks cuts stretches as it cuts step runs: the same state at every bound."""
    cfg = replace(BASE, **{**VARIANTS[name], "requests": 300})
    off, _ = _run(cfg, False, 211)
    on, taken = _run(cfg, True, 211)
    assert taken > 400
    assert len(off) == len(on)
    for x, y in zip(off, on, strict=True):
        for (k, a), (_, b) in zip(x, y, strict=True):
            assert a == b, f"{name}: {k} differs with open-loop stretches"


def test_stretch_in_steps_of_advance() -> None:
    """Engine.advance's bounds (a wall-clock frame's seconds and ticks) cut stretches as they cut step runs."""
    same_under_advance(open_loop, replace(BASE, requests=400), 60, "open-loop")
