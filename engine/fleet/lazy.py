"""The fleet's lazy run loop: open-loop arrivals behind a "lazy" router (engine.fleet.routers), each replica moved
up to an arrival only when the router could see a difference there.

A least-loaded router reads loads, which change only when a request joins or finishes; a replica whose requests
cannot finish before an arrival (see `Replica.calm_bound`) keeps its long quiet decode run past it. A router that is not
steady (kv-aware) is given every replica's state at the arrival, unless `settled` can decide from the replicas
whose state there is already exact and bounds on the others' (LazyLoop.decide), or from a busy replica's floor
there beating every other's bound (LazyLoop.room_floor: kv-aware), that replica then left behind the arrival as a
steady router's is (below). The routes and every step are
those of the event-ordered loop (Fleet._run_events): each replica still takes exactly its steps that start before
each arrival, and how its steps are grouped into quiet runs changes no number (open loop: see Fleet.__init__).
A steady router's request is handed to its replica's lane as that lane's source (engine.fleet.feed): the lane draws
it at its first step boundary after the arrival, as one engine draws its own, so the replica is not moved up to
the arrival for it, and under async scheduling the step after the arrival (which still decodes the batch chosen
before it) rides in the quiet run rather than being a lone step.

What it reads of a replica it reads once per change: each replica's routing snapshot is kept until the replica
steps or takes a request (the only things that change its tables on this loop: no KV copies, no shared remote
tier, no scaler), so most arrivals re-read one replica or two, not all of them; a request a steady router hands
to a replica's feed only adds one to the kept snapshot's queue. A router reading loads alone (least-loaded,
Router.by_load) is kept each replica's load, a Python int, instead: picked by two C calls (Router.pick_load), raised
by one as a request is handed over, read again as the replica steps (3.3 % fewer instructions on a fleet day than
building, keeping and scanning 8 snapshots).

A replica's steps up to an arrival are one call (Replica.catch_up: no step_before, Lane.jump or calm_bound call a
step). For a router reading loads alone it also drops the finished requests and writes the load, and a step after a
quiet run that drew a request (one routed here cut it) is taken before calm is read: that step is a lone decode step
(steps.jump skips it) which the arrival does not enter (only an idle step reads its limit), the same whenever taken;
and calm never falls as a replica steps (each step takes at least dt_min and brings a request at most one token
nearer its end), so were it past the arrival before that step it still is after it, and the loop stops there: the
quiet runs are those it took before. (A router that is not steady could read that replica exact at the arrival
after it, where it was behind, and move other replicas up otherwise: not for it.)
"""

from __future__ import annotations

import math
import operator
from collections import deque
from typing import TYPE_CHECKING

from engine.fleet.feed import Feed
from engine.fleet.replica import Replica
from engine.fleet.routers import Pick, RoutingSnapshot
from engine.serving.tables import BLOCK, Rows, blocks_for

if TYPE_CHECKING:
    from engine.fleet.fleet import Fleet

_CALM = operator.attrgetter("calm")
DRAW_AHEAD_S = 10.0  # open-loop fleets draw their requests this far ahead (fewer, larger draws; the same rows)


