"""The step kinds of a lane: how one planned step is turned into a batch record, priced and applied.

Every kind does the same four things: it builds the step's batch record (engine.physics.batch.Batch) from the
running rows, has the lane price it (Lane.price: the step model's one entry point, StepModel.price), moves the
lane's clock, and applies the step (caches grow, tokens come out, first and first-visible times are stamped,
finished requests leave) before the lane accounts it. The kinds differ only in the batch they build and what
their tokens do, so each is a short function over the shared helpers here.

STEP_KINDS is the registry, in the order the lane tries them: the first whose `when` accepts the step's plan
runs it. A new kind is one StepKind added with `register` (docs/extending/step-kinds.md has the recipe).
The quiet-run jump (many decode steps priced in one call) is not a kind: it runs between ticks, see jump().
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from engine.physics.batch import Batch
from engine.physics.run_table import table_run
from engine.physics.specs import Model
from engine.physics.speculative import sample_accepted
from engine.physics.step import StepCost, StepModel, StepParts, _one_step, price_run
from engine.serving import admission, keying
from engine.serving.history import Growth, Run
from engine.serving.lora_slots import LoraSlots
from engine.serving.tables import BLOCK, SHIFT, FloatCol, IntCol, blocks_for

if TYPE_CHECKING:
    from engine.serving.lane import Lane, TickResult

_EMPTY = np.zeros(0, dtype=np.int64)
_EMPTY.flags.writeable = False
_FIRST_VISIBLE = slice(int(FloatCol.FIRST), int(FloatCol.VISIBLE) + 1)  # (plain ints: IntEnum indexes slower)
_THINK, _CACHED, _GEN, _BLOCKS = int(IntCol.THINK), int(IntCol.CACHED), int(IntCol.GEN), int(IntCol.BLOCKS)
_VISIBLE = int(FloatCol.VISIBLE)
_FIRST = int(FloatCol.FIRST)
_TOTAL = int(IntCol.TOTAL)
_INPUT, _PROMPT = int(IntCol.INPUT), int(IntCol.PROMPT)
assert (_THINK, _CACHED, _BLOCKS) == (int(IntCol.TOTAL) - 1, int(IntCol.TARGET) + 1, _GEN + 1)  # jump's one slice
_ADD = np.add.reduce  # an int array's sum: exact, as ndarray.sum (which calls it)
_MIN = np.minimum.reduce  # an array's least item, as ndarray.min (which calls it)
_FEW_ADMITTED = 4  # up to this many rows admitted in a join step are checked in Python lists
_FEW_STEPS_PY = 64  # runs priced up to this many steps find their arrival's step by bisect on a list
_FEW_ROWS = 16  # up to this many rows a quiet run's bounds are found in Python lists (numpy's per-call cost wins)
_RUN_AGGS = 8  # above this many rows (as Lane's _FEW_ROWS) a quiet run counts the lane's CacheAggs and keeps them
_FEW_TALLIED = 16  # CacheAggs.tally counts up to this many rows in Python
_FEW_INC = 4  # up to this many rows a join step adds its tokens and finish finds its finished rows by scalar reads
_FEW_RUN = 4  # up to this many rows (<= _RUN_AGGS) a quiet run reads and writes its rows' counts as Python ints
# The blocks quiet runs of one or two rows take (Growth), by the rows' steps to their next block: a key one of 16 lags
# (one row) or BLOCK + BLOCK * lag0 + lag1 (two rows). A Growth is immutable: runs share one (building one costs ~9k
# instructions, about a tenth of a lone row's run).
_GROWTHS: dict[int, Growth] = {}
_ROW0 = np.zeros(1, dtype=np.int64)  # the row numbers [0]: a lone row finishing a run
_ROW0.flags.writeable = False
_Ints = np.ndarray | list[int]  # a quiet run's rows' counts: views, or Python ints for a few rows
_Steps = tuple[np.ndarray, np.ndarray, np.ndarray]  # a quiet run's steps' times, FLOPs and bytes
_ONES = [np.ones(1 << 10, dtype=np.int64)]  # read-only 1s for TickResult counts, grown on demand
_ONES[0].flags.writeable = False
_NONE = [np.zeros(1 << 10, dtype=bool)]  # read-only Falses for new-block masks, grown on demand
_NONE[0].flags.writeable = False


def isum(a: np.ndarray) -> int:
    """The sum of an int array (exact either way): a Python sum for a few rows, where numpy's call costs more
    than the work."""
    return sum(a.tolist()) if a.size <= _FEW_ROWS else int(_ADD(a))  # (ndarray.sum's Python wrapper costs ~0.2 us)


def no_rows(n: int) -> np.ndarray:
    """n read-only False values: a decode plan's new-block mask when no row opens a block (a view of a shared
    array that doubles when a batch outgrows it)."""
    a = _NONE[0]
    if n > a.size:
        a = np.zeros(max(n, 2 * a.size), dtype=bool)
        a.flags.writeable = False
        _NONE[0] = a
    return a[:n]


def add_one(a: np.ndarray, n: int) -> None:
    """a[:n] += 1 (a field of a table): a few rows (a join step's one or two) by scalar writes, where a slice's += costs
    ~1.5 us."""
    if n <= _FEW_INC:
        for j in range(n):
            a[j] = a.item(j) + 1
    else:
        v = a[:n]
        v += 1


def ones(n: int) -> np.ndarray:
    """n read-only int64 ones (a view of a shared array that doubles when a batch outgrows it)."""
    a = _ONES[0]
    if n > a.size:
        a = np.ones(max(n, 2 * a.size), dtype=np.int64)
        a.flags.writeable = False
        _ONES[0] = a
    return a[:n]


class CacheAggs:
    """The running rows' cache total and how many hold each cache length mod BLOCK (those at 0 open a block with
    their next token), kept across decode and join steps and quiet runs of many rows: such a step then neither sums
    its caches nor masks and counts the rows opening a block (three numpy calls, ~2.5 us at 256 rows).

    `opens[(c - phase) mod BLOCK]` counts the rows holding c tokens, so a step adding one token to every row moves
    `phase` on by one rather than every count (a quiet run of k steps: by k). The counts hold while `at` is the (lane
    clock, running rows) they were left at (Lane.aggs counts them again otherwise): whatever else changes the running
    rows' caches moves the clock (a mixed or speculative step, any registered kind: each is a priced step) or the
    number of rows (a replica's transfer lands a row), or drops them (`at` None: a preemption, an abort, a plan of a
    few rows, which never reads them). Integer sums and counts: exact in any order, so a kept total is the sum
    counted again."""

    __slots__ = ("total", "opens", "phase", "at")

    def __init__(self) -> None:
        self.total = 0
        self.opens = [0] * BLOCK
        self.phase = 0
        self.at: tuple[float, int] | None = None

    def count(self, cached: np.ndarray, at: tuple[float, int]) -> None:
        """Count the aggregates of rows holding `cached` tokens afresh, valid at `at` (clock, rows)."""
        self.total = int(_ADD(cached))
        self.opens = np.bincount(cached & (BLOCK - 1), minlength=BLOCK).tolist()
        self.phase = 0
        self.at = at

    def need(self) -> int:
        """Rows whose next token opens a block (their cache a multiple of BLOCK)."""
        return self.opens[-self.phase & (BLOCK - 1)]

    def step(self, n: int, k: int = 1) -> None:
        """Each of the n rows added k tokens (one a step: a decode or join step, or a quiet run of k)."""
        self.total += n * k
        self.phase = (self.phase + k) & (BLOCK - 1)

    def lags(self) -> list[int]:
        """Rows by the steps to their next block: item j counts the rows whose cache + j is a multiple of BLOCK
        (cache = -j mod BLOCK, kept at opens[(-j - phase) mod BLOCK]): the reversed counts, rotated."""
        rev = self.opens[::-1]  # rev[i] = opens[BLOCK - 1 - i]: item j is rev[(j + phase - 1) mod BLOCK]
        s = (self.phase - 1) & (BLOCK - 1)
        return rev[s:] + rev[:s]

    def tally(self, cached: np.ndarray, sign: int) -> None:
        """Rows holding `cached` tokens join (sign 1) or leave (sign -1) the rows counted."""
        ph, opens = self.phase, self.opens
        if cached.size <= _FEW_TALLIED:  # (a tick's few admitted or finished rows: Python ints)
            total = self.total
            for v in cached.tolist():
                opens[(v - ph) & (BLOCK - 1)] += sign
                total += sign * v
            self.total = total
        else:
            cnt = np.bincount((cached - ph) & (BLOCK - 1), minlength=BLOCK).tolist()
            self.opens = [a + sign * b for a, b in zip(opens, cnt, strict=True)]
            self.total += sign * int(_ADD(cached))


class StepPlan(NamedTuple):
    """What the lane decided for this tick before any kind runs it: rows [0, n_run) were running, [n_run, n)
    were just admitted with `chunks` tokens each (`whole`: whole prompts from an empty cache)."""

    n_run: int
    n: int
    new: np.ndarray | None  # tokens each running row computes (None: one each, a pure decode)
    # With new None: the running rows whose next token opens a block. None from the built-in path for more than
    # lane._FEW_ROWS rows: the lane's CacheAggs are counted for them instead (run() makes it for a registered kind).
    nb: np.ndarray | None
    need: int  # blocks the running rows' growth takes this step
    chunks: np.ndarray  # tokens each admitted row prefills
    whole: bool
    tick: int
    admitted: np.ndarray  # ids admitted (for the TickResult)
    pre: np.ndarray  # ids preempted
    want: bool  # build a TickResult (False: a headless run reads totals only)


class StepKind(NamedTuple):
    """One kind of step: `when` says whether it runs a plan, `run` runs it (None when the plan wants no result)."""

    name: str
    when: Callable[[Lane, StepPlan], bool]
    run: Callable[[Lane, StepPlan], TickResult | None]


# ---- batch records: one builder per shape of batch ----------------------------------------------------------

def window(model: Model, cached: np.ndarray, new: np.ndarray | None = None) -> tuple[float, float]:
    """(sum_win, attn_win) of rows holding `cached` tokens that add `new` each (None: one each, a decode): what
    the model's sliding-window or chunked layers read and attend to. Zero for a model without local layers."""
    if model.sliding_layers <= 0:
        return 0.0, 0.0
    sum_win = float(model.local_seen(cached).sum())
    if new is None:  # a decode token sees local_seen(c) and half a pair on itself
        return sum_win, sum_win + 0.5 * cached.size
    return sum_win, float(model.local_pairs(cached, new).sum())


