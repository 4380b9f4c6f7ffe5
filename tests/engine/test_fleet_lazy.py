"""The lazy loop's shortcuts read what a fresh read would: kept routing snapshots, the fewest steps to a finish."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.fleet.feed import Feed
from engine.fleet.fleet import Fleet, FleetSpec
from engine.fleet.lazy import LazyLoop, _commit
from engine.fleet.replica import _FEW_ROWS, _LIST_ROWS, Replica
from engine.fleet.routers import LeastLoaded, RoutingSnapshot, least_loaded
from engine.serving import steps
from engine.serving.lane import Lane

# Open loop on the lazy loop; a small KV pool so requests queue and get preempted (P and Q are not empty).
TIGHT = EngineConfig(rate=12, users=0, requests=400, prompt="lognormal:1000,0.8", output="lognormal:200,0.8",
                     kv_pool_blocks=1500)


@pytest.mark.parametrize("router", ["least-loaded", "kv-aware"])
def test_kept_snapshots_are_the_replicas_read_afresh(router: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A replica's snapshot is kept until it steps or takes a request: at every arrival each one the router is
    # given must be what reading the replica now gives. (A steady router is given every kept one, each read
    # again as its replica steps; one that is not, those snapshots() gives.)
    original, hand = LazyLoop.snapshots, LazyLoop.hand
    seen = [0, 0]

    def checked(self: LazyLoop, reps: list[Replica], row: object) -> list[RoutingSnapshot]:
        got = original(self, reps, row)  # type: ignore[arg-type]
        wanted = "wanted_blocks" in self.router.reads
        assert got == [r.routing(wanted, None) for r in reps]
        seen[0] += 1
        return got

    def current(self: LazyLoop) -> None:
        fresh = [r.routing(self.wanted, None) for r in self.reps]
        if self.loads is not None:  # a router reading loads alone (least-loaded) is kept the loads
            assert self.loads == [s.load for s in fresh]
            assert all(type(x) is int for x in self.loads)
        else:
            assert self.snaps == fresh
            assert all(type(s) is RoutingSnapshot for s in self.snaps)

    def kept(self: LazyLoop, row: object, t: float) -> None:  # (a steady router's arrival)
        current(self)
        hand(self, row, t)  # type: ignore[arg-type]
        current(self)  # (the chosen one's queued count raised by one, not read)
        seen[1] += 1

    monkeypatch.setattr(LazyLoop, "snapshots", checked)
    monkeypatch.setattr(LazyLoop, "hand", kept)
    f = Fleet(FleetSpec(TIGHT, replicas=4, router=router))
    assert f.loop == "lazy"
    f.run()
    assert max(seen) >= 400 and f.metrics()["requests_completed"] == 400


def _fewest_left(r: Replica) -> int:
    """The fewest tokens left by definition: the least (total - gen) over running, preempted then queued requests,
    a table's 0 giving way to the next one's figure, as numpy computes it on each whole table."""
    ln = r.lane
    m = 0
    for t in (ln.R, ln.P, ln.Q):
        if t.size:
            left = int(np.min(t.col("total") - t.col("gen")))
            m = left if not m else min(m, left)
    return m


def _calm_by_definition(r: Replica) -> float:
    """Replica.calm_bound by its definition: the fewest steps to a finish (_fewest_left) at dt_min each from the
    clock, the first of them starting now, and no sooner than its feed's calm."""
    m = _fewest_left(r)
    c = math.inf if not m else r.clock + (m - 1) * r.dt_min
    return c if r.feed is None else min(c, r.feed.calm)


