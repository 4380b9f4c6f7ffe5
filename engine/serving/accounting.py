"""Accounting: what each lane counted, and the run and rolling metrics built from it as typed records.

A lane adds to its `LaneStats` every tick (totals, a bounded per-tick history) and hands it the rows of
the requests it finished, whose records (latencies, times) are derived in batches when read; `rolling`
and `run_metrics` turn the stats of one or more lanes into `Rolling` and `RunMetrics`, whose `as_dict()`
is the public `Engine.metrics()` / `tokensim run --json` shape.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any, NamedTuple, Protocol

import numpy as np

from engine.physics.step import StepCost
from engine.serving.history import N_COLS, History
from engine.serving.prefix_cache import BlockPool
from engine.serving.tables import BLOCK, DONE_COLS, FloatCol, Ring, Rows, done_rows

HISTORY_POINTS = 512  # per-tick UI history (kv_util, queue, tok/s, step time): the last 512 ticks
LATENCY_SAMPLES = 65_536  # per-request latencies for percentiles: a ring of the last 65,536 completions
ROLLING_SAMPLES = 256  # the UI's rolling TTFT/TPOT: the last 256 completions
RECENT_DONE = 64  # finished requests kept for the snapshot
FINISH_BATCH = 512  # finished requests whose records wait to be derived in one pass (LaneStats.finish)


class H(IntEnum):
    """Columns of the per-tick history ring."""

    TIME = 0  # clock after the tick
    DT = 1  # how far the tick moved the clock
    KV = 2  # pool utilisation after the tick
    QUEUE = 3  # requests waiting (queued + preempted)
    BATCH = 4  # sequences in the step (0: idle)
    OUT = 5  # tokens generated
    IN = 6  # prompt tokens read for the first time
    CIN = 7  # seconds charged to input tokens
    COUT = 8  # seconds charged to output tokens
    FLOPS = 9  # useful FLOPs (recompute excluded)
    BYTES = 10  # HBM bytes


assert len(H) == N_COLS  # engine.serving.history builds rows in this order


class L(IntEnum):
    """Columns of the latency ring (one row per finished request)."""

    TTFT = 0  # first visible token - arrival
    TTFT_RAW = 1  # first token of any kind - arrival
    TPOT = 2  # per generated token after the first
    E2E = 3  # last token - arrival
    QUEUE = 4  # first admission - arrival
    STAGE = 5  # workload stage the request was sent in


class T(IntEnum):
    """Columns of the per-request times ring (one row per finished request, aligned with the latency ring):
    the request's id, its FloatCol times and the seconds it spent preempted and recomputing."""

    ID = 0
    ARRIVAL = 1
    ADMIT = 2
    FIRST = 3
    VISIBLE = 4
    DONE = 5
    PRE = 6
    REC = 7
    PRE_V = 8
    REC_V = 9
    LOST_F = 10
    XFER = 11
    PROMPT = 12  # prompt tokens (as served: after any clipping to the context)
    OUTPUT = 13  # visible answer tokens (hidden thinking left out), as a client counts them


# The FloatCol fields the times ring keeps, in T's order after ID.
TIMES_FROM = np.array([FloatCol.ARRIVAL, FloatCol.ADMIT, FloatCol.FIRST, FloatCol.VISIBLE, FloatCol.DONE,
                       FloatCol.PRE, FloatCol.REC, FloatCol.PRE_V, FloatCol.REC_V, FloatCol.LOST_F,
                       FloatCol.XFER], dtype=np.intp)
assert len(TIMES_FROM) + 1 == T.PROMPT
# The latencies measured from arrival: rows of the latency record <- the request's time columns.
_LAT_TO = np.array([L.TTFT, L.TTFT_RAW, L.E2E, L.QUEUE], dtype=np.intp)
_LAT_FROM = np.array([FloatCol.VISIBLE, FloatCol.FIRST, FloatCol.DONE, FloatCol.ADMIT], dtype=np.intp)
_N_LAT = len(L)
_N_PATH = 3  # the request path adds to the first three of them (TTFT, TTFT_RAW, E2E), not to the queue delay


def finished_times(d: Rows, out: np.ndarray | None = None) -> np.ndarray:
    """Finished rows as rows of the times record (T columns), written into `out` (a ring's claimed rows) if given."""
    if out is None:
        out = np.empty((len(d), len(T)))
    o = out.T
    o[0] = d.id
    o[1:T.PROMPT] = d.f[TIMES_FROM]
    o[T.PROMPT] = d.prompt
    o[T.OUTPUT] = d.total - d.think
    return out

# Inter-token latencies are kept as a histogram (one sample per token after the first: millions in a run):
# log-spaced bins from 1 us to 1000 s, 1 % wide, so percentiles are read to about 1 %.
ITL_EDGES = np.logspace(-6, 3, 2085)
ITL_MID = np.sqrt(ITL_EDGES[:-1] * ITL_EDGES[1:])
_ITL_EDGES = ITL_EDGES.tolist()  # for one step's bin: bisect on a list beats np.searchsorted on a scalar
_TOP = ITL_MID.size - 1  # the last bin (longer gaps are counted in it)
_BINS = ITL_MID.size
# A gap's bin, np.searchsorted(ITL_EDGES, dt) - 1 clipped to 0.._TOP, in one call: the edges it passes but the first
# and last (below every inner edge: bin 0; past them all: _TOP, as the clip gives).
_INNER_EDGES = ITL_EDGES[1:-1].copy()
# Quiet runs whose ITL waits to be counted together (Itl.add_steps), at most; and the doubles their step times keep
# alive (views of a run's priced arrays), at most: a batch's temporaries stay small (below malloc's mmap threshold,
# whose fresh pages cost more to fault in than the work on them), its fixed cost spread over tens of runs.
_RUNS_PENDING = 64
_HELD_PENDING = 1 << 13