def decode_batch(model: Model, cached: np.ndarray, total: int | None = None) -> Batch:
    """Every row decodes one token on top of its cache (the attention sums are whole and half tokens); `total`: the
    caches' sum if kept (CacheAggs), else summed here."""
    n = cached.size
    sum_ctx = float(isum(cached) if total is None else total)
    attn = sum_ctx + 0.5 * n
    sum_win, attn_win = window(model, cached) if model.sliding_layers > 0 else (0.0, 0.0)  # (window's 0s, no call)
    # tuple.__new__ with every field (tokens, seqs, sum_ctx, sum_win, attn_full, attn_win, logits, attn_decode,
    # adapters), as join_batch
    return tuple.__new__(Batch, (n, n, sum_ctx, sum_win, attn, attn_win, n, attn, 0))


def join_batch(model: Model, dec: np.ndarray, chunks: np.ndarray, total: int | None = None) -> tuple[Batch, float]:
    """Running rows (caches `dec`, summing to `total` if kept, else summed here) decode one token each while admitted
    rows read whole prompts (`chunks`) from an empty cache: every row emits, so every row needs logits. Also the
    prefill rows' attention pairs (the step's cost rule charges them to input)."""
    n_run = dec.size
    k = chunks.size
    if total is None:  # (isum's answer for no row or one, without its call: an idle lane's join, or next to one)
        total = 0 if n_run == 0 else dec.item(0) if n_run == 1 else isum(dec)
    s_dec = float(total)
    if k == 1:  # the usual lone admitted row: its pairs as a Python float, as the few rows' sum of one term
        x = chunks.item(0)
        attn_pf = x * (x / 2)  # (a float: the sum of one term is it)
        t_pf = x
    elif k <= 8:  # a few admitted rows: Python floats, the same products
        cl = chunks.tolist()
        attn_pf = float(sum([x * (x / 2) for x in cl]))  # whole and half tokens: exact, in any order
        t_pf = sum(cl)
    else:
        nf = chunks.astype(np.float64)
        attn_pf = float((nf * (nf / 2)).sum())
        t_pf = int(chunks.sum())
    attn_dec = s_dec + 0.5 * n_run
    if model.sliding_layers > 0:
        sum_win, attn_win = window(model, dec)
        nf = chunks.astype(np.float64)
        attn_win += float(model.local_pairs(np.zeros(nf.size), nf).sum())
    else:  # (window's answer without its call)
        sum_win = attn_win = 0.0
    # tuple.__new__ with every field (tokens, seqs, sum_ctx, sum_win, attn_full, attn_win, logits, attn_decode,
    # adapters): a NamedTuple's own __new__ costs ~0.5 us more
    b = tuple.__new__(Batch, (t_pf + n_run, n_run + k, s_dec, sum_win, attn_dec + attn_pf, attn_win, n_run + k,
                              attn_dec, 0))
    return b, attn_pf


def mixed_batch(model: Model, cached: np.ndarray, new: np.ndarray, nf: np.ndarray, a: np.ndarray,
                decoding: np.ndarray, logits: int) -> Batch:
    """Rows add `new` tokens (float `nf`, pairs `a` = nf (cached + nf / 2)) on top of `cached`; rows in
    `decoding` are past their prompt; `logits` rows reach their target and emit."""
    sum_win, attn_win = window(model, cached, nf)
    return Batch(tokens=int(new.sum()), seqs=int(np.count_nonzero(new)), sum_ctx=float(cached.sum()),
                 sum_win=sum_win, attn_full=float(a.sum()), attn_win=attn_win, logits=logits,
                 attn_decode=float(a[decoding].sum()))


def verify_batch(model: Model, cached: np.ndarray, q: np.ndarray) -> Batch:
    """A speculative verify pass: each row computes q tokens (its drafts and one more) on top of its cache, every
    one of them scored (logits), all of them decode pairs (MLA's absorbed width)."""
    nf = q.astype(np.float64)
    tokens = int(q.sum())
    attn = float((nf * (cached + nf / 2)).sum())
    sum_win, attn_win = window(model, cached, nf)
    return Batch(tokens=tokens, seqs=cached.size, sum_ctx=float(cached.sum()), sum_win=sum_win, attn_full=attn,
                 attn_win=attn_win, logits=tokens, attn_decode=attn)


