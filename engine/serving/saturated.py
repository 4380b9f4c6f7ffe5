"""Saturated stretches: many join and decode steps of a full batch planned on Python ints, applied to the tables once.

A saturated closed loop (every user re-sends at once, a queue hundreds long, the batch at its cap) runs a join step
nearly every tick: ~1 row finishes, ~1 queued request joins. Step by step each costs table moves, array updates and
~20 calls for a few rows' worth of change. Here the steps are planned on Python ints instead, while nothing can
happen that the plan cannot decide: every running row decodes (no prefill in progress), admission reads only the
queue rows there at the stretch's start (users who finish re-send to the queue's tail, behind them), and no step
preempts. Each step is priced and accounted as Lane.step would (the same batch record, the same float operations in
the same order); the tables, the pool and the finished rows' records are then brought to the state step by step
would leave: the rows present throughout gain K tokens, the finished ones leave in the order they finished (the
order of their records and of their users' think draws), the admitted ones join in admission order behind them (and
leave again if they finished within the stretch). The steps are planned first (who joins, who finishes, the blocks:
no time enters), then priced in one StepModel.price call on arrays, then their clock, draws, wakes and accounts run.
A stretch ends before a step that would preempt, whose admission could reach past the queue rows read at its start,
that starts a long quiet gap (steps.jump takes those), that draws the run's last request, or that starts at `stop`.

Only the plain case is taken (one lane, headless, the built-in step kinds, whole-prompt admission, no speculation,
LoRA, tiers, recorder, script, Poisson arrivals, hidden thinking, shared content or preempted rows);
anything else, or a stretch that would end at once, leaves the tick to Lane.step. ENABLED off (tests) turns it off.
"""

from __future__ import annotations

import bisect
import heapq
import math
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from engine.physics.batch import Batch
from engine.serving import admission, steps
from engine.serving import lane as lane_mod
from engine.serving.steps import CacheAggs
from engine.serving.tables import BLOCK, SHIFT, FloatCol, IntCol, Rows

if TYPE_CHECKING:
    from engine.serving.accounting import LaneStats
    from engine.serving.lane import Lane
    from engine.serving.tables import TableRows

ENABLED = True  # tests turn it off to compare every figure with step-by-step runs
_MIN_QUEUE = 4  # fewer queued requests: the stretch would end within a step or two (not worth its set-up)
_WINDOW = 256  # queue rows read at a stretch's start: it ends before admission would look past them
# A stretch ends where nobody can join for this many steps or more (no slot frees until a row finishes): a quiet
# run prices such steps at once for less than this many planned and accounted one by one.
_QUIET_GAP = 32
_I = {c: int(c) for c in IntCol}  # (plain ints index faster than IntEnum members)
_CACHED, _GEN, _BLOCKS, _SEQ, _INPUT = _I[IntCol.CACHED], _I[IntCol.GEN], _I[IntCol.BLOCKS], _I[IntCol.SEQ], \
    _I[IntCol.INPUT]
_TOTAL = _I[IntCol.TOTAL]
_ADMIT, _FIRST, _VISIBLE, _DONE = int(FloatCol.ADMIT), int(FloatCol.FIRST), int(FloatCol.VISIBLE), \
    int(FloatCol.DONE)


def eligible(lane: Lane) -> bool:
    """The plain saturated case a stretch handles (cheapest tests first: most lanes fail on the queue)."""
    Q, src = lane.Q, lane.source
    if Q.n - Q.head < _MIN_QUEUE or lane.n_pf or lane.P.n or src.arrivals.rate > 0 or src.script is not None:
        return False  # (an open loop's overloaded queue: the arrivals the plan does not count)
    if lane.on_done is not None or (lane.caching and lane.pool.cached):
        return False
    return lane.R.n > 0 and plain(lane)