# The ITL sum is kept in fixed point, in units of 2^-60 s, as Python ints: each gap is cut once (to 8.7e-19 s,
# below a double's resolution at any gap over 1e-3 s), and the integer total is exact and independent of how the
# steps were grouped into calls (one step at a time, or a quiet run of many), so a faster loop that draws its run
# boundaries elsewhere gives the same mean to the last digit. The mean is one correctly rounded int division.
_FIX_BITS = 60
_FIX = float(2 ** _FIX_BITS)
_INT64_ROOM = 2.0 ** 62  # below int64's 2^63, with room for rounding in the check
_LOW31 = (1 << 31) - 1


def fixed(dt: float) -> int:
    """dt seconds as a whole count of 2^-60 s (truncated: int() of the exactly scaled double)."""
    return int(dt * _FIX)


def fixed_sum(dts: np.ndarray, top: float | None = None) -> int:
    """The sum of fixed(dt) over dts, exactly (the same integer as adding them one at a time). `top`: the largest
    of dts if the caller has it (Itl.add_steps finds it for its bins), else found here."""
    k = len(dts)
    if k > 32:
        if top is None:
            top = float(np.maximum.reduce(dts))
        top *= _FIX  # scaling by a power of two is exact (and keeps the order): the largest term
        if top < _INT64_ROOM / k:  # every term and the total fit in int64: the reduction casts each term to int64
            return int(np.add.reduce(dts * _FIX, dtype=np.int64))  # (truncated toward zero, as int() does) and adds
        if top < _INT64_ROOM:  # every term fits, their total may not: sum the high and low 31 bits apart (each
            i = (dts * _FIX).astype(np.int64)  # half's total fits for any run below 2^32 steps), not a Python loop
            return (int((i >> 31).sum()) << 31) + int((i & _LOW31).sum())
    return sum(map(int, (dts * _FIX).tolist()))  # a short run (measured: cheaper in Python up to ~40), or past int64