def run_batch(model: Model, cached: np.ndarray | list[int] | None, k: int, s0: int | None = None,
              n: int | None = None) -> Batch:
    """k decode steps in a row, as arrays: step j has every row j tokens further on and adds one each. Tokens
    and logits stay one float (every step has the same batch): the step model prices their terms once. `s0` and
    `n`: the caches' sum and count when the caller has them (engine.physics.run_table builds the same record from
    them); `cached` is then read by window layers only (None: a model without them)."""
    if n is None:
        n = cached.size  # type: ignore[union-attr]
    if s0 is None:
        s0 = int(np.add.reduce(cached))  # (the ufunc's own reduce: ndarray.sum's Python wrapper costs ~0.5 us more)
    # s0 + j n for j < k (n > 0: a run has rows), made as doubles (whole numbers below 2^53: exact)
    sum_ctx = np.arange(s0, s0 + k * n, n, dtype=np.float64)
    attn = sum_ctx + 0.5 * n
    if model.sliding_layers > 0:
        sum_win = window_sums(np.asarray(cached), k, int(model.sliding_window), model.chunked)
        attn_win = sum_win + 0.5 * n
    else:
        sum_win = attn_win = 0.0  # one float for every step: the window terms are not priced per step
    tok = float(n)
    # tuple.__new__ with every field (tokens, seqs, sum_ctx, sum_win, attn_full, attn_win, logits, attn_decode,
    # adapters): a NamedTuple's keyword __new__ costs ~0.5 us more
    return tuple.__new__(Batch, (tok, n, sum_ctx, sum_win, attn, attn_win, tok, attn, 0))


def window_sums(cached: np.ndarray, k: int, w: int, chunked: bool) -> np.ndarray:
    """Sum over rows of local_seen(cached + j) for j = 0..k-1, exactly (integers), without a k x rows matrix.

    A sliding window sees min(c, w) tokens; a chunked layer sees c mod w (closed form here for k <= w)."""
    j = np.arange(k)
    n = cached.size
    if chunked:
        r = np.sort(cached % w)
        # (r + j) mod w = r + j, less w for the rows that crossed into the next chunk (r >= w - j).
        crossed = n - np.searchsorted(r, w - j, side="left")
        return (int(r.sum()) + j * n - w * crossed).astype(np.float64)
    cs = np.sort(cached)
    below = np.searchsorted(cs, w - j, side="left")  # rows still inside the window: c + j < w
    prefix = np.concatenate(([0], np.cumsum(cs)))
    return (prefix[below] + j * below + (n - below) * w).astype(np.float64)


# ---- what every kind shares ---------------------------------------------------------------------------------

def stamp_visible(lane: Lane, n: int, gen: np.ndarray, emit: np.ndarray | None, t1: float) -> int:
    """Stamp t1 as the first visible token's time of rows whose hidden thinking just ended, and return the
    visible tokens the step emitted. `emit`: rows that emitted one token (None: every row did)."""
    c = lane.R.cols
    if emit is None:
        if lane.think_zero:  # nothing hidden: a row whose first token this is was stamped with it
            return n
        think = c.think[:n]
        vis = gen == think + 1
        if vis.any():
            c.visible[:n][vis] = t1
        return int(np.count_nonzero(gen > think))
    think = c.think[:n]
    vis = emit & (gen == think + 1)
    if vis.any():
        c.visible[:n][vis] = t1
    return int(np.count_nonzero(emit)) if lane.think_zero else int(np.count_nonzero(emit & (gen > think)))


def finish(lane: Lane, s: StepPlan, p: StepParts, tokens: int, n_emit: int, vis_tokens: int, t1: float,
           dt: float, ids: np.ndarray, counts: np.ndarray, inputs: tuple[int, int, float, float] = (0, 0, 0.0, 0.0),
           kept: bool = False) -> TickResult | None:
    """The end every kind shares: finished rows leave, the step is accounted (`inputs`: prompt tokens read
    for the first time, recomputed tokens, and the step's shares charged to input and cached input), and the
    TickResult is built when wanted. `kept`: the kind kept the lane's CacheAggs through the step (complete takes
    the finished rows out of them): they hold for the rows left, at the step's end."""
    n = s.n
    c = lane.R.cols
    # The finished rows' numbers, found once: complete takes them as they are (no mask counted, then searched again).
    if n <= _FEW_INC:  # a few rows (a join step's one or two): scalar reads, an array only for a finish
        gen, total = c.gen, c.total
        few = [j for j in range(n) if gen.item(j) >= total.item(j)]
        gone = np.array(few, dtype=np.int64) if few else _EMPTY
    else:
        gone = (c.gen[:n] >= c.total[:n]).nonzero()[0]
    completed = lane.complete(gone, t1) if gone.size else _EMPTY
    if kept:  # (the rows this step left, not R.n: a row landed meanwhile, by on_done, is not in the counts)
        lane.aggs.at = (t1, n - gone.size)
    in_new, recomputed, share_in, share_cached = inputs
    lane.account(p, tokens, n, n_emit, vis_tokens, in_new, recomputed, share_in, t1, dt, share_cached)
    return lane.result(s.tick, dt, ids, counts, s.admitted, s.pre, completed) if s.want else None


def fill_new_blocks(lane: Lane, n: int, cached: np.ndarray) -> None:
    """With shared content, key the blocks rows just filled (engine.serving.keying)."""
    if lane.shared_content:
        keying.fill(lane, np.flatnonzero((cached >> SHIFT) > lane.R.cols.full[:n]))


# ---- the kinds ----------------------------------------------------------------------------------------------

def decode_step(lane: Lane, s: StepPlan) -> TickResult | None:
    """A pure decode step: every running row adds one token on top of its cache."""
    n, need = s.n, s.need
    if need:  # (alloc(0) takes nothing)
        lane.pool.alloc(need)
    c = lane.R.cols
    cached = c.cached[:n]
    nb = s.nb
    aggs = lane.aggs if nb is None else None  # (no mask: the plan counted the lane's aggregates for these rows)
    dt, p = lane.price(decode_batch(lane.sm.model, cached, None if aggs is None else aggs.total))
    t1 = lane.advance(dt)
    gen = c.gen[:n]
    cached += 1
    gen += 1
    if aggs is not None:
        aggs.step(n)
        if need:  # the blocks of the rows just past a multiple of BLOCK (blocks_for: one more for them, as nb adds)
            blocks_for(cached, out=c.blocks[:n])
    elif need:  # (nb has no row set otherwise)
        blocks = c.blocks[:n]
        blocks += nb
    if lane.shared_content:
        keying.fill(lane, np.flatnonzero((cached & (BLOCK - 1)) == 0))  # rows whose last block just filled
    ids = c.id[:n].copy() if s.want else _EMPTY
    vis_tokens = n if lane.think_zero else stamp_visible(lane, n, gen, None, t1)  # (its answer with nothing hidden)
    lane.stats.itl.add(dt, c.stage[:n] if lane.staged else 0, n)  # every row had its first token already
    return finish(lane, s, p, n, n, vis_tokens, t1, dt, ids, ones(n) if s.want else _EMPTY, kept=aggs is not None)


def join_step(lane: Lane, s: StepPlan) -> TickResult | None:
    """mixed_step's common case on fewer and smaller arrays: the running rows [0, n_run) all decode and the rows
    just admitted [n_run, n) read their whole prompt from an empty cache, so every row emits.

    Same aggregates as mixed_step (its sums are of whole and half tokens, exact in any order), same updates.
    """
    n_run, n, chunks, need = s.n_run, s.n, s.chunks, s.need
    if need:  # (alloc(0) takes nothing)
        lane.pool.alloc(need)
    c = lane.R.cols
    cached = c.cached  # (the whole field: its slices below are views of the table)
    # No mask with running rows: the plan counted the lane's aggregates for them (with none, nothing was counted).
    aggs = lane.aggs if s.nb is None and n_run else None
    b, attn_pf = join_batch(lane.sm.model, cached[:n_run], chunks, None if aggs is None else aggs.total)
    dt, p = lane.price(b)
    in_new, recomputed, share_in = _join_inputs(lane, s, p, b, attn_pf)
    t1 = lane.advance(dt)
    if lane.stats.preemptions:
        lane.end_recomputes(~np.isnan(c.mark[:n]), t1)  # every row emits: recomputes that end with this step
    if n_run:
        if aggs is not None:
            dec = cached[:n_run]
            dec += 1
            aggs.step(n_run)
            if need:  # the blocks of the rows just past a multiple of BLOCK (blocks_for: one more for them)
                blocks_for(dec, out=c.blocks[:n_run])
        else:
            add_one(cached, n_run)
            if need:  # (nb has no row set otherwise)
                blocks = c.blocks[:n_run]
                blocks += s.nb
    if n - n_run == 1:
        cached[n_run] = chunks.item(0)
    else:
        cached[n_run:n] = chunks
    if aggs is not None:
        aggs.tally(chunks, 1)  # the admitted rows now hold their prompts
    if lane.shared_content:
        fill_new_blocks(lane, n, cached[:n])
    add_one(c.gen, n)
    gen = c.gen[:n]
    n_first, first = _stamp_first(lane, n_run, n, gen, t1)
    vis_tokens = n if lane.think_zero else stamp_visible(lane, n, gen, None, t1)  # (its answer with nothing hidden)
    _join_itl(lane, n_run, n, n_first, first, dt)
    ids = c.id[:n].copy() if s.want else _EMPTY
    lane.n_pf = 0
    return finish(lane, s, p, b.tokens, n, vis_tokens, t1, dt, ids, ones(n) if s.want else _EMPTY,
                  (in_new, recomputed, share_in, 0.0), aggs is not None)


