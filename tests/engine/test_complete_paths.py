"""A request's completion on its one-row path is the array path's arithmetic: the same records, blocks and sends.

A tick's usual one finished row goes through Table.drop's one-row move (drop_row), keying.release's one-row branch
and Source.wake_one (Arrivals.think_one), its fields read as Python ints. Here whole runs of varied configurations
with the one-row wake off (lane._ONE_ROW = -1: every finished row's user woken by wake) must give the same numbers
bit for bit, and each one-row call is checked against its array twin on varied inputs (drop_row in test_tables.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.fleet.fleet import Fleet, FleetSpec
from engine.serving import keying, lane
from engine.serving.engine import Engine
from engine.serving.prefix_cache import BlockPool
from engine.serving.tables import Rows
from engine.traffic.arrivals import Arrivals, Budget
from engine.traffic.workload import Dist, Sampler

ROOT = Path(__file__).resolve().parents[2]
STAGED = """
[prompt]
tokens = "uniform:50,600"
[output]
tokens = "uniform:10,120"
[[stage]]
users = 6
duration = 20
think_time = "exp:0.4"
[[stage]]
users = 20
duration = 20
[[stage]]
rate = 6
duration = 20
"""

CONFIGS: dict[str, dict[str, Any]] = {
    "open": dict(users=0, rate=15.0, requests=150, prompt="uniform:50,1500", output="exp:100"),
    "closed-thinking": dict(users=24, think_time="exp:0.5", requests=150, output="uniform:20,200"),
    "closed-fixed-think": dict(users=16, think_time="0.25", requests=120, output="uniform:5,80"),
    "preempting": dict(users=32, kv_pool_blocks=300, prompt="uniform:50,400", output="uniform:50,500",
                       requests=100),
    "fast-lane": dict(users=20, fast_share=0.25, requests=120, output="uniform:10,150"),
    "shared-prefix": dict(users=0, workload=str(ROOT / "scenes/workloads/shared-system-prompt.toml"),
                          prefix_caching=True, requests=120),
    "staged": dict(workload="STAGED", requests=300),
}


def _engine(name: str, tmp: Path) -> Engine:
    kw: dict[str, Any] = {"prompt": "200", "output": "100", "seed": 5, "debug": True}
    kw.update(CONFIGS[name])
    if kw.get("workload") == "STAGED":
        p = tmp / "staged.toml"
        p.write_text(STAGED)
        kw["workload"] = str(p)
    return Engine(EngineConfig(**kw))


def _run(name: str, tmp: Path) -> tuple[str, bytes, bytes, list[int]]:
    e = _engine(name, tmp)
    e.run()
    st = e._lanes[0].stats
    return (json.dumps(e.metrics(), sort_keys=True), e.latencies().tobytes(), st.times.last().tobytes(),
            st.stage_done.tolist())


@pytest.mark.parametrize("name", list(CONFIGS))
def test_runs_are_bit_for_bit_the_same_with_the_one_row_path_off(name: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    complete = lane.Lane.complete

    def counted(ln: lane.Lane, done: np.ndarray, t: float) -> np.ndarray:
        seen.append(int(np.count_nonzero(done)))
        return complete(ln, done, t)

    monkeypatch.setattr(lane.Lane, "complete", counted)
    default = _run(name, tmp_path)
    assert 1 in seen  # the one-row path ran
    monkeypatch.setattr(lane, "_ONE_ROW", -1)
    assert _run(name, tmp_path) == default


def test_a_fleets_finished_rows_are_the_same_with_the_one_row_path_off(monkeypatch: pytest.MonkeyPatch) -> None:
    # A replica's router is told of each finished row (Lane.on_done): the rows it hears of must be the same.
    heard: list[bytes] = []
    complete = lane.Lane.complete

    def told(ln: lane.Lane, done: np.ndarray, t: float) -> np.ndarray:
        tell = ln.on_done
        if tell is not None:
            ln.on_done = lambda d: (heard.append(d.i.tobytes() + d.f.tobytes()), tell(d))  # type: ignore[func-returns-value]
        try:
            return complete(ln, done, t)
        finally:
            ln.on_done = tell

    monkeypatch.setattr(lane.Lane, "complete", told)

    def run() -> tuple[str, bytes, list[bytes]]:
        heard.clear()
        cfg = EngineConfig(users=0, rate=12.0, requests=240, prompt="uniform:50,900", output="uniform:10,150",
                           seed=3)
        f = Fleet(FleetSpec(cfg, replicas=3, router="least-loaded"))
        f.run()
        return json.dumps(f.metrics(), sort_keys=True), f.latencies().tobytes(), list(heard)

    default = run()
    assert default[2]
    monkeypatch.setattr(lane, "_ONE_ROW", -1)
    assert run() == default


@pytest.mark.parametrize("caching", [False, True])
def test_releasing_one_row_gives_back_what_the_array_path_does(caching: bool) -> None:
    # keying.release's one-row branch against the array path (the same row beside a row holding nothing, which
    # adds no block and no key): the pool's counts and cached keys after each release must agree.
    rng = np.random.default_rng(11)
    for _ in range(200):
        pools = [BlockPool(4000, caching) for _ in range(2)]
        r = Rows.new(1)
        r.id[:] = rng.integers(0, 1000)
        r.prompt[:] = rng.integers(1, 2000)
        r.cached[:] = rng.integers(0, int(r.prompt[0]) + 1)
        r.blocks[:] = (r.cached + 15) >> 4
        r.group[:] = rng.integers(0, 3)
        r.prefix[:] = min(int(r.prompt[0]), int(rng.integers(0, 1000))) * (r.group[0] > 0)
        r.body[:] = rng.integers(0, 2) * rng.integers(1, 5)
        full = int(rng.integers(0, int(r.blocks[0]) + 1)) if caching and rng.random() < 0.7 else 0
        r.full[:] = full
        two = Rows.join([r, Rows.new(1)])
        for pool, rows in zip(pools, (r, two), strict=True):
            ln: Any = type("L", (), {"caching": caching, "pool": pool, "texts": None})()
            pool.take(int(r.blocks[0]))
            if full:
                z = np.zeros(1, dtype=np.int64)
                keys = keying.block_keys(r.id, r.group, r.prefix, r.body, r.sess, r.prompt, z, r.full, z)
                pool.fill(keys)
            keying.release(ln, rows)
        a, b = pools
        assert (a.private, a.used, a.free) == (b.private, b.used, b.free)
        if caching:
            assert a._ref.tolist() == b._ref.tolist() and a._key.tolist() == b._key.tolist()


@pytest.mark.parametrize("think", ["fixed:2.5", "exp:1.5", "uniform:0.1,9"])
def test_think_one_matches_think_of_one_user(think: str) -> None:
    # Arrivals.think_one against think() of a one-user array, over a run of finishers: open-loop requests (-1),
    # users past the active count, active ones (some twice); the think-time draws are clipped at 2 s (take_scalar
    # counts the clip as take does): every send time, heap entry, clip count and the next draw must agree.
    kind, _, args = think.partition(":")
    dist = Dist(kind, *map(float, args.split(",")))
    rng = np.random.default_rng(4)
    pair = []
    for _ in range(2):
        a = Arrivals(Budget(None, 40, None), False, 0.0, 0.0,
                     Sampler(dist, np.random.default_rng(9), False, 0.0, 2.0),
                     Sampler(Dist("exp", 1.0), np.random.default_rng(2), False, 0.0))
        a.u_next = np.full(50, np.inf)
        pair.append(a)
    one, arr = pair
    t = 0.0
    for step in range(600):
        u = int(rng.integers(-1, 50))
        t += float(rng.exponential(0.1))
        if step == 300:
            for x in pair:
                x.budget.users = 0  # an open loop from here: nobody wakes
        one.think_one(u, t)
        arr.think(np.array([u], dtype=np.int64), t)
        assert one.u_next.tobytes() == arr.u_next.tobytes() and one.u_pending.tolist() == arr.u_pending.tolist()
        assert one._sends == arr._sends and one.next_user == arr.next_user
        assert one.think_time.clipped == arr.think_time.clipped
    assert one.think_time.take(5).tobytes() == arr.think_time.take(5).tobytes()
    assert one.think_time.clipped > 0 and math.isfinite(one.next_user)