class Itl:
    """Inter-token latency histogram per stage: counts per bin, and the exact sum (fixed point) and count for
    the mean.

    A quiet run's steps (add_steps) are noted as its step times and counted when read, many runs at once: a run
    of a few rows costs ~6 numpy calls to bin and sum alone, and a lane runs thousands between reads (a headless
    run reads once, at the end). Every figure is an integer sum (bins, counts, the fixed-point total), the same
    whatever the grouping, so reading counts, sum or n (properties that count the pending runs first) gives
    exactly what counting each run as it came gave. A single step's tokens (add) wait in Python ints the same way
    (a dict of bin to tokens, and tokens per stage) until a read: two numpy scalar updates a step cost more."""

    __slots__ = ("_counts", "_sum", "_n", "_pend", "_pend_held", "_one", "_one_n")

    def __init__(self, stages: int = 1) -> None:
        self._counts = np.zeros((stages, ITL_MID.size), dtype=np.int64)
        self._sum = [0] * stages  # per stage: the sum of every token's gap, in 2^-60 s (see fixed)
        self._n = np.zeros(stages, dtype=np.int64)
        self._pend: list[tuple[np.ndarray, int, int]] = []  # (a run's step times, stage, rows of that stage)
        self._pend_held = 0
        self._one: dict[int, int] = {}  # single steps' tokens not yet in _counts: flat bin index (stage, bin) -> tokens
        self._one_n = [0] * stages  # and per stage, not yet in _n

    @property
    def counts(self) -> np.ndarray:
        """Tokens per bin, per stage (stages x bins, int64)."""
        if self._pend:
            self._count_runs()
        if self._one:
            self._count_one()
        return self._counts

    @property
    def sum(self) -> list[int]:
        """Per stage, the sum of every token's gap in 2^-60 s (Python ints: exact)."""
        if self._pend:
            self._count_runs()
        return self._sum

    @property
    def n(self) -> np.ndarray:
        """Tokens per stage (int64)."""
        if self._pend:
            self._count_runs()
        if self._one:
            self._count_one()
        return self._n

    def add(self, dt: float, stage: np.ndarray | int, k: int) -> None:
        """k tokens (of rows in `stage`, an array or one index) came dt seconds after their previous ones."""
        if k <= 0:
            return
        b = bisect.bisect_left(_ITL_EDGES, dt) - 1  # np.searchsorted's side='left', clipped to the bins (min and max
        if b < 0:  # parse their keywords on every call in this interpreter: ~0.2 us)
            b = 0
        elif b > _TOP:
            b = _TOP
        v = int(dt * _FIX)  # fixed(dt), inline
        if isinstance(stage, int) or self._n.size == 1:
            s = stage if isinstance(stage, int) else 0
            one, at = self._one, s * _BINS + b
            one[at] = one.get(at, 0) + k  # (counted at the next read: _count_one)
            self._sum[s] += v * k
            self._one_n[s] += k
            return
        per = np.bincount(stage, minlength=self._n.size)
        self._counts[:, b] += per
        for s, m in enumerate(per.tolist()):
            self._sum[s] += v * m
        self._n += per

    def _count_one(self) -> None:
        """Count the single steps' tokens waiting since the last read (integer sums: the same in any grouping)."""
        one = self._one
        self._counts.reshape(-1)[list(one)] += list(one.values())  # (distinct indices: a fancy += adds each once)
        self._n += self._one_n
        one.clear()
        self._one_n = [0] * len(self._one_n)

    def add_steps(self, dts: np.ndarray, stage: np.ndarray | int, n: int, held: int | None = None) -> None:
        """Several decode steps in a row, each giving n rows (in `stage`) their next token after dts[j]: noted, and
        counted with the other pending runs when read or when _RUNS_PENDING runs (or _HELD_PENDING doubles) wait.
        `dts` must not change afterwards (a run's step times are never written again). `held`: the doubles noting
        it keeps alive, if the caller knows (a view of a price table, which its step model keeps anyway: its own
        steps); else its base's, if a view."""
        k = len(dts)
        if n <= 0 or not k:
            return
        if isinstance(stage, int) or self._n.size == 1:
            self._pend.append((dts, stage if isinstance(stage, int) else 0, n))
        else:
            cnt = np.bincount(stage, minlength=self._n.size)
            for s in np.flatnonzero(cnt).tolist():
                self._pend.append((dts, s, int(cnt[s])))
        if held is None:
            held = k if dts.base is None else dts.base.size  # (a view keeps its whole base alive)
        self._pend_held += held
        if len(self._pend) >= _RUNS_PENDING or self._pend_held >= _HELD_PENDING:
            self._count_runs()

    def _count_runs(self) -> None:
        """Count the pending runs: each run's fixed-point sum (exact, see fixed_sum) times its rows goes to its
        stage, and every step's bin (as add finds it: np.searchsorted's side='left', clipped to the histogram:
        _INNER_EDGES) gets its run's rows. A run's step times change slowly, so 9 runs in 10 fall in one 1 %-wide
        bin: the bins of every run's shortest and longest step (bins are monotone in dt) are found at once, and only
        the runs they differ for are binned step by step."""
        pend = self._pend
        d = np.concatenate([r[0] for r in pend]) if len(pend) > 1 else pend[0][0]
        lens = [len(r[0]) for r in pend]
        starts = np.cumsum([0, *lens[:-1]])
        x = d * _FIX  # scaling by a power of two is exact
        if float(np.maximum.reduce(x)) < _INT64_ROOM:  # every term fits in int64: each run's sum of its high and
            i = x.astype(np.int64)  # low 31 bits apart (each half's total fits for any run below 2^32 steps)
            hi = np.add.reduceat(i >> 31, starts).tolist()
            lo = np.add.reduceat(i & _LOW31, starts).tolist()
            sums = [(h << 31) + low for h, low in zip(hi, lo, strict=True)]
        else:  # a gap past int64's room (over 4 s): each run alone, in Python ints
            sums = [fixed_sum(r[0]) for r in pend]
        ext = np.concatenate((np.minimum.reduceat(d, starts), np.maximum.reduceat(d, starts)))
        bins = np.searchsorted(_INNER_EDGES, ext).tolist()
        tops = bins[len(pend):]
        counts, total, added = self._counts, self._sum, [0] * len(self._sum)
        at: list[int] = []  # one-bin runs: (stage, bin) as a flat index into counts, and the tokens it gets
        tokens: list[int] = []
        for (dts, s, m), v, k, b, top in zip(pend, sums, lens, bins, tops, strict=False):
            total[s] += m * v
            added[s] += m * k
            if b == top:
                at.append(s * _BINS + b)
                tokens.append(m * k)
            else:  # its steps' bins lie in b..top: searched among those bins' inner edges alone (a step's bin is the
                # inner edges below it: all before b, none from top on), counted in that slice
                rel = np.searchsorted(_INNER_EDGES[b:top], dts)
                counts[s, b:top + 1] += m * np.bincount(rel, minlength=top - b + 1)
        np.add.at(counts.reshape(-1), at, tokens)
        self._n += added
        pend.clear()
        self._pend_held = 0

    def summary(self, s: int | None = None) -> Summary:
        """Mean and percentiles of stage s (every stage if None)."""
        c = self.counts.sum(axis=0) if s is None else self.counts[s]  # (counts the pending runs first)
        n = int(self._n.sum() if s is None else self._n[s])
        if n == 0:
            return Summary(None, None, None, None)
        cum = np.cumsum(c)
        p = [float(ITL_MID[int(np.searchsorted(cum, q * n / 100.0))]) for q in (50, 90, 99)]
        total = sum(self._sum) if s is None else self._sum[s]
        return Summary(total / (n << _FIX_BITS), p[0], p[1], p[2])  # int / int: correctly rounded


class Uncounted(Itl):
    """An Itl that counts nothing, for a run whose inter-token latencies nobody reads (a plan point reads its totals
    and latency rows: plan._read): the writers' calls return at once, so the runs' step times are never binned (the
    binning is ~2-3 % of a low-load run). Reading it is an error, not an empty histogram."""

    __slots__ = ()

    def __init__(self) -> None:  # (no histogram to allocate)
        pass

    def add(self, dt: float, stage: np.ndarray | int, k: int) -> None:
        """Nothing counted."""

    def add_steps(self, dts: np.ndarray, stage: np.ndarray | int, n: int, held: int | None = None) -> None:
        """Nothing counted."""

    @property
    def counts(self) -> np.ndarray:
        raise RuntimeError("this run counted no inter-token latencies (accounting.uncount_itl)")

    @property
    def sum(self) -> list[int]:
        raise RuntimeError("this run counted no inter-token latencies (accounting.uncount_itl)")

    @property
    def n(self) -> np.ndarray:
        raise RuntimeError("this run counted no inter-token latencies (accounting.uncount_itl)")