def plain(lane: Lane) -> bool:
    """What both stretches (this module's and engine.serving.open_loop's) ask of a lane besides their own case: its
    steps are the built-in kinds' plain ones the stretches take themselves (no speculation, tier loads, LoRA,
    recorder, stages, hidden thinking, shared content or debug checks; no KV tiers or keyed blocks; whole prompts
    admitted while rows run; no window layers) and no recompute after a preemption is under way (one ends with the
    row's first step: none is with nothing prefilling)."""
    if lane.spec_k or lane.load_s or lane.lora is not None or lane.rec is not None or lane.staged:
        return False
    if not lane.think_zero or lane.shared_content or lane.spec.debug or not steps.built_in_only():
        return False
    pool, sched = lane.pool, lane.sched
    if pool.tiers is not None or pool.keyed_used:
        return False
    if not sched.whole_prompts or not sched.admits_while_running() or lane.sm.model.sliding_layers > 0:
        return False
    R = lane.R
    return not (lane.stats.preemptions and not np.isnan(R.cols.mark[:R.n]).all())


def stretch(lane: Lane, stop: float, max_steps: int) -> int:
    """Run up to `max_steps` saturated steps starting before `stop` at once; returns how many ran (0: none, take
    the tick with Lane.step)."""
    if not ENABLED or max_steps < 2 or not eligible(lane):
        return 0
    t0 = lane.clock
    if lane.source.next_time <= t0:  # the first step's arrivals, drawn as Lane.step draws them
        lane.draw_due(t0)
    s = _Stretch(lane)
    if not s.fresh_queue():
        return 0
    k = s.plan(stop, max_steps)
    if k:
        s.apply()
    return k


def running(lane: Lane) -> tuple[CacheAggs, list[int], list[int], list[int]]:
    """The running rows as a stretch starts from them: their cache aggregates, their row numbers in the order they
    finish (ties in row order), the step each finishes with (0: the stretch's first) and their caches."""
    R = lane.R
    n = R.n
    c = R.cols
    cached = c.cached[:n]
    aggs = CacheAggs()
    aggs.count(cached, None)  # type: ignore[arg-type]
    left = c.total[:n] - c.gen[:n]
    order = np.argsort(left, kind="stable")  # rows by the step they finish in, ties in row order
    return aggs, order.tolist(), (left[order] - 1).tolist(), cached.tolist()


