"""The fleet's reading API for the app: advance_to (the app's clock), replica rows, the router's reasons, copies."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.fleet.fleet import Fleet, FleetSpec, engine_for
from engine.serving.engine import Engine
from tests.engine.test_fleet import SHARED, _flat

CLOSED = EngineConfig(users=12, think_time="exp:1", requests=150, prompt="uniform:500,3000", output="uniform:50,200")
OPEN = EngineConfig(rate=6, users=0, requests=150, prompt="lognormal:1000,0.8", output="lognormal:200,0.8")


@pytest.mark.parametrize("pd", [None, (1, 3)])
def test_advancing_in_small_steps_is_the_same_run(pd: tuple[int, int] | None) -> None:
    # The app moves the fleet a frame at a time; every figure must be those of one straight run. (Open loop: in
    # closed loop the fleet draws think times in the order it hears of answers, which depends on how its
    # replicas' steps are grouped, so a closed-loop run framed differently is another sample of the same run.)
    spec = FleetSpec(OPEN, replicas=4, router="least-loaded", pd=pd)
    straight = Fleet(spec)
    straight.run()
    framed = Fleet(spec, preroute=False)
    t = 0.0
    while not framed.finished:
        t += 0.037
        framed.advance_to(t)
        assert framed.now == t
        assert all(r.clock_s >= t or r.batch == 0 for r in framed.replica_states())  # nothing busy left behind
    a, b = straight.metrics(), framed.metrics()
    a.pop("rolling")
    b.pop("rolling")
    assert _flat(a) == pytest.approx(_flat(b), rel=1e-12, abs=1e-15)
    assert a["requests_completed"] == 150 and a["replicas"] == b["replicas"]


def test_advance_to_runs_an_unbounded_workload_and_max_ticks_bounds_the_work() -> None:
    f = Fleet(FleetSpec(EngineConfig(users=8, prompt="uniform:500,3000", output="uniform:50,200"), replicas=3),
              preroute=False)
    with pytest.raises(Exception, match="unbounded"):
        f.run()
    assert f.advance_to(2.0) > 0 and f.now == 2.0
    n = f.advance_to(4.0, max_ticks=5)
    assert n == 5 and f.now == 2.0  # stopped short: the fleet has not reached 4.0
    states = f.replica_states()
    assert sum(s.done for s in states) == f.requests_completed
    assert sum(s.batch + s.queued for s in states) == sum(r.load for r in f.reps)
    assert [s.kv_used for s in states] == [r.lane.pool.used for r in f.reps]


def test_routes_say_why_with_the_figure_that_decided() -> None:
    f = Fleet(FleetSpec(EngineConfig(users=16, prompt="uniform:500,3000", output="uniform:50,200"), replicas=4,
                        router="least-loaded"), preroute=False)
    f.advance_to(3.0)
    routes = f.routes
    assert 0 < len(routes) <= 8 and {r.replica for r in routes} <= {r.index for r in f.reps}
    assert all(r.why == "least-loaded" for r in routes)
    assert [r.time_s for r in routes] == sorted(r.time_s for r in routes)
    # 16 users on 4 idle replicas at t = 0: the first four go one to each replica, loads 0, then load 1.
    g = Fleet(FleetSpec(EngineConfig(users=8, think_time="0", prompt="1000", output="100"), replicas=4,
                        router="least-loaded"), preroute=False)
    g.advance_to(1e-9)
    assert [(r.replica, r.figure) for r in g.routes] == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1)]
    kv = Fleet(FleetSpec(EngineConfig(users=6, think_time="0", prompt="2000", output="100"), replicas=3,
                         router="kv-aware"), preroute=False)
    kv.advance_to(1e-9)
    first = kv.routes[0]
    assert first.why == "kv-aware" and first.figure == kv.replica_states()[0].kv_total  # all free at t = 0
    rr = Fleet(FleetSpec(EngineConfig(rate=10, requests=30), replicas=3), preroute=True)
    rr.run()
    assert [r.replica for r in rr.routes] == [(r.req_id) % 3 for r in rr.routes]  # dealt in turn, ids from 0


def test_prefix_aware_says_how_long_a_prefix_decided(tmp_path: Path) -> None:
    # 40 groups share a 1,600-token prefix: once a group's prefix is cached somewhere, its requests go there for it.
    w = tmp_path / "shared.toml"
    w.write_text(SHARED)
    f = Fleet(FleetSpec(EngineConfig(users=0, workload=str(w), kv_pool_blocks=1500), replicas=4,
                        router="prefix-aware"), preroute=False)
    seen: list = []
    t = 0.0
    while t < 12.0:
        t += 0.5
        f.advance_to(t)
        seen += [r for r in f.routes if r not in seen]
    prefix = [r for r in seen if r.why == "prefix"]
    assert prefix and all(r.figure == 1600 for r in prefix)  # the whole shared prefix, in tokens
    assert {r.why for r in seen} <= {"prefix", "least-loaded"}  # no hit anywhere: the least loaded


def test_pd_copies_in_flight_are_listed_until_they_land() -> None:
    f = Fleet(FleetSpec(EngineConfig(users=16, think_time="0", prompt="3000", output="200"), replicas=3, pd=(1, 2),
                        kv_link_gbps=5.0), preroute=False)  # a slow link: copies take a while
    seen = 0
    t = 0.0
    while t < 3.0:
        t += 0.05
        f.advance_to(t)
        for c in f.copies():
            seen += 1
            assert c.src == 0 and c.tokens == 2999
            if math.isnan(c.lands_s):
                assert c.dst == -1
            else:
                assert c.dst in (1, 2) and c.lands_s >= t  # every landing before t has happened
    assert seen > 0 and f.transfers > 0
    held = sum(s.held for s in f.replica_states())
    # A copy under way pins its blocks on both sides.
    under_way = [c for c in f.copies() if c.dst >= 0]
    assert held >= sum(2 * ((c.tokens + 15) // 16) for c in under_way) - 2 * len(under_way)


def test_replica_snapshot_is_that_replica_on_its_own_clock() -> None:
    f = Fleet(FleetSpec(CLOSED, replicas=2, router="least-loaded"), preroute=False)
    f.advance_to(1.5)
    for i, st in enumerate(f.replica_states()):
        s = f.replica_snapshot(i)
        assert s.time_s == st.clock_s and s.kv_blocks_used == st.kv_used and s.running == st.batch
        assert s.tick == f.replica_engine(i).tick
    assert f.replica_snapshot(0).tick + f.replica_snapshot(1).tick == f.ticks


def test_engine_for_builds_an_engine_for_one_replica_else_a_fleet() -> None:
    assert isinstance(engine_for(FleetSpec(CLOSED)), Engine)
    assert isinstance(engine_for(FleetSpec(CLOSED, replicas=2)), Fleet)
    assert isinstance(engine_for(FleetSpec(CLOSED, replicas=2, pd=(1, 1))), Fleet)
    assert engine_for(FleetSpec(EngineConfig(rate=4, requests=5), replicas=2), preroute=False).loop == "events"