def join_lone(lane: Lane, n_run: int, chunk: int, need: int, tick: int, admitted: np.ndarray,
              want: bool) -> TickResult | None:
    """join_step, and the finish after it, of the usual join at low load on Python numbers: at most one running row
    (decoding, n_run 0 or 1, its next token opening `need` blocks) and the one row admission.admit_lone just admitted
    reading its whole prompt (`chunk` tokens) from an empty cache; a model whose steps price straight to _one_step
    (StepModel.plain). Lane.step calls it in place of a StepPlan run through run, join_step, join_batch, Lane.price,
    _join_inputs, _join_shares, _stamp_first and finish: their operations on these rows in the same order
    (tests/engine/test_lone_join.py runs with it off and checks every step against them)."""
    if need:  # (alloc(0) takes nothing)
        lane.pool.alloc(need)
    sm = lane.sm
    c = lane.R.cols
    ci = c.i
    n = n_run + 1
    # join_batch: the running row decodes one token, the admitted one's pairs are a float (the sum of one term)
    s_dec = float(ci.item(_CACHED, 0)) if n_run else 0.0
    attn_dec = s_dec + 0.5 * n_run
    attn_pf = chunk * (chunk / 2)
    tokens = chunk + n_run
    attn_full = attn_dec + attn_pf
    b = tuple.__new__(Batch, (tokens, n, s_dec, 0.0, attn_full, 0.0, n, attn_dec, 0))
    p = _one_step(sm, sm._c, float(tokens), n, s_dec, 0.0, attn_full, 0.0, attn_dec)  # (StepModel.price's own call)
    lane.priced = partial(sm.record, b, p)  # (Lane.price without adapters)
    dt = p.time
    # _join_inputs and _join_shares of one admitted row
    was = ci.item(_INPUT, n_run)
    in_new = max(min(chunk, ci.item(_PROMPT, n_run)), was) - was
    if in_new:
        ci[_INPUT, n_run] = was + in_new
    ftot = p.flops_total
    part = p.fl_mm * chunk / tokens
    if attn_full:
        part += p.fl_attn * attn_pf / attn_full
    part += p.fl_lm * 1 / n
    share_in = part / ftot if ftot else 0.0
    t1 = lane.clock + dt  # (Lane.advance)
    lane.clock = t1
    if lane.stats.preemptions:
        lane.end_recomputes(~np.isnan(c.mark[:n]), t1)  # every row emits: recomputes that end with this step
    if n_run:
        ci[_CACHED, 0] = ci.item(_CACHED, 0) + 1
        if need:  # (the plan's mask: the row opens a block)
            ci[_BLOCKS, 0] = ci.item(_BLOCKS, 0) + 1
        ci[_GEN, 0] = ci.item(_GEN, 0) + 1
    ci[_CACHED, n_run] = chunk
    gen = ci.item(_GEN, n_run) + 1
    ci[_GEN, n_run] = gen
    return _lone_end(lane, n_run, gen, tokens, p, (in_new, chunk - in_new, share_in), t1, dt, tick, admitted, want)


def _lone_end(lane: Lane, n_run: int, gen: int, tokens: int, p: StepParts, inputs: tuple[int, int, float], t1: float,
              dt: float, tick: int, admitted: np.ndarray, want: bool) -> TickResult | None:
    """join_lone's second half: join_step's stamps and inter-token latencies for the admitted row (`gen` tokens
    now), then finish (finished rows leave, the step is accounted, the TickResult built when wanted)."""
    c = lane.R.cols
    n = n_run + 1
    if gen == 1:  # _stamp_first's usual lone new row
        c.f[_FIRST, n_run] = t1
        if lane.think_zero:  # nothing hidden: the first token is the first visible one
            c.f[_VISIBLE, n_run] = t1
        n_first, first = 1, None
    else:
        n_first, first = _stamp_first(lane, n_run, n, c.gen[:n], t1)
    vis_tokens = n if lane.think_zero else stamp_visible(lane, n, c.gen[:n], None, t1)
    _join_itl(lane, n_run, n, n_first, first, dt)
    ids = c.id[:n].copy() if want else _EMPTY
    ci = c.i
    few = [j for j in range(n) if ci.item(_GEN, j) >= ci.item(_TOTAL, j)]
    completed = lane.complete(np.array(few, dtype=np.int64), t1) if few else _EMPTY
    in_new, recomputed, share_in = inputs
    lane.account(p, tokens, n, n, vis_tokens, in_new, recomputed, share_in, t1, dt, 0.0)
    return lane.result(tick, dt, ids, ones(n), admitted, _EMPTY, completed) if want else None


def _join_itl(lane: Lane, n_run: int, n: int, n_first: int, first: np.ndarray | None, dt: float) -> None:
    """A join step's inter-token gaps: the tokens after a request's first (their gap is this step), every decode
    row's and a recomputed row's. `first` marks the admitted rows (from n_run) whose first token this is, as
    _stamp_first gives it (None: every admitted row's); join_step's and join_lone's alike."""
    if lane.staged:
        st = lane.R.cols.stage[:n]
        lane.stats.itl.add(dt, st[:n_run] if first is None else np.concatenate([st[:n_run], st[n_run:][~first]]),
                           n - n_first)
    else:
        lane.stats.itl.add(dt, 0, n - n_first)


def _join_inputs(lane: Lane, s: StepPlan, p: StepParts, b: Batch, attn_pf: float) -> tuple[int, int, float]:
    """A join step's prompt tokens read for the first time, recomputed ones and prefill's share of the time."""
    n_run, n, chunks = s.n_run, s.n, s.chunks
    c = lane.R.cols
    # Prompt tokens read for the first time are input; re-reading after a preemption is recompute.
    if n - n_run == 1:  # one admitted row (the usual join): its three fields as ints
        was = c.input.item(n_run)
        now = max(min(chunks.item(0), c.prompt.item(n_run)), was)
        in_new = now - was
        if in_new:
            c.input[n_run] = now
        return _join_shares(s, p, b, attn_pf, in_new)
    inp = c.input[n_run:n]
    if n - n_run <= _FEW_ADMITTED:  # the usual one or two admitted rows: Python ints (numpy's five calls cost more)
        was = inp.tolist()
        now = [max(min(x, p), i) for x, p, i in zip(chunks.tolist(), c.prompt[n_run:n].tolist(), was,
                                                         strict=True)]
        in_new = sum(now) - sum(was)
        if in_new:
            inp[:] = now
    else:
        gained = np.maximum(np.minimum(chunks, c.prompt[n_run:n]) - inp, 0)
        in_new = int(gained.sum())
        inp += gained
    return _join_shares(s, p, b, attn_pf, in_new)


