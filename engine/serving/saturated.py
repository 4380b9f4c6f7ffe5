"""Saturated stretches: many join and decode steps of a full batch planned on Python ints, applied to the tables once.

A saturated closed loop (every user re-sends at once, a queue hundreds long, the batch at its cap) runs a join step
nearly every tick: ~1 row finishes, ~1 queued request joins. Step by step each costs table moves, array updates and
~20 calls for a few rows' worth of change. Here the steps are planned on Python ints instead, while nothing can
happen that the plan cannot decide: every running row decodes (no prefill in progress), admission reads only the
queue rows there at the stretch's start (users who finish re-send to the queue's tail, behind them), and no step
preempts. Each step is priced and accounted as Lane.step would (the same batch record, the same float operations in
the same order); the tables, the pool and the finished rows' records are then brought to the state step by step
would leave: the rows present throughout gain K tokens, the finished ones leave in the order they finished (the
order of their records and of their users' think draws), the admitted ones join in admission order behind them.

Only the plain case is taken (one lane, headless, the built-in step kinds, whole-prompt admission, no speculation,
LoRA, tiers, recorder, script, Poisson arrivals, hidden thinking, shared content or preempted rows);
anything else, or a stretch that would end at once, leaves the tick to Lane.step. ENABLED off (tests) turns it off.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from engine.physics.batch import Batch
from engine.serving import lane as lane_mod
from engine.serving import steps
from engine.serving.steps import CacheAggs, StepPlan
from engine.serving.tables import BLOCK, SHIFT, FloatCol, IntCol, Rows

if TYPE_CHECKING:
    from engine.physics.step import StepModel, StepParts
    from engine.serving.lane import Lane

ENABLED = True  # tests turn it off to compare every figure with step-by-step runs
_MIN_QUEUE = 4  # fewer queued requests: the stretch would end within a step or two (not worth its set-up)
_WINDOW = 256  # queue rows read at a stretch's start: it ends before admission would look past them
_EMPTY = np.zeros(0, dtype=np.int64)
_I = {c: int(c) for c in IntCol}  # (plain ints index faster than IntEnum members)
_CACHED, _GEN, _BLOCKS, _SEQ, _INPUT = _I[IntCol.CACHED], _I[IntCol.GEN], _I[IntCol.BLOCKS], _I[IntCol.SEQ], \
    _I[IntCol.INPUT]
_ADMIT, _FIRST, _VISIBLE, _DONE = int(FloatCol.ADMIT), int(FloatCol.FIRST), int(FloatCol.VISIBLE), \
    int(FloatCol.DONE)


def eligible(lane: Lane) -> bool:
    """The plain saturated case a stretch handles (cheapest tests first: most lanes fail on the queue)."""
    Q = lane.Q
    if Q.n - Q.head < _MIN_QUEUE or lane.n_pf or lane.P.n or lane.spec_k or lane.load_s:
        return False
    if lane.lora is not None or lane.rec is not None or lane.on_done is not None or lane.staged:
        return False
    if not lane.think_zero or lane.shared_content or lane.spec.debug or steps.STEP_KINDS != steps._BUILT_IN:
        return False
    src = lane.source
    if src.script is not None or src.arrivals.rate > 0:
        return False
    pool, sched = lane.pool, lane.sched
    if pool.tiers is not None or pool.keyed_used or (lane.caching and pool.cached):
        return False
    if not sched.whole_prompts or not sched.admits_while_running() or lane.sm.model.sliding_layers > 0:
        return False
    R = lane.R
    # (a recompute after a preemption ends with the row's first step: none is under way with nothing prefilling)
    return R.n > 0 and not (lane.stats.preemptions and not np.isnan(R.cols.mark[:R.n]).all())


def stretch(lane: Lane, stop: float, max_steps: int) -> int:
    """Run up to `max_steps` saturated steps starting before `stop` at once; returns how many ran (0: none, take
    the tick with Lane.step)."""
    if not ENABLED or max_steps < 2 or not eligible(lane):
        return 0
    t0 = lane.clock
    if lane.source.next_time <= t0:  # the first step's arrivals, drawn as Lane.step draws them
        lane._arrive(t0)
    s = _Stretch(lane)
    if not s.fresh_queue():
        return 0
    k = s.plan(stop, max_steps)
    if k:
        s.apply()
    return k


class _Stretch:
    """One stretch: the plan's state on Python ints, its per-step records, and their application."""

    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        R, Q = lane.R, lane.Q
        n = R.n
        c = R.cols
        self.n0 = n
        self.h0 = Q.head
        self.w_end = min(Q.n, Q.head + _WINDOW)  # queue rows the plan may admit: [h0, w_end)
        cached = c.cached[:n]
        self.aggs = CacheAggs()
        self.aggs.count(cached, None)  # type: ignore[arg-type]
        left = c.total[:n] - c.gen[:n]
        order = np.argsort(left, kind="stable")  # rows by the step they finish in, ties in row order
        self.fin_rows = order.tolist()
        self.fin_step = (left[order] - 1).tolist()
        self.users = c.user[:n].tolist()
        self.cached0 = cached.tolist()
        self.fp = 0  # finished rows planned so far (a prefix of fin_rows)

    def fresh_queue(self) -> bool:
        """The window's queue rows are new requests (nothing generated, read or preempted): their first step is a
        join reading the whole prompt, and their first token is their first."""
        q = self.lane.Q.cols
        h, e = self.h0, self.w_end
        if (q.gen[h:e].any() or q.input[h:e].any() or q.preempts[h:e].any()
                or (q.target[h:e] != q.prompt[h:e]).any() or not np.isnan(q.admit[h:e]).all()):
            return False
        self.tg = q.target[h:e].tolist()
        self.arr = q.arrival[h:e].tolist()
        self.tot = q.total[h:e].tolist()
        self.qusers = q.user[h:e].tolist()
        return True

    # ---- the plan: step by step on Python ints ----------------------------------------------------------------
    def plan(self, stop: float, max_steps: int) -> int:
        """Plan, price and account steps while each is decided (see the module's doc); returns how many."""
        self._begin()
        lane = self.lane
        sm, st, pool, aggs, keyed = lane.sm, lane.stats, lane.pool, self.aggs, lane.pool.keyed_used
        t, chosen, n_run, kmax = lane.clock, lane.chosen_at, self.n0, max_steps
        bud = lane.source.budget
        room = math.inf if bud.limit is None else bud.limit - bud.accepted
        itl, push = st.itl, st.hist.push_row
        j = 0
        while j < kmax and t < stop and n_run:
            if j:  # the sends due by this step's start join the queue's tail (drawn for real at the end)
                sp = bisect.bisect_right(self.sends, t, self.sp) if room else self.sp  # (none drawn past the limit)
                if sp > self.sp and self.drawn + sp - self.sp >= room:
                    break  # the run's last request would be drawn: the sends after it wait, never drawn
                self.drawn += sp - self.sp
                self.sp = sp
            need = aggs.need()
            free = pool.total - self.private - keyed - need
            if free < 0:
                break  # the step would preempt
            chunks = self._admit(t, n_run, free, t if chosen is None else chosen, j)
            if chunks is None:
                break  # admission would look past the window, or an admitted row would finish in the stretch
            chosen = t if lane.async_sched else None
            k = len(chunks)
            self.private += need
            if self.private + keyed > self.peak:
                self.peak = self.private + keyed
            b, p, in_new, recomputed, share_in = _price(sm, n_run, chunks, aggs.total)
            dt = p.time
            t1 = t + dt
            aggs.step(n_run)
            for x in chunks:  # (CacheAggs.tally on ints: the admitted rows now hold their prompts)
                aggs.opens[(x - aggs.phase) & (BLOCK - 1)] += 1
                aggs.total += x
            itl.add(dt, 0, n_run)  # every running row's token follows another; the admitted rows' are first
            n = n_run + k
            n_run = n - self._complete(j, t1)
            self._account(p, b.tokens, n, in_new, recomputed, share_in, t1, dt, push, keyed)
            self.starts.append(t)
            self.ends.append(t1)
            self.adm_steps += [j] * k
            kmax = min(kmax, self.kmax_adm) if k else kmax
            self.last = (b, p)
            self.drawn_done = self.drawn
            t = t1
            j += 1
        self.t, self.chosen, self.k = t, chosen, j
        return j

    def _begin(self) -> None:
        """The plan's counters at the stretch's start: the pool's, the queue's, the sends due later (the users
        already thinking: their sends are drawn at the steps' starts too) and the lane's float totals."""
        lane = self.lane
        st, pool, a = lane.stats, lane.pool, lane.source.arrivals
        self.private, self.peak = pool.private, pool.peak
        self.qsize0 = lane.Q.n - self.h0
        at = a._send_at
        self.h, self.drawn, self.sp, self.drawn_done = self.h0, 0, 0, 0
        self.sends = sorted([x for x, u in a._sends if at[u] == x])
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.adm_steps: list[int] = []
        self.sums = [st.busy_s, st.charge_in_s, st.charge_cached_s, st.charge_out_s, st.flops, st.flops_useful,
                     st.bytes]
        self.in_tokens = self.out_tokens = 0
        self.hist_n: dict[int, int] = {}
        self.last: tuple[Batch, StepParts] | None = None

    def _admit(self, t: float, n_run: int, free: int, cut: float, j: int) -> list[int] | None:
        """admission.admit's answer for step j (whole prompts, from the queue's head; `cut`: the async scheduling
        cut): the admitted prompts, their blocks taken. None: the plan cannot decide it (the candidates reach past
        the window) or an admitted row would finish within the stretch."""
        sched = self.lane.sched
        lo = self.h - self.h0
        qsize = self.qsize0 - lo + self.drawn
        slots = sched.max_batch - n_run
        if qsize <= 0 or slots <= 0:
            return []  # (admission.closed)
        mq = min(slots, qsize)
        if self.h + mq > self.w_end:
            return None
        if cut < t:  # those that arrived by the cut (the queue is in arrival order)
            mq = bisect.bisect_right(self.arr, cut, lo, lo + mq) - lo
            if not mq:
                return []
        tg = self.tg[lo:lo + mq]
        chunks: list[int] = []
        took = 0
        fits = [sched.admit_one(tg[0], n_run, False)] if mq == 1 else sched.admit_few(tg, n_run, False)
        for c, ok in fits:  # the leading run that fits the budget and, block counts added up, the free blocks
            nb = (c + BLOCK - 1) >> SHIFT
            if not ok or took + nb > free:
                break
            chunks.append(c)
            took += nb
        if not chunks:
            return chunks
        if chunks != tg[:len(chunks)]:
            return None  # (a policy that splits a prompt: never with whole_prompts)
        tot = self.tot
        fin = min([tot[lo + i] for i in range(len(chunks))]) - 1  # steps until an admitted row finishes
        if fin < 1:
            return None
        self.kmax_adm = j + fin
        self.h += len(chunks)
        self.private += took
        return chunks

    def _complete(self, j: int, t1: float) -> int:
        """The rows finishing with step j (at t1) leave the plan's counts and wake their users (Lane.complete's
        grouping: one row by wake_one, several by wake); returns how many."""
        fin_step, fp = self.fin_step, self.fp
        if fp >= len(fin_step) or fin_step[fp] != j:
            return 0
        aggs = self.aggs
        gone = []
        while fp < len(fin_step) and fin_step[fp] == j:
            r = self.fin_rows[fp]
            v = self.cached0[r] + j + 1  # its cache after the step
            aggs.opens[(v - aggs.phase) & (BLOCK - 1)] -= 1
            aggs.total -= v
            self.private -= (v + BLOCK - 1) >> SHIFT
            gone.append(self.users[r])
            fp += 1
        k = fp - self.fp
        self.fp = fp
        src = self.lane.source
        if k == lane_mod._ONE_ROW:
            src.wake_one(gone[0], t1)
        else:
            src.wake(np.array(gone, dtype=np.int64), t1)
        at = src.arrivals._send_at
        for u in gone:  # their next sends, for the draws at the next steps' starts
            if 0 <= u < len(at) and at[u] != math.inf:
                bisect.insort(self.sends, at[u])
        return k

    def _account(self, p: StepParts, tokens: int, n: int, in_new: int, recomputed: int, share_in: float, t1: float,
                 dt: float, push: Callable[[tuple[float, ...]], None], keyed: int) -> None:
        """Lane.account's float sums (the same operations in the same order, on locals written back at the end)
        and its history row; the counts are summed and written at the end."""
        s = self.sums
        s[0] += dt
        c_in = dt * share_in
        c_cached = dt * 0.0
        s[1] += c_in
        s[2] += c_cached
        s[3] += dt - c_in - c_cached
        ftot = p.flops_total
        s[4] += ftot
        useful = ftot * (1.0 - recomputed / tokens) if recomputed else ftot
        s[5] += useful
        b = p.bytes_total
        s[6] += b
        self.hist_n[n] = self.hist_n.get(n, 0) + 1
        self.out_tokens += n
        self.in_tokens += in_new
        total = self.lane.pool.total
        waiting = self.qsize0 - (self.h - self.h0) + self.drawn
        push((t1, dt, (self.private + keyed) / total if total else 0.0, waiting, n, n, in_new, c_in, dt - c_in,
              useful, b))

    # ---- the tables, once -------------------------------------------------------------------------------------
    def apply(self) -> None:
        """Bring the lane to the state the planned steps leave (see the module's doc)."""
        lane, K = self.lane, self.k
        R, Q, st = lane.R, lane.Q, lane.stats
        c = R.cols
        n0, C = self.n0, self.fp
        if C:  # the finished rows as Lane.complete takes them, in the order they finished
            idx = np.array(self.fin_rows[:C], dtype=np.int64)
            di, df = c.i.take(idx, axis=1), c.f.take(idx, axis=1)
            grown = np.array(self.fin_step[:C], dtype=np.int64) + 1
            di[_CACHED] += grown
            di[_GEN] += grown
            di[_BLOCKS] = (di[_CACHED] + BLOCK - 1) >> SHIFT
            df[_DONE] = np.array(self.ends)[grown - 1]
        cached = c.cached[:n0]
        cached += K
        c.gen[:n0] += K
        np.add(cached, BLOCK - 1, out=c.blocks[:n0])
        c.blocks[:n0] >>= SHIFT
        if C:
            R.drop(np.sort(idx))
        A = self.h - self.h0
        if A:
            self._join(A, K)
        lane.clock, lane.chosen_at = self.t, self.chosen
        lane.aggs.at = None  # (the lane's aggregates are counted again at the next plan)
        pool = lane.pool
        pool.private, pool.peak = self.private, self.peak
        st.ticks += K
        st.out_tokens += self.out_tokens
        st.visible_tokens += self.out_tokens  # (nothing hidden: every token is visible)
        st.in_tokens += self.in_tokens
        st.busy_s, st.charge_in_s, st.charge_cached_s, st.charge_out_s, st.flops, st.flops_useful, st.bytes = \
            self.sums
        mb = st.max_batch
        for n, m in self.hist_n.items():
            st.batch_hist[n if n <= mb else mb] += m
        b, p = self.last  # type: ignore[misc]
        st.last_batch = b.seqs
        lane.priced = partial(lane.sm.record, b, p)
        if C:
            st.completed += C
            st.stage_done[0] += C
            st.finish(Rows(di, df))
        if K > 1 and lane.source.next_time <= self.starts[-1]:  # the sends drawn at the later steps' starts
            lane._arrive(self.starts[-1])
        assert Q.n - Q.head == self.qsize0 - A + self.drawn_done, "saturated stretch: draws out of step"

    def _join(self, A: int, K: int) -> None:
        """The A admitted rows join R behind the rows left, with what their join step and the steps after it gave
        them (admission's seq, blocks and time; the join's cache, input and first token; K - j - 1 more tokens)."""
        lane = self.lane
        R, Q = lane.R, lane.Q
        m = R.n
        R.append_buf(Q.cols.b[:, self.h0:self.h0 + A])
        Q.pop(A)
        c = R.cols
        ja = np.array(self.adm_steps, dtype=np.int64)
        tg = np.array(self.tg[:A], dtype=np.int64)
        rows = slice(m, m + A)
        c.i[_SEQ, rows] = np.arange(lane.seq, lane.seq + A)
        lane.seq += A
        c.i[_CACHED, rows] = tg + (K - 1 - ja)
        c.i[_GEN, rows] = K - ja
        c.i[_BLOCKS, rows] = (c.i[_CACHED, rows] + BLOCK - 1) >> SHIFT
        c.i[_INPUT, rows] = tg
        c.f[_ADMIT, rows] = np.array(self.starts)[ja]
        ends = np.array(self.ends)[ja]
        c.f[_FIRST, rows] = ends
        c.f[_VISIBLE, rows] = ends


