"""The fleet's lazy run loop: open-loop arrivals behind a "lazy" router (engine.fleet.routers), each replica moved
up to an arrival only when the router could see a difference there.

A least-loaded router reads loads, which change only when a request joins or finishes; a replica whose requests
cannot finish before an arrival (see `LazyLoop.calm`) keeps its long quiet decode run past it. A router that is not
steady (kv-aware) is given every replica's state at the arrival, unless `settled` can decide from the replicas
whose state there is already exact. The routes and every step are those of the event-ordered loop
(Fleet._run_events): each replica still takes exactly its steps that start before each arrival, and how its steps
are grouped into quiet runs changes no number (open loop: see Fleet.__init__).

What it reads of a replica it reads once per change: each replica's routing snapshot is kept until the replica
steps or takes a request (the only things that change its tables on this loop: no KV copies, no shared remote
tier, no scaler), so most arrivals re-read one or two replicas, not all of them.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

from engine.fleet.replica import Replica
from engine.fleet.routers import RoutingSnapshot
from engine.serving.tables import Rows

if TYPE_CHECKING:
    from engine.fleet.fleet import Fleet

DRAW_AHEAD_S = 10.0  # open-loop fleets draw their requests this far ahead (fewer, larger draws; the same rows)


class LazyLoop:
    """One lazy run of a fleet (Fleet._run_lazy): the loop, and each replica's routing snapshot as last read."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.reps = fleet.reps
        self.router = fleet.router
        self.dt_min = fleet.dt_min
        self.snaps: list[RoutingSnapshot | None] = [None] * len(self.reps)  # None: changed since last read

    def run(self) -> int:
        """Every arrival in time order, then every replica to the run's end; returns the replica steps taken."""
        d = self.fleet.duration
        end = math.inf if d is None else d
        n = 0
        reps = self.reps
        while ahead := self.ahead():
            row = ahead.popleft()
            t = float(row.arrival[0])
            stop = min(t, end)
            for r in reps:
                if r.calm < stop:
                    n += self.catch_up(r, stop)
            n += self.arrive(row, t, stop)
        for r in reps:
            n += self.catch_up(r, end, calm=False)
        return n

    def arrive(self, row: Rows, t: float, stop: float) -> int:
        """One request: the chosen replica takes its steps before t, then gets it. Returns the steps taken."""
        n = 0
        router = self.router
        choice = None
        if router.steady:
            choice = router.pick(self.snapshots(self.reps, row))
        else:
            known = [r for r in self.reps if not r.busy or r.clock >= stop]  # their state at t is exact
            if known:
                choice = router.settled(self.snapshots(known, row))
            if choice is None:
                for r in self.reps:
                    k = self.catch_up(r, stop, calm=False)
                    if k:
                        n += k
                        r.calm = self.calm(r)
                choice = router.pick(self.snapshots(self.reps, row))
        rep = self.reps[choice.index]
        n += self.catch_up(rep, stop, calm=False)
        self.fleet._give(choice, row, t)
        self.snaps[rep.index] = None
        rep.calm = self.calm(rep)
        return n

    def snapshots(self, reps: list[Replica], row: Rows) -> list[RoutingSnapshot]:
        """What the router reads of these replicas (Fleet._snapshots), each as last read unless it has changed
        since. A router reading the request's cached prefix reads every replica afresh: that depends on the row.
        (No scaler, and at least two replicas, all reading prompts: what Fleet._route adds does not arise.)"""
        reads = self.router.reads
        if "cached_blocks" in reads:
            return self.fleet._snapshots(reps, row)
        snaps = self.snaps
        wanted = "wanted_blocks" in reads
        out = []
        for r in reps:
            s = snaps[r.index]
            if s is None:
                s = snaps[r.index] = r.routing(wanted, None)
            out.append(s)
        return out

    def ahead(self) -> deque[Rows]:
        """The next requests, one row each, drawn DRAW_AHEAD_S at a time (when they come does not depend on the
        replicas, and drawing a stretch at once gives the same rows as drawing each when it is due). A stretch
        with no request (a quiet workload stage) is drawn past, not taken for the end of the run. Each row is a
        view of its stretch's fresh rows, which nothing else holds (inject copies it into a queue)."""
        q = self.fleet.ahead
        src = self.fleet.src
        while not q and (t := src.next_time) < math.inf:
            rows = src.draw(t + DRAW_AHEAD_S)
            if rows is not None:
                q.extend(rows.pick(slice(j, j + 1)) for j in range(len(rows)))
        return q

    def catch_up(self, r: Replica, stop: float, calm: bool = True) -> int:
        """Take replica r's steps that start before `stop`; with `calm`, only as far as needed to be sure no
        request of its finishes in them unseen, keeping r.calm up to date. Without `calm`, r.calm is left for the
        caller to set (it is read only at the next arrival). Returns the steps taken."""
        n = 0
        while r.busy and r.clock < stop and not (calm and r.calm >= stop):
            n += r.step_before(stop, 1 << 20)
            r.finished_rows.clear()  # open loop: no user to wake (Fleet._think would wake nobody)
            if calm:
                r.calm = self.calm(r)
        if n:
            self.fleet.ticks += n
            self.snaps[r.index] = None
        return n

    def calm(self, r: Replica) -> float:
        """A time before which no step of r can finish a request: after m - 1 more steps at the least, each no
        shorter than the cheapest step this model can take (every cost term grows with tokens and context)."""
        m = r.steps_to_finish()
        return math.inf if not m else r.clock + (m - 1) * self.dt_min
