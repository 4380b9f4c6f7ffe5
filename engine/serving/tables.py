"""Request tables, column-major: each field is one contiguous row of a (fields x capacity) array, named by an IntEnum.

A request lives in exactly one table of its lane: the queue (FIFO), the preempted set, or the running
batch. Rows move between tables as `Rows` (the same fields, k entries each); no Python object exists
per request. A table's integer and float fields share one buffer (TableRows), so dropping finished rows moves
each field's contiguous run once, in one numpy call for all of them, rather than recopying whole rows of a
row-major table.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TypeVar

import numpy as np

# Tokens a KV block holds. Defined here, with the pool's tables, not in engine.serving.snapshot (which re-exports
# it): the serving code needs the number, and a headless run never builds a snapshot's classes (issue 26, start-up).
KV_BLOCK_TOKENS = 16


class IntCol(IntEnum):
    """Integer fields: token counts and identities."""

    ID = 0  # request id, unique per engine
    USER = 1  # closed-loop user index (-1: an open-loop arrival)
    PROMPT = 2  # prompt tokens
    THINK = 3  # hidden reasoning tokens generated before the answer
    TOTAL = 4  # tokens to generate (think + visible answer)
    TARGET = 5  # tokens to hold in the cache before decoding (the prompt, or prompt + generated after preemption)
    CACHED = 6  # tokens in the KV cache
    GEN = 7  # tokens generated so far
    BLOCKS = 8  # KV blocks held
    SEQ = 9  # admission order: the newest running request has the largest
    FAST = 10  # 1 in the fast lane
    PREEMPTS = 11  # times evicted
    INPUT = 12  # prompt tokens read at least once (re-reading after a preemption is recompute)
    # Token content, for the prefix cache (engine.serving.prefix_cache streams; 0: none / the request's own):
    GROUP = 13  # stream of the shared prefix
    PREFIX = 14  # tokens of the shared prefix
    BODY = 15  # stream of the rest of the prompt
    SESS = 16  # 1: generated tokens continue the body (a chat session's next turn reads them back)
    FULL = 17  # keyed (full, cached) blocks held: the first `full` blocks of the request's content
    HKEY = 18  # key of block full-1 (uint64 bits), the parent of the next block to fill
    HIT = 19  # prompt tokens read from the prefix cache instead of computed
    STAGE = 20  # workload stage the request was sent in
    ADAPTER = 21  # multi-LoRA: the adapter the request runs with, 1..N (0: the base model alone)


class FloatCol(IntEnum):
    """Float fields: times in seconds (NaN until they happen), then seconds spent (0 until some is)."""

    ARRIVAL = 0  # sent
    ADMIT = 1  # first admitted into the batch
    FIRST = 2  # first token (hidden or visible)
    VISIBLE = 3  # first visible token
    DONE = 4  # last token
    # Where a preempted request's time went (engine.serving.accounting's latency split), stamped only at
    # eviction, readmission and the end of its recompute, never per step:
    MARK = 5  # evicted at (while preempted), readmitted at (while recomputing); NaN otherwise
    PRE = 6  # seconds waiting after preemptions
    REC = 7  # seconds re-reading prompt + generated tokens after preemptions
    PRE_V = 8  # the part of PRE before the first visible token
    REC_V = 9  # the part of REC before the first visible token
    LOST_F = 10  # PRE + REC before the first token of any kind
    XFER = 11  # P/D: seconds from the prefill replica's last step to landing on a decode replica (queue + copy)
    SLOT = 12  # multi-LoRA: first passed over for lack of an adapter slot at (NaN: not waiting for one)


SPENT = slice(FloatCol.PRE, FloatCol.XFER + 1)  # the seconds-spent fields: 0 in a new row
BLANK_F = np.full(len(FloatCol), np.nan)  # a new row's float fields: NaN times, no seconds spent
BLANK_F[SPENT] = 0.0
BLANK_F.flags.writeable = False
_ARRIVAL = int(FloatCol.ARRIVAL)  # (a plain int indexes faster than an IntEnum member)


_Count = TypeVar("_Count", np.ndarray, int)  # token counts: an array of them, or one

BLOCK = KV_BLOCK_TOKENS
SHIFT = 4  # log2(16): blocks for c cached tokens = (c + 15) >> 4
assert 1 << SHIFT == BLOCK


def blocks_for(tokens: _Count, out: np.ndarray | None = None) -> _Count:
    """KV blocks that hold `tokens` cached tokens (int64 arrays, or one Python int: the same integer arithmetic),
    written into `out` if given (no temporaries)."""
    if out is None:
        return (tokens + BLOCK - 1) >> SHIFT
    np.add(tokens, BLOCK - 1, out=out)
    out >>= SHIFT
    return out


class Rows:
    """k requests: `i` (IntCol x k, int64) and `f` (FloatCol x k, float64); each field is also an attribute
    (rows.cached is rows.i[IntCol.CACHED], a view)."""

    __slots__ = ("i", "f")

    def __init__(self, i: np.ndarray, f: np.ndarray) -> None:
        self.i = i
        self.f = f

    @classmethod
    def new(cls, k: int) -> Rows:
        """k blank rows: zero counts, NaN times, no seconds spent."""
        r = cls(np.empty((len(IntCol), k), dtype=np.int64), np.empty((len(FloatCol), k)))
        r.blank()
        return r

    def blank(self) -> None:
        """Make these rows blank in place: zero counts, NaN times, no seconds spent."""
        self.i[:] = 0
        self.f[:] = BLANK_F[:, None]

    def put_new(self, j: int, heads: list[tuple[int, ...]], arrivals: list[float]) -> None:
        """Make rows j, j + 1, ... new requests': blank but for their first len(head) integer fields and their arrival
        times (a tick's few arrivals' rows in a few writes, rather than blank()'s three and then one per field)."""
        i, f = self.i, self.f
        k = len(heads)
        if k == 1:  # (column writes: a lone arrival's row in four)
            i[:, j] = 0
            i[:len(heads[0]), j] = heads[0]
            f[:, j] = BLANK_F
            f[_ARRIVAL, j] = arrivals[0]
            return
        i[:, j:j + k] = 0
        for x, head in enumerate(heads):
            i[:len(head), j + x] = head
        f[:, j:j + k] = BLANK_F[:, None]
        f[_ARRIVAL, j:j + k] = arrivals

    def __len__(self) -> int:
        return int(self.i.shape[1])

    def pick(self, idx: np.ndarray | slice) -> Rows:
        """The rows at `idx` (an index array, mask or slice); copies for arrays, views for slices."""
        return Rows(self.i[:, idx], self.f[:, idx])

    def copy(self) -> Rows:
        """Independent copies of every field."""
        return Rows(self.i.copy(), self.f.copy())

    @staticmethod
    def join(parts: list[Rows]) -> Rows:
        """Rows of several groups, in order."""
        return Rows(np.concatenate([p.i for p in parts], axis=1), np.concatenate([p.f for p in parts], axis=1))

    # Named views of each field (generated below from IntCol and FloatCol).
    id: np.ndarray
    user: np.ndarray
    prompt: np.ndarray
    think: np.ndarray
    total: np.ndarray
    target: np.ndarray
    cached: np.ndarray
    gen: np.ndarray
    blocks: np.ndarray
    seq: np.ndarray
    fast: np.ndarray
    preempts: np.ndarray
    input: np.ndarray
    group: np.ndarray
    prefix: np.ndarray
    body: np.ndarray
    sess: np.ndarray
    full: np.ndarray
    hkey: np.ndarray
    hit: np.ndarray
    stage: np.ndarray
    adapter: np.ndarray
    arrival: np.ndarray
    admit: np.ndarray
    first: np.ndarray
    visible: np.ndarray
    done: np.ndarray
    mark: np.ndarray
    pre: np.ndarray
    rec: np.ndarray
    pre_v: np.ndarray
    rec_v: np.ndarray
    lost_f: np.ndarray
    xfer: np.ndarray
    slot: np.ndarray


def _field(part: str, c: int) -> property:
    """A property reading field c of part "i" or "f" (a view: writes go to the rows). Two lambdas rather than
    getattr(self, part): the serving loop reads these fields ~100k times a run."""
    c = int(c)  # a plain int indexes faster than an IntEnum member
    get = (lambda self: self.i[c]) if part == "i" else (lambda self: self.f[c])
    return property(get, doc=f"{part}[{c}]")


for _c in IntCol:
    setattr(Rows, _c.name.lower(), _field("i", _c))
for _c in FloatCol:
    setattr(Rows, _c.name.lower(), _field("f", _c))
FIELDS = tuple(c.name.lower() for c in IntCol) + tuple(c.name.lower() for c in FloatCol)


_NI = len(IntCol)


class TableRows(Rows):
    """A table's own rows: each field's view is made once, when the rows are (a table replaces its rows only as it
    grows), and kept in a slot, so the serving loop's many reads of rows.cached, rows.gen, ... are slot reads
    (~0.05 us) rather than property calls (~0.3 us; ~800k of them in a plan's 20 points). Both parts are views of
    one int64 buffer `b`, the integer fields' rows then the float fields' (their float64 bits), so the table moves
    rows with one numpy call for every field (moving bits, exact), not one per part."""

    __slots__ = (*FIELDS, "b")

    def __init__(self, b: np.ndarray) -> None:
        super().__init__(b[:_NI], b[_NI:].view(np.float64))
        self.b = b
        for c in IntCol:
            setattr(self, c.name.lower(), self.i[c])
        for c in FloatCol:
            setattr(self, c.name.lower(), self.f[c])

    @classmethod
    def new(cls, k: int) -> TableRows:
        """k blank rows in one buffer."""
        r = cls(np.empty((_NI + len(FloatCol), k), dtype=np.int64))
        r.blank()
        return r

    def __reduce__(self) -> tuple[type[TableRows], tuple[np.ndarray]]:
        # Pickled (a replica sent to a pool worker) as its buffer: the parts and field views are made again from it,
        # so they stay views rather than arriving as copies of their own.
        return TableRows, (self.b,)


_FEW_MOVES = 2  # drop_row(): up to this many rows after the one removed move one column at a time
_FLAT_SPAN = 8  # drop_row(): the first row's removal shifts whole buffers up to this many times the live rows
_FEW_GAPS = 8  # drop(): up to this many runs of dropped rows are closed by sliding the kept rows between them
_RUN_ROWS = 64  # runs are looked for among at most this many dropped rows (a Python pass over them)
_GATHER_ROWS = 1536  # more dropped rows: below this many live rows one gather per part, above it a mask per field


def _gap_runs(gone: np.ndarray) -> list[tuple[int, int]]:
    """Sorted row numbers as runs of consecutive rows: [(first, last + 1), ...] (plain ints: few rows)."""
    runs: list[tuple[int, int]] = []
    for g in gone.tolist():
        if runs and runs[-1][1] == g:
            runs[-1] = (runs[-1][0], g + 1)
        else:
            runs.append((g, g + 1))
    return runs


class Table:
    """Rows of requests, grown by doubling; live rows are [start, n)."""

    __slots__ = ("cols", "n", "cap")

    def __init__(self, cap: int = 64) -> None:
        self.cols = TableRows.new(cap)
        self.n = 0
        self.cap = cap

    @property
    def start(self) -> int:
        """First live row (a queue admits from its head; other tables start at 0)."""
        return 0

    @property
    def size(self) -> int:
        """Live rows (n - start; a queue says its own, so neither reads the other property: ~340k reads in a plan's
        20 points)."""
        return self.n

    def col(self, name: str) -> np.ndarray:
        """The live part of one field (a view: writes go to the table)."""
        return getattr(self.cols, name)[self.start:self.n]

    def rows(self, k: int | None = None) -> Rows:
        """Views of the first k live rows (all if None)."""
        s = self.start
        end = self.n if k is None else min(self.n, s + k)
        return self.cols.pick(slice(s, end))

    def reserve(self, extra: int) -> None:
        """Make room for `extra` more rows."""
        need = self.n + extra
        if need > self.cap:
            cap = self.cap
            while cap < need:
                cap *= 2
            grown = TableRows.new(cap)
            grown.b[:, :self.n] = self.cols.b[:, :self.n]
            self.cols, self.cap = grown, cap

    def append(self, rows: Rows) -> None:
        """Append rows at the end."""
        i = rows.i
        k = i.shape[1]
        if self.n + k > self.cap:  # (reserve does nothing otherwise)
            self.reserve(k)
        n = self.n
        c = self.cols
        c.i[:, n:n + k] = i
        c.f[:, n:n + k] = rows.f
        self.n = n + k

    def append_buf(self, b: np.ndarray) -> None:
        """Append the rows whose fields are the columns of `b`: a slice of another table's buffer (TableRows.b, the
        integer fields then the float fields' bits), every field in one copy."""
        k = b.shape[1]
        if self.n + k > self.cap:  # (reserve does nothing otherwise)
            self.reserve(k)
        n = self.n
        self.cols.b[:, n:n + k] = b
        self.n = n + k

    def append_view(self, rows: Rows) -> Rows:
        """Append rows at the end and return a view of them there (writes go to the table)."""
        n = self.n
        self.append(rows)
        return self.cols.pick(slice(n, self.n))

    def extend(self, k: int) -> Rows:
        """Append k blank rows (as Rows.new makes them) and return a view of them to fill in."""
        self.reserve(k)
        n = self.n
        self.n = n + k
        r = self.cols.pick(slice(n, n + k))
        r.blank()
        return r

    def add_new(self, heads: list[tuple[int, ...]], arrivals: list[float]) -> int:
        """Append new requests' rows (Rows.put_new); returns the first one's row in `cols` (no view is made: a lane
        queueing a tick's arrival needs none)."""
        k = len(heads)
        if self.n + k > self.cap:
            self.reserve(k)
        n = self.n  # (after reserve: a queue slides its live rows down to make room)
        self.cols.put_new(n, heads, arrivals)
        self.n = n + k
        return n

    def keep(self, mask: np.ndarray) -> None:
        """Drop the live rows where mask is False, keeping order (each field compacts in place)."""
        gone = ~mask
        self.drop(np.flatnonzero(gone), gone)

    def drop(self, gone: np.ndarray, gone_mask: np.ndarray | None = None) -> None:
        """Drop the live rows at `gone` (sorted row numbers), keeping order; `gone_mask` (True at `gone`) if at hand."""
        k = gone.size
        if not k:
            return
        c, n = self.cols, self.n
        if k == n and self.start == 0:  # every live row (a lone request finishing): nothing moves
            self.n = 0
            return
        if k == 1:  # one row (a tick's usual finisher)
            self.drop_row(int(gone[0]))
            return
        b = c.b
        if gone[0] == 0 and gone[k - 1] == k - 1 and self.start == 0:
            # The first k rows (in a batch of equal lengths the oldest requests finish first, every time): shift
            # the whole buffer left by k in one move. A field's first k values land in the previous field's tail,
            # past its n - k live rows: dead space, which extend() blanks and append() overwrites.
            fb = b.reshape(-1)  # a view (the buffer is C-contiguous: TableRows.new's)
            fb[:-k] = fb[k:]
            self.n = n - k
            return
        gaps = _gap_runs(gone) if gone.size <= _RUN_ROWS else None
        if gaps is not None and len(gaps) <= _FEW_GAPS:
            # A few runs of finished rows (requests admitted together finish together, side by side): slide each
            # run of kept rows left over the gaps (contiguous moves per part, nothing before the first gap moves).
            w = gaps[0][0]
            for (_, lo), (a, _) in zip(gaps, gaps[1:] + [(n, n)], strict=True):
                seg = a - lo
                if seg:
                    b[:, w:w + seg] = b[:, lo:a]
                w += seg
        else:
            m = n - gone.size
            if gone_mask is None:
                mask = np.ones(n, dtype=bool)
                mask[gone] = False
            else:
                mask = ~gone_mask
            if n <= _GATHER_ROWS:
                # A small table: gather the kept columns at once (3 numpy calls, not 2 per field).
                b[:, :m] = b.take(np.flatnonzero(mask), axis=1)
            else:
                for row in b:  # (every field's bits, integer and float alike)
                    row[:m] = row[:n][mask]
        self.n = n - gone.size

    def remove_at(self, j: int) -> Rows:
        """Remove live row `j` (counted from the first live row), keeping order, and return it (copies): one
        request leaving out of turn, e.g. an aborted one. O(rows after it), which a single removal can afford."""
        a = self.start + j
        row = self.cols.pick(slice(a, a + 1)).copy()
        self.drop_row(a)
        return row

    def drop_row(self, a: int) -> None:
        """Remove row `a` (a row number, not counted from the first live row), keeping order: the live rows after it
        move up one, every field at once (TableRows' one buffer), in the cheapest of three moves (measured): one
        column at a time for a few rows (a 1-D copy of a column costs less than a 2-D slide, whose overlapping
        source numpy copies first); the whole buffer shifted left by one for the first row, when it is not much
        longer than the live rows (a 1-D move numpy makes in place, no copy first); else one 2-D slide."""
        n = self.n
        b = self.cols.b
        if n - 1 - a <= _FEW_MOVES:  # (none after it: nothing moves)
            for j in range(a, n - 1):
                b[:, j] = b[:, j + 1]
        elif a == 0 and self.cap <= _FLAT_SPAN * n:
            # (a is the first live row, so the table starts at 0.) A field's first value lands in the previous
            # field's last slot, past its live rows: dead space, which extend() blanks and append() overwrites.
            fb = b.reshape(-1)  # a view (the buffer is C-contiguous: TableRows.new's)
            fb[:-1] = fb[1:]
        else:
            b[:, a:n - 1] = b[:, a + 1:n]
        self.n = n - 1

    def pop_last(self) -> Rows:
        """Remove the last row and return it (copies)."""
        self.n -= 1
        return self.cols.pick(slice(self.n, self.n + 1)).copy()


class Queue(Table):
    """FIFO of waiting requests in arrival order: appended at the tail, admitted from the head."""

    __slots__ = ("head",)

    def __init__(self, cap: int = 64) -> None:
        super().__init__(cap)
        self.head = 0

    @property
    def start(self) -> int:
        return self.head

    @property
    def size(self) -> int:
        return self.n - self.head

    def reserve(self, extra: int) -> None:
        # Slide the live rows down before growing: admitted rows at the front are dead space.
        if self.head and self.n + extra > self.cap:
            live = self.n - self.head
            b = self.cols.b
            b[:, :live] = b[:, self.head:self.n]
            self.n, self.head = live, 0
        super().reserve(extra)

    def remove_at(self, j: int) -> Rows:
        row = super().remove_at(j)
        if self.head == self.n:
            self.head = self.n = 0
        return row

    def pop(self, k: int) -> None:
        """Drop k rows from the head (they were admitted); an emptied queue rewinds."""
        self.head += k
        if self.head == self.n:
            self.head = self.n = 0


_RING_START = 1024  # a Ring's first array, in rows (it doubles up to its cap)


class Ring:
    """A fixed-size ring of float rows: the last `cap` rows appended, for bounded statistics.

    The array starts small and doubles as rows come, up to `cap`: a lane's latency rings hold 65,536 rows, and a
    plan point or a fleet replica that finishes a thousand requests would otherwise zero megabytes it never uses
    (freed memory the allocator hands out again is zeroed by hand, not mapped fresh). Until the array reaches
    `cap` the ring has never wrapped: its rows are a[:pos], oldest first."""

    __slots__ = ("a", "pos", "count", "cap")

    def __init__(self, cap: int, cols: int) -> None:
        self.cap = cap
        self.a = np.zeros((min(cap, _RING_START), cols))
        self.pos = 0
        self.count = 0

    def _room(self, end: int) -> None:
        """Grow the array (not yet at cap, never wrapped) to hold rows up to `end` (at most cap)."""
        size = self.a.shape[0]
        if end <= size or size >= self.cap:
            return
        a = np.zeros((min(self.cap, max(2 * size, end)), self.a.shape[1]))
        a[:self.pos] = self.a[:self.pos]
        self.a = a

    def push(self, rows: np.ndarray) -> None:
        """Append rows, overwriting the oldest once full."""
        cap = self.cap
        k = rows.shape[0]
        if k >= cap:
            rows, k = rows[-cap:], cap
        end = self.pos + k
        self._room(end)
        if end <= cap:
            self.a[self.pos:end] = rows
        else:
            cut = cap - self.pos
            self.a[self.pos:] = rows[:cut]
            self.a[:end - cap] = rows[cut:]
        self.pos = end % cap
        self.count = min(self.count + k, cap)

    def claim(self, k: int) -> np.ndarray | None:
        """The next k rows as a view to write in place, counted as pushed (what push would overwrite); None when
        they would wrap around the end or fill the ring (push those). Saves building the rows then copying them.
        Write the view before the ring's next push or claim (either may move the rows to a larger array)."""
        end = self.pos + k
        cap = self.cap
        if end > cap or k >= cap:
            return None
        self._room(end)
        view = self.a[self.pos:end]
        self.pos = end % cap
        self.count = min(self.count + k, cap)
        return view

    def push_row(self, row: tuple[float, ...]) -> None:
        """Append one row (a tuple of floats), overwriting the oldest once full."""
        if self.pos >= self.a.shape[0]:
            self._room(self.pos + 1)
        self.a[self.pos] = row
        self.pos = (self.pos + 1) % self.cap
        if self.count < self.cap:
            self.count += 1

    def last(self, k: int | None = None) -> np.ndarray:
        """The last k rows (all valid rows if None), oldest first; a copy."""
        cap = self.cap
        k = self.count if k is None else min(k, self.count)
        start = (self.pos - k) % cap
        if start + k <= cap:
            return self.a[start:start + k].copy()
        return np.concatenate([self.a[start:], self.a[:(start + k) % cap]])


DONE_COLS = len(IntCol) + 1  # the recent-finished ring: every integer field, then the arrival time


def done_rows(r: Rows) -> np.ndarray:
    """Finished rows as ring rows of DONE_COLS floats (ids and counts are exact in float64 below 2**53)."""
    return np.concatenate((r.i, r.f[FloatCol.ARRIVAL:FloatCol.ARRIVAL + 1])).T


def done_view(a: np.ndarray) -> Rows:
    """Ring rows back as Rows, as a snapshot shows a finished request: its whole prompt read, no blocks held."""
    r = Rows.new(len(a))
    r.i[:] = a[:, :len(IntCol)].T
    r.arrival[:] = a[:, -1]
    r.cached[:] = r.prompt
    r.blocks[:] = 0
    return r


def spend(r: Rows, t: float, total: np.ndarray, before_visible: np.ndarray) -> None:
    """Rows `r` spent t - mark seconds waiting or recomputing (`total`, a field of r): count them there, in
    `before_visible` and LOST_F for rows that had no visible / no token yet, and clear the mark."""
    gap = t - r.mark
    total += gap
    before_visible += np.where(np.isnan(r.visible), gap, 0.0)
    lost = r.lost_f  # a view: += writes the rows
    lost += np.where(np.isnan(r.first), gap, 0.0)
    r.mark[:] = np.nan