def test_calm_bound_is_the_definitions_over_every_table(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its running batch is read as two items for one row, one row at a time for a few, as a Python min over a list
    # for more, and the queue and the preempted only when some request waits: after every step it must give the
    # definition's figure, through batches, queues and preemptions.
    # A table is read one row at a time, as a list or by numpy's min by its size (_least_left): each way is met.
    tables = {"R": 0, "P": 0, "Q": 0}
    sizes = {"one": 0, "few": 0, "list": 0, "numpy": 0}
    f = Fleet(FleetSpec(TIGHT, replicas=2, router="least-loaded"))
    owner = {id(r.lane): r for r in f.reps}

    def check(lane: Lane) -> None:
        r = owner[id(lane)]
        assert r.calm_bound() == _calm_by_definition(r)
        for name in tables:
            size = getattr(lane, name).size
            tables[name] += size > 0
            if size:
                sizes["one" if size == 1 else "few" if size <= _FEW_ROWS else "list" if size <= _LIST_ROWS
                      else "numpy"] += 1

    # Every step is a quiet run (steps.jump) or a lone step (Lane.step), whichever loop takes it.
    jump, step = steps.jump, Lane.step

    def checked_jump(lane: Lane, stop: float, most: int) -> int:
        k = jump(lane, stop, most)
        if k:
            check(lane)
        return k

    def checked_step(lane: Lane, *args: object, **kw: object) -> object:
        got = step(lane, *args, **kw)  # type: ignore[arg-type]
        check(lane)
        return got

    monkeypatch.setattr(steps, "jump", checked_jump)
    monkeypatch.setattr(Lane, "step", checked_step)
    f.run()
    assert f.metrics()["preemptions"] > 0
    assert all(v > 0 for v in tables.values()), tables
    assert all(v > 0 for v in sizes.values()), sizes


def test_the_calm_a_catch_up_keeps_is_calm_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    # Replica.catch_up reads a replica's calm after each step itself where it runs one row or none with nothing
    # waiting (calm_bound's cases written out), else by calm_bound, and not at all after a quiet run that drew a
    # request (the step after it is taken first). Wherever it read it (its next step, or its return), the calm it
    # keeps must be calm_bound's right after the step, each way met. (The run's end takes its steps without
    # reading calm.) A light load (the fleet day's: a replica holds a row or two) and a tight pool (queues,
    # preemptions).
    light = EngineConfig(rate=2.5, users=0, requests=400, prompt="lognormal:1000,0.8", output="lognormal:200,0.8")
    fleets = [Fleet(FleetSpec(cfg, replicas=4, router="least-loaded")) for cfg in (light, TIGHT)]
    owner = {id(r.lane): r for f in fleets for r in f.reps}
    jump, step, catch_up, last = steps.jump, Lane.step, Replica.catch_up, LazyLoop.catch_up
    seen = {"idle": 0, "one": 0, "more": 0}
    after: dict[int, tuple[float, str]] = {}  # calm_bound right after each replica's last step, and its case
    ending = [False]

    def stepped(lane: Lane) -> None:
        r = owner[id(lane)]
        after.pop(id(r), None)
        if not ending[0] and not (lane.join_next and lane.R.n):  # (else the loop takes the next step first)
            waits = lane.waiting > 0
            case = "idle" if not lane.R.n and not waits else "one" if lane.R.n == 1 and not waits else "more"
            after[id(r)] = (r.calm_bound(), case)

    def read(r: Replica) -> None:
        if (got := after.pop(id(r), None)) is not None:
            assert r.calm == got[0]
            seen[got[1]] += 1

    def checked_jump(lane: Lane, stop: float, most: int) -> int:
        read(owner[id(lane)])
        k = jump(lane, stop, most)
        if k:
            stepped(lane)
        return k

    def checked_step(lane: Lane, *args: object, **kw: object) -> object:
        read(owner[id(lane)])
        got = step(lane, *args, **kw)  # type: ignore[arg-type]
        stepped(lane)
        return got

    def checked_catch_up(self: Replica, stop: float, calm: bool, loads: list[int] | None = None) -> int:
        n = catch_up(self, stop, calm, loads)
        read(self)
        return n

    def run_end(self: LazyLoop, r: Replica, stop: float, calm: bool = True) -> int:
        ending[0] = not calm  # (least-loaded: only the run's end asks the loop's catch_up, without calm)
        return last(self, r, stop, calm)

    monkeypatch.setattr(steps, "jump", checked_jump)
    monkeypatch.setattr(Lane, "step", checked_step)
    monkeypatch.setattr(Replica, "catch_up", checked_catch_up)
    monkeypatch.setattr(LazyLoop, "catch_up", run_end)
    for f in fleets:
        ending[0] = False
        f.run()
        assert ending[0] and f.metrics()["requests_completed"] == 400
    assert all(v > 20 for v in seen.values()), seen


# Bounded replicas: a roomy pool (no preemption possible), a tight one (bounds refused where the requests might not
# all fit), chunked prompts (an admission takes fewer blocks than its prompt wants), prefix caching off.
BOUNDED = [EngineConfig(rate=12, users=0, requests=250, prompt="lognormal:1000,0.8", output="lognormal:200,0.8"),
           EngineConfig(rate=12, users=0, requests=250, prompt="lognormal:1000,0.8", output="lognormal:200,0.8",
                        kv_pool_blocks=900),
           EngineConfig(rate=10, users=0, requests=250, prompt="lognormal:2000,1", output="lognormal:300,1",
                        scheduler="chunked", max_batched_tokens=512, kv_pool_blocks=3000, prefix_caching=False)]


@pytest.mark.parametrize("cfg", BOUNDED)
def test_room_bounds_hold_at_the_arrival(cfg: EngineConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    # A replica kv-aware leaves behind an arrival is bounded there: moved up to the arrival (a copy of it), its
    # headroom is at most the bound's and its load is the bound's. The blocks counted for each replica's requests
    # are what its tables hold.
    decide, bound = LazyLoop.decide, LazyLoop.room_bound
    stops: list[float] = []
    checked = [0, 0]

    def at(self: LazyLoop, row: object, stop: float) -> object:
        stops.append(stop)
        assert self.commit == [_commit(r) for r in self.reps]
        return decide(self, row, stop)  # type: ignore[arg-type]

    def bounded(self: LazyLoop, r: Replica) -> RoutingSnapshot | None:
        b = bound(self, r)
        checked[b is None] += 1
        if b is not None:
            s = _moved_up(r, stops[-1])
            assert s.headroom <= b.headroom and s.load == b.load
        return b

    monkeypatch.setattr(LazyLoop, "decide", at)
    monkeypatch.setattr(LazyLoop, "room_bound", bounded)
    f = Fleet(FleetSpec(cfg, replicas=4, router="kv-aware"))
    assert f.loop == "lazy"
    f.run()
    assert checked[0] > 50, checked


def _moved_up(r: Replica, stop: float) -> RoutingSnapshot:
    """What a router reads of replica r at `stop`: a copy of it moved up there as LazyLoop.catch_up moves it (a lane
    with nothing to run but requests in its feed waits for the first of them)."""
    c = copy.deepcopy(r)
    feed = c.feed
    while c.clock < stop:
        if not c.busy:
            if feed is None or feed.next_time >= stop:
                break
            c.clock = max(c.clock, feed.next_time)
        c.step_before(stop, 1 << 20)
    return c.routing(True, None)


def test_room_floors_hold_at_the_arrival(monkeypatch: pytest.MonkeyPatch) -> None:
    # A busy replica kv-aware may pick without moving it up to the arrival is floored there (room_floor): moved up
    # to the arrival (a copy of it), its headroom is at least the floor's and its load is the floor's; and such
    # picks are made, their requests drawn from the replica's feed, the run's figures those of the event-ordered
    # loop.
    floor = LazyLoop.room_floor
    checked = [0, 0]

    def floored(self: LazyLoop, b: RoutingSnapshot, stop: float) -> RoutingSnapshot | None:
        f = floor(self, b, stop)
        checked[f is None] += 1
        if f is not None:
            s = _moved_up(self.reps[b.index], stop)
            assert s.headroom >= f.headroom and s.load == f.load
        return f

    monkeypatch.setattr(LazyLoop, "room_floor", floored)
    for cfg in FLOORED:
        f = Fleet(FleetSpec(cfg, replicas=3, router="kv-aware"))
        assert f.loop == "lazy"
        f.run()
        e = Fleet(FleetSpec(cfg, replicas=3, router="kv-aware"), preroute=False)
        assert e.loop == "events"
        e.run()
        assert json.dumps(f.metrics(), sort_keys=True) == json.dumps(e.metrics(), sort_keys=True)  # (NaN too)
        assert f.routes == e.routes
    assert checked[0] > 50, checked


# A light load (an idle replica with its whole pool free at most arrivals) and a busy one (none, most of the time).
DECIDED = [EngineConfig(rate=0.5, users=0, requests=150, prompt="lognormal:1000,0.8", output="lognormal:200,0.8"),
           EngineConfig(rate=12, users=0, requests=150, prompt="lognormal:1000,0.8", output="lognormal:200,0.8",
                        kv_pool_blocks=900)]
# Every replica busy at many arrivals, with room for all (so floored): async scheduling (vllm) and not (sglang),
# whole prompts and chunked ones.
FLOORED = [EngineConfig(rate=3, users=0, requests=150, prompt="lognormal:1000,0.8", output="lognormal:200,0.8"),
           EngineConfig(rate=3, users=0, requests=150, prompt="lognormal:1000,0.8", output="lognormal:200,0.8",
                        runtime="sglang"),
           EngineConfig(rate=3, users=0, requests=150, prompt="lognormal:2000,1", output="lognormal:300,1",
                        scheduler="chunked", max_batched_tokens=512, prefix_caching=False)]


def test_a_decision_is_the_routers_pick_over_every_replica_at_the_arrival(monkeypatch: pytest.MonkeyPatch) -> None:
    # decide picks the first idle replica with its whole pool free without reading the others (Router.idle_first),
    # else from exact replicas and bounds on the rest: either way, the pick (and its figure) the router makes over
    # every replica moved up to the arrival (copies of them).
    decide = LazyLoop.decide
    seen = {"idle": 0, "busy": 0, "unmoved": 0}

    def checked(self: LazyLoop, row: object, stop: float) -> object:
        exact = [_moved_up(r, stop) for r in self.reps]
        choice, n, unmoved = decide(self, row, stop)  # type: ignore[arg-type]
        pick = self.router.pick(exact)
        # (a pick made unmoved logs its floor, which the later routes push out of the log: see LazyLoop.later)
        assert (choice.index, choice.why) == pick[:2] if unmoved else choice == pick
        seen["busy" if exact[choice.index].load else "idle"] += 1
        seen["unmoved"] += unmoved
        return choice, n, unmoved

    monkeypatch.setattr(LazyLoop, "decide", checked)
    for cfg in DECIDED + FLOORED:
        f = Fleet(FleetSpec(cfg, replicas=3, router="kv-aware"))
        assert f.loop == "lazy"
        f.run()
        assert f.metrics()["requests_completed"] == 150
    assert min(seen.values()) > 100, seen  # (unmoved: picks room_floor settled)


def test_a_feed_queues_a_request_as_inject_does() -> None:
    # A steady router's (and a dealt) replica's lane draws its requests from a Feed at its step boundaries; each
    # draw must leave the replica as Replica.inject leaves it: the same queue rows, counts, content note and queue
    # peak; what is never drawn is injected when the feed is removed, the clock moved up to each arrival.
    cfg = EngineConfig(rate=12, users=0, requests=40, prompt="lognormal:1000,0.8", output="lognormal:200,0.8",
                       prefix_caching=True)
    f = Fleet(FleetSpec(cfg, replicas=2, router="least-loaded"))
    rows = f.src.draw(30.0)
    assert rows is not None and len(rows) > 6
    a, b = f.reps
    a.content = b.content = True  # (no script here: note content as if the requests could carry some)
    feed = Feed(b, f.dt_min)
    feed.install()
    assert b.lane.source is feed and b.feed is feed
    for j in range(len(rows)):
        feed.push(rows.pick(slice(j, j + 1)), float(rows.arrival[j]))
    assert feed.next_time == float(rows.arrival[0])
    assert feed.calm == min(float(rows.arrival[j]) + (int(rows.total[j]) - 1) * f.dt_min for j in range(len(rows)))
    assert b.routing(False, None).queued == len(rows)
    half = float(rows.arrival[len(rows) // 2])
    for j in range(len(rows) // 2 + 1):
        a.inject(rows.pick(slice(j, j + 1)))
    b.lane.draw_due(half)
    assert len(feed.rows) == len(rows) - len(rows) // 2 - 1
    a.clock = b.clock = 5.0
    for j in range(len(rows) // 2 + 1, len(rows)):
        a.clock = max(a.clock, float(rows.arrival[j]))
        a.inject(rows.pick(slice(j, j + 1)))
    feed.remove()
    assert b.lane.source is feed.inner and b.feed is None and not feed.rows
    for x, y in ((a.lane.Q.cols.i, b.lane.Q.cols.i), (a.lane.Q.cols.f, b.lane.Q.cols.f)):
        assert np.array_equal(x[:, :a.lane.Q.n], y[:, :b.lane.Q.n], equal_nan=True)  # (unset times are NaN)
    assert a.lane.Q.n == b.lane.Q.n == len(rows)
    assert (a.lane.stats.accepted, a._budget.accepted, a.queue_peak, a.lane.shared_content, a.clock) == \
        (b.lane.stats.accepted, b._budget.accepted, b.queue_peak, b.lane.shared_content, b.clock)


@pytest.mark.parametrize("router", ["least-loaded", "kv-aware"])
def test_kept_calm_is_the_replicas_calm_read_afresh(router: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each replica's calm is kept from one arrival to the next (a steady router's arrival lowers it to its feed's
    # new calm instead of reading the replica again): at every arrival, before and after, each must be what
    # Replica.calm_bound gives now.
    # (A steady router's requests are handed over by LazyLoop.hand, the others' by arrive.)
    original, hand = LazyLoop.arrive, LazyLoop.hand
    seen = [0]

    def fresh(self: LazyLoop) -> None:
        assert [r.calm for r in self.reps] == [r.calm_bound() for r in self.reps]

    def checked(self: LazyLoop, row: object, t: float, stop: float) -> int:
        fresh(self)
        n = original(self, row, t, stop)  # type: ignore[arg-type]
        fresh(self)
        seen[0] += 1
        return n

    def handed(self: LazyLoop, row: object, t: float) -> None:
        fresh(self)
        hand(self, row, t)  # type: ignore[arg-type]
        fresh(self)
        seen[0] += 1

    monkeypatch.setattr(LazyLoop, "arrive", checked)
    monkeypatch.setattr(LazyLoop, "hand", handed)
    f = Fleet(FleetSpec(TIGHT, replicas=4, router=router))
    f.run()
    assert seen[0] == 400 and f.metrics()["requests_completed"] == 400


def test_only_a_scripts_requests_carry_content() -> None:
    # A feed notes a drawn row's content (Lane.note_content) only when the fleet's source has a script: the rows an
    # unscripted source draws never carry a group prefix or a body, so noting them could change nothing.
    cfg = EngineConfig(rate=12, users=0, requests=300, prompt="lognormal:1000,0.8", output="lognormal:200,0.8",
                       prefix_caching=True)
    f = Fleet(FleetSpec(cfg, replicas=2, router="least-loaded"))
    assert f.src.script is None
    drawn = 0
    while f.src.next_time < math.inf:
        rows = f.src.draw(f.src.next_time + 10.0)
        if rows is not None:
            drawn += len(rows)
            assert not rows.group.any() and not rows.body.any()
    assert drawn == 300


def test_least_loaded_is_the_least_load_then_the_lowest_index() -> None:
    # The router's loop must give min by (load, index), whatever the order the replicas come in and however many
    # tie on load; its pick from the loads alone (pick_load, the lazy loop's) must be its pick from the snapshots.
    rng = np.random.default_rng(7)
    router = LeastLoaded()
    for _ in range(2000):
        k = int(rng.integers(1, 12))
        reps = [RoutingSnapshot(int(i), int(rng.integers(0, 3)), int(rng.integers(0, 3)), 10, 20)
                for i in rng.permutation(k)]
        assert least_loaded(reps) == min(reps, key=lambda s: (s.load, s.index))
        in_order = sorted(reps, key=lambda s: s.index)
        assert router.pick_load([s.load for s in in_order]) == router.pick(reps)


# Fleets on each loop: the lazy and dealt loops (open loop), the event-ordered one (closed loop, P/D, a stretch of the
# app's advance_to), with async scheduling and without, sliding windows, chunked prompts.
STEP_BOUND = [
    (EngineConfig(rate=12, users=0, requests=300, prompt="lognormal:1000,0.8", output="lognormal:200,0.8"),
     {"router": "least-loaded"}),
    (EngineConfig(rate=12, users=0, requests=300, prompt="lognormal:1000,0.8", output="lognormal:200,0.8",
                  kv_pool_blocks=1500), {"router": "kv-aware"}),
    (EngineConfig(rate=12, users=0, requests=300, output="exp:150", runtime="sglang"),
     {"router": "round-robin"}),
    (EngineConfig(users=24, requests=300, think_time="exp:2", output="uniform:50,150", model="gpt-oss-20b"),
     {"router": "least-loaded"}),
    (EngineConfig(rate=6, users=0, requests=200, prompt="3000", output="lognormal:200,0.5", scheduler="chunked",
                  max_batched_tokens=1024), {"pd": (1, 2)}),
    (EngineConfig(rate=4, users=0, requests=150, model="llama-4-scout", tp=8), {"router": "least-loaded"}),
]


@pytest.mark.parametrize(("cfg", "kw"), STEP_BOUND)
def test_the_quiet_run_bound_never_cuts_a_run(cfg: EngineConfig, kw: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    # Replica.step_before (and Replica.catch_up, the lazy loop's) asks its lane for at most (T - clock) / dt_min + 3
    # quiet steps: a run must never be as long as that (it would be the bound, not the cut, that ended it), and the
    # fleet's figures must be those of fleets whose replicas ask for runs of any length (dt_min 0).
    jump = steps.jump
    bounded = [0]

    def checked(lane: Lane, stop: float, max_steps: int) -> int:
        k = jump(lane, stop, max_steps)
        if max_steps < 1 << 19:
            bounded[0] += 1
            assert k < max_steps
        return k

    def run(bound: bool) -> str:
        f = Fleet(FleetSpec(cfg, replicas=3, **kw))
        if not bound:
            for r in f.reps:
                r.dt_min = 0.0
        f.run()
        return json.dumps([f.metrics(), f.ticks, f.latencies().tolist()], sort_keys=True)  # (NaN as NaN: equal)

    plain = run(False)
    # (Lane.jump is steps.jump itself, bound as the class was made: the dealt loop calls it, the lazy loop steps.jump)
    monkeypatch.setattr(steps, "jump", checked)
    monkeypatch.setattr(Lane, "jump", checked)
    assert run(True) == plain
    assert bounded[0] > 50


def test_a_feeds_wake_is_its_inner_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    # A feed's wake does nothing: a replica's own source has no users, so its wakes (which the feed once passed on
    # through __getattr__) draw nothing. Every figure must be the same with them passed on. (Only a step finishing
    # several rows wakes through wake; a lone finisher of an open loop wakes nobody: Lane.complete skips user -1. A
    # dealt round-robin share's stretches hand their finishers to the replica without a wake: least-loaded, busy
    # enough that steps finish two rows at once.)
    cfg = EngineConfig(rate=12, users=0, requests=600, prompt="lognormal:1000,0.8", output="lognormal:200,0.8")

    def run() -> str:
        f = Fleet(FleetSpec(cfg, replicas=3, router="least-loaded"), workers=1)
        f.run()
        return json.dumps([f.metrics(), f.ticks, f.latencies().tolist()], sort_keys=True)

    called = [0]
    wake = Feed.wake

    def counted(self: Feed, users: object, t: float) -> None:
        called[0] += 1
        wake(self, users, t)

    monkeypatch.setattr(Feed, "wake", counted)
    quiet = run()
    assert called[0] > 5
    monkeypatch.delattr(Feed, "wake")
    assert run() == quiet