def _join_shares(s: StepPlan, p: StepParts, b: Batch, attn_pf: float, in_new: int) -> tuple[int, int, float]:
    """_join_inputs' result: `in_new` prompt tokens read for the first time, the rest of the prefill recomputed,
    and prefill's share of the step's time."""
    n_run, n = s.n_run, s.n
    t_pf = b.tokens - n_run
    # mixed_step's cost rule: prefill's share of the step's FLOPs is charged to input tokens.
    ftot = p.flops_total
    part = p.fl_mm * t_pf / b.tokens
    if b.attn_full:
        part += p.fl_attn * attn_pf / b.attn_full
    part += p.fl_lm * (n - n_run) / n
    return in_new, t_pf - in_new, part / ftot if ftot else 0.0


def _stamp_first(lane: Lane, n_run: int, n: int, gen: np.ndarray, t1: float) -> tuple[int, np.ndarray | None]:
    """Stamp t1 as the first token's time of admitted rows [n_run, n) whose first token this is (`gen` 1 after the
    step: not a recomputed row), and as the first visible one with nothing hidden; returns how many and which (None:
    every admitted row)."""
    c = lane.R.cols
    k = n - n_run
    if k == 1 and gen.item(n_run) == 1:  # the usual lone new row: two fields of one row (scalar writes)
        c.first[n_run] = t1
        if lane.think_zero:  # nothing hidden: the first token is the first visible one
            c.visible[n_run] = t1
        return 1, None
    # A few admitted rows are checked in Python (one call, against numpy's compare and count on a 1-row array).
    first = None if k <= _FEW_ADMITTED and gen[n_run:].tolist().count(1) == k else gen[n_run:] == 1
    n_first = k if first is None else int(np.count_nonzero(first))
    if n_first == k:  # (the common case, every admitted row new: slices, not masks)
        if lane.think_zero:  # nothing hidden: the first token is the first visible one
            c.f[_FIRST_VISIBLE, n_run:n] = t1
        else:
            c.first[n_run:n] = t1
        return k, None
    assert first is not None
    if n_first:
        c.first[n_run:n][first] = t1
        if lane.think_zero:
            c.visible[n_run:n][first] = t1
    return n_first, first


def mixed_step(lane: Lane, s: StepPlan) -> TickResult | None:
    """A step with prefill in it: `new` tokens per row on top of its cache; rows reaching their target emit."""
    new, need, n = _mixed_plan(lane, s)
    lane.pool.alloc(need)
    c = lane.R.cols
    cached = c.cached[:n]
    target = c.target[:n]
    pf = cached < target
    fresh_end = cached + new
    emit = (fresh_end >= target) & (new > 0)
    nf = new.astype(np.float64)
    a = nf * (cached + nf / 2)
    b = mixed_batch(lane.sm.model, cached, new, nf, a, ~pf, int(np.count_nonzero(emit)))
    t_step, p = lane.price(b)
    inputs = _mixed_inputs(lane, n, new, fresh_end, pf, emit, nf, a, p, b)
    dt, inputs = _with_load(lane, t_step, inputs)
    t1 = lane.advance(dt)
    if lane.stats.preemptions:
        lane.end_recomputes(emit & ~np.isnan(c.mark[:n]), t1)  # rows whose recompute ends with this step
    # Apply: caches grow, tokens come out, first-token times are stamped.
    gen = c.gen[:n]
    cached[:] = fresh_end
    c.blocks[:n] = blocks_for(fresh_end)
    fill_new_blocks(lane, n, fresh_end)
    gen += emit
    first = emit & (gen == 1)
    if first.any():
        c.first[:n][first] = t1
    vis_tokens = stamp_visible(lane, n, gen, emit, t1)
    ids = c.id[:n][emit]  # (a copy: a mask picks)
    later = emit & (gen > 1)  # tokens after a request's first: their gap is this step
    lane.stats.itl.add(dt, c.stage[:n][later] if lane.staged else 0, int(np.count_nonzero(later)))
    lane.n_pf = int(np.count_nonzero(cached < target))
    n_emit = len(ids)
    return finish(lane, s, p, b.tokens, n_emit, vis_tokens, t1, dt, ids, ones(n_emit), inputs)


def _mixed_plan(lane: Lane, s: StepPlan) -> tuple[np.ndarray, int, int]:
    """The tokens every row computes in a mixed step, the blocks the running rows take and the batch size."""
    need, new = s.need, s.new
    if s.n > s.n_run:
        if new is None and lane.spec_k:
            # Prefill joins: this step is a plain mixed step, decode rows verify nothing (one token each).
            need = int(np.count_nonzero((lane.R.cols.cached[:s.n_run] & (BLOCK - 1)) == 0))
        new = np.concatenate([ones(s.n_run) if new is None else new, s.chunks])
    assert new is not None
    return new, need, s.n


def _mixed_inputs(lane: Lane, n: int, new: np.ndarray, fresh_end: np.ndarray, pf: np.ndarray, emit: np.ndarray,
                  nf: np.ndarray, a: np.ndarray, p: StepParts, b: Batch) -> tuple[int, int, float, float]:
    """A mixed step's prompt tokens read for the first time, recomputed ones, and the shares of its time charged
    to input and to cached input.

    Cost rule: a step's time is split between prefill and decode by each side's share of the step's FLOPs.
    Every token passes through the same weights, so the matmuls (and the weight read they share) go by token
    count; attention goes to whoever attends; the LM head to whoever needs logits. Prefill time is then charged
    to input tokens, decode time to output. Prompt tokens that came from the prefix cache cost only the
    attention that reads them: that part of the prefill rows' attention is charged to cached input.
    """
    c = lane.R.cols
    cached = c.cached[:n]
    # Prompt tokens read for the first time are input; re-reading after a preemption is recompute.
    reach = np.minimum(fresh_end, c.prompt[:n])
    inp = c.input[:n]
    gained = np.maximum(reach - inp, 0)
    in_new = int(gained.sum())
    inp += gained
    t_pf = int(new[pf].sum())
    share_in = share_cached = 0.0
    if t_pf:
        ftot = p.flops_total
        attn, logits = b.attn_full, b.logits
        part = p.fl_mm * t_pf / b.tokens
        if attn:
            part += p.fl_attn * float(a[pf].sum()) / attn
            if lane.caching:
                reads = float((nf[pf] * np.minimum(c.hit[:n][pf], cached[pf])).sum())
                share_cached = p.fl_attn * reads / attn / ftot if ftot else 0.0
        if logits:
            part += p.fl_lm * int(np.count_nonzero(emit & pf)) / logits
        share_in = part / ftot - share_cached if ftot else 0.0
    return in_new, t_pf - in_new, share_in, share_cached


def _with_load(lane: Lane, t_step: float, inputs: tuple[int, int, float, float],
               ) -> tuple[float, tuple[int, int, float, float]]:
    """The step's time with the host-to-GPU copies of its cache hits (the step waits for them; the copy is
    cached input's cost), and its input shares rescaled to that time."""
    if not lane.load_s:
        return t_step, inputs
    in_new, recomputed, share_in, share_cached = inputs
    load, lane.load_s = lane.load_s, 0.0
    dt = t_step + load
    f = t_step / dt
    return dt, (in_new, recomputed, share_in * f, share_cached * f + load / dt)


