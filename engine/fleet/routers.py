"""Routers: which replica a fleet sends each request to, read from a small snapshot of every replica.

A router is a class with a `name`, a `pick(reps)` that returns the replica it chooses (with why, and the
figure that decided it), and two class attributes that tell the fleet how it may be run fast:

- `loop`: which open-loop run loop can serve it with the event-ordered loop's numbers. "dealt": it reads no
  replica at all (only how many there are), so requests may be dealt ahead; "lazy": a replica needs to be
  moved up to an arrival only when what the router reads there could have changed (see `steady`);
  "events" (the default, always right): every replica is moved up to every arrival.
- `steady`: what it reads changes only when a request joins or finishes at a replica (its load), not at
  every step; a "lazy" router that is not steady is given every replica's state at the arrival, unless
  `settled` can decide from the replicas whose state there is already exact.
- `reads`: the snapshot fields that cost something to fill ("wanted_blocks": a sum over the queue;
  "cached_blocks": the request's prefix looked up in each cache); unlisted ones are left 0.
- `by_load`: its pick reads each replica's load alone: a lazy loop keeps the loads as ints and asks `pick_load`.

Adding a router is one class here and one line in ROUTERS (docs/extending/routers.md); `--router`'s choices,
plan's router axis and the scenes' check all read ROUTERS.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, NamedTuple

from engine.serving.tables import BLOCK


class RoutingSnapshot(NamedTuple):
    """One replica as a router sees it when a request arrives (a frozen record; never a lane's tables)."""

    index: int  # the replica's number in the fleet
    queued: int  # requests queued or preempted there
    running: int  # requests in its batch
    free_blocks: int  # KV blocks no request holds (cached ones count: they are reclaimed when needed)
    kv_blocks: int  # its KV pool's size, in blocks
    wanted_blocks: int = 0  # blocks its waiting requests need to start (if the router reads it)
    cached_blocks: int = 0  # leading blocks of this request's prompt its prefix cache holds (if read)
    # ... counting the fleet's shared remote KV tier too (engine.serving.kv_tiers; if read): a prefix another replica
    # spilled there is found from every replica, at the remote link's cost
    tier_blocks: int = 0

    @property
    def load(self) -> int:
        """Requests queued, preempted or running."""
        return self.queued + self.running

    @property
    def headroom(self) -> int:
        """Free KV blocks less what the requests already waiting there need: the room a new request finds."""
        return self.free_blocks - self.wanted_blocks


class Pick(NamedTuple):
    """A router's choice: the replica's index, why (shown in the app's route log) and the deciding figure."""

    index: int
    why: str
    figure: int


class Router:
    """The interface: pick one of `reps` (never empty; the replicas that read prompts) for a request."""

    name: ClassVar[str] = ""
    loop: ClassVar[str] = "events"
    steady: ClassVar[bool] = False
    reads: ClassVar[frozenset[str]] = frozenset()
    # Its pick reads each replica's load alone (queued + running): a lazy loop keeps the loads, not the snapshots,
    # and asks pick_load.
    by_load: ClassVar[bool] = False
    # Whether an idle replica (nothing queued, preempted or running) with the largest pool all free beats every
    # other, ties to the lowest index: a lazy loop then picks the first such one without reading the rest.
    idle_first: ClassVar[bool] = False
    # Whether its rank (not steady) only worsens as a replica's free blocks fall, its load and waiting blocks fixed:
    # a lazy loop may then pick a busy replica by its floor (LazyLoop.room_floor) without moving it up.
    floors: ClassVar[bool] = False

    def pick(self, reps: Sequence[RoutingSnapshot]) -> Pick:
        """The replica this request goes to."""
        raise NotImplementedError

    def pick_load(self, loads: list[int]) -> Pick:
        """For a router `by_load`: its pick over replicas 0, 1, ... whose loads are `loads` (what pick gives for
        their snapshots)."""
        raise NotImplementedError

    def settled(self, known: Sequence[RoutingSnapshot], rest: Sequence[RoutingSnapshot] | None = None) -> Pick | None:
        """For a lazy router that is not steady: its pick if it follows from the replicas in `known` alone (those
        whose state at the arrival is exact), else None (the fleet then moves more replicas up to the arrival).
        With `rest` None, whatever the others hold; else `rest` are all the others, each with at most that KV
        headroom and exactly that load there (LazyLoop.room_bound), sorted by `rank` (the lowest first)."""
        return None

    def idle_pick(self, index: int, blocks: int) -> Pick:
        """For an idle_first router: its pick of idle replica `index` with its whole pool of `blocks` free."""
        raise NotImplementedError

    def rank(self, s: RoutingSnapshot) -> tuple[int, ...]:
        """For a router that is not steady, its order of preference (the lowest first): the lazy loop moves the
        replica that could beat the most up to an arrival first."""
        return (s.index,)


class RoundRobin(Router):
    """Replica i, i+1, ... in turn, reading nothing."""

    name = "round-robin"
    loop = "dealt"
    steady = True

    def __init__(self) -> None:
        self.next = 0

    def pick(self, reps: Sequence[RoutingSnapshot]) -> Pick:
        i = self.next % len(reps)  # the replicas it sees may change (autoscaling)
        self.next = (i + 1) % len(reps)
        return Pick(reps[i].index, self.name, i)


class LeastLoaded(Router):
    """Fewest requests queued, preempted or running; ties to the lowest index."""

    name = "least-loaded"
    loop = "lazy"
    steady = True  # a load changes only when a request joins or finishes
    by_load = True

    def pick(self, reps: Sequence[RoutingSnapshot]) -> Pick:
        r = least_loaded(reps)
        return Pick(r.index, self.name, r.load)

    def pick_load(self, loads: list[int]) -> Pick:
        """The least load, the first of equal ones (least_loaded's tie to the lowest index), in two C calls: ~0.3 us
        against ~1.2 us for least_loaded's loop over 8 snapshots (a least-loaded fleet asks at every arrival)."""
        m = min(loads)
        return tuple.__new__(Pick, (loads.index(m), self.name, m))  # (a NamedTuple's own __new__ costs ~0.3 us more)


class KvAware(Router):
    """The most KV room once the requests already waiting are placed; ties to the least loaded, then the lowest
    index. Free blocks change at every step, so it is not steady; a replica with its whole pool free cannot be
    beaten, and one that beats every other's bound (the lazy loop's room_bound) cannot either, which settles most
    arrivals without moving the busy replicas up to them; and one whose floor there (room_floor: the least room it
    can have) beats every other's bound is the pick without being moved up either."""

    name = "kv-aware"
    loop = "lazy"
    reads = frozenset({"wanted_blocks"})
    # Its rank's first term, wanted - free, is -blocks for such a replica, the least any replica's can be (free at
    # most its pool, wanted at least 0), and its load, 0, the least too.
    idle_first = True
    floors = True  # (free blocks enter its rank as -free_blocks)

    def pick(self, reps: Sequence[RoutingSnapshot]) -> Pick:
        r = min(reps, key=self.rank)
        return Pick(r.index, self.name, r.headroom)

    def settled(self, known: Sequence[RoutingSnapshot], rest: Sequence[RoutingSnapshot] | None = None) -> Pick | None:
        rank = self.rank
        r = min(known, key=rank)
        if r.headroom >= r.kv_blocks:  # a whole pool free: no replica can have more room
            return Pick(r.index, self.name, r.headroom)
        if rest is not None:
            # Each other replica's rank there is no better than its bound's (its load is exact, its room at most
            # the bound's): beating every bound, that is the first (rest is sorted by rank), beats every replica.
            if not rest or rank(r) < rank(rest[0]):
                return Pick(r.index, self.name, r.headroom)
        return None

    def idle_pick(self, index: int, blocks: int) -> Pick:
        return Pick(index, self.name, blocks)  # (its headroom: the whole pool, none wanted)

    def rank(self, s: RoutingSnapshot) -> tuple[int, ...]:
        """The most headroom, then the least loaded, then the lowest index (the properties written out: the lazy
        loop ranks every replica, and its bounds, at every arrival)."""
        return s.wanted_blocks - s.free_blocks, s.queued + s.running, s.index


class PrefixAware(Router):
    """The replica whose own prefix cache (GPU, host memory, disk) holds the longest run of the request's leading
    blocks (a group's shared prefix, a session's history); else, where a shared remote KV tier holds the longest
    run, the least loaded of those; with no hit anywhere (or prefix caching off), the least loaded."""

    name = "prefix-aware"
    reads = frozenset({"cached_blocks"})

    def pick(self, reps: Sequence[RoutingSnapshot]) -> Pick:
        best = min(reps, key=lambda s: (-s.cached_blocks, -s.tier_blocks, s.load, s.index))
        if best.cached_blocks:
            return Pick(best.index, "prefix", best.cached_blocks * BLOCK)  # tokens of its prefix cached there
        if best.tier_blocks:
            return Pick(best.index, "remote", best.tier_blocks * BLOCK)  # tokens of its prefix in the remote tier
        r = least_loaded(reps)
        return Pick(r.index, LeastLoaded.name, r.load)


def least_loaded(reps: Sequence[RoutingSnapshot]) -> RoutingSnapshot:
    """The least loaded replica, ties to the lowest index: min(reps, key=(load, index)) written as one loop (a
    least-loaded fleet asks this at every arrival: 1.2 us for 8 replicas against 2.4 us for min's key calls; the
    load's sum written out, as its property call costs as much as the sum). The first of equal keys, as min."""
    best = reps[0]
    key = (best.queued + best.running, best.index)
    for s in reps[1:]:
        k = (s.queued + s.running, s.index)
        if k < key:
            best, key = s, k
    return best


ROUTERS: dict[str, type[Router]] = {cls.name: cls for cls in (RoundRobin, LeastLoaded, KvAware, PrefixAware)}


def make_router(name: str) -> Router:
    """A fresh router by name (each fleet has its own: a router may keep state, as round-robin's turn)."""
    return ROUTERS[name]()
