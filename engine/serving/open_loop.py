"""Open-loop stretches: a busy open loop's join steps, quiet runs and completions walked on Python ints, the running
rows' table brought up to date once at the end.

A Poisson open loop at moderate load (~25-40 rows running, an arrival and a completion every ~0.1 s) spends each
event on a join step (admission's table moves, the step's array updates), a quiet run (steps.jump's checks, its
array updates) and a completion (the rows' take and drop), a few rows' worth of change each. Here the same steps are
taken in the same order, priced and accounted by the same calls (a join step's record priced alone as Lane.price
prices it, a quiet run's steps in one steps.run_batch-like record by price_run, cut at the next arrival as jump cuts
them), but the running rows are counted on ints (CacheAggs, the steps each row has left): the pool, the queue, the
clock and every total move live, and only R (caches, generated counts, blocks; the finished rows' records; the
admitted rows' stamps) waits for the end, as engine.serving.saturated applies its stretches.

Arrivals are drawn for real at each step's start (Lane.draw_due, as Lane.step draws them), so the RNG sees the same
draws. Times play a part (which step admits an arrival depends on the steps' times): the walk prices each step or run
as it reaches it. It ends where it cannot decide: an admitted row would finish, a step would preempt, the batch
empties, or the bound is reached; stepping resumes from there. Only the plain case is taken (one lane, headless,
Poisson arrivals alone, the built-in step kinds, whole-prompt admission, no speculation, LoRA, tiers, recorder,
hidden thinking, keyed or cached blocks, sliding layers or preempted rows). ENABLED off (tests) turns it off.
"""

from __future__ import annotations

import bisect
import itertools
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from engine.serving import admission, steps
from engine.serving.history import Growth
from engine.serving.saturated import (
    _batch,
    advance_rows,
    finished_rows,
    fresh,
    plain,
    record_done,
    running,
    stamp_joined,
)
from engine.serving.tables import BLOCK, SHIFT, FloatCol, IntCol, Rows

if TYPE_CHECKING:
    from engine.serving.lane import Lane

ENABLED = True  # tests turn it off to compare every figure with step-by-step runs
# Fewer rows running: a light load, whose stretches end within an event or two (the batch empties, or a lone
# admitted row's end is near): step by step costs less than a stretch's set-up and application.
_MIN_ROWS = 4
_TARGET, _TOTAL, _ARRIVAL = int(IntCol.TARGET), int(IntCol.TOTAL), int(FloatCol.ARRIVAL)


def eligible(lane: Lane, fed: bool = False) -> bool:
    """The plain open-loop case a stretch handles (cheapest tests first). `fed`: the lane's source is a fleet
    replica's share of an open loop (engine.fleet.feed: requests with known arrival times, no users, no script),
    drawn as its own Poisson arrivals are (Lane.draw_due), its finished rows handed to the replica (on_done)."""
    src = lane.source
    if lane.R.n < _MIN_ROWS or lane.n_pf or lane.P.n:
        return False
    if not fed and (src.arrivals.rate <= 0 or src.script is not None or src.budget.users or lane.on_done is not None):
        return False
    return not lane.pool.cached and plain(lane)


def stretch(lane: Lane, stop: float, max_steps: int, fed: bool = False) -> int:
    """Run up to `max_steps` steps starting before `stop` at once; returns how many ran (0: none, take the tick
    with Lane.step). `fed`: see eligible."""
    if not ENABLED or max_steps < 2:
        return 0
    t0 = lane.clock
    if lane.source.next_time <= t0:  # the first step's arrivals, drawn as Lane.step draws them
        lane.draw_due(t0)
    if not eligible(lane, fed):
        return 0
    s = _Open(lane)
    if not s.fresh_queue():
        return 0
    k = s.walk(stop, max_steps)
    if k:
        s.apply()
    return k


