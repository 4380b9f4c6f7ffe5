"""The one bisection: finds the first n where a monotone predicate turns true, and gives up after one call."""

from __future__ import annotations

import pytest

from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions, context_wall
from engine.search import first_true


@pytest.mark.parametrize(("lo", "hi"), [(0, 1), (1, 2), (1, 17), (0, 1000), (5, 6)])
def test_first_true_finds_every_threshold(lo: int, hi: int) -> None:
    for t in range(lo, hi + 1):
        assert first_true(lambda n, t=t: n >= t, lo, hi) == t


def test_a_predicate_that_never_turns_costs_one_call_and_returns_hi() -> None:
    calls: list[int] = []

    def never(n: int) -> bool:
        calls.append(n)
        return False

    assert first_true(never, 1, 1 << 20) == 1 << 20 and calls == [1 << 20]


def test_context_wall_is_where_kv_reads_reach_weight_reads() -> None:
    sm = StepModel(load_hardware("h100-sxm"), load_model("generic-14b"), StepOptions(ideal=True, kv_dtype="fp8"))
    for batch in (1, 300):
        wall = context_wall(sm, batch)
        before, at = sm.decode(batch, wall - 1).bytes, sm.decode(batch, wall).bytes
        assert before["kv_read"] < before["weights"] and at["kv_read"] >= at["weights"]