def spec_step(lane: Lane, s: StepPlan) -> TickResult | None:
    """A speculative decode step: the drafter proposes K tokens per row, one verify pass computes K+1 on top of
    each cache, each row keeps its accepted run plus one token, and the rejected drafts' KV is rolled back."""
    n, need = s.n, s.need
    lane.pool.alloc(need)
    c = lane.R.cols
    K = lane.spec_k
    cached = c.cached[:n]
    gen = c.gen[:n]
    q = np.minimum(K + 1, c.total[:n] - gen)  # a row near its end verifies only what it still writes
    b = verify_batch(lane.sm.model, cached, q)
    t_step, p = lane.price(b)
    dt = t_step + lane.spec.drafter.time(n, b.sum_ctx)  # type: ignore[union-attr]
    t1 = lane.advance(dt)
    acc = sample_accepted(lane.spec_rng, n, K, lane.spec.spec_accept)
    emitted = np.minimum(acc + 1, q)
    before = gen.copy()
    cached += emitted
    gen += emitted
    held = int(c.blocks[:n].sum()) + need  # what the verify pass held (its K+1 tokens' blocks)
    c.blocks[:n] = blocks_for(cached)
    lane.pool.give(held - int(c.blocks[:n].sum()))  # the rejected drafts' blocks go back
    fill_new_blocks(lane, n, cached)
    # Several tokens a row: the first visible one comes out in this step if thinking ends inside the run.
    think = c.think[:n]
    vis = (before <= think) & (gen > think)
    if vis.any():
        c.visible[:n][vis] = t1
    n_out = int(emitted.sum())
    vis_tokens = int((gen - np.maximum(before, think)).clip(0).sum())
    st = lane.stats
    st.spec_steps += n
    st.spec_tokens += n_out
    st.itl.add(dt, c.stage[:n] if lane.staged else 0, n)  # a row's tokens of one step arrive together
    ids = c.id[:n].copy() if s.want else _EMPTY
    counts = emitted.copy() if s.want else _EMPTY
    return finish(lane, s, p, b.tokens, n_out, vis_tokens, t1, dt, ids, counts)


# ---- quiet runs: many decode steps at once -------------------------------------------------------------------

def jump(lane: Lane, stop: float, max_steps: int) -> int:
    """Run up to `max_steps` decode steps at once while none of them can meet an event; returns how many ran
    (0: the next step is not quiet, take it with Lane.step).

    Quiet means: every row decodes (no prefill), no step starts at or after the next arrival or `stop`, no
    waiting request can be admitted (admission is monotone in free blocks, and they only shrink), and the
    pool holds every new block (no preemption). The steps are priced in one call (a Batch of arrays), or read from
    a price table (price_quiet); completions end the run (the last step may finish requests). Counts, clocks and
    the per-tick history come out exactly as step() by step() would give them (the same aggregates, and sums taken
    in the same order). A run of up to _FEW_RUN rows (a replica at low load holds one or two) reads its rows' counts
    as Python ints, in one call, and writes them back item by item (_apply_run): numpy's calls on views of a row or
    two cost more than the work."""
    if lane.join_next:  # the last run drew a request into the queue: the next tick admits it, a step (and were it
        lane.join_next = False  # blocked after all, a step gives what a run would: the skip never changes a figure)
        return 0
    n, t0 = lane.R.n, lane.clock
    if n == 0 or lane.n_pf or max_steps < 2 or lane.spec_k:
        return 0
    nxt = lane.source.next_time  # (Lane.next_arrival's property unread) read once: a run draws none before its cut
    if nxt <= t0:
        return 0
    queue = lane.waiting  # the same until the run's arrival or completions (neither happens before they are noted)
    if queue and not admission.blocked(lane, lane.pool.available - n, n, False):
        return 0  # a request waits that joins the next step even if every row opens a block (the usual case)
    c = lane.R.cols
    if n <= _FEW_RUN:  # (the int fields think .. blocks are consecutive: one slice, one tolist)
        think, total, _, cached, gen, _ = c.i[_THINK:_BLOCKS + 1, :n].tolist()
    else:  # views of the running rows, sliced once
        think, cached, gen, total = None, c.cached[:n], c.gen[:n], c.total[:n]
    k, grown, left, s0 = _quiet_blocks(lane, max_steps, queue, (cached, gen, total))
    if k < 2 or grown is None:
        return 0
    b, p, got = price_quiet(lane, s0, n, k, cached)
    st = lane.stats
    sums = fold_run((t0, st.busy_s, st.charge_out_s, st.flops, st.flops_useful, st.bytes), got)
    clock = sums[0]  # step j runs clock[j] -> clock[j + 1]
    k, k_arr = cut_at_arrival(lane, nxt, clock, k, stop)
    if k < 2:
        return 0
    # The steps' times, FLOPs and bytes (views: sliced only for a run cut short) and the doubles they keep alive: a
    # price table's views their own (its step model keeps the table), a pricing's all it priced (history_run).
    priced = len(got[0])
    steps = got + (priced,) if k == priced else (got[0][:k], got[1][:k], got[2][:k], k if type(b) is int else priced)
    used0 = lane.pool.used
    _apply_run(lane, k, clock, grown.after(k), (think, cached, gen))
    if lane.async_sched:
        lane.chosen_at = clock.item(k - 1)  # the last jumped step's start
    if k_arr < k:  # the run's last step starts after the arrival: it joins the queue then, as step() draws it
        _arrive_in_run(lane, clock.item(k_arr))
        lane.join_next = lane.waiting > queue  # (2,540 of 7,737 jump attempts at rate 10 asked admission to learn it)
    # A row finishes in the run only if its last step is the run's: k reached the fewest tokens left (a lone row: 0).
    done = None if k != left else _ROW0 if n == 1 else _finished(total, gen, k)
    _account_run(lane, k, clock, steps, sums[:, k].tolist(), (used0, grown), done, (k_arr, queue))
    if lane.lora is not None:
        lb = np.broadcast_to(np.asarray(p.lora_bytes, dtype=np.float64), np.shape(p.time))[:k]
        lane.lora.step(b.adapters, k, float(lb.sum()), float(steps[2].sum()))
    # The last step, priced alone if someone reads last_cost (a fleet's replicas run many short runs: none do).
    lane.priced = partial(last_of_run, lane.sm, b, k - 1, n)
    lane.stats.last_batch = n
    return k


def price_quiet(lane: Lane, s0: int, n: int, k: int, cached: np.ndarray | list[int] | None,
                ) -> tuple[Batch | int, StepParts | None, _Steps]:
    """A quiet run's k steps of n rows whose caches sum to s0, priced: (its record, its parts, the steps' times,
    FLOPs and bytes). Read from a price table (engine.physics.run_table: the same
    doubles, read-only) where one serves it, the record then the run's start sum (last_of_run prices the last step
    from it) and no parts; else run_batch's record priced. jump and open_loop's stretch both price their runs here.
    `cached`: the rows' caches, which window layers read (None where they are not at hand, as in open_loop's
    stretch: a model without window layers there, and no adapters)."""
    lora = lane.lora
    if lora is None:
        got = table_run(lane.sm, s0, n, k)
        if got is not None:
            return s0, None, got
    b = run_batch(lane.sm.model, cached, k, s0, n)
    if lora is not None:  # no admission in a quiet run: the same adapters every step
        b = b._replace(adapters=int(LoraSlots.in_batch(lane.R.cols.adapter[:n]).size))
    p = price_run(lane.sm, b)
    return b, p, (p.time, p.flops_total, p.bytes_total)


def cut_at_arrival(lane: Lane, nxt: float, clock: np.ndarray, k: int, stop: float) -> tuple[int, int]:
    """How many of a quiet run's k steps (starting at clock[:-1]) run before the next arrival (at `nxt`) or `stop`,
    and the first step starting at or after the arrival (k when none does).

    Under async scheduling a step's batch was chosen when the step before it started, so a request arriving
    during step j - 1 cannot join step j: step j still decodes the same rows, with the request waiting in the
    queue. The run then takes that step too (the arrival is drawn at its start), instead of ending a step early
    and leaving it to step(). Never past `stop`.
    """
    cut = starts_before(clock, k, stop if stop < nxt else nxt)  # (min(nxt, stop), without min's keyword parsing)
    if cut >= k:
        return k, k
    if lane.async_sched and nxt <= stop and clock[cut] < stop:
        return cut + 1, cut
    return cut, k


