"""Where requests come from: closed-loop users (send, wait for the answer, think, send again) and Poisson arrivals.

A lane owns one `Arrivals` for the users it serves; the lanes of an engine share one `Budget` (request
ids, the --requests limit, the --duration bound, the live user count). A router for a fleet of lanes
would own the arrivals and hand each request to a lane; the lane only needs `due` and `think`.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Protocol

import numpy as np

from engine.traffic.workload import Sampler

if TYPE_CHECKING:  # types only: a run without --workload or --trace never loads their readers (issue 26, start-up)
    from engine.traffic.trace import Trace
    from engine.traffic.workload_file import Plan, Requests


class Budget:
    """What the lanes of one engine share: request ids, the request budget, the closed-loop user count."""

    __slots__ = ("next_id", "accepted", "limit", "users", "duration")

    def __init__(self, limit: int | None, users: int, duration: float | None) -> None:
        self.next_id = 0
        self.accepted = 0
        self.limit = limit
        self.users = users
        self.duration = duration

    def bound(self, t: float) -> float:
        """`t` if a request sent then would still be taken, else inf (past --duration or --requests)."""
        if self.duration is not None and t > self.duration:
            return math.inf
        if self.limit is not None and self.accepted >= self.limit:
            return math.inf
        return t

    def room(self) -> float:
        """Requests the run can still take (inf without --requests)."""
        if self.limit is None:
            return math.inf
        left = self.limit - self.accepted
        return left if left > 0 else 0  # (max(0, left) without the builtin's ~0.2 us call: an arrival's)


def is_fast_user(u: np.ndarray, share: float) -> np.ndarray:
    """Spread fast users evenly over user indices: user u is fast when floor((u+1)f) steps past floor(uf)."""
    return np.floor((u + 1) * share) > np.floor(u * share)


_AHEAD = 256  # Poisson arrival times computed at once


class Arrivals:
    """One lane's send times: per closed-loop user (inf while its request is out or it is not ours) and the
    next Poisson arrival at `rate` per second."""

    __slots__ = ("budget", "fast", "fast_share", "think_time", "gap", "_send_at", "next_user", "rate",
                 "next_poisson", "_at", "_at_pos", "_at_list", "_sends")

    def __init__(self, budget: Budget, fast: bool, fast_share: float, rate: float, think_time: Sampler,
                 gap: Sampler) -> None:
        self.budget = budget
        self.fast = fast
        self.fast_share = fast_share
        self.think_time = think_time
        self.gap = gap  # exp(1) gaps, scaled by 1/rate
        # Each user's send time while it waits to send (thinking or about to send), inf otherwise (its request is out,
        # or it is not ours): Python floats, as a tick reads and writes one or two of them (a numpy scalar read or
        # write costs several times a list item's). Send times are finite, so a user waits iff its entry is.
        self._send_at: list[float] = []
        # Every waiting user's (send time, user), a heap in the order due_tagged hands sends out; an entry whose user
        # no longer waits with that time is stale, skipped when it comes up. A tick's sends are popped from it rather
        # than found by scanning the send times (a scan per tick for the one or two users due).
        self._sends: list[tuple[float, int]] = []
        self.next_user = math.inf
        self.rate = rate
        self.next_poisson = math.inf
        self._at = np.full(1, np.inf)  # Poisson arrival times computed ahead; _at[_at_pos] is next_poisson
        self._at_pos = 0
        if rate > 0:
            self.next_poisson = float(gap.take(1)[0]) / rate
            self._at[0] = self.next_poisson
        self._at_list = self._at.tolist()  # _at as Python floats, for due_lists

    @property
    def u_next(self) -> np.ndarray:
        """Each user's send time while it waits to send, inf otherwise (a copy: for checks and tests)."""
        return np.array(self._send_at, dtype=np.float64)

    @u_next.setter
    def u_next(self, at: np.ndarray) -> None:
        """Set every user's send time (inf: not waiting; a test's users, none waiting, without set_users)."""
        self._send_at = [float(x) for x in at]

    def live_sends(self) -> list[float]:
        """The send times of the users waiting to send, sorted (the heap's entries still current): what a saturated
        stretch (engine.serving.saturated) draws its steps' arrivals against."""
        at = self._send_at
        return sorted([x for x, u in self._sends if at[u] == x])

    def sends_of(self, users: list[int]) -> list[float]:
        """The send times, in order, of those of these users (Python ints) that wait to send: a saturated stretch's
        finished users just woken (an open-loop arrival, -1, and a user not waiting have none)."""
        at = self._send_at
        return [at[u] for u in users if 0 <= u < len(at) and at[u] != math.inf]

    @property
    def u_pending(self) -> np.ndarray:
        """Which users wait to send (thinking or about to send): those whose send time is set (a copy)."""
        return self.u_next < math.inf

    def set_users(self, n: int, t: float, outstanding: np.ndarray) -> None:
        """Users [0, n) are active; ours (by fast flag) start sending at t if idle (not `outstanding`, not
        already waiting); the rest stop after their answer."""
        at = self._send_at
        if n > len(at):
            at += [math.inf] * (n - len(at))
        size = len(at)
        u = np.arange(size)
        share = self.fast_share
        if share > 0:
            mine = (u < n) & (is_fast_user(u, share) == self.fast)
        else:
            mine = (u < n) & (not self.fast)
        # New or re-activated users that are neither waiting nor thinking send now.
        out = np.zeros(size, dtype=bool)
        out[outstanding[(outstanding >= 0) & (outstanding < out.size)]] = True
        pending = self.u_pending
        for u in np.flatnonzero(mine & ~pending & ~out).tolist():
            at[u] = t
            heapq.heappush(self._sends, (t, u))
        for u in np.flatnonzero(~mine & pending).tolist():
            at[u] = math.inf
        self._refresh()

    def _refresh(self) -> None:
        """The earliest closed-loop send time (u_next's minimum): the first entry of the heap whose user still waits
        with that time, stale ones dropped."""
        sends, at = self._sends, self._send_at
        while sends:
            x, u = sends[0]
            if at[u] == x:  # (a heap entry's time is finite: the user waits, with that time)
                self.next_user = x
                return
            heapq.heappop(sends)
        self.next_user = math.inf

    def _pop_sends(self, t: float) -> tuple[list[float], list[int]]:
        """Every user's send at or before t, handed out (the user no longer waits), in the order due_tagged gives
        them: by time, then user. Python lists: a tick's one or two sends cost no arrays."""
        times: list[float] = []
        users: list[int] = []
        sends, at = self._sends, self._send_at
        while sends and sends[0][0] <= t:
            x, u = heapq.heappop(sends)
            if at[u] == x:  # (else stale: the user's send moved or was called off)
                times.append(x)
                users.append(u)
                at[u] = math.inf
        self._refresh()
        return times, users

    def due_lists(self, t: float) -> tuple[list[float], list[int]] | None:
        """due_tagged's answer, without a script (the caller's case), as Python lists, when only one source has
        anything due at t: the users' sends, or the Poisson arrivals within the times computed ahead; else None, and
        nothing changes (ask due_tagged). Those past the run's bounds never send (users) or are dropped (arrivals).
        A tick's usual one or two requests without due_tagged's ~10 numpy calls on arrays of a few values
        (tests/engine/test_serving.py compares the two)."""
        if self.next_poisson > t:
            if self.next_user > t:
                return [], []
            times, users = self._pop_sends(t)
        elif self.next_user > t:
            times = self._poisson_list(t)
            if times is None:
                return None
            users = [-1] * len(times)
        else:
            return None
        b = self.budget
        if b.duration is not None and times[-1] > b.duration:  # sorted: the requests past --duration are a tail
            k = len(times)
            while k and times[k - 1] > b.duration:
                k -= 1
            del times[k:], users[k:]  # (handed out: a user never sends again, an arrival is dropped)
        if b.limit is not None:
            room = b.limit - b.accepted
            if len(times) > room:
                del times[room:], users[room:]
        return times, users

    def _poisson_list(self, t: float) -> list[float] | None:
        """_poisson_until(t) in Python numbers, when the arrival after those handed out is already computed (else None,
        nothing changed): the same arrivals, cap, next_poisson and stream position."""
        b = self.budget
        cap = b.room() + 1  # (the arrival a one-at-a-time draw stops on too)
        ahead, p = self._at_list, self._at_pos
        size = len(ahead)
        e = p
        while e < size and ahead[e] <= t and e - p < cap:
            e += 1
        if e >= size:
            return None  # _poisson_until computes more ahead
        self._at_pos = e
        self.next_poisson = ahead[e]
        return ahead[p:e]

    def _poisson_until(self, t: float) -> np.ndarray:
        """Every Poisson arrival at or before t, never more than the run can still accept (plus the one a
        one-at-a-time draw stops on). Arrival times are computed ahead in blocks, a sequential cumsum over the
        gaps in the order drawn, so they are those of one-at-a-time drawing, bit for bit, and a tick with an
        arrival costs a search rather than a draw."""
        b = self.budget
        cap = b.room() + 1  # (the arrival a one-at-a-time draw stops on too)
        at, p = self._at, self._at_pos
        m = int(np.searchsorted(at[p:], t, side="right"))
        while p + m >= at.size and m < cap:  # every time ahead is at or before t: compute more
            at, p = self._ahead(max(_AHEAD, int((t - float(at[-1])) * self.rate * 1.25) + 16)), 0
            m = int(np.searchsorted(at, t, side="right"))
        m = int(min(m, cap))
        if p + m >= at.size:  # keep the arrival after the last one handed out
            at, p = self._ahead(_AHEAD), 0
        self._at_pos = p + m
        self.next_poisson = float(at[p + m])
        return at[p:p + m].copy()

    def _ahead(self, k: int) -> np.ndarray:
        """Extend the times ahead by k more gaps (dropping those handed out); returns them, _at_pos reset to 0."""
        at = self._at[self._at_pos:]
        more = np.cumsum(np.concatenate((at[-1:], self.gap.take(k) / self.rate)))[1:]
        self._at = np.concatenate((at, more))
        self._at_pos = 0
        self._at_list = self._at.tolist()  # (once per _AHEAD arrivals or more: ~10 ns an arrival)
        return self._at

    def due(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Every send and Poisson arrival at or before t that the budget takes, in time order: (times, users)."""
        tt, uu, _ = self.due_tagged(t)
        return tt, uu

    def due_tagged(self, t: float, script: Script | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Every send, Poisson and scripted arrival at or before t that the budget takes, in time order: (times,
        users, script tags, -1 where not scripted; None without a script); users whose send falls past the run's
        bounds never send again."""
        times: list[np.ndarray] = []
        users: list[np.ndarray] = []
        tags: list[np.ndarray] = []
        scripted = script is not None
        if self.next_user <= t:
            ut, uu_ = self._pop_sends(t)
            times.append(np.array(ut))
            users.append(np.array(uu_, dtype=np.int64))
            if scripted:
                tags.append(np.full(len(ut), -1, dtype=np.int64))
        if self.next_poisson <= t:
            ts = self._poisson_until(t)
            times.append(ts)
            users.append(np.full(len(ts), -1, dtype=np.int64))
            if scripted:
                tags.append(np.full(len(ts), -1, dtype=np.int64))
        if script is not None and script.next_time <= t:
            st, sg = script.pop_until(t)
            times.append(st)
            users.append(np.full(st.size, -1, dtype=np.int64))
            tags.append(sg)
        if not times:
            return np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64) if scripted else None
        tt = np.concatenate(times) if len(times) > 1 else times[0]
        uu = np.concatenate(users) if len(users) > 1 else users[0]
        gg = (np.concatenate(tags) if len(tags) > 1 else tags[0]) if scripted else None
        if len(tt) > 1 and (len(times) > 1 or np.count_nonzero(tt[1:] < tt[:-1])):
            # One source is in time order already unless its sends are (users' think times end in any order).
            order = np.argsort(tt, kind="stable")
            tt, uu = tt[order], uu[order]
            if gg is not None:
                gg = gg[order]
        b = self.budget
        if b.duration is not None and len(tt) and tt[-1] > b.duration:  # tt is sorted: its last is its latest
            keep = tt <= b.duration
            self._drop(uu[~keep])
            tt, uu = tt[keep], uu[keep]
            if gg is not None:
                gg = gg[keep]
        if b.limit is not None:
            room = b.limit - b.accepted
            if len(tt) > room:
                self._drop(uu[room:])
                tt, uu = tt[:room], uu[:room]
                if gg is not None:
                    gg = gg[:room]
        return tt, uu, gg

    def _drop(self, uu: np.ndarray) -> None:
        """Users whose send fell past the run's bounds never send again (they are not requests)."""
        at = self._send_at
        for u in uu[uu >= 0].tolist():
            at[u] = math.inf

    def think(self, users: np.ndarray, t: float) -> None:
        """Closed-loop users whose answer finished at t think, then send again (if still active)."""
        if not users.size or not self.budget.users:
            return  # (no active user: an open loop's finishers wake nobody)
        u = users.tolist()  # (the heap takes Python numbers)
        active = self.budget.users
        for j in u:  # (most often every one is a closed-loop user still active: no list made)
            if j < 0 or j >= active:
                u = [j for j in u if 0 <= j < active]  # (open-loop arrivals, user -1, and users no longer active)
                break
        k = len(u)
        if not k:
            return
        v = self.think_time.take_same(k)
        if v is None:
            times = (t + self.think_time.take(k)).tolist()  # (numpy's float64 sums are Python's, term for term)
            m = min(times)
        else:  # one think time for everyone (e.g. none): one send time
            m = t + v
            times = None
        at, sends = self._send_at, self._sends
        for n, j in enumerate(u):
            x = m if times is None else times[n]
            at[j] = x
            heapq.heappush(sends, (x, j))
        if m < self.next_user:
            self.next_user = m

    def think_one(self, user: int, t: float) -> None:
        """think() for one user (a Python int): the same bounds, think-time draw (Sampler.take_scalar: take(1)'s
        value, stream position and clip count), send time and heap entry, without think()'s arrays."""
        if user < 0 or user >= self.budget.users:
            return  # an open-loop arrival (-1), or a user no longer active (an open loop has none)
        x = t + self.think_time.take_scalar()[0]  # (Python's float sum is numpy's t + take(1))
        self._send_at[user] = x
        heapq.heappush(self._sends, (x, user))
        if x < self.next_user:
            self.next_user = x