def uncount_itl(lanes: Iterable[LaneLike]) -> None:
    """Count no inter-token latencies in these lanes from now on (Uncounted): for a caller that will read only their
    totals and latency rows, before the run."""
    for ln in lanes:
        ln.stats.itl = Uncounted()


@dataclass(slots=True)
class LaneStats:
    """One lane's running totals (per GPU of its group) and bounded histories."""

    max_batch: int
    stages: int = 1  # workload stages (per-stage completions and inter-token latencies)
    ticks: int = 0
    accepted: int = 0
    completed: int = 0
    aborted: int = 0  # requests dropped before finishing (a client went away: Lane.abort)
    preemptions: int = 0
    out_tokens: int = 0
    visible_tokens: int = 0
    in_tokens: int = 0
    recomputed_tokens: int = 0
    clipped: int = 0
    busy_s: float = 0.0
    charge_in_s: float = 0.0
    charge_out_s: float = 0.0
    charge_cached_s: float = 0.0  # seconds charged to prompt tokens read from the prefix cache
    cached_in_tokens: int = 0  # prompt tokens read from the prefix cache instead of computed (part of in_tokens)
    flops: float = 0.0
    flops_useful: float = 0.0
    bytes: float = 0.0
    last_cost: StepCost | None = None  # a cache: read Lane.last_cost, which builds it when the lane stepped since
    last_batch: int = 0
    spec_steps: int = 0  # speculative verify steps' sequences, and the tokens they emitted
    spec_tokens: int = 0
    path_s: float = 0.0  # the request path outside the GPU steps, added to every TTFT and E2E
    slo_ttft: float | None = None  # an answer meets the SLO with TTFT <= slo_ttft and TPOT <= slo_tpot (None: any)
    slo_tpot: float | None = None
    batch_hist: np.ndarray = field(init=False)  # ticks per batch size (sizes above the cap count at the cap)
    hist: History = field(init=False)
    itl: Itl = field(init=False)
    stage_done: np.ndarray = field(init=False)  # requests completed per stage (exact; the ring is bounded)
    # Finished requests' records, derived in batches (see finish): read them through lat, times, recent, slo_ok.
    _lat: Ring = field(init=False)
    _times: Ring = field(init=False)
    _recent: Ring = field(init=False)
    _slo_ok: int = field(init=False, default=0)
    _slo_ok_tokens: int = field(init=False, default=0)
    _pending: list[Rows] = field(init=False)
    _n_pending: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.batch_hist = np.zeros(max(self.max_batch, 1) + 1, dtype=np.int64)
        self.hist = History(HISTORY_POINTS)
        self._lat = Ring(LATENCY_SAMPLES, len(L))
        self._times = Ring(LATENCY_SAMPLES, len(T))
        self._recent = Ring(RECENT_DONE, DONE_COLS)
        self._pending = []
        self.itl = Itl(self.stages)
        self.stage_done = np.zeros(self.stages, dtype=np.int64)

    # ---- finished requests ----------------------------------------------------------------------
    def finish(self, d: Rows) -> None:
        """Rows of requests that just finished (their own copies, done time set): their latency, times and
        snapshot records are derived later, many ticks' worth in one pass (a tick finishes a few requests, and
        the fixed cost of the numpy calls that derive them outweighs their work), when a reader asks or
        FINISH_BATCH rows wait. The records are element by element of each row, so batching changes no value."""
        # Whoever else holds the rows (a TickResult, a fleet) reads them: the records are derived from them later.
        d.i.setflags(write=False)  # (the method: ~0.25 us less than setting the flags object's attribute)
        d.f.setflags(write=False)
        self._pending.append(d)
        self._n_pending += d.i.shape[1]
        if self._n_pending >= FINISH_BATCH:
            self._derive()

    @property
    def lat(self) -> Ring:
        """Per finished request: L columns (the last LATENCY_SAMPLES)."""
        self._derive()
        return self._lat

    @property
    def times(self) -> Ring:
        """Per finished request: T columns, row for row with `lat`."""
        self._derive()
        return self._times

    @property
    def recent(self) -> Ring:
        """The last RECENT_DONE finished requests as done_rows (for the snapshot)."""
        self._derive()
        return self._recent

    @property
    def slo_ok(self) -> int:
        """Finished requests that met the SLO."""
        self._derive()
        return self._slo_ok

    @property
    def slo_ok_tokens(self) -> int:
        """Tokens of the finished requests that met the SLO."""
        self._derive()
        return self._slo_ok_tokens

    def _derive(self) -> None:
        """Turn the waiting finished rows into their latency, times and recent records and SLO counts."""
        parts = self._pending
        if not parts:
            return
        d = parts[0] if len(parts) == 1 else Rows.join(parts)
        self._pending = []
        self._n_pending = 0
        f = d.f
        k = d.i.shape[1]
        total = d.total
        # The latency record is written straight into its ring's next rows where they do not wrap.
        slot = self._lat.claim(k)
        lat = np.empty((_N_LAT, k)) if slot is None else slot.T
        since = f[_LAT_FROM] - f[FloatCol.ARRIVAL]
        if self.path_s:
            # The request path outside the GPU steps (HTTP, tokenising, detokenising and streaming): the client
            # sees it in its first token and its last.
            since[:_N_PATH] += self.path_s
        lat[_LAT_TO] = since
        # TPOT: time per generated token after the first (hidden tokens included); undefined for 1 token.
        tpot = lat[L.TPOT]
        gap = f[FloatCol.DONE] - f[FloatCol.FIRST]
        if total.min() > 1:
            np.divide(gap, total - 1, out=tpot)
        else:
            tpot.fill(np.nan)
            np.divide(gap, total - 1, out=tpot, where=total > 1)
        lat[L.STAGE] = d.stage
        if slot is None:
            self._lat.push(lat.T)
        if self.slo_ttft is not None or self.slo_tpot is not None:
            ok = np.ones(k, dtype=bool)
            if self.slo_ttft is not None:
                ok &= lat[L.TTFT] <= self.slo_ttft
            if self.slo_tpot is not None:
                ok &= ~(tpot > self.slo_tpot)
            self._slo_ok += int(ok.sum())
            self._slo_ok_tokens += int(total[ok].sum())
        self._recent.push(done_rows(d.pick(slice(max(0, k - RECENT_DONE), k))))
        times = self._times.claim(k)
        if times is None:
            self._times.push(finished_times(d))
        else:
            finished_times(d, times)

    def set_max_batch(self, max_batch: int) -> None:
        """A new batch cap: the histogram grows to hold it (it never shrinks; bigger batches count at the cap)."""
        self.max_batch = max_batch
        if self.batch_hist.size <= max_batch:
            grown = np.zeros(max_batch + 1, dtype=np.int64)
            grown[:self.batch_hist.size] = self.batch_hist
            self.batch_hist = grown