def starts_before(clock: np.ndarray, k: int, t: float) -> int:
    """How many of the k step starts clock[:k] (non-decreasing) come before t: np.searchsorted's side='left'."""
    if k and clock.item(k - 1) < t:  # every start (the usual run, which a completion ends): no search
        return k
    if k <= _FEW_STEPS_PY:  # a short run: bisect on a list (~1 us less than numpy's call and slice)
        return bisect.bisect_left(clock.tolist(), t, 0, k)
    return int(clock[:k].searchsorted(t))  # (the method: np.searchsorted's wrapper costs ~0.5 us more)


def _arrive_in_run(lane: Lane, t: float) -> None:
    """Requests due by t (the start of a run's last step) join the queue, as step() would draw them. If they are
    the first to share content (Lane.note_content), step() would have keyed the blocks the last step filled:
    so are they here (the run's earlier steps filled theirs with nothing shared, unkeyed)."""
    was = lane.shared_content
    lane.draw_due(t)
    if lane.shared_content and not was:
        cached = lane.R.cols.cached[:lane.R.n]  # (after the run: no row has left yet)
        keying.fill(lane, np.flatnonzero((cached & (BLOCK - 1)) == 0))


def last_of_run(sm: StepModel, b: Batch | int, last: int, n: int) -> StepCost:
    """The StepCost of step `last` of a run priced as one record `b` (built only when last_cost is read), or read
    from a price table (`b` the run's start sum s0: run_batch's record has sum_ctx s0 + j n, attention pairs
    sum_ctx + 0.5 n, no window terms, no adapters)."""
    if type(b) is int:
        s = float(b + last * n)
        at = s + 0.5 * n
        return sm.cost(Batch(tokens=n, seqs=n, sum_ctx=s, sum_win=0.0, attn_full=at, attn_win=0.0, logits=n,
                             attn_decode=at, adapters=0))
    win = (0.0, 0.0) if isinstance(b.sum_win, float) else (float(b.sum_win[last]), float(b.attn_win[last]))
    at = float(b.attn_full[last])
    return sm.cost(Batch(tokens=n, seqs=n, sum_ctx=float(b.sum_ctx[last]), sum_win=win[0], attn_full=at,
                         attn_win=win[1], logits=n, attn_decode=at, adapters=b.adapters))


def _quiet_blocks(lane: Lane, max_steps: int, waiting: int, rows: tuple[_Ints, _Ints, _Ints],
                  ) -> tuple[int, Growth | None, int, int]:
    """How many decode steps may run before a completion, an admission or a preemption could happen (< 2: not
    worth a jump), the blocks the run takes step by step, the fewest tokens a row has left (the steps until the
    first completion) and the caches' sum (the run's start, which prices it). `waiting`: the requests waiting
    (none: nobody can be admitted); `rows`: the running rows' caches, generated and total tokens (views, or Python
    ints for up to _FEW_RUN rows)."""
    cached, gen, total = rows
    n = len(cached)
    # The first step finishing a request ends the run. (Conditional expressions for min() of two: in this
    # interpreter min parses its keywords on every call, ~0.1 us; the same result, ties to the first.)
    if type(cached) is list:
        left = total[0] - gen[0] if n == 1 else min(map(operator.sub, total, gen))
    elif n <= _FEW_ROWS:  # a few rows: Python ints, cheaper than numpy's calls
        left = min(map(operator.sub, total.tolist(), gen.tolist()))
    else:
        left = int(_MIN(total - gen))
    k = left if left < max_steps else max_steps
    model = lane.sm.model
    if model.sliding_layers and model.chunked:
        k = min(k, int(model.sliding_window))  # window_sums' closed form holds for k <= the chunk
    if k < 2:
        return 0, None, left, 0
    # Blocks: a row opens one at each step j where its cache (cached + j) is a multiple of 16, i.e. at the steps
    # j = lag (mod 16) with lag = -cached mod 16.
    aggs, at = lane.aggs, (lane.clock, n)
    growth = key = None
    if aggs.at == at or n > _RUN_AGGS:  # the lane's counts, kept by its steps (counted here for more rows: the run
        if aggs.at != at:  # keeps them, so the step after it need not)
            aggs.count(np.asarray(cached), at)  # (an array already unless _RUN_AGGS < _FEW_RUN, as tests set it)
        opens = aggs.lags()
        s0 = aggs.total  # (a kept total is the sum counted again: integers)
    else:
        cl = cached if type(cached) is list else cached.tolist()
        if n == 1:  # (a replica at low load: its blocks' pattern is one of 16, one of 256 for two rows, kept)
            s0 = cl[0]
            key = -s0 & (BLOCK - 1)
            growth = _GROWTHS.get(key)
        elif n == 2:
            c0, c1 = cl
            s0 = c0 + c1
            key = BLOCK + (-c0 & (BLOCK - 1)) * BLOCK + (-c1 & (BLOCK - 1))
            growth = _GROWTHS.get(key)
        else:
            s0 = sum(cl)
        if growth is None:
            opens = [0] * BLOCK
            for x in cl:
                opens[(-x) & (BLOCK - 1)] += 1
    if growth is None:  # (tuple.__new__: a NamedTuple's own __new__ costs more)
        growth = tuple.__new__(Growth, (n, tuple(itertools.accumulate(opens, initial=0))))
        if key is not None:
            _GROWTHS[key] = growth
    avail = lane.pool.available  # a dry admission check takes no blocks: read once
    if waiting and not admission.blocked(lane, avail - growth.prefix[1], n, False):  # (prefix[1]: rows opening a
        return 0, None, left, s0  # block in the first step)
    return growth.cut(k, avail), growth, left, s0  # (cached blocks are reclaimed before anyone is preempted)


def _apply_run(lane: Lane, k: int, clock: np.ndarray, grown: int,
               rows: tuple[list[int] | None, _Ints, _Ints]) -> None:
    """Caches and generated counts move k on; visible answers start where they start (step j ends at
    clock[j + 1]); blocks are taken. `rows`: the running rows' thinking tokens, caches and generated counts: views
    (moved on in place; the thinking tokens None, read here), or Python ints as they were before the run for up to
    _FEW_RUN rows (written back here item by item, blocks_for's integer rule on each)."""
    think, cached, gen = rows
    n = lane.R.n
    c = lane.R.cols
    if type(cached) is list:
        i, vis = c.i, lane.think_zero
        vis_tokens = n * k
        for j in range(n):
            v, g = cached[j] + k, gen[j]
            i[_CACHED, j] = v
            i[_GEN, j] = g + k
            i[_BLOCKS, j] = (v + BLOCK - 1) >> SHIFT
            if not vis:  # (as the arrays' rule below, one row at a time)
                jv = think[j] - g  # type: ignore[index]
                if 0 <= jv < k:
                    c.f[_VISIBLE, j] = clock.item(jv + 1)
                vis_tokens -= min(max(jv, 0), k)
        lane.pool.alloc(grown)
        if lane.shared_content:
            fill_new_blocks(lane, n, c.cached[:n])
        lane.stats.visible_tokens += vis_tokens
        return
    if lane.think_zero:
        vis_tokens = n * k
    else:
        jv = c.think[:n] - gen  # the step at whose end a row's first visible token comes out
        now = (jv >= 0) & (jv < k)
        if now.any():
            c.visible[:n][now] = clock[jv[now] + 1]
        vis_tokens = int((k - np.clip(jv, 0, k)).sum())
    cached += k
    gen += k
    blocks_for(cached, out=c.blocks[:n])
    lane.pool.alloc(grown)
    fill_new_blocks(lane, n, cached)
    lane.stats.visible_tokens += vis_tokens