class Script(Protocol):
    """Requests that arrive on a script rather than from users: a workload file's Poisson stages, or a trace.
    `pop_until` hands out (times, tags) in order; `content` says what the tagged requests send."""

    @property
    def next_time(self) -> float: ...

    def pop_until(self, t: float) -> tuple[np.ndarray, np.ndarray]: ...

    def content(self, tags: np.ndarray, users: np.ndarray, times: np.ndarray) -> Requests: ...


class PlanScript:
    """A workload file's plan: Poisson arrivals per stage; every request (users' too) sends the plan's content."""

    __slots__ = ("plan",)

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    @property
    def next_time(self) -> float:
        """The next Poisson arrival of any stage."""
        return self.plan.next_time

    def pop_until(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Poisson arrivals at or before t, tagged with their stage."""
        return self.plan.pop_until(t)

    def content(self, tags: np.ndarray, users: np.ndarray, times: np.ndarray) -> Requests:
        """Closed-loop users send in the stage running when they send; scripted arrivals in their own."""
        stage = np.where(users >= 0, self.plan.wl.stage_at(times), tags)
        return self.plan.take(stage)


class TraceScript:
    """A trace replayed in order: row i arrives at its time and sends its lengths and content."""

    __slots__ = ("trace", "pos")

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.pos = 0

    @property
    def next_time(self) -> float:
        """The next row's arrival (inf after the last)."""
        a = self.trace.arrival
        return float(a[self.pos]) if self.pos < a.size else math.inf

    def pop_until(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Rows arriving at or before t: times and row numbers."""
        a = self.trace.arrival
        end = int(np.searchsorted(a, t, side="right"))
        rows = np.arange(self.pos, max(end, self.pos), dtype=np.int64)
        self.pos = max(end, self.pos)
        return a[rows], rows

    def content(self, tags: np.ndarray, users: np.ndarray, times: np.ndarray) -> Requests:
        """The rows' lengths and content."""
        return self.trace.requests(tags)
