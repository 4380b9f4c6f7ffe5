"""The per-tick history ring, written when read: a lane notes each tick (or quiet run) as it happens, and the rows
are built only when someone reads them.

A headless run reads the history once at the end (the rolling rates of `run --json`), the app a few times a second;
a busy lane adds thousands of ticks in between, almost all of which the ring would overwrite before anyone looked.
Building a quiet run's rows (eleven column writes, the KV fill divided out) cost more than pricing its steps, so a
run is kept as the arrays it was priced with and a single tick as its tuple; pending entries the ring would
overwrite anyway are dropped as new ones come, and the rest are written into the ring on the next read. Every value
is the one the eager ring held (the same floats, computed from the same operands), so readers see no difference.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

import numpy as np

from engine.serving.tables import Ring

# History columns (engine.serving.accounting.H, whose order this module shares; kept as ints here because
# accounting imports this module).
_TIME, _DT, _KV, _QUEUE, _BATCH, _OUT, _IN, _CIN, _COUT, _FLOPS, _BYTES = range(11)
N_COLS = 11


class Growth(NamedTuple):
    """The blocks a quiet run of `n` decoding rows takes: a row opens one at each step whose cache is a multiple of
    the block size (16), so the pattern repeats every 16 steps. `prefix[r]`: rows opening one in the first r steps
    of each 16 (17 entries, prefix[16] = n)."""

    n: int
    prefix: tuple[int, ...]

    def after(self, m: int) -> int:
        """Blocks taken by the end of step m (m >= 0 steps run)."""
        return (m >> 4) * self.n + self.prefix[m & 15]

    def array(self, k: int) -> np.ndarray:
        """Blocks taken by the end of each of the first k steps (after(1) .. after(k)), int64."""
        m = np.arange(1, k + 1)
        return (m >> 4) * self.n + np.asarray(self.prefix)[m & 15]

    def cut(self, k: int, avail: int) -> int:
        """How many of k steps run before one would take more than `avail` blocks (k when all fit): the step that
        would preempt is left to Lane.step (growth never shrinks, so the first such step ends the run)."""
        if self.after(k) <= avail:
            return k
        return int(np.argmax(self.array(k) > avail))


class Run(NamedTuple):
    """A quiet run of k decode steps of `n` rows, noted as the arrays it was priced with (see Lane's jump)."""

    start: float  # the clock before the run (each step's end is the left fold of the times from it, as the lane's)
    dts: np.ndarray  # each step's time
    flops: np.ndarray
    byts: np.ndarray
    used0: int  # the pool's used blocks before the run
    grown: Growth  # blocks the run has taken after each step (used = used0 + grown)
    total: int  # the pool's blocks (KV fill = used / total)
    last_kv: float  # the fill after the last step's completions freed their blocks (the last row's KV)
    waiting: int  # requests waiting after the run
    queue: tuple[int, int]  # (j, w): the steps before step j saw w waiting (an arrival drawn at step j's start)
    n: int


def run_rows(r: Run) -> np.ndarray:
    """A run's k history rows, as the eager ring wrote them. The steps' ends are the clock folded again from the
    run's start (np.add.accumulate, a left fold: the very doubles the run's clock held), here, when read, rather
    than kept by every run noted."""
    k = len(r.dts)
    h = np.empty((k, N_COLS))
    cols = h.T  # one column a row: each assignment is one strided write
    clock = np.empty(k + 1)
    clock[0] = r.start
    clock[1:] = r.dts
    cols[_TIME] = np.add.accumulate(clock, out=clock)[1:]
    cols[_DT] = r.dts
    cols[_COUT] = r.dts
    cols[_KV] = r.grown.array(k)
    cols[_KV] += r.used0  # whole numbers: exact, as the int sum used0 + grown was
    cols[_KV] /= r.total
    h[-1, _KV] = r.last_kv
    cols[_QUEUE] = r.waiting
    cols[_QUEUE, :r.queue[0]] = r.queue[1]
    cols[_BATCH] = r.n  # the steps' batch (the rows that finished in the last step included)
    cols[_OUT] = r.n
    cols[_IN] = 0.0
    cols[_CIN] = 0.0
    cols[_FLOPS] = r.flops
    cols[_BYTES] = r.byts
    return h


class History:
    """The last `cap` ticks of a lane (Ring rows of the H columns), with pushes kept pending until a read."""

    __slots__ = ("ring", "cap", "_pend", "_ends", "_total", "_start")

    def __init__(self, cap: int) -> None:
        self.ring = Ring(cap, N_COLS)
        self.cap = cap
        self._pend: list[tuple[float, ...] | Run] = []
        # Rows are counted as a running total of rows ever pushed: `_ends[i]` the total after pending entry i, `_start`
        # the total before the first. Rows pending = _total - _start; at twice the ring's worth the older entries are
        # dropped (bounded memory), found by bisection rather than a walk over up to a ring's worth of entries.
        self._ends: list[int] = []
        self._total = 0
        self._start = 0

    def push_row(self, row: tuple[float, ...]) -> None:
        """One tick's row (a tuple of the H columns)."""
        self._pend.append(row)
        self._total += 1
        self._ends.append(self._total)
        if self._total - self._start >= 2 * self.cap:
            self._trim()

    def push_run(self, run: Run) -> None:
        """A quiet run's rows (built when read). Its arrays are kept as given: the caller copies slices of much
        longer arrays (a run priced far past where it was cut), so a pending run holds about its own rows."""
        self._pend.append(run)
        self._total += len(run.dts)
        self._ends.append(self._total)
        if self._total - self._start >= 2 * self.cap:
            self._trim()

    def _trim(self) -> None:
        """Forget the oldest pending entries: those before the newest `cap` rows, which the ring would overwrite.
        The entries kept start at the last one whose rows from it on number at least cap: the entries before it
        end at or before _total - cap."""
        ends = self._ends
        j = bisect.bisect_right(ends, self._total - self.cap)
        if j:
            del self._pend[:j]
            self._start = ends[j - 1]
            del ends[:j]

    def _flush(self) -> None:
        """Write the pending entries into the ring, oldest first (consecutive ticks in one push)."""
        self._trim()
        ring = self.ring
        ticks: list[tuple[float, ...]] = []
        for e in self._pend:
            if isinstance(e, Run):
                if ticks:
                    ring.push(np.array(ticks, dtype=np.float64))
                    ticks = []
                ring.push(run_rows(e))
            else:
                ticks.append(e)
        if ticks:
            ring.push(np.array(ticks, dtype=np.float64))
        self._pend.clear()
        self._ends.clear()
        self._start = self._total

    @property
    def count(self) -> int:
        """Rows held (at most cap)."""
        if self._pend:
            self._flush()
        return self.ring.count

    def last(self, k: int | None = None) -> np.ndarray:
        """The last k rows (all held rows if None), oldest first; a copy."""
        if self._pend:
            self._flush()
        return self.ring.last(k)
