"""A replica's requests as its lane's own source: the fast open-loop fleet loops hand a replica the requests routed
to it, and its lane draws each at its first step boundary after the arrival, as one engine draws its own.

The event-ordered loop moves a replica up to an arrival and queues the request there (Replica.inject); under async
scheduling the step after that still decodes the batch chosen before the arrival, a lone step of its own. A lane
that knows the arrival (its source's next_time) takes that step inside its quiet run instead (engine.serving.steps
cut_at_arrival), and draws the request at the step's start: the same steps and numbers, one engine call fewer per
arrival at a busy replica, and the replica need not be moved up to the arrival at all.

What Replica.inject does besides queueing is done here as the lane draws: the engine's accepted count, the content
note, the replica's queue peak (the queue only grows between an arrival and the step that draws it, so its peak is
the same). The lane counts its own accepted requests as it draws (Lane.draw_due).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any

from engine.serving.tables import IntCol, Rows, Table

if TYPE_CHECKING:
    from engine.fleet.replica import Replica

_TOTAL = int(IntCol.TOTAL)  # (a plain int indexes faster than an IntEnum member)


class Feed:
    """The requests routed to one replica and not yet drawn by its lane, in arrival order (one row each): the lane's
    source while a fast loop runs (install/remove). Everything else a lane asks of its source (arrivals for its
    checks) goes to the replica's own source, which draws nothing; a finisher's wake does nothing, as there."""

    def __init__(self, rep: Replica, dt_min: float | None) -> None:
        self.rep = rep
        self.dt_min = dt_min  # None: calm is not kept (a dealt replica's whole share at once: nobody reads it)
        # A dealt share (dt_min None): every request the replica will get is here from the start, so its lane may
        # walk through their arrivals at once (Replica.step_before's open-loop stretches).
        self.dealt = dt_min is None
        # Whether a row can carry content another could share (a group prefix, a body): only a script's requests do
        # (the rule Lane.draw_due follows), so only then does a draw note it (Lane.note_content, ~2 us a row), as
        # Replica.inject does.
        self.content = rep.content
        self.inner = rep.lane.source
        assert not self.inner.budget.users  # (see wake)
        self.rows: deque[Rows] = deque()
        self.times: deque[float] = deque()  # each row's arrival, as a float (read at every draw)
        self.next_time = math.inf  # the first row's arrival (what Lane.step and the quiet runs read)
        self.clipped = 0  # the fleet's source clipped the rows already
        self.script = None  # (Lane.draw_due notes only a script's content: draw_into notes a row's when `content`)
        self.calm = math.inf  # no request here finishes in a step starting before this (see push)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def wake(self, users: object, t: float) -> None:
        """Finished requests' users would think and send again: a replica's own source has no users (Replica builds
        it with none: every think returns at once, Arrivals.think), so nothing happens, as there. Written here
        rather than reached through __getattr__ (~1 us a call). (A lone finisher's wake_one is not called for an
        open-loop arrival, the only kind a feed carries: Lane.complete skips user -1.)"""

    def install(self) -> None:
        """Become the replica's lane's source."""
        self.rep.lane.source = self  # type: ignore[assignment]
        self.rep.feed = self

    def remove(self) -> None:
        """Give the lane its own source back, queueing what is still undrawn (arrivals at or past the run's end,
        or after the start of a replica's last step) as the fleet would: the clock moved up to each arrival."""
        rep = self.rep
        while self.rows:
            row = self.rows.popleft()
            rep.clock = max(rep.clock, self.times.popleft())
            rep.inject(row)
        rep.lane.source = self.inner
        rep.feed = None

    def push(self, row: Rows, t: float) -> None:
        """A request routed here (one row, arriving at t)."""
        if not self.rows:
            self.next_time = t
        self.rows.append(row)
        self.times.append(t)
        if self.dt_min is not None:  # (_calm written out: a least-loaded fleet pushes at every arrival)
            c = t + (row.i.item(_TOTAL, 0) - 1) * self.dt_min
            if c < self.calm:
                self.calm = c

    def _calm(self, row: Rows, t: float) -> float:
        """A time before which request `row` (arriving at t) cannot finish: it joins at its arrival at the earliest,
        and writes one token a step after that, each step no shorter than dt_min (the fleet's cheapest step, see
        Replica.calm_bound). The row's total read as one item of its integer part (~0.1 us against ~0.5 us for
        the field's view, its element and int: a least-loaded fleet reads it at every arrival)."""
        return t + (row.i.item(_TOTAL, 0) - 1) * self.dt_min  # type: ignore[operator]

    def draw_into(self, t: float, q: Table) -> int:
        """The rows arrived by t, queued in q (the lane's queue) as Replica.inject queues them; returns how many (0:
        none due; the lane reads only the count)."""
        if self.next_time > t:
            return 0
        rows, times = self.rows, self.times
        rep = self.rep
        ln = rep.lane
        k = 0
        while times and times[0] <= t:
            times.popleft()
            row = rows.popleft()
            if self.content:
                ln.note_content(row)
            q.append(row)
            k += 1
        self.next_time = times[0] if times else math.inf
        if self.dt_min is not None:  # (a lazy loop's: rarely a row left)
            self.calm = min(map(self._calm, rows, times)) if rows else math.inf
        rep._budget.accepted += k
        Q = ln.Q
        w = Q.n - Q.head + ln.P.n  # (ln.waiting without its property call)
        if w > rep.queue_peak:
            rep.queue_peak = w
        return k
