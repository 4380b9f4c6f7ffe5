"""Properties of `tokensim run` over random small workloads: deterministic, bounded, counted once.

- the same seed gives byte-identical JSON; another seed is allowed to differ;
- clipped_requests <= requests accepted, and accepted = finished + unfinished;
- a --duration run stops at its duration (within one step), however long users think.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.harness import assert_contract, call, examples

pytestmark = pytest.mark.usefixtures("small_budget")
PROPS = settings(deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
LENGTH = st.sampled_from(["50", "uniform:10,400", "lognormal:120,1.5", "exp:80", "normal:100,60", "lognormal:200,20",
                          "uniform:1,100000"])


@st.composite
def workloads(draw: st.DrawFn) -> list[str]:
    """A small run: closed or open loop, varied lengths, one of three schedulers, maybe a tight pool."""
    argv = ["run", "--model", "qwen2.5-0.5b", "--json", "--prompt", draw(LENGTH), "--output", draw(LENGTH),
            "--scheduler", draw(st.sampled_from(["static", "continuous", "chunked"])),
            "--max-batch", str(draw(st.integers(1, 64)))]
    if draw(st.booleans()):
        argv += ["--users", str(draw(st.integers(1, 16))),
                 "--think-time", draw(st.sampled_from(["0", "exp:2", "uniform:0,30", "1e6"]))]
    else:
        argv += ["--rate", str(draw(st.sampled_from([0.5, 5, 40, 400])))]
    argv += ["--kv-blocks", str(draw(st.integers(40, 400)))]  # a small pool: wide draws clip to a short cap
    argv += ["--requests", str(draw(st.integers(1, 40)))]
    return argv


@settings(PROPS, max_examples=examples(8))
@given(argv=workloads(), seed=st.integers(0, 2**32 - 1))
def test_same_seed_same_result_and_counts_add_up(argv: list[str], seed: int) -> None:
    argv = [*argv, "--seed", str(seed)]
    a = call(argv, seconds=60)
    assert_contract(a, argv)
    if a.code:
        return
    assert call(argv, seconds=60).out == a.out  # byte-identical
    r = json.loads(a.out)
    assert r["clipped_requests"] <= r["requests_accepted"]
    assert r["requests_accepted"] == r["requests_completed"] + r["requests_unfinished"]
    assert r["requests_completed"] == r["requests"]  # a --requests run finishes what it accepts


@settings(PROPS, max_examples=examples(5))
@given(users=st.integers(1, 12), think=st.sampled_from(["1e9", "exp:1e8", "uniform:0,1e9", "exp:30", "0"]),
       duration=st.sampled_from([0.5, 3.0, 20.0]))
def test_duration_bounds_the_run_whatever_users_think(users: int, think: str, duration: float) -> None:
    argv = ["run", "--model", "qwen2.5-0.5b", "--users", str(users), "--think-time", think, "--duration",
            str(duration), "--prompt", "uniform:10,300", "--output", "uniform:5,60", "--json"]
    o = call(argv, seconds=60)
    assert_contract(o, argv)
    assert o.code == 0
    r = json.loads(o.out)
    assert r["sim_time_s"] <= duration + 1.0  # stops at the duration, give or take the step in flight
    assert r["requests_accepted"] >= min(users, 1)
