"""Routers as classes in a registry: a router registered here (as docs/extending/routers.md shows) routes a fleet
from `tokensim run --router`, reads only its replica snapshots, and the built-in ones pick as they always did."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from engine.config import EngineConfig
from engine.errors import InputError
from engine.fleet.fleet import Fleet, FleetSpec
from engine.fleet.routers import ROUTERS, KvAware, LeastLoaded, Pick, PrefixAware, Router, RoutingSnapshot
from engine.serving.tables import Rows
from tui.cli import main


class ShortestQueue(Router):
    """The docs' worked example: the fewest requests waiting, whatever is running; ties to the smaller batch."""

    name = "shortest-queue"

    def pick(self, reps: Sequence[RoutingSnapshot]) -> Pick:
        r = min(reps, key=lambda s: (s.queued, s.running, s.index))
        return Pick(r.index, self.name, r.queued)


@pytest.fixture
def shortest_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registered for one test: the one line the recipe adds to ROUTERS."""
    monkeypatch.setitem(ROUTERS, ShortestQueue.name, ShortestQueue)


def _snap(index: int, queued: int = 0, running: int = 0, free: int = 100, total: int = 100, wanted: int = 0,
          cached: int = 0) -> RoutingSnapshot:
    return RoutingSnapshot(index, queued, running, free, total, wanted, cached)


def _request(rid: int, prompt: int) -> Rows:
    r = Rows.new(1)
    r.id[0], r.user[0], r.prompt[0], r.target[0], r.total[0], r.arrival[0] = rid, -1, prompt, prompt, 5, 0.0
    return r


def test_a_registered_router_routes_a_fleet_from_the_command_line(shortest_queue: None,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--users", "24", "--replicas", "3", "--router", "shortest-queue", "--requests", "120", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["router"] == "shortest-queue" and out["requests_completed"] == 120
    assert sum(r["requests_completed"] for r in out["replicas"]) == 120
    assert all(r["requests_completed"] > 0 for r in out["replicas"])  # it spreads them (0 would be a bad pick)


def test_a_registered_router_reads_the_snapshots_it_is_given(shortest_queue: None) -> None:
    f = Fleet(FleetSpec(EngineConfig(users=0, requests=10), replicas=3, router="shortest-queue"))
    assert f.loop == "events"  # a router that says nothing about its figures takes the always-right loop
    # Replica 0: two queued; replica 1: one running (stepped into its batch), none queued; replica 2: one queued.
    f.reps[0].inject(_request(100, 10))
    f.reps[0].inject(_request(101, 10))
    f.reps[1].inject(_request(102, 3000))
    f.reps[1].step_before(1.0, 1)
    f.reps[2].inject(_request(103, 10))
    snaps = f._snapshots(f.front, None)
    assert [(s.queued, s.running) for s in snaps] == [(2, 0), (0, 1), (1, 0)]
    assert snaps[1].free_blocks < snaps[0].free_blocks == snaps[0].kv_blocks
    assert f._route() == Pick(1, "shortest-queue", 0)  # least-loaded would tie 1 and 2 and take 1 as well...
    f.reps[1].inject(_request(104, 10))
    f.reps[1].inject(_request(105, 10))
    assert f._route().index == 2  # ...but now 1 has two queued: the shortest queue is 2's
    # An unknown name is one line naming every registered router.
    with pytest.raises(InputError, match="shortest-queue"):
        Fleet(FleetSpec(EngineConfig(users=4, requests=4), replicas=2, router="no-such-router"))


def test_the_built_in_routers_pick_by_their_rules() -> None:
    reps = [_snap(0, queued=3, running=1, free=50), _snap(1, queued=0, running=2, free=40, wanted=0),
            _snap(2, queued=1, running=1, free=90, wanted=60)]
    assert LeastLoaded().pick(reps) == Pick(1, "least-loaded", 2)  # loads 4, 2, 2: the lower index
    assert KvAware().pick(reps) == Pick(0, "kv-aware", 50)  # headroom 50, 40, 30
    assert KvAware().settled(reps) is None  # nobody has its whole pool free: the busy ones must catch up
    assert KvAware().settled([_snap(3, free=100, total=100)]) == Pick(3, "kv-aware", 100)
    cached = [reps[0], reps[1]._replace(cached_blocks=2), reps[2]._replace(cached_blocks=5)]
    assert PrefixAware().pick(cached) == Pick(2, "prefix", 5 * 16)
    assert PrefixAware().pick(reps) == Pick(1, "least-loaded", 2)  # no hit anywhere


def test_router_choices_come_from_the_registry(shortest_queue: None, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:  # argparse refuses it: one line, exit code 2
        main(["run", "--users", "4", "--replicas", "2", "--router", "nope", "--requests", "4"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert all(name in err for name in ROUTERS) and "shortest-queue" in err