class Rates(NamedTuple):
    """Per-GPU nominal peaks and the price of one lane's GPU group, for utilisation and cost."""

    peak_flops: float  # FLOP/s at the dtype the matmuls run in, what-if knobs applied
    bandwidth: float  # HBM bytes/s
    dollars_per_s: float  # one lane's GPU group


def finite_percentiles(x: np.ndarray, qs: tuple[float, ...]) -> list[float] | None:
    """The qs-th percentiles (linear) of the finite values of x, None if there are none: the one place unfinished
    requests (NaN, inf) are left out of latency percentiles."""
    x = x[np.isfinite(x)]
    return np.percentile(x, qs).tolist() if x.size else None


class Summary(NamedTuple):
    """Mean and p50/p90/p99 of the finite values (None where there are none)."""

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None

    @staticmethod
    def of(x: np.ndarray) -> Summary:
        """Mean and percentiles of the finite values of x."""
        x = x[np.isfinite(x)]
        v = finite_percentiles(x, (50, 90, 99))
        if v is None:
            return Summary(None, None, None, None)
        return Summary(float(x.mean()), *v)



Percentiles = Summary  # the name the fleet reads


def _median(x: np.ndarray) -> float:
    """p50 of the finite values (NaN where there are none)."""
    v = finite_percentiles(x, (50,))
    return float("nan") if v is None else v[0]