def fresh(q: Rows, h: int, e: int) -> bool:
    """Whether queue rows [h, e) (columns `q`) are new requests (nothing generated, read or preempted): their first
    step is a join reading the whole prompt, and their first token is their first."""
    return e <= h or not (q.gen[h:e].any() or q.input[h:e].any() or q.preempts[h:e].any()
                          or (q.target[h:e] != q.prompt[h:e]).any() or not np.isnan(q.admit[h:e]).all())


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
        self.aggs, self.fin_rows, self.fin_step, self.cached0 = running(lane)
        self.users = c.user[:n].tolist()
        self.fp = 0  # finished rows planned so far (a prefix of fin_rows)
        self.h = self.h0  # the next queue row to admit
        self.t0 = lane.clock

    def fresh_queue(self) -> bool:
        """The window's queue rows are new requests (nothing generated, read or preempted): their first step is a
        join reading the whole prompt, and their first token is their first."""
        q = self.lane.Q.cols
        h, e = self.h0, self.w_end
        if not fresh(q, h, e):
            return False
        self.tg = q.target[h:e].tolist()
        self.arr = q.arrival[h:e].tolist()
        self.tot = q.total[h:e].tolist()
        self.qusers = q.user[h:e].tolist()
        return True

    # ---- the plan: which rows join and leave at each step, on Python ints ---------------------------------------
    def plan(self, stop: float, max_steps: int) -> int:
        """Plan the steps (_plan_steps), price them in one call (_price_all), then run their clock and account them
        (_run): returns how many ran."""
        if self._plan_steps(max_steps) == 0:
            return 0
        self._price_all()
        return self._run(stop)

    def _plan_steps(self, kmax: int) -> int:
        """Who joins and who finishes at each step while each is decided (see the module's doc), and the blocks the
        steps take and give back: times play no part (the queue rows the plan admits arrived by its start, so the
        async cut of every step after the first admits them all). Returns how many steps were planned."""
        lane = self.lane
        pool, aggs = lane.pool, self.aggs
        keyed = pool.keyed_used
        private, peak = pool.private, pool.peak
        # per step: rows running, cache total before it, rows admitted, their prompts' tokens and attention pairs
        n_runs, totals, ks, tpf, apf = self.n_runs, self.totals, self.ks, self.tpf, self.apf = [], [], [], [], []
        self.chunks: list[list[int]] = []
        # per step, after it: (rows present at the start finished so far, queue rows admitted, private blocks, peak,
        # rows finished so far, admitted rows finished so far)
        after = self.after = []
        self.adm_fin: dict[int, list[int]] = {}  # step -> admitted rows (window offsets) finishing with it
        self.adm_steps: list[int] = []  # its steps, a heap
        self.adm_at: list[int] = []  # per admitted row, its step
        self.adm_done: list[int] = []  # admitted rows finished, in order
        self.order: list[int] = []  # every row finished, in order: fin_rows' position, or -1 - an admitted row's
        self.done_users: list[int] = []  # their users
        n_run, j = self.n0, 0
        cut = lane.clock if lane.chosen_at is None else lane.chosen_at
        while j < kmax and n_run:
            need = aggs.need()
            free = pool.total - private - keyed - need
            if free < 0:
                break  # the step would preempt
            got = self._admit(n_run, free, cut, j)
            if got is None:
                break  # admission would look past the window
            chunks, took = got
            if j and not chunks and self._quiet_ahead(j) >= _QUIET_GAP:
                break  # nobody joins until a row finishes, far ahead: a quiet run (steps.jump) takes those steps
            cut = math.inf  # (every later step's cut is past the window rows' arrivals)
            private += took + need
            if private + keyed > peak:
                peak = private + keyed
            n_runs.append(n_run)
            totals.append(aggs.total)
            aggs.step(n_run)
            self.chunks.append(chunks)
            ks.append(len(chunks))
            if chunks:
                for x in chunks:  # (CacheAggs.tally on ints: the admitted rows now hold their prompts)
                    aggs.opens[(x - aggs.phase) & (BLOCK - 1)] += 1
                    aggs.total += x
                tpf.append(sum(chunks))
                apf.append(float(sum([x * (x / 2) for x in chunks])))  # (halves: exact in any order)
            else:
                tpf.append(0)
                apf.append(0.0)
            gone, freed = self._finish(j)
            private -= freed
            n_run += len(chunks) - gone
            after.append((self.fp, self.h, private, peak, len(self.order), len(self.adm_done)))
            j += 1
        return j

    def _admit(self, n_run: int, free: int, cut: float, j: int) -> tuple[list[int], int] | None:
        """admission.admit's answer for step j (whole prompts, from the queue's head; `cut`: the async scheduling
        cut): the admitted prompts and the blocks they take. None: the plan cannot decide it (the candidates may
        reach past the window)."""
        sched = self.lane.sched
        lo = self.h - self.h0
        mq = sched.max_batch - n_run  # the free slots (the queue holds at least the window's rows left)
        if mq <= 0:
            return [], 0  # (admission.closed)
        if self.h + mq > self.w_end:
            return None
        if cut < self.t0:  # those that arrived by the cut (the queue is in arrival order)
            mq = bisect.bisect_right(self.arr, cut, lo, lo + mq) - lo
            if not mq:
                return [], 0
        tg = self.tg[lo:lo + mq]
        fits = [sched.admit_one(tg[0], n_run, False)] if mq == 1 else sched.admit_few(tg, n_run, False)
        chunks, took = admission.leading_fit(fits, free)
        if not chunks:
            return chunks, 0
        if chunks != tg[:len(chunks)]:
            return None  # (a policy that splits a prompt: never with whole_prompts)
        adm_fin = self.adm_fin
        for a in range(lo, lo + len(chunks)):  # the step each finishes with (its join step gives its first token)
            f = j + self.tot[a] - 1
            at = adm_fin.get(f)
            if at is None:
                adm_fin[f] = [a]
                heapq.heappush(self.adm_steps, f)
            else:
                at.append(a)
            self.adm_at.append(j)
        self.h += len(chunks)
        return chunks, took

    def _quiet_ahead(self, j: int) -> int:
        """Steps from step j to the first that finishes a row."""
        nxt = self.fin_step[self.fp] if self.fp < len(self.fin_step) else 1 << 30
        return min(nxt, self.adm_steps[0] if self.adm_steps else nxt) - j

    def _finish(self, j: int) -> tuple[int, int]:
        """The rows finishing with step j leave the plan's cache counts: how many, and the blocks they give back."""
        fin_step, fp = self.fin_step, self.fp
        adm = self.adm_fin.pop(j, None)
        if adm is not None:
            heapq.heappop(self.adm_steps)  # (j: the least step any admitted row finishes with)
        elif fp >= len(fin_step) or fin_step[fp] != j:
            return 0, 0
        aggs = self.aggs
        freed = 0
        order, users = self.order, self.done_users
        n = len(order)
        while fp < len(fin_step) and fin_step[fp] == j:  # (in row order: the rows present at the start first)
            r = self.fin_rows[fp]
            v = self.cached0[r] + j + 1  # its cache after the step
            aggs.opens[(v - aggs.phase) & (BLOCK - 1)] -= 1
            aggs.total -= v
            freed += (v + BLOCK - 1) >> SHIFT
            order.append(fp)
            users.append(self.users[r])
            fp += 1
        self.fp = fp
        for a in adm or ():  # (then the admitted ones, behind them, in admission order)
            v = self.tg[a] + j - self.adm_at[a]
            aggs.opens[(v - aggs.phase) & (BLOCK - 1)] -= 1
            aggs.total -= v
            freed += (v + BLOCK - 1) >> SHIFT
            order.append(-1 - a)
            users.append(self.qusers[a])
            self.adm_done.append(a)
        return len(order) - n, freed

    # ---- pricing, the clock and the accounts -------------------------------------------------------------------
    def _price_all(self) -> None:
        """Every planned step's batch record (as steps.join_batch or steps.decode_batch builds it, no local layers)
        priced in one call (StepModel.price prices arrays elementwise, with the scalar path's arithmetic), and what
        Lane.account adds up for each (steps._join_shares' share of the time charged to input, its arithmetic
        elementwise: every admitted row is new, its prompt is input, none is recomputed)."""
        n_run = np.array(self.n_runs, dtype=np.float64)
        t_pf = np.array(self.tpf, dtype=np.float64)
        attn_pf = np.array(self.apf)
        s_dec = np.array(self.totals, dtype=np.float64)
        attn_dec = s_dec + 0.5 * n_run
        n = n_run + np.array(self.ks, dtype=np.float64)
        tokens = t_pf + n_run
        b = tuple.__new__(Batch, (tokens, n.astype(np.int64), s_dec, 0.0, attn_dec + attn_pf, 0.0, n, attn_dec, 0))
        p = self.lane.sm.price(b)
        K = len(self.n_runs)
        dts, ftot, fl_mm, fl_attn, fl_lm = (np.broadcast_to(np.asarray(x, dtype=np.float64), (K,)) for x in
                                            (p.time, p.flops_total, p.fl_mm, p.fl_attn, p.fl_lm))
        part = fl_mm * t_pf / tokens
        part = part + np.where(b.attn_full != 0.0, fl_attn * attn_pf / b.attn_full, 0.0)  # (part + 0.0 is part)
        part = part + fl_lm * (n - n_run) / n
        share = np.where((t_pf > 0) & (ftot != 0.0), part / np.where(ftot != 0.0, ftot, 1.0), 0.0)
        c_in = dts * share
        c_cached = dts * 0.0
        # Lane.account's running sums (a left fold, as step by step) and the clock, one row each from the start
        st = self.lane.stats
        fold = np.empty((8, K + 1))
        fold[:, 0] = (self.lane.clock, st.busy_s, st.charge_in_s, st.charge_cached_s, st.charge_out_s, st.flops,
                      st.flops_useful, st.bytes)
        fold[0:2, 1:] = dts
        fold[2, 1:] = c_in
        fold[3, 1:] = c_cached
        fold[4, 1:] = dts - c_in - c_cached
        fold[5:7, 1:] = ftot
        fold[7, 1:] = np.broadcast_to(np.asarray(p.bytes_total, dtype=np.float64), (K,))
        self.fold = np.add.accumulate(fold, axis=1, out=fold)
        self.dts = dts
        # the history rows' step-wise columns: end, dt, rows, in_new, charged to input, the rest, FLOPs, bytes
        self.rows = list(zip(fold[0, 1:].tolist(), dts.tolist(), n.astype(np.int64).tolist(),
                             t_pf.astype(np.int64).tolist(), c_in.tolist(), (dts - c_in).tolist(), ftot.tolist(),
                             np.broadcast_to(np.asarray(p.bytes_total, dtype=np.float64), (K,)).tolist(), strict=True))

    def _run(self, stop: float) -> int:
        """The planned steps' users woken and history rows, step by step as Lane.step gives them, up to the first
        that would start at or after `stop` or draw the run's last request; then the accounts up to it. Returns how
        many steps ran."""
        lane = self.lane
        st = lane.stats
        self._begin()
        starts = self.fold[0].tolist()
        K = bisect.bisect_left(starts, stop, 0, len(self.n_runs))  # the steps that start before stop
        bud = lane.source.budget
        room = math.inf if bud.limit is None else bud.limit - bud.accepted
        push = st.hist.push_row
        pool = lane.pool
        total, keyed = pool.total, pool.keyed_used
        sends, qsize0, h0 = self.sends, self.qsize0, self.h0
        fp = sp = drawn = 0
        for j in range(K):
            t = starts[j]
            if j:  # the sends due by this step's start join the queue's tail (drawn for real at the end)
                e = bisect.bisect_right(sends, t, sp) if room else sp  # (none drawn past the limit)
                if e > sp and drawn + e - sp >= room:
                    K = j
                    break  # the run's last request would be drawn: the sends after it wait, never drawn
                drawn += e - sp
                sp = e
            end, dt, n, in_new, c_in, rest, ftot, byts = self.rows[j]
            _, h, private, _, fin, _ = self.after[j]
            if fin > fp:
                fp = self._wake(fp, fin, end)
            push((end, dt, (private + keyed) / total if total else 0.0, qsize0 - (h - h0) + drawn, n, n, in_new, c_in,
                  rest, ftot, byts))
        self.k, self.drawn_done = K, drawn
        if K:
            self._close(K, starts)
        return K

    def _close(self, K: int, starts: list[float]) -> None:
        """The accounts of the K steps that ran: the clock, the float totals, token and batch-size counts, the
        inter-token gaps (each running row's token follows another; the admitted rows' are their first)."""
        lane = self.lane
        self.t = starts[K]
        self.chosen = starts[K - 1] if lane.async_sched else None
        self.sums = self.fold[1:, K].tolist()
        by_rows: dict[int, list[int]] = {}
        hist_n: dict[int, int] = {}
        for j, (m, k) in enumerate(zip(self.n_runs[:K], self.ks[:K], strict=True)):
            by_rows.setdefault(m, []).append(j)
            hist_n[m + k] = hist_n.get(m + k, 0) + 1
        itl = lane.stats.itl
        for m, js in by_rows.items():
            itl.add_steps(self.dts[js], 0, m)  # (integer sums: the same whatever the grouping)
        self.hist_n = hist_n
        self.out_tokens = sum(self.n_runs[:K]) + sum(self.ks[:K])
        self.in_tokens = sum(self.tpf[:K])
        self.starts, self.ends = starts[:K], starts[1:K + 1]

    def _begin(self) -> None:
        """The counters at the stretch's start: the queue's and the sends due later (the users already thinking:
        their sends are drawn at the steps' starts too)."""
        self.qsize0 = self.lane.Q.n - self.h0
        self.sends = self.lane.source.arrivals.live_sends()

    def _wake(self, fp: int, end: int, t1: float) -> int:
        """The users of the finished rows fp..end-1 (those finishing with a step ending at t1) think, grouped as
        Lane.complete groups them (one row by wake_one, several by wake); their next sends are noted for the
        draws. Returns end."""
        gone = self.done_users[fp:end]
        src = self.lane.source
        if end - fp == lane_mod._ONE_ROW:
            src.wake_one(gone[0], t1)
        else:
            src.wake(np.array(gone, dtype=np.int64), t1)
        for x in src.arrivals.sends_of(gone):
            bisect.insort(self.sends, x)
        return end

    # ---- the tables, once -------------------------------------------------------------------------------------
    def apply(self) -> None:
        """Bring the lane to the state the planned steps leave (see the module's doc)."""
        lane, K = self.lane, self.k
        R, Q, st = lane.R, lane.Q, lane.stats
        c = R.cols
        n0 = self.n0
        C, h, private, peak, done, C_adm = self.after[K - 1]
        if C:  # the finished rows present at the start, as Lane.complete takes them, in the order they finished
            grown = np.array(self.fin_step[:C], dtype=np.int64) + 1
            idx, di, df = finished_rows(c, self.fin_rows[:C], grown, np.array(self.ends)[grown - 1])
        advance_rows(c, n0, K)
        if C:
            R.drop(np.sort(idx))
        A = h - self.h0
        if A:
            fin_adm = self._join(A, K, C_adm)
            if fin_adm is not None:  # every finished row in the order they finished (the admitted ones' among them)
                di = np.concatenate((di, fin_adm.i), axis=1) if C else fin_adm.i
                df = np.concatenate((df, fin_adm.f), axis=1) if C else fin_adm.f
                perm, a = [], C
                for x in self.order[:done]:
                    if x < 0:
                        x, a = a, a + 1
                    perm.append(x)
                di, df = di[:, perm], df[:, perm]
        lane.clock, lane.chosen_at = self.t, self.chosen
        lane.aggs.at = None  # (the lane's aggregates are counted again at the next plan)
        pool = lane.pool
        pool.private, pool.peak = private, peak
        st.ticks += K
        st.out_tokens += self.out_tokens
        st.visible_tokens += self.out_tokens  # (nothing hidden: every token is visible)
        st.in_tokens += self.in_tokens
        st.busy_s, st.charge_in_s, st.charge_cached_s, st.charge_out_s, st.flops, st.flops_useful, st.bytes = \
            self.sums
        mb = st.max_batch
        for n, m in self.hist_n.items():
            st.batch_hist[n if n <= mb else mb] += m
        b = _batch(self.n_runs[K - 1], self.chunks[K - 1], self.totals[K - 1])  # the last step's record, priced
        # alone (as Lane.price keeps it)
        st.last_batch = b.seqs
        lane.priced = partial(lane.sm.record, b, lane.sm.price(b))
        if done:
            record_done(st, di, df)
        if K > 1 and lane.source.next_time <= self.starts[-1]:  # the sends drawn at the later steps' starts
            lane.draw_due(self.starts[-1])
        assert Q.n - Q.head == self.qsize0 - A + self.drawn_done, "saturated stretch: draws out of step"

    def _join(self, A: int, K: int, C_adm: int) -> Rows | None:
        """The A admitted rows join R behind the rows left, with what their join step and the steps after it gave
        them (admission's seq, blocks and time; the join's cache, input and first token; K - j - 1 more tokens);
        the first C_adm of adm_done, which finished, leave again: their rows (None if none), in that order."""
        lane = self.lane
        R, Q = lane.R, lane.Q
        m = R.n
        R.append_buf(Q.cols.b[:, self.h0:self.h0 + A])
        Q.pop(A)
        c = R.cols
        ja = np.repeat(np.arange(K), self.ks[:K])  # the step each joined in
        tg = np.array(self.tg[:A], dtype=np.int64)
        stamp_joined(lane, m, K, ja, tg, np.array(self.starts)[ja], np.array(self.ends)[ja])
        if not C_adm:
            return None
        fin = np.array(self.adm_done[:C_adm], dtype=np.int64)
        d = Rows(c.i.take(m + fin, axis=1), c.f.take(m + fin, axis=1))
        tot = d.i[_TOTAL]
        d.i[_CACHED] = tg[fin] + tot - 1  # (a row's tokens: its prompt's in the join step, one more each step after)
        d.i[_GEN] = tot
        d.i[_BLOCKS] = (d.i[_CACHED] + BLOCK - 1) >> SHIFT
        d.f[_DONE] = np.array(self.ends)[ja[fin] + tot - 1]
        R.drop(np.sort(m + fin))
        return d


