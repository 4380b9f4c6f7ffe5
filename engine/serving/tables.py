"""Request tables: one numpy array per field (column-major), so dropping finished rows moves each column once.

A request lives in exactly one table of its lane: the queue (FIFO), the preempted set, or the running
batch. Rows move between tables as `Rows` (the same fields, k entries each); no Python object exists
per request.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from engine.snapshot import KV_BLOCK_TOKENS

# Per-request fields. Integers: token counts and identities; floats: times (NaN until they happen).
INT_FIELDS = (
    "id",  # request id, unique per engine
    "user",  # closed-loop user index (-1: an open-loop arrival)
    "prompt",  # prompt tokens
    "think",  # hidden reasoning tokens generated before the answer
    "total",  # tokens to generate (think + visible answer)
    "target",  # tokens to hold in the cache before decoding (the prompt, or prompt + generated after preemption)
    "cached",  # tokens in the KV cache
    "gen",  # tokens generated so far
    "blocks",  # KV blocks held
    "seq",  # admission order: the newest running request has the largest
    "fast",  # 1 in the fast lane
    "preempts",  # times evicted
    "input",  # prompt tokens read at least once (re-reading after a preemption is recompute)
)
FLOAT_FIELDS = (
    "arrival",  # sent
    "admit",  # first admitted into the batch
    "first",  # first token (hidden or visible)
    "visible",  # first visible token
    "done",  # last token
)
FIELDS = INT_FIELDS + FLOAT_FIELDS

BLOCK = KV_BLOCK_TOKENS
SHIFT = 4  # log2(16): blocks for c cached tokens = (c + 15) >> 4
assert 1 << SHIFT == BLOCK


def blocks_for(tokens: np.ndarray) -> np.ndarray:
    """KV blocks that hold `tokens` cached tokens (int64 arrays)."""
    return (tokens + BLOCK - 1) >> SHIFT


class Rows:
    """k requests as one array per field (what moves between tables)."""

    __slots__ = FIELDS

    def __init__(self, cols: dict[str, np.ndarray]) -> None:
        for name in FIELDS:
            setattr(self, name, cols[name])

    @classmethod
    def new(cls, k: int) -> Rows:
        """k blank rows: zero counts, NaN times."""
        cols = {f: np.zeros(k, dtype=np.int64) for f in INT_FIELDS}
        cols.update({f: np.full(k, np.nan) for f in FLOAT_FIELDS})
        return cls(cols)

    def __len__(self) -> int:
        return int(self.id.shape[0])

    def pick(self, idx: np.ndarray | slice) -> Rows:
        """The rows at `idx` (an index array, mask or slice); copies for arrays, views for slices."""
        return Rows({f: getattr(self, f)[idx] for f in FIELDS})

    def copy(self) -> Rows:
        """Independent copies of every column."""
        return Rows({f: getattr(self, f).copy() for f in FIELDS})

    @staticmethod
    def join(parts: list[Rows]) -> Rows:
        """Rows of several groups, in order."""
        return Rows({f: np.concatenate([getattr(p, f) for p in parts]) for f in FIELDS})


class Table:
    """Rows of requests, one array per field, grown by doubling; live rows are [start, n)."""

    __slots__ = ("cols", "n", "cap")

    def __init__(self, cap: int = 64) -> None:
        self.cols = Rows.new(cap)
        self.n = 0
        self.cap = cap

    @property
    def start(self) -> int:
        """First live row (a queue admits from its head; other tables start at 0)."""
        return 0

    @property
    def size(self) -> int:
        """Live rows."""
        return self.n - self.start

    def col(self, name: str) -> np.ndarray:
        """The live part of one column (a view: writes go to the table)."""
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
            grown = Rows.new(cap)
            for f in FIELDS:
                getattr(grown, f)[:self.n] = getattr(self.cols, f)[:self.n]
            self.cols, self.cap = grown, cap

    def append(self, rows: Rows) -> None:
        """Append rows at the end."""
        k = len(rows)
        self.reserve(k)
        n = self.n
        for f in FIELDS:
            getattr(self.cols, f)[n:n + k] = getattr(rows, f)
        self.n = n + k

    def keep(self, mask: np.ndarray) -> None:
        """Drop the live rows where mask is False, keeping order (each column compacts in place)."""
        m = int(np.count_nonzero(mask))
        if m == self.size:
            return
        idx = np.flatnonzero(mask)
        for f in FIELDS:
            c = getattr(self.cols, f)
            c[:m] = c[:self.n][idx]
        self.n = m

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

    def reserve(self, extra: int) -> None:
        # Slide the live rows down before growing: admitted rows at the front are dead space.
        if self.head and self.n + extra > self.cap:
            live = self.n - self.head
            for f in FIELDS:
                c = getattr(self.cols, f)
                c[:live] = c[self.head:self.n]
            self.n, self.head = live, 0
        super().reserve(extra)

    def pop(self, k: int) -> None:
        """Drop k rows from the head (they were admitted); an emptied queue rewinds."""
        self.head += k
        if self.head == self.n:
            self.head = self.n = 0


class Ring:
    """A fixed-size ring of float rows: the last `cap` rows appended, for bounded statistics."""

    __slots__ = ("a", "pos", "count")

    def __init__(self, cap: int, cols: int) -> None:
        self.a = np.zeros((cap, cols))
        self.pos = 0
        self.count = 0

    def push(self, rows: np.ndarray) -> None:
        """Append rows, overwriting the oldest once full."""
        cap = self.a.shape[0]
        k = rows.shape[0]
        if k >= cap:
            rows, k = rows[-cap:], cap
        end = self.pos + k
        if end <= cap:
            self.a[self.pos:end] = rows
        else:
            cut = cap - self.pos
            self.a[self.pos:] = rows[:cut]
            self.a[:end - cap] = rows[cut:]
        self.pos = end % cap
        self.count = min(self.count + k, cap)

    def push_row(self, row: tuple[float, ...]) -> None:
        """Append one row (a tuple of floats), overwriting the oldest once full."""
        self.a[self.pos] = row
        self.pos = (self.pos + 1) % self.a.shape[0]
        if self.count < self.a.shape[0]:
            self.count += 1

    def last(self, k: int | None = None) -> np.ndarray:
        """The last k rows (all valid rows if None), oldest first; a copy."""
        cap = self.a.shape[0]
        k = self.count if k is None else min(k, self.count)
        start = (self.pos - k) % cap
        if start + k <= cap:
            return self.a[start:start + k].copy()
        return np.concatenate([self.a[start:], self.a[:(start + k) % cap]])


class Done(IntEnum):
    """Columns of the recently-finished ring: what a snapshot shows of a finished request."""

    ID = 0
    USER = 1
    PROMPT = 2
    THINK = 3
    TOTAL = 4
    GEN = 5
    FAST = 6
    ARRIVAL = 7


def done_rows(r: Rows) -> np.ndarray:
    """Finished rows as Done-column float rows (ids and counts are exact in float64 below 2**53)."""
    return np.column_stack([r.id, r.user, r.prompt, r.think, r.total, r.gen, r.fast, r.arrival]).astype(np.float64)