class _Open:
    """One stretch: the running rows on ints, the walk, and its application to R."""

    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        self.n0 = lane.R.n
        self.aggs, self.fin_rows, self.fin_step, self.cached0 = running(lane)
        self.fp = 0  # rows finished so far (a prefix of fin_rows)
        self.done_at: list[float] = []  # their finish times
        self.bufs: list[np.ndarray] = []  # the admitted rows' queue fields, in admission order
        self.joined: list[tuple[int, list[int], float, float]] = []  # per join step: (step, prompts, start, end)
        self.qa = 0  # queue rows (of tg, tot, arr) admitted so far

    def fresh_queue(self) -> bool:
        """The queue's rows are new requests (nothing generated, read or preempted): their first step is a join
        reading the whole prompt, and their first token is their first."""
        Q = self.lane.Q
        q = Q.cols
        h, e = Q.head, Q.n
        if not fresh(q, h, e):
            return False
        self.tg = q.target[h:e].tolist()
        self.tot = q.total[h:e].tolist()
        self.arr = q.arrival[h:e].tolist()
        return True

    def _draw(self, t: float) -> None:
        """The arrivals due by t join the queue (Lane.draw_due); their prompts, lengths and times noted."""
        lane = self.lane
        Q = lane.Q
        size = Q.n - Q.head
        lane.draw_due(t)
        e = Q.n
        n0 = e - (e - Q.head - size)  # (the new rows are the last: the queue may have slid its rows down to grow)
        if e > n0:
            i, f = Q.cols.i, Q.cols.f
            if e - n0 == 1:
                self.tg.append(int(i[_TARGET, n0]))
                self.tot.append(int(i[_TOTAL, n0]))
                self.arr.append(float(f[_ARRIVAL, n0]))
            else:
                self.tg += i[_TARGET, n0:e].tolist()
                self.tot += i[_TOTAL, n0:e].tolist()
                self.arr += f[_ARRIVAL, n0:e].tolist()

    # ---- the walk ----------------------------------------------------------------------------------------------
    def walk(self, stop: float, kmax: int) -> int:
        """Take steps as Lane.step and steps.jump would, from the lane's clock, while each is decided here (see the
        module's doc); returns how many were taken."""
        lane = self.lane
        src, pool = lane.source, lane.pool
        aggs = self.aggs
        t, chosen = lane.clock, lane.chosen_at
        n_run, j = self.n0, 0
        while j < kmax and t < stop and n_run:
            if src.next_time <= t:
                self._draw(t)
            need = aggs.need()
            free = pool.total - pool.private - need
            if free < 0:
                break  # the step would preempt
            got = self._admit(n_run, free, t if chosen is None else chosen)
            if got is None:
                break
            chunks, took, fin = got
            if chunks:
                kmax = min(kmax, j + fin)  # the stretch ends before an admitted row's last step
                t1, n_run = self._join(j, t, n_run, chunks, took, need)
                chosen = t if lane.async_sched else None
                t, j = t1, j + 1
                continue
            most = min(kmax - j, self._left(j), 1 if fin < 0 else kmax)
            if most == 1:  # a step alone (a decode step, priced as Lane.step prices it)
                t1, gone = self._decode(j, t, n_run, need)
                chosen = t if lane.async_sched else None
                n_run -= gone
                t, j = t1, j + 1
                continue
            k, last, gone = self._run(j, t, n_run, most, stop)
            if not k:
                break
            if lane.async_sched:
                chosen = last
            n_run -= gone
            t, j = lane.clock, j + k
        self.k, self.t, self.chosen = j, t, chosen
        return j

    def _left(self, j: int) -> int:
        """Steps from step j up to and including the first that finishes a row present at the stretch's start."""
        return self.fin_step[self.fp] - j + 1 if self.fp < len(self.fin_step) else 1 << 40

    def _admit(self, n_run: int, free: int, cut: float) -> tuple[list[int], int, int] | None:
        """admission.admit's answer on ints (whole prompts, from the queue's head; `cut`: the async scheduling cut):
        the admitted prompts, the blocks they take and the fewest steps until one of them finishes (its total);
        nothing admitted, that last -1 if the cut held back rows the next step's cut takes (else blocked: nobody
        joins until a row finishes)."""
        lane = self.lane
        sched = lane.sched
        qa = self.qa
        mq = min(sched.max_batch - n_run, len(self.tg) - qa)
        if mq <= 0:
            return [], 0, 0  # (admission.closed)
        if cut < self.arr[qa + mq - 1]:  # those that arrived by the cut (the queue is in arrival order)
            mq = bisect.bisect_right(self.arr, cut, qa, qa + mq) - qa
            if not mq:
                return [], 0, -1  # (the next step's cut may take them: a step alone)
        tg = self.tg[qa:qa + mq]
        fits = [sched.admit_one(tg[0], n_run, False)] if mq == 1 else sched.admit_few(tg, n_run, False)
        chunks, took = admission.leading_fit(fits, free)
        if not chunks:
            return chunks, 0, 0
        if chunks != tg[:len(chunks)]:
            return None  # (a policy that splits a prompt: never with whole_prompts)
        fin = min(self.tot[qa:qa + len(chunks)]) - 1  # the join step and those after it before one finishes
        if fin < 1:
            return None
        return chunks, took, fin

    def _join(self, j: int, t: float, n_run: int, chunks: list[int], took: int, need: int) -> tuple[float, int]:
        """Join step j (starting at t): the admitted rows leave the queue (their fields kept for R), the step is
        priced, its rows finishing leave the counts, and it is accounted (Lane.account) as join_step does. Returns
        its end and the rows running after it."""
        lane = self.lane
        Q, pool, st, aggs = lane.Q, lane.pool, lane.stats, self.aggs
        k = len(chunks)
        h = Q.head
        self.bufs.append(Q.cols.b[:, h:h + k].copy())
        Q.pop(k)
        self.qa += k
        pool.alloc(took)  # (admission's blocks, then the step's new ones, as step by step)
        pool.alloc(need)
        b = _batch(n_run, chunks, aggs.total)
        p = lane.sm.price(b)
        dt = p.time
        self.last = (b, p)
        t1 = t + dt
        n = n_run + k
        # steps._join_shares on the step's figures: every admitted row is new, its prompt is input
        in_new = b.tokens - n_run
        attn_pf = float(sum([x * (x / 2) for x in chunks]))  # (as _batch and join_batch: exact in any order)
        ftot = p.flops_total
        part = p.fl_mm * in_new / b.tokens
        if b.attn_full:
            part += p.fl_attn * attn_pf / b.attn_full
        part += p.fl_lm * (n - n_run) / n
        aggs.step(n_run)
        opens, ph = aggs.opens, aggs.phase
        for x in chunks:  # (CacheAggs.tally on ints: the admitted rows now hold their prompts)
            opens[(x - ph) & (BLOCK - 1)] += 1
            aggs.total += x
        self.joined.append((j, chunks, t, t1))
        gone = self._finish(j, t1) if self._left(j) == 1 else 0
        st.itl.add(dt, 0, n_run)
        lane.account(p, b.tokens, n, n, n, in_new, 0, part / ftot if ftot else 0.0, t1, dt)
        lane.clock = t1
        return t1, n - gone

    def _decode(self, j: int, t: float, n: int, need: int) -> tuple[float, int]:
        """Decode step j (starting at t) as decode_step takes it: its new blocks, its price, its rows finishing, its
        account. Returns its end and the rows finished."""
        lane, aggs = self.lane, self.aggs
        lane.pool.alloc(need)
        b = _batch(n, [], aggs.total)
        p = lane.sm.price(b)
        dt = p.time
        self.last = (b, p)
        t1 = t + dt
        aggs.step(n)
        gone = self._finish(j, t1) if self._left(j) == 1 else 0
        lane.stats.itl.add(dt, 0, n)
        lane.account(p, n, n, n, n, 0, 0, 0.0, t1, dt)
        lane.clock = t1
        return t1, gone

    def _run(self, j: int, t: float, n: int, kmax: int, stop: float) -> tuple[int, float, int]:
        """Quiet decode steps from step j (steps.jump's run: priced at once, cut at the next arrival or `stop`, an
        arrival drawn at the start of its last step under async scheduling), at most kmax (the last may finish
        rows, which leave the counts). Returns how many ran (0: none), the last one's start and the rows finished."""
        lane = self.lane
        pool, st, aggs = lane.pool, lane.stats, self.aggs
        ph = aggs.phase
        growth = Growth(n, tuple(itertools.accumulate(aggs.lags(), initial=0)))  # (lags: rows opening a block per step)
        k = growth.cut(kmax, pool.total - pool.private)  # the step that would preempt is left to Lane.step
        if not k:
            return 0, t, 0
        s0 = aggs.total
        # Priced as steps.jump prices a run (a price table where one serves it, the run's start sum then standing
        # for its record: last_of_run; else steps.run_batch's record), from the counts: the rows' caches are not
        # at hand mid-stretch, nor needed (no window layers here).
        b, _, got = steps.price_quiet(lane, s0, n, k, None)
        sums = steps.fold_run((t, st.busy_s, st.charge_out_s, st.flops, st.flops_useful, st.bytes), got)
        clock = sums[0]
        Q = lane.Q
        queue = Q.n - Q.head  # (lane.waiting: nothing preempted)
        k, k_arr = steps.cut_at_arrival(lane, lane.source.next_time, clock, k, stop)
        if not k:
            return 0, t, 0
        dts, flops, byts = got
        priced = len(dts)
        # The times copied: Itl.add_steps weighs a view by the base it keeps alive (jump passes a table's own length).
        dts, flops, byts, ends = dts[:k].copy(), flops[:k], byts[:k], clock[1:k + 1]
        used0 = pool.private  # (pool.used: nothing keyed)
        pool.alloc(growth.after(k))
        aggs.total = s0 + n * k
        aggs.phase = (ph + k) & (BLOCK - 1)
        if k_arr < k:  # the run's last step starts after the arrival: it joins the queue then, as step() draws it
            self._draw(float(clock[k_arr]))
        st.visible_tokens += n * k
        st.itl.add_steps(dts, 0, n)
        t1 = float(ends[-1])
        lane.clock = t1
        st.ticks += k
        st.out_tokens += n * k
        st.busy_s, st.charge_out_s, st.flops, st.flops_useful, st.bytes = sums[1:, k].tolist()
        st.batch_hist[min(n, st.max_batch)] += k
        # (its finished rows leave before the history notes the pool's fill after the run)
        gone = self._finish(j + k - 1, t1) if self._left(j) == k else 0
        steps.history_run(lane, n, k, t, (dts, flops, byts, priced), (used0, growth), (k_arr, queue))
        self.last = (b, k - 1, n)
        return k, float(clock[k - 1]), gone

    def _finish(self, j: int, t1: float) -> int:
        """The rows present at the start that finish with step j (ending at t1) leave the counts and give back
        their blocks; returns how many."""
        fin_step, fp = self.fin_step, self.fp
        if fp >= len(fin_step) or fin_step[fp] != j:
            return 0
        aggs, pool = self.aggs, self.lane.pool
        opens, ph = aggs.opens, aggs.phase
        while fp < len(fin_step) and fin_step[fp] == j:
            v = self.cached0[self.fin_rows[fp]] + j + 1  # its cache after the step
            opens[(v - ph) & (BLOCK - 1)] -= 1
            aggs.total -= v
            pool.give((v + BLOCK - 1) >> SHIFT)
            self.done_at.append(t1)
            fp += 1
        k = fp - self.fp
        self.fp = fp
        return k

    # ---- R, once ----------------------------------------------------------------------------------------------
    def apply(self) -> None:
        """Bring R to the state the walk's steps leave: the rows present throughout gain K tokens, the finished
        ones leave in the order they finished (their records, in that order, to the accounts), the admitted ones
        join in admission order behind them with what their join step and the steps after it gave them."""
        lane, K = self.lane, self.k
        R, st = lane.R, lane.stats
        c = R.cols
        C = self.fp
        if C:  # the finished rows as Lane.complete takes them, in the order they finished
            grown = np.array(self.fin_step[:C], dtype=np.int64) + 1
            idx, di, df = finished_rows(c, self.fin_rows[:C], grown, self.done_at)
        advance_rows(c, self.n0, K)
        if C:
            R.drop(np.sort(idx))
        if self.bufs:
            self._append(K)
        lane.clock, lane.chosen_at = self.t, self.chosen
        lane.aggs.at = None  # (the lane's aggregates are counted again at the next plan)
        if C:
            record_done(st, di, df)
            if lane.on_done is not None:  # (a fed replica's: its finished rows at once, in the order they finished)
                lane.on_done(Rows(di, df))
        last = self.last
        if len(last) == 2:  # a join or decode step: priced alone (as Lane.price keeps it)
            lane.priced = partial(lane.sm.record, *last)
        else:  # a run's last step (as steps.jump keeps it)
            lane.priced = partial(steps.last_of_run, lane.sm, *last)
            st.last_batch = last[2]

    def _append(self, K: int) -> None:
        """The admitted rows join R behind the rows left, in admission order (saturated.stamp_joined)."""
        lane = self.lane
        R = lane.R
        m = R.n
        R.append_buf(self.bufs[0] if len(self.bufs) == 1 else np.concatenate(self.bufs, axis=1))
        ja, x, t0, t1 = [], [], [], []
        for j, chunks, s, e in self.joined:
            k = len(chunks)
            ja += [j] * k
            x += chunks
            t0 += [s] * k
            t1 += [e] * k
        stamp_joined(lane, m, K, np.array(ja, dtype=np.int64), np.array(x, dtype=np.int64), t0, t1)