def _finished(total: _Ints, gen: _Ints, k: int) -> np.ndarray:
    """The rows a run of k steps finishes (k their fewest tokens left): a mask of the views (gen moved on already),
    or the row numbers of a few rows' Python ints (gen as before the run; one row: a shared read-only [0])."""
    if type(gen) is list:
        rows = [j for j, (t, g) in enumerate(zip(total, gen, strict=True)) if g + k >= t]
        return _ROW0 if rows == [0] else np.array(rows, dtype=np.int64)
    return gen >= total  # type: ignore[operator]


def _account_run(lane: Lane, k: int, clock: np.ndarray, steps: tuple[np.ndarray, np.ndarray, np.ndarray, int],
                 totals: list[float], used: tuple[int, Growth], done: np.ndarray | None,
                 queue: tuple[int, int]) -> None:
    """Account each of the k steps as Lane.account would, in the same order, then let the rows `done` leave
    (None: no row finished). `steps`: the steps' times, FLOPs and bytes, and the doubles they keep alive (k for
    views of a price table, else how many steps were priced: k or more); `totals`: the clock and the five running
    totals after them (fold_run's column k). `queue`: (j, w) the steps before step j saw w requests waiting (an
    arrival drawn at step j's start)."""
    n = lane.R.n
    st = lane.stats
    dts, flops, byts = steps[:3]
    # The ITL sum is exact (accounting.fixed_sum): the run's steps go in at once, wherever the run starts and ends.
    st.itl.add_steps(dts, lane.R.cols.stage[:n] if lane.staged else 0, n, steps[3])
    t0 = lane.clock  # (the run's start: the clock moves only here)
    lane.clock, st.busy_s, st.charge_out_s, st.flops, st.flops_useful, st.bytes = totals
    t1 = totals[0]
    st.ticks += k
    st.out_tokens += n * k
    mb = st.max_batch
    st.batch_hist[mb if mb < n else n] += k  # (min(n, mb), without min's keyword parsing)
    aggs = lane.aggs
    kept = aggs.at == (t0, n)  # the lane's cache counts, kept through the run (complete takes the finished rows out)
    if kept:
        aggs.step(n, k)
    gone = 0 if done is None else lane.complete(done, t1).size  # (some row is done: k was its tokens left)
    if kept:  # (the rows the run left, not R.n: a row landed meanwhile, by on_done, is not in the counts)
        aggs.at = (t1, n - gone)
    history_run(lane, n, k, t0, steps, used, queue)
    if lane.rec is not None:
        lane.rec.steps(lane, clock[1:k + 1], dts, n, byts, flops)  # (the steps' ends)


def fold_run(start: tuple[float, ...], steps: _Steps) -> np.ndarray:
    """The running sums of a run's steps (`steps`: their times, FLOPs and bytes, as price_quiet gives them), one row
    each from its start: the clock (start[0] + times), then the five totals Lane.account adds to (busy and
    output-charged seconds += times, FLOPs and useful FLOPs += FLOPs, bytes += bytes). np.add.accumulate is a left
    fold, as the clock and the totals move step by step (numpy's sum would pair the terms up): column j holds each
    after j steps. One buffer and one accumulate for the six (rather than one for the clock and one for the
    totals): a run's arrays are short, numpy's per-call cost is what counts."""
    dts, flops, byts = steps
    fold = np.empty((6, len(dts) + 1))
    fold[:, 0] = start
    fold[0:3, 1:] = dts
    fold[3:5, 1:] = flops
    fold[5, 1:] = byts
    return np.add.accumulate(fold, axis=1, out=fold)


def history_run(lane: Lane, n: int, k: int, t0: float, steps: tuple[np.ndarray, np.ndarray, np.ndarray, int],
                 used: tuple[int, Growth], queue: tuple[int, int]) -> None:
    """The run's k rows (steps of n rows) of the per-tick history, noted as the arrays they come from and built
    when read (engine.serving.history): as account's push_row would have written them one by one. `t0`: the clock
    before the run (the steps' ends are folded again from it when read); `used`: the pool's used blocks before the
    run and the blocks it had taken after each step. The arrays are views of the pricing's (or of a price table, which
    its step model keeps), copied if they keep far more alive (steps[3]: a run priced far past its cut), so a
    pending run pins about its own rows."""
    pool = lane.pool
    dts, flops, byts, held = steps
    if held > 4 * k + 64:
        dts, flops, byts = dts.copy(), flops.copy(), byts.copy()
    # tuple.__new__ with every field (a NamedTuple's __new__ costs ~0.4 us more)
    lane.stats.hist.push_run(tuple.__new__(Run, (t0, dts, flops, byts, used[0], used[1], pool.total, pool.util,
                                                 lane.waiting, queue, n)))


# ---- the registry -------------------------------------------------------------------------------------------

def _joins(lane: Lane, s: StepPlan) -> bool:
    """The common mixed step: every running row decodes, every admitted row reads its whole prompt."""
    return s.n > s.n_run and s.whole and s.new is None and not lane.spec_k and not lane.load_s


def _verifies(lane: Lane, s: StepPlan) -> bool:
    """Speculative decoding with nothing admitted and nothing prefilling."""
    return s.n == s.n_run and s.new is None and lane.spec_k > 0


def _decodes(lane: Lane, s: StepPlan) -> bool:
    """Every row decodes one token, nothing admitted."""
    return s.n == s.n_run and s.new is None


STEP_KINDS: list[StepKind] = [
    StepKind("join", _joins, join_step),
    StepKind("spec", _verifies, spec_step),
    StepKind("decode", _decodes, decode_step),
    StepKind("mixed", lambda lane, s: True, mixed_step),  # anything with prefill in it: the general case
]


_BUILT_IN = list(STEP_KINDS)  # the kinds above, in their order (run picks among them by the plan's shape)


def built_in_only() -> bool:
    """Whether the step kinds are the built-in ones alone: the stretches (engine.serving.saturated, open_loop)
    take the built-in kinds' steps themselves, so a registered kind turns them off."""
    return STEP_KINDS == _BUILT_IN


def register(kind: StepKind, before: str = "mixed") -> None:
    """Add a step kind, tried just before the kind named `before` (mixed, the general case, stays last)."""
    if any(k.name == kind.name for k in STEP_KINDS):
        raise ValueError(f"a step kind named {kind.name!r} is registered already")
    STEP_KINDS.insert(next(i for i, k in enumerate(STEP_KINDS) if k.name == before), kind)


def unregister(name: str) -> None:
    """Remove a registered step kind (tests register toy kinds and take them out again)."""
    STEP_KINDS[:] = [k for k in STEP_KINDS if k.name != name]


def run(lane: Lane, s: StepPlan) -> TickResult | None:
    """Run the plan with the first kind that takes it. With the built-in kinds alone, a plan with no prefill
    planned and no speculation goes straight to decode (nothing admitted) or join (whole prompts, nothing loaded
    from a tier): what their `when`s answer, without asking each in turn (tests/engine/test_batch_record.py
    checks the two agree)."""
    if STEP_KINDS == _BUILT_IN and s.new is None and not lane.spec_k:  # (a list compares its items by identity
        if s.n == s.n_run:  # first: four reads)
            return decode_step(lane, s)
        if s.whole and not lane.load_s:
            return join_step(lane, s)
    if s.nb is None and s.new is None and s.n_run and STEP_KINDS != _BUILT_IN:  # a registered kind may read the
        s = s._replace(nb=(lane.R.cols.cached[:s.n_run] & (BLOCK - 1)) == 0)  # mask (docs/extending/step-kinds.md)
    for _, when, go in STEP_KINDS:
        if when(lane, s):
            return go(lane, s)
    raise AssertionError("no step kind takes this plan")  # mixed takes every plan