class LaneLike(Protocol):
    """What the metrics read of a lane."""

    stats: LaneStats
    pool: BlockPool
    clock: float

    @property
    def waiting(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Rolling:
    """What the UI shows now: rates over the last HISTORY_POINTS ticks, latencies over the last 256 answers."""

    tok_s_in: float
    tok_s_out: float
    tok_s_per_user: float  # a decoding user gets one token per step: the output rate over the mean batch
    ttft_p50: float
    tpot_p50: float
    mfu: float
    bw_util: float
    kv_util: float
    cost_per_mtok_in: float
    cost_per_mtok_out: float
    batch: float
    queue: float
    # The windows the figures above cover, for the screen to say: rates over window_s simulated seconds,
    # the p50 latencies over the last `answers` finished requests.
    window_s: float = 0.0
    answers: float = 0.0

    def as_dict(self) -> dict[str, float]:
        """The public dict (Engine.rolling_metrics, Snapshot.metrics)."""
        return {f.name: float(getattr(self, f.name)) for f in fields(self)}


def rolling(lanes: list[LaneLike], rates: Rates) -> Rolling:
    """Rates over the last HISTORY_POINTS ticks of each lane and latencies over the last ROLLING_SAMPLES answers."""
    span = out = inp = cin = cout = fl = by = batch = kv = 0.0
    steps = 0
    for ln in lanes:
        h = ln.stats.hist.last()
        if not len(h):
            continue
        d = float(h[:, H.DT].sum())
        span = max(span, d)
        out += h[:, H.OUT].sum()
        inp += h[:, H.IN].sum()
        cin += h[:, H.CIN].sum()
        cout += h[:, H.COUT].sum()
        fl += h[:, H.FLOPS].sum()
        by += h[:, H.BYTES].sum()
        busy = h[:, H.BATCH] > 0
        steps += int(busy.sum())
        batch += float(h[busy, H.BATCH].sum())
        kv = max(kv, float(h[-1, H.KV]))
    lat = np.concatenate([ln.stats.lat.last(ROLLING_SAMPLES) for ln in lanes])
    ps = rates.dollars_per_s
    mean_batch = batch / steps if steps else 0.0
    tok_s_out = out / span if span else 0.0
    nl = len(lanes)
    return Rolling(
        tok_s_in=inp / span if span else 0.0,
        tok_s_out=tok_s_out,
        tok_s_per_user=tok_s_out / mean_batch if mean_batch else 0.0,
        ttft_p50=_median(lat[:, L.TTFT]),
        tpot_p50=_median(lat[:, L.TPOT]),
        mfu=fl / (rates.peak_flops * span * nl) if span else 0.0,
        bw_util=by / (rates.bandwidth * span * nl) if span else 0.0,
        kv_util=kv,
        cost_per_mtok_in=float("nan") if not inp else ps * cin / inp * 1e6,
        cost_per_mtok_out=float("nan") if not out else ps * cout / out * 1e6,
        batch=mean_batch,
        queue=float(sum(ln.waiting for ln in lanes)),
        window_s=span,
        answers=float(len(lat)),
    )


def _per_mtok(dollars_s: float, seconds: float, tokens: float) -> float | None:
    """Dollars per million tokens for `seconds` of GPU time at `dollars_s` (None without tokens)."""
    return dollars_s * seconds / tokens * 1e6 if tokens else None


def batch_p50(stats: list[LaneStats]) -> float:
    """Median batch over every stepping tick (idle ticks excluded), from the exact histogram."""
    size = max(s.batch_hist.size for s in stats)
    h = np.zeros(size, dtype=np.int64)
    for s in stats:
        h[:s.batch_hist.size] += s.batch_hist
    h[0] = 0
    tot = int(h.sum())
    if not tot:
        return 0.0
    return float(np.searchsorted(np.cumsum(h), (tot + 1) / 2))


@dataclass(frozen=True, slots=True)
class RunMetrics:
    """The whole run: totals, latency percentiles over the last LATENCY_SAMPLES answers, utilisation, cost."""

    requests_completed: int
    requests_accepted: int
    input_tokens: int
    output_tokens: int
    visible_tokens: int
    recomputed_tokens: int
    sim_time_s: float
    ticks: int
    throughput_in_tok_s: float
    throughput_out_tok_s: float
    ttft_s: Summary
    ttft_raw_s: Summary
    tpot_s: Summary
    itl_s: Summary  # every token after a request's first: the gap since its previous token
    e2e_s: Summary
    queue_delay_s: Summary
    latency_samples: int
    requests_unfinished: int  # accepted, not done when the run ended (queued, preempted or running)
    prefix_cache_hit_rate: float | None  # prompt tokens read from the prefix cache / prompt tokens (None: none)
    cached_input_tokens: int
    kv_offloaded_blocks: int  # blocks copied to host memory (KV offload), and copied back on a hit
    kv_loaded_blocks: int
    goodput_req_s: float | None  # None without an SLO
    goodput_tok_s: float | None
    slo_attainment: float | None
    kv_capacity_bytes: float
    kv_blocks_total: int
    kv_peak_blocks: int
    kv_peak_bytes: float
    kv_util_peak: float
    preemptions: int
    mfu: float  # wall (simulated) time, idle included; GPUs of every lane count
    bw_util: float
    busy_fraction: float
    price_per_hour: float
    cost_per_mtok_in: float | None  # busy time only: prefill time to input tokens, decode time to output
    cost_per_mtok_out: float | None
    cost_per_mtok_cached_in: float | None  # prompt tokens from the prefix cache: the attention reading them
    spec_tokens_per_step: float | None  # tokens a sequence emitted per speculative verify step (None: off)
    stages: tuple[dict[str, Any], ...]  # one per workload stage, over the requests sent in it
    batch_p50: float
    clipped_requests: int
    lanes: int
    rolling: Rolling

    def as_dict(self) -> dict[str, Any]:
        """The public dict: the run's keys, then the rolling keys it does not have, then "rolling" itself."""
        m: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Summary):
                v = v._asdict()
            elif f.name == "stages":
                v = [dict(s) for s in v]
            if f.name != "rolling":
                m[f.name] = v
        r = self.rolling.as_dict()
        m.update({k: v for k, v in r.items() if k not in m})
        m["rolling"] = r
        return m


def stage_metrics(lanes: list[LaneLike], stages: tuple[Any, ...]) -> tuple[dict[str, Any], ...]:
    """Per workload stage (engine.traffic.workload_file.Stage): its rate or users, length, and the latencies of the
    requests sent during it (completions exact, percentiles over the latency ring)."""
    st = [ln.stats for ln in lanes]
    lat = np.concatenate([s.lat.last() for s in st])
    out = []
    for s in stages:
        m = lat[:, L.STAGE] == s.index
        itl = _itl(st, s.index)
        out.append({
            "stage": s.index, "start_s": s.start, "duration_s": s.duration,
            "rate": s.rate if not s.closed else None, "users": s.users if s.closed else None,
            "requests_completed": int(sum(int(x.stage_done[s.index]) for x in st)),
            "ttft_s": Summary.of(lat[m, L.TTFT])._asdict(), "itl_s": itl._asdict(),
            "e2e_s": Summary.of(lat[m, L.E2E])._asdict(),
        })
    return tuple(out)


def _itl(st: list[LaneStats], stage: int | None = None) -> Summary:
    """Inter-token latency over every lane's histogram (of one workload stage, or of all): a fleet's replicas
    pool their histograms as an engine's lanes do."""
    if len(st) == 1:
        return st[0].itl.summary(stage)
    agg = Itl(1)
    for s in st:
        if stage is None:
            agg.counts[0] += s.itl.counts.sum(axis=0)
            agg.sum[0] += sum(s.itl.sum)
            agg.n[0] += s.itl.n.sum()
        else:
            agg.counts[0] += s.itl.counts[stage]
            agg.sum[0] += s.itl.sum[stage]
            agg.n[0] += s.itl.n[stage]
    return agg.summary()


class Totals(NamedTuple):
    """A run's headline totals (run_metrics' keys of the same names): what a plan point reads of its run, without
    the percentiles, histograms and rates the whole metrics take ~3 ms to build."""

    sim_time_s: float
    requests_completed: int
    input_tokens: int
    output_tokens: int
    throughput_out_tok_s: float
    preemptions: int