def _price(sm: StepModel, n_run: int, chunks: list[int], total: int) -> tuple[Batch, StepParts, int, int, float]:
    """A step's batch record and its price, with what Lane.account reads of a join (steps._join_inputs: prompt
    tokens read for the first time, recomputed ones, the share of the time charged to input; none for a decode)."""
    b, attn_pf = _batch(n_run, chunks, total)
    p = sm.price(b)
    if not chunks:
        return b, p, 0, 0, 0.0
    k = len(chunks)
    plan = tuple.__new__(StepPlan, (n_run, n_run + k, None, None, 0, _EMPTY, True, 0, _EMPTY, _EMPTY, False))
    in_new, recomputed, share_in = steps._join_shares(plan, p, b, attn_pf, sum(chunks))  # (fresh rows: all input)
    return b, p, in_new, recomputed, share_in


def _batch(n_run: int, chunks: list[int], total: int) -> tuple[Batch, float]:
    """The step's batch record as steps.join_batch (admitted `chunks`) or steps.decode_batch (none) build it for
    running rows caching `total` tokens, no local layers; and the prefill rows' attention pairs."""
    s_dec = float(total)
    attn_dec = s_dec + 0.5 * n_run
    k = len(chunks)
    if not k:
        return tuple.__new__(Batch, (n_run, n_run, s_dec, 0.0, attn_dec, 0.0, n_run, attn_dec, 0)), 0.0
    if k == 1:
        x = chunks[0]
        attn_pf = x * (x / 2)
    else:  # whole and half tokens: exact in any order (join_batch's numpy sum for many rows gives the same)
        attn_pf = float(sum([x * (x / 2) for x in chunks]))
    t_pf = sum(chunks)
    return tuple.__new__(Batch, (t_pf + n_run, n_run + k, s_dec, 0.0, attn_dec + attn_pf, 0.0, n_run + k, attn_dec,
                                 0)), attn_pf