class LazyLoop:
    """One lazy run of a fleet (Fleet._run_lazy): the loop, and each replica's routing snapshot as last read."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.reps = fleet.reps
        self.router = fleet.router
        self.dt_min = fleet.dt_min
        self.snaps: list[RoutingSnapshot | None] = [None] * len(self.reps)  # None: changed since last read
        # Blocks each replica's requests would hold with their whole contexts cached (room_bound): counted up as a
        # request is given, down as it finishes; only for a router that is not steady (the one reader).
        self.counting = not self.router.steady
        self.commit = [_commit(r) for r in self.reps]
        # The largest KV pool (the replicas' pools keep their sizes through a run): an idle replica with that
        # many blocks free is an idle-first router's pick (decide).
        self.top = max(r.lane.pool.total for r in self.reps)
        self.idle_first = self.router.idle_first and not self.router.steady
        # A router reading what waits (and no cached prefix) can take a replica's snapshot now as its room bound.
        self.reads_room = "wanted_blocks" in self.router.reads and "cached_blocks" not in self.router.reads
        # A steady router's requests are handed to their replicas' lanes as their sources (see Feed): a replica is
        # moved up to an arrival only when its load could change before it, never because it gets the request.
        self.steady = self.router.steady
        # A steady router's snapshots are kept current, each read again as its replica steps (catch_up): so they
        # must not depend on the request (no cached prefix read), and read the waiting's blocks only if it does.
        self.wanted = "wanted_blocks" in self.router.reads
        assert not (self.steady and "cached_blocks" in self.router.reads)
        # A router whose pick a busy replica's floor can settle (room_floor) hands that replica its request unmoved,
        # through its feed as a steady router does: so each replica has one.
        self.floors = self.router.floors and not self.steady
        self.feeds = [Feed(r, self.dt_min) for r in self.reps] if self.steady or self.floors else []
        self.times: deque[float] = deque()  # the arrival times of the rows in fleet.ahead (see ahead)
        # A router reading loads alone (Router.by_load) is given each replica's load, kept current as its snapshot
        # would be (read again as the replica steps, one added as it is given a request), not the snapshots.
        self.loads: list[int] | None = [] if self.steady and self.router.by_load else None
        self.keep = fleet.route_log.maxlen or 0  # (Fleet.ROUTE_LOG)

    def run(self) -> int:
        """Every arrival in time order, then every replica to the run's end; returns the replica steps taken."""
        d = self.fleet.duration
        end = math.inf if d is None else d
        n = 0
        reps = self.reps
        for f in self.feeds:
            f.install()
        for r in reps:  # each replica's calm as calm_bound gives it, kept so from here on (see hand and arrive)
            r.calm = r.calm_bound()
        if self.router.steady:  # its snapshots (or loads) kept current from here on (see catch_up and hand)
            if self.loads is None:
                self.snaps = [r.routing(self.wanted, None) for r in reps]
            else:
                self.loads = [r.routed_load for r in reps]
        q, times = self.fleet.ahead, self.times
        inf = math.inf
        loads, steady = self.loads, self.steady
        while self.ahead():
            while q:  # (the stretch drawn, one arrival at a time)
                row = q.popleft()
                t = times.popleft()
                stop = t if t < end else end
                # The replicas not calm past the arrival (~1.1 an arrival on a least-loaded fleet day, none at 4 in
                # 10), found by C calls over their calms rather than a Python loop over the 8: the least calm first
                # (each replica's steps are its own, so the order changes no number). A router reading loads alone
                # has each one's load written by Replica.catch_up itself (no catch_up here).
                calms = list(map(_CALM, reps))
                while (c := min(calms)) < stop:
                    i = calms.index(c)
                    calms[i] = inf
                    n += self.catch_up(reps[i], stop) if loads is None else reps[i].catch_up(stop, True, loads)
                if steady:
                    self.hand(row, t)
                else:
                    n += self.arrive(row, t, stop)
        for r in reps:
            n += self.catch_up(r, end, calm=False)
        for f in self.feeds:
            f.remove()
        self.fleet.ticks += n  # (nothing reads it while the loop runs)
        return n

    def hand(self, row: Rows, t: float) -> None:
        """One request for a steady router: handed to its replica's feed, which its lane draws itself (Feed), so the
        replica is not moved up to the arrival for it."""
        # Every replica's snapshot (or load) is current (the replicas are read again as they step): no list to build.
        loads = self.loads
        choice = self.router.pick(self.snaps) if loads is None else self.router.pick_load(loads)  # type: ignore[arg-type]
        i = choice.index
        rep = self.reps[i]
        # (Fleet._give, less what a lazy loop never has.) Logged only among the last ROUTE_LOG: one with as many
        # arrivals drawn behind it would be pushed out of the log by them before anyone reads it (nobody reads the log
        # while the loop runs).
        if len(self.fleet.ahead) < self.keep:
            self.fleet.route_log.append((row, choice, t))
        feed = rep.feed
        assert feed is not None
        calm = rep.calm
        ln = rep.lane  # (rep.clock is its clock: read and set here without the property)
        if calm == math.inf and ln.clock <= t:
            # Idle at the arrival (its calm is calm_bound's, kept so: inf exactly when no request is queued,
            # preempted, running or in its feed): queued there now, as Fleet._give queues it, the clock moved up to
            # the arrival. Its next step starts at t either way and draws nothing else (a request routed here later
            # comes after t); from its feed it would draw this one at t (~0.5 arrivals in 1 at a least-loaded fleet
            # day: no push and draw). Its calm is then the feed's for this row (Feed._calm: t + (total - 1) dt_min),
            # calm_bound's now.
            ln.clock = t
            rep.inject(row)
            rep.calm = feed._calm(row, t)
        else:
            # Busy, or idle past the arrival: its lane draws the request at its first step after t. rep.calm is
            # calm_bound's before the push (the loop keeps it so), which changed only feed.calm: the new one is the
            # least of rep.calm and the new feed.calm (no calm_bound read).
            feed.push(row, t)
            if feed.calm < calm:
                rep.calm = feed.calm
        # Its snapshot with the request queued: routing counts the rows its feed holds as queued, and the request
        # changed nothing else it reads (the record built afresh, not read: ~1.5 us less).
        if loads is None:
            s = self.snaps[i]
            self.snaps[i] = tuple.__new__(RoutingSnapshot, (i, s[1] + 1, *s[2:]))  # type: ignore[index]
        else:
            loads[i] += 1

    def arrive(self, row: Rows, t: float, stop: float) -> int:
        """One request for a router that is not steady: the chosen replica takes its steps before t, then gets it
        (or, picked by its floor, its feed does). Returns the steps taken."""
        choice, n, unmoved = self.decide(row, stop)
        rep = self.reps[choice.index]
        # Fleet._give, less what a lazy loop never has (a prefill replica) or reads (the heap of ready replicas).
        self.fleet.route_log.append((row, choice, t))
        feed = rep.feed
        if unmoved:
            # Picked by its floor (room_floor), still behind the arrival: its lane draws the request as it passes it
            # (Feed), and the step after the arrival rides in its quiet run. r.calm was kept past the arrival (run),
            # so the new calm is the least of it and the feed's (as in hand).
            assert feed is not None
            feed.push(row, t)
            rep.calm = min(rep.calm, feed.calm)
        else:
            n += self.catch_up(rep, stop, calm=False)
            if feed is not None and feed.rows:  # requests routed here before are not drawn yet: this one after them
                feed.push(row, t)
            else:
                rep.inject(row)
                rep.clock = max(rep.clock, t)
            rep.calm = rep.calm_bound()
        self.snaps[rep.index] = None
        if self.counting:  # (always, for a router picking by floors: it is not steady)
            self.commit[rep.index] += blocks_for(int(row.prompt[0]) + int(row.total[0]))
        return n

    def decide(self, row: Rows, stop: float) -> tuple[Pick, int, bool]:
        """A router that is not steady: its pick at `stop`, and the steps taken to be sure of it. Replicas idle
        or already at `stop` are exact there; the others are first bounded (`room_bound`), and moved up to `stop`
        one at a time, the most promising first, only while one of them could still beat the best exact one
        (Router.settled). The pick is the router's over every replica's exact state: each one not moved up
        provably loses to it."""
        router = self.router
        exact, behind = [], []
        idle_first, top = self.idle_first, self.top
        for r in self.reps:  # idle or at stop: exact at the arrival (r.clock and r.busy read without the properties)
            ln = r.lane
            if ln.has_work or (r.feed is not None and r.feed.rows):  # (requests in its feed: it is not idle)
                (behind if ln.clock < stop else exact).append(r)
                continue
            if idle_first:
                # The first idle replica with the largest pool all free is the pick (Router.idle_first): each one
                # before it is busy at the arrival (one behind it is calm past it: the caller's rule) or idle with
                # less free. No other replica read, no snapshot built.
                pool = ln.pool
                if pool.available == pool.total == top:
                    return router.idle_pick(r.index, top), 0, False
            exact.append(r)
        # The exact replicas' snapshots, each one moved up added as it is (moving a replica changes no other's, so the
        # list is not read again).
        known = self.snapshots(exact, row)
        if known and (choice := router.settled(known)) is not None:
            return choice, 0, False
        n = 0
        bounds = []
        for r in behind:
            b = self.room_bound(r)
            if b is None:
                n += self.step_to(r, stop)
                known += self.snapshots([r], row)
            else:
                bounds.append(b)
        bounds.sort(key=router.rank)  # (kept sorted as they are taken from the front: Router.settled reads so)
        floors = self.floors and self.later()
        while bounds:
            if known and (choice := router.settled(known, bounds)) is not None:
                return choice, n, False
            if floors and (f := self.room_floor(bounds[0], stop)) is not None:
                # The most promising one, at its worst, still beats every other at its best: the pick, not moved.
                rf = router.rank(f)
                if (len(bounds) < 2 or rf < router.rank(bounds[1])) and (
                        not known or rf < min(map(router.rank, known))):
                    return Pick(f.index, router.name, f.headroom), n, True
            r = self.reps[bounds.pop(0).index]  # the one that could beat the most: its exact state
            n += self.step_to(r, stop)
            known += self.snapshots([r], row)
        return router.pick(self.snapshots(self.reps, row)), n, False

    def step_to(self, r: Replica, stop: float) -> int:
        """Replica r's steps before `stop` (its state there exact), r.calm brought up to date if it stepped."""
        k = self.catch_up(r, stop, calm=False)
        if k:
            r.calm = r.calm_bound()
        return k

    def room_bound(self, r: Replica) -> RoutingSnapshot | None:
        """A snapshot of busy replica r as it could be at the arrival, before it is moved up there, with at least
        its KV headroom there and its exact load, or None where no such bound is cheap.

        The caller has every busy replica behind the arrival calm past it (`run`): none of its requests finishes
        before it, so its load there is its load now, and no finish frees a block. The headroom (free blocks less
        what the waiting want) is at most the free blocks, and those only fall while no block is freed: steps
        and admissions take blocks (holding a cached hit takes one too). Two things free blocks without a finish:
        - preemption: it needs a step wanting more blocks than are free. A request never holds more than
          blocks_for(prompt + total) (its whole context), so while every request here fits at once
          (`commit` + pinned <= pool) none is ever preempted;
        - a filled block found already held by another request (keying.fill frees the copy): only with prefix
          caching on and content shared between requests (a group prefix, a body): no bound then.
        (The lazy loop runs no speculative decoding, no KV offload and no KV copies: nothing else frees blocks.)
        A chunked admission can raise the headroom itself (a chunk takes fewer blocks than its prompt wants), so
        there the bound is the free blocks. A scheduler that reads prompts whole (whole_prompts) takes at admission
        exactly the blocks the prompt wanted (a preempted request's own cached blocks, held again, among them: no
        other request holds them without shared content), so there the headroom now is the bound: its snapshot
        as the router would read it now."""
        ln = r.lane
        pool = ln.pool
        if (ln.caching and ln.shared_content) or self.commit[r.index] + r.held > pool.total:
            return None
        if ln.sched.whole_prompts and self.reads_room:
            s = self.snaps[r.index]
            if s is None:
                s = self.snaps[r.index] = r.routing(True, None)
            return s
        return r.routing(False, None)  # (the headroom bound: its free blocks, what its waiting want not read)

    def room_floor(self, b: RoutingSnapshot, stop: float) -> RoutingSnapshot | None:
        """Replica b.index (bounded by b: room_bound) as it could be at the arrival at its worst: its exact load and
        at most its KV headroom there, or None where no such floor is cheap (a request prefilling or preempted).

        None of its requests finishes before the arrival (run keeps it calm past it: a finish would only add room
        and lower its load), none is preempted (room_bound's test) and no filled block is found held by another
        (no shared content: room_bound's test), so what changes its headroom (free blocks less those its waiting
        requests want) before the arrival is only:
        - an admission: a waiting request's wanted blocks, blocks_for(target), leave the wanted sum as it starts,
          and its prefill takes at most as many (a whole prompt at once, or chunk by chunk) before it decodes;
        - a decode step: one token a row (no speculative decoding on a lazy loop), a row opening a block at each
          step j where its cache (cached + j) is a multiple of BLOCK (steps.py _quiet_blocks); a waiting request
          decodes from a cache of its target.
        So its headroom there is at least the headroom now less what every row opens in the most steps that can
        start before `stop`: each takes at least dt_min (Fleet.dt_min), so at most (stop - clock) / dt_min + 1
        of them (one more for rounding), a waiting request's prefill counted among its decode steps."""
        r = self.reps[b.index]
        ln = r.lane
        if ln.n_pf or ln.P.n:
            return None
        k = int((stop - ln.clock) / self.dt_min) + 2
        R = ln.R
        cached = R.cols.cached[:R.n].tolist()
        wanted = 0
        feed = r.feed
        if ln.waiting or feed.rows:  # type: ignore[union-attr]
            w = ln.Q.col("target").tolist() + [int(row.target[0]) for row in feed.rows]  # type: ignore[union-attr]
            wanted = sum(map(blocks_for, w))
            cached += w
        opened = 0
        for c in cached:
            lag = (-c) & (BLOCK - 1)  # the first step opening a block
            if k > lag:
                opened += (k - 1 - lag) // BLOCK + 1
        pool = ln.pool
        return RoutingSnapshot(b.index, b.queued, R.n, pool.available - opened, pool.total, wanted)

    def later(self) -> bool:
        """Whether at least Fleet.ROUTE_LOG more arrivals follow this one (drawing the next stretch if need be: drawing
        it early gives the same rows, see ahead): a pick made without its replica's exact state (room_floor) logs
        its floor, not its headroom, and those later routes push it out of the route log (Fleet.routes) before
        anyone reads it."""
        q = self.fleet.ahead
        keep = self.fleet.route_log.maxlen or 0
        while len(q) < keep and self.draw():
            pass
        return len(q) >= keep

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
        replicas, and drawing a stretch at once gives the same rows as drawing each when it is due), their arrival
        times in `times`. A stretch with no request (a quiet workload stage) is drawn past, not taken for the end
        of the run. Each row is a view of its stretch's fresh rows, which nothing else holds (inject copies it into
        a queue)."""
        q = self.fleet.ahead
        while not q and self.draw():
            pass
        return q

    def draw(self) -> bool:
        """The next stretch of DRAW_AHEAD_S from the source's next arrival, its rows (one view each) queued in
        fleet.ahead and their arrival times in `times` (maybe none: a quiet workload stage); False when no request
        is left to draw."""
        src = self.fleet.src
        t = src.next_time
        if t == math.inf:
            return False
        rows = src.draw(t + DRAW_AHEAD_S)
        if rows is not None:
            self.fleet.ahead.extend(rows.pick(slice(j, j + 1)) for j in range(len(rows)))
            self.times.extend(rows.arrival.tolist())
        return True

    def catch_up(self, r: Replica, stop: float, calm: bool = True) -> int:
        """Take replica r's steps that start before `stop` (Replica.catch_up); with `calm` (asked only of a replica not
        calm past `stop`: r.calm < stop), only as far as needed to be sure no request of its finishes in them unseen,
        keeping r.calm up to date. Without `calm`, r.calm is left for the caller to set (it is read only at the next
        arrival). Returns the steps taken; a replica that stepped is read again (its load or snapshot)."""
        n = r.catch_up(stop, calm)
        if n:
            done = r.finished_rows
            if done:
                if self.counting:
                    self.commit[r.index] -= _held_whole(done)
                done.clear()  # open loop: no user to wake (Fleet._think would wake nobody)
            # A steady router reads every replica at every arrival: read this one now, else when next asked.
            if self.loads is not None:
                self.loads[r.index] = r.routed_load
            else:
                self.snaps[r.index] = r.routing(self.wanted, None) if self.steady else None
        return n


def _held_whole(done: list[Rows]) -> int:
    """Blocks these finished requests would have held with their whole contexts cached (what `_commit` counted for
    them), on Python ints: a finish is usually one row, and two lists cost ~1 us against ~4 us for numpy's sum of
    blocks_for over the row (integers: the same sum)."""
    return sum(blocks_for(x) for d in done for x in map(operator.add, d.prompt.tolist(), d.total.tolist()))


def _commit(r: Replica) -> int:
    """Blocks replica r's requests (running, preempted, queued, routed to its feed) would hold with their whole
    contexts cached."""
    ln = r.lane
    fed = 0 if r.feed is None else _held_whole(list(r.feed.rows))
    return fed + sum(int(blocks_for(t.col("prompt") + t.col("total")).sum()) for t in (ln.R, ln.P, ln.Q) if t.size)