def totals(lanes: list[LaneLike]) -> Totals:
    """The headline totals of `lanes` (one lane, or every lane of an engine or a fleet): run_metrics reads its keys
    of these names from here, so a reader of either gets the same numbers."""
    st = [ln.stats for ln in lanes]
    sim = max(ln.clock for ln in lanes)
    out = sum(s.out_tokens for s in st)
    return Totals(sim, sum(s.completed for s in st), sum(s.in_tokens for s in st), out, out / sim if sim else 0.0,
                  sum(s.preemptions for s in st))


def run_metrics(lanes: list[LaneLike], rates: Rates, ticks: int, kv_capacity_bytes: float,
                kv_bytes_per_token: float, slo: bool, tp: int, stages: tuple[Any, ...] = ()) -> RunMetrics:
    """The run metrics of `lanes` (one lane, or every lane of an engine) after `ticks` engine ticks."""
    st = [ln.stats for ln in lanes]
    tot = totals(lanes)
    sim, completed, inp, out = tot.sim_time_s, tot.requests_completed, tot.input_tokens, tot.output_tokens
    lat = np.concatenate([s.lat.last() for s in st])
    ps = rates.dollars_per_s
    nl = len(lanes)
    cached = sum(s.cached_in_tokens for s in st)
    spec_steps = sum(s.spec_steps for s in st)
    slo_ok = sum(s.slo_ok for s in st)
    return RunMetrics(
        requests_completed=completed,
        requests_accepted=sum(s.accepted for s in st),
        input_tokens=inp,
        output_tokens=out,
        visible_tokens=sum(s.visible_tokens for s in st),
        recomputed_tokens=sum(s.recomputed_tokens for s in st),
        sim_time_s=sim,
        ticks=ticks,
        throughput_in_tok_s=inp / sim if sim else 0.0,
        throughput_out_tok_s=tot.throughput_out_tok_s,
        ttft_s=Summary.of(lat[:, L.TTFT]),
        ttft_raw_s=Summary.of(lat[:, L.TTFT_RAW]),
        tpot_s=Summary.of(lat[:, L.TPOT]),
        itl_s=_itl(st),
        e2e_s=Summary.of(lat[:, L.E2E]),
        queue_delay_s=Summary.of(lat[:, L.QUEUE]),
        latency_samples=len(lat),
        requests_unfinished=sum(s.accepted - s.completed for s in st),
        prefix_cache_hit_rate=cached / inp if inp and any(ln.pool.caching for ln in lanes) else None,
        cached_input_tokens=cached,
        kv_offloaded_blocks=sum(ln.pool.offloaded for ln in lanes),
        kv_loaded_blocks=sum(ln.pool.loaded for ln in lanes),
        goodput_req_s=(slo_ok / sim if sim else 0.0) if slo else None,
        goodput_tok_s=(sum(s.slo_ok_tokens for s in st) / sim if sim else 0.0) if slo else None,
        slo_attainment=(slo_ok / completed if completed else None) if slo else None,
        **_kv_fields(lanes, kv_capacity_bytes, kv_bytes_per_token),
        preemptions=tot.preemptions,
        mfu=sum(s.flops_useful for s in st) / (rates.peak_flops * sim * nl) if sim else 0.0,
        bw_util=sum(s.bytes for s in st) / (rates.bandwidth * sim * nl) if sim else 0.0,
        busy_fraction=sum(s.busy_s for s in st) / (sim * nl) if sim else 0.0,
        price_per_hour=ps * 3600 / tp,
        # Computed input and cached input have their own prices (APIs bill cached input at about a tenth).
        cost_per_mtok_in=_per_mtok(ps, sum(s.charge_in_s for s in st), inp - cached),
        cost_per_mtok_out=_per_mtok(ps, sum(s.charge_out_s for s in st), out),
        cost_per_mtok_cached_in=_per_mtok(ps, sum(s.charge_cached_s for s in st), cached),
        spec_tokens_per_step=(sum(s.spec_tokens for s in st) / spec_steps) if spec_steps else None,
        stages=stage_metrics(lanes, stages),
        # Median batch of the first lane given (the main one when both are): mixing lanes' ticks would
        # mostly count the fast lane's many small steps.
        batch_p50=batch_p50(st[:1]),
        clipped_requests=sum(s.clipped for s in st),
        lanes=nl,
        rolling=rolling(lanes, rates),
    )


def _kv_fields(lanes: list[LaneLike], kv_capacity_bytes: float, kv_bytes_per_token: float) -> dict[str, Any]:
    """RunMetrics' KV pool figures: its capacity, and the most blocks any lane held at once."""
    peak_blocks = max(ln.pool.peak for ln in lanes)
    total = lanes[0].pool.total
    return {
        "kv_capacity_bytes": kv_capacity_bytes,
        "kv_blocks_total": total,
        "kv_peak_blocks": peak_blocks,
        "kv_peak_bytes": peak_blocks * (kv_bytes_per_token * BLOCK),
        "kv_util_peak": peak_blocks / total if total else 0.0,
    }


# ---- where each request's time went (run --json --explain, the app's explain screen) ----------------------