# ---- what a stretch's application shares (engine.serving.open_loop applies its walks with them too) -------------
def finished_rows(c: TableRows, fin: list[int], grown: np.ndarray, done: np.ndarray | list[float]) -> tuple[
        np.ndarray, np.ndarray, np.ndarray]:
    """The running rows at `fin` (in the order they finished, each after `grown` steps of the stretch, its last
    ending at `done`) as they left: their row numbers and fields (taken before advance_rows moves the rest)."""
    idx = np.array(fin, dtype=np.int64)
    di, df = c.i.take(idx, axis=1), c.f.take(idx, axis=1)
    di[_CACHED] += grown
    di[_GEN] += grown
    di[_BLOCKS] = (di[_CACHED] + BLOCK - 1) >> SHIFT
    df[_DONE] = done
    return idx, di, df


def advance_rows(c: TableRows, n0: int, K: int) -> None:
    """The n0 rows running at a stretch's start gained a token at each of its K steps: caches, counts, blocks."""
    cached = c.cached[:n0]
    cached += K
    c.gen[:n0] += K
    np.add(cached, BLOCK - 1, out=c.blocks[:n0])
    c.blocks[:n0] >>= SHIFT


def stamp_joined(lane: Lane, m: int, K: int, ja: np.ndarray, tg: np.ndarray, admit: np.ndarray | list[float],
                 first: np.ndarray | list[float]) -> None:
    """The rows R holds from row m on, admitted in a stretch of K steps (row i at step ja[i], its whole prompt
    tg[i] read then, `admit` its start and `first` its end): admission's seq and time, the join's input and first
    token (the first visible: nothing hidden), a token more at each later step."""
    c = lane.R.cols
    A = len(tg)
    rows = slice(m, m + A)
    c.i[_SEQ, rows] = np.arange(lane.seq, lane.seq + A)
    lane.seq += A
    c.i[_CACHED, rows] = tg + (K - 1 - ja)
    c.i[_GEN, rows] = K - ja
    c.i[_BLOCKS, rows] = (c.i[_CACHED, rows] + BLOCK - 1) >> SHIFT
    c.i[_INPUT, rows] = tg
    c.f[_ADMIT, rows] = admit
    c.f[_FIRST, rows] = first
    c.f[_VISIBLE, rows] = first


def record_done(st: LaneStats, di: np.ndarray, df: np.ndarray) -> None:
    """A stretch's finished rows (in the order they finished) counted and recorded, as Lane.complete does."""
    st.completed += di.shape[1]
    st.stage_done[0] += di.shape[1]
    st.finish(Rows(di, df))


def _batch(n_run: int, chunks: list[int], total: int) -> Batch:
    """The step's batch record as steps.join_batch (admitted `chunks`) or steps.decode_batch (none) build it for
    running rows caching `total` tokens, no local layers (the last step's, priced alone for Lane.last_cost)."""
    s_dec = float(total)
    attn_dec = s_dec + 0.5 * n_run
    k = len(chunks)
    if not k:
        return tuple.__new__(Batch, (n_run, n_run, s_dec, 0.0, attn_dec, 0.0, n_run, attn_dec, 0))
    attn_pf = float(sum([x * (x / 2) for x in chunks]))  # whole and half tokens: exact in any order
    return tuple.__new__(Batch, (sum(chunks) + n_run, n_run + k, s_dec, 0.0, attn_dec + attn_pf, 0.0, n_run + k,
                                 attn_dec, 0))