# A finished request's TTFT (arrival to first visible token) and E2E (arrival to last token), each split into
# parts that add up to it exactly:
#   queue      arrival to first admission (a full pool, a full batch, or async scheduling's one-step wait)
#   prefill    first admission to first token, less any preemption and KV copy in between
#   transfer   P/D: the prompt's KV cache waiting for a decode replica and crossing the link to it
#   decode     first token onward (hidden thinking, then the answer), less any preemption in between
#   preempted  waiting after an eviction until readmitted
#   recompute  re-reading the prompt and the generated tokens after readmission, until decoding resumes
#   path       the request path outside the GPU steps (HTTP, tokenising, streaming), the runtime's constant
PARTS = ("queue", "prefill", "transfer", "decode", "preempted", "recompute", "path")
PERCENTILES = (50, 90, 99)


class Split(NamedTuple):
    """Per finished request (rows, oldest first per lane): its id and its TTFT and E2E parts (k x PARTS)."""

    ids: np.ndarray
    ttft: np.ndarray
    e2e: np.ndarray


def split_of(times: np.ndarray, path_s: np.ndarray | float) -> Split:
    """The TTFT and E2E parts of finished requests from their times-ring rows (T columns)."""
    a = times.T
    queue = a[T.ADMIT] - a[T.ARRIVAL]
    prefill = a[T.FIRST] - a[T.ADMIT] - a[T.LOST_F] - a[T.XFER]
    path = np.broadcast_to(np.asarray(path_s, dtype=np.float64), queue.shape)
    lost_after_f = a[T.PRE_V] + a[T.REC_V] - a[T.LOST_F]  # preempted/recomputing between first and visible
    decode_v = a[T.VISIBLE] - a[T.FIRST] - lost_after_f
    decode = a[T.DONE] - a[T.FIRST] - (a[T.PRE] + a[T.REC] - a[T.LOST_F])
    ttft = np.stack([queue, prefill, a[T.XFER], decode_v, a[T.PRE_V], a[T.REC_V], path], 1)
    e2e = np.stack([queue, prefill, a[T.XFER], decode, a[T.PRE], a[T.REC], path], 1)
    return Split(a[T.ID].astype(np.int64), ttft, e2e)


def lanes_split(lanes: list[LaneLike], last: int | None = None) -> Split:
    """The split of the last `last` (all kept if None) finished requests of each lane, lane after lane."""
    parts = [split_of(ln.stats.times.last(last), ln.stats.path_s) for ln in lanes]
    return Split(*(np.concatenate([getattr(p, f) for p in parts]) for f in Split._fields))


def _named(parts: np.ndarray) -> dict[str, float]:
    """One request's (or a mean's) parts by name, and their total."""
    out = {n: float(v) for n, v in zip(PARTS, parts, strict=True)}
    out["total"] = float(parts.sum())
    return out


def percentile_rows(parts: np.ndarray, qs: Iterable[float]) -> list[int]:
    """For each percentile q of the latency (the sum of a request's parts), the row of the request of that rank in
    sorted order: a real request, so its parts are its own. `parts` has at least one row."""
    order = np.argsort(parts.sum(axis=1), kind="stable")
    return [int(order[int(round(q / 100 * (len(order) - 1)))]) for q in qs]


def split_summary(ids: np.ndarray, parts: np.ndarray) -> dict[str, Any]:
    """The mean split (its total is the mean latency) and the split of the request at each percentile of the
    latency (percentile_rows)."""
    if not len(parts):
        return {"mean": None, **{f"p{q}": None for q in PERCENTILES}}
    out: dict[str, Any] = {"mean": _named(parts.mean(axis=0))}
    for q, i in zip(PERCENTILES, percentile_rows(parts, PERCENTILES), strict=True):
        out[f"p{q}"] = {"request": int(ids[i]), **_named(parts[i])}
    return out


def explain(lanes: list[LaneLike]) -> dict[str, Any]:
    """`run --json --explain`'s "explain" key: over the same finished requests as the latency percentiles, the
    mean TTFT and E2E split into PARTS, the split of the p50, p90 and p99 requests, and every request's own
    split (per_request), so the slow ones can be found and read."""
    s = lanes_split(lanes)
    return {"parts": list(PARTS), "requests": int(len(s.ids)), "ttft_s": split_summary(s.ids, s.ttft),
            "e2e_s": split_summary(s.ids, s.e2e), "per_request": per_request(lanes, s)}


def per_request(lanes: list[LaneLike], s: Split) -> dict[str, Any]:
    """One row per finished request: [id, its E2E parts (PARTS, seconds)..., its E2E as the latency ring has it].
    Columns, then rows (a table, not an object per request: 10,000 requests stay a compact list of lists). The
    parts add up to the last column: the times ring and the latency ring are written together, row for row."""
    e2e = np.concatenate([ln.stats.lat.last()[:, L.E2E] for ln in lanes])
    rows = np.column_stack([s.ids.astype(np.float64), s.e2e, e2e]) if len(e2e) else np.zeros((0, len(PARTS) + 2))
    return {"columns": ["request", *PARTS, "e2e"],
            "rows": [[int(r[0]), *map(float, r[1:])] for r in rows.tolist()]}


def check_conserved(where: str, accepted: int, completed: int, running: int, queued: int, preempted: int,
                    moving: int = 0, aborted: int = 0) -> None:
    """The conservation invariant (issue 30, class 2): every request a run accepted is finished, running, queued,
    preempted, aborted (its client went away) or (P/D) on its way between replicas, once each. AssertionError
    naming `where` and the counts when a request vanished or was counted twice."""
    held = completed + running + queued + preempted + moving + aborted
    assert held == accepted, (f"{where}: accepted {accepted} != done {completed} + running {running} + queued"
                              f" {queued} + preempted {preempted} + moving {moving} + aborted {aborted}")
