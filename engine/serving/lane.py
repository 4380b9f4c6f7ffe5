"""One lane: a GPU group (tp GPUs) with its own KV pool, request tables, arrivals and clock.

Per tick: arrivals join the queue, running requests keep going (the newest are preempted under KV
pressure), waiting ones are admitted as the scheduler's budget, free blocks and batch slots allow, the
step model prices the batch from its aggregates, the clock moves by the step time, tokens come out,
finished requests leave and their users start thinking.

A step is planned as `new` tokens per running row (None: one each, a pure decode step); a row emits a
token when its cache reaches its target. The plan (engine.serving.steps.StepPlan) goes to the first step kind
of engine.serving.steps.STEP_KINDS that takes it (decode, join, speculative verify, mixed): the kind builds
the step's batch record, the lane prices it (Lane.price, the step model's one entry point) and accounts it.
Admission lives in engine.serving.admission and prefix-cache keying in engine.serving.keying.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from engine.physics.batch import Batch
from engine.physics.speculative import Drafter
from engine.physics.step import StepCost, StepModel, StepParts
from engine.serving import admission, keying, steps
from engine.serving.accounting import LaneStats, check_conserved, finished_times
from engine.serving.kv_tiers import KVTiers, TierSpec
from engine.serving.lora_slots import LoraSlots
from engine.serving.prefix_cache import BlockPool
from engine.serving.scheduler import Scheduler
from engine.serving.steps import CacheAggs, StepPlan
from engine.serving.tables import BLOCK, SHIFT, FloatCol, IntCol, Queue, Rows, Table, blocks_for, spend
from engine.traffic.workload import Dist

if TYPE_CHECKING:
    from engine.serving.trace_out import Recorder
    from engine.traffic.source import RequestSource

IDLE_TICK_S = 0.1  # clock step of an engine with nothing to do and nothing coming (e.g. zero users)

_EMPTY = np.zeros(0, dtype=np.int64)
_EMPTY.flags.writeable = False
_NOKEYS = np.zeros(0, dtype=np.uint64)
_DONE = int(FloatCol.DONE)  # (a plain int indexes faster than an IntEnum member: ~1 us less a call)
_ID, _USER, _CACHED = int(IntCol.ID), int(IntCol.USER), int(IntCol.CACHED)
_MASK = np.dtype(bool)  # (numpy's one bool dtype: `is` asks what == asks, ~0.3 us less)
_FEW_ROWS = 8  # up to this many running rows a decode plan's new blocks are counted in Python
_ONE_ROW = 1  # complete(): this many finished rows wake their user by wake_one (tests set -1: wake always)
_LONE_ROWS = 1  # step(): a lone request joins 0 or 1 running rows by admit_lone and join_lone (tests set -1: never)
@dataclass(frozen=True, slots=True)
class TickResult:
    """What one tick did. Id arrays are read-only; `cost` is None for an idle tick (no tokens, clock jumps)."""

    tick: int
    time_s: float  # the engine clock after the tick
    dt: float  # how far this lane's clock moved
    cost: StepCost | None
    fast_lane: bool  # which lane ran the step
    emitted_ids: np.ndarray  # int64 request ids that produced a token this tick
    emitted_counts: np.ndarray  # int64 tokens each produced (1 per sequence per step)
    admitted: np.ndarray  # request ids admitted into the batch for this step
    preempted: np.ndarray  # request ids evicted to free KV blocks
    completed: np.ndarray  # request ids that finished


def idle_result(tick: int, t1: float, dt: float, fast: bool, admitted: np.ndarray = _EMPTY,
                preempted: np.ndarray = _EMPTY) -> TickResult:
    """A tick that ran no step: the clock moved by dt, no tokens."""
    return TickResult(tick, t1, dt, None, fast, _EMPTY, _EMPTY, admitted, preempted, _EMPTY)



@dataclass(frozen=True, slots=True)
class LaneSpec:
    """What a lane serves and how it judges answers (built by the Engine from its config)."""

    fast: bool  # the fast lane: serves only fast users, at its own batch cap
    think: Dist  # hidden thinking lengths (fixed at 0: every token is visible)
    slo_ttft: float | None
    slo_tpot: float | None
    debug: bool
    prefix_caching: bool = False  # full blocks keyed by content, shared and kept (engine.serving.prefix_cache)
    spec_tokens: int = 0  # speculative decoding: drafts per decode step (0: off)
    spec_accept: float = 0.0  # each draft's acceptance probability
    drafter: Drafter | None = None  # what drafting costs
    seed: int = 0
    # KV offload: the tiers behind the prefix cache (host memory, disk, remote; None where absent) and their policy
    tiers: tuple[TierSpec | None, ...] = (None, None, None)
    tier_policy: str = "lru"


class Lane:
    """One GPU group serving its share of the users: tables R (running), Q (queue), P (preempted)."""

    def __init__(self, spec: LaneSpec, sm: StepModel, sched: Scheduler, pool_blocks: int, source: RequestSource,
                 stages: int = 1) -> None:
        self.spec = spec
        self.fast = spec.fast
        self.sm = sm
        self.sched = sched
        self.source = source  # where this lane's requests come from (engine.traffic.source)
        self.clock = 0.0
        self.async_sched = sm.runtime.async_scheduling and not sm.opts.ideal
        self.chosen_at: float | None = None  # when the next step's batch was chosen (async scheduling), else None
        self._request_s = 0.0 if sm.opts.ideal else sm.runtime.request_overhead_s
        self.R = Table(64)
        self.Q = Queue(64)
        self.P = Table(16)
        tiers = KVTiers(spec.tiers, spec.tier_policy) if any(spec.tiers) else None
        self.pool = BlockPool(pool_blocks, spec.prefix_caching, tiers=tiers)
        self.load_s = 0.0  # copies back from the tiers below the GPU for this step's hits (seconds, charged to it)
        self.caching = spec.prefix_caching
        self.spec_k = spec.spec_tokens
        self.spec_rng = np.random.default_rng([spec.seed, 0x5BEC, int(spec.fast)])
        self.n_pf = 0  # running rows still prefilling (cached < target)
        self.aggs = CacheAggs()  # the running rows' cache total and lengths mod BLOCK, kept by steps of many rows
        self.seq = 0  # admission order: the newest running request is the last row of R
        self.cap_tokens = min(sm.model.max_context, pool_blocks * BLOCK)
        self.think_zero = spec.think.is_fixed and spec.think.a == 0
        # The call that builds the last step's StepCost, kept until someone reads last_cost (headless runs never do).
        self.priced: Callable[[], StepCost] | None = None
        self.stats = self.new_stats(stages)
        self.rec: Recorder | None = None  # engine.serving.trace_out's recorder, when the run is traced
        self.staged = self.stats.stages > 1
        self.on_done: Callable[[Rows], None] | None = None  # told of every finished request (a fleet's router)
        # The queue head that last failed to join: (head id, keys added, free blocks, tokens planned) then.
        self.blocked_head: tuple[int, int, int, int] = (-1, -1, 0, 0)
        self.join_next = False  # a quiet run just drew a request into the queue: the next jump attempt is skipped
        self.head_keys: tuple[int, np.ndarray] = (-1, _NOKEYS)  # the queue head's content keys
        self.shared_content = False  # some request shares tokens with another (only then are blocks keyed as filled)
        # Multi-LoRA: the adapter slots (engine.serving.lora_slots), None with LoRA off.
        self.lora = None if sm.lora is None else LoraSlots(sm.opts.max_loras, sm.lora.bytes_per_adapter,
                                                           sm.hw.host_link_gbps)
        # Text streams' block streams (prefix_cache.text_streams): filled only by engine.serving.live, for the
        # requests it holds; empty elsewhere, so no other run pays for it.
        self.texts: dict[int, np.ndarray] = {}

    # ---- configuration ------------------------------------------------------------------------
    def set_scheduler(self, sched: Scheduler) -> None:
        """A new policy or knobs; running requests carry on under the new rules."""
        self.sched = sched
        self.stats.set_max_batch(self._hist_cap(sched))

    def _hist_cap(self, sched: Scheduler) -> int:
        """Largest batch the histogram counts: every running request holds a block, so never above the pool."""
        return max(1, min(sched.max_batch, self.pool.total))

    def set_pool(self, blocks_total: int) -> list[int]:
        """Resize the KV pool; if it shrank below what is held, preempt the newest until it fits."""
        self.pool.resize(blocks_total)
        self.cap_tokens = min(self.sm.model.max_context, blocks_total * BLOCK)
        self.source.set_cap(self.cap_tokens)
        self.stats.set_max_batch(self._hist_cap(self.sched))
        out = []
        while self.pool.used > self.pool.total and self.R.n:
            out.append(self._preempt_newest())
        self.pool.trim()  # what the preempted released is cached: reclaim what no longer fits
        return out

    def new_stats(self, stages: int) -> LaneStats:
        """Fresh totals for this lane counting `stages` workload stages (its batch cap, request path and SLO)."""
        sp = self.spec
        return LaneStats(self._hist_cap(self.sched), stages, path_s=self._request_s, slo_ttft=sp.slo_ttft,
                         slo_tpot=sp.slo_tpot)

    # ---- state queries ------------------------------------------------------------------------
    @property
    def last_cost(self) -> StepCost | None:
        """The cost of the step that ran last (None before the first), priced when first asked: a headless run
        never asks, so its steps are priced for their time, FLOPs and bytes only (StepModel.parts_agg)."""
        if self.priced is not None:
            self.stats.last_cost = self.priced()
            self.priced = None
        return self.stats.last_cost

    @property
    def next_arrival(self) -> float:
        """Time of the next request (or stage change) this lane's source will give it (inf past the run's bounds)."""
        return self.source.next_time

    @property
    def waiting(self) -> int:
        """Requests queued or preempted."""
        Q = self.Q
        return Q.n - Q.head + self.P.n  # (Q.size without its property call: read a few times a tick)

    @property
    def has_work(self) -> bool:
        """Some request is queued, preempted or running here."""
        return self.R.n > 0 or self.Q.size > 0 or self.P.n > 0

    @property
    def dormant(self) -> bool:
        """Nothing to run and nothing coming: the lane needs no ticks."""
        return not self.has_work and self.next_arrival == math.inf

    def max_request_tokens(self) -> int:
        """Largest prompt + generation of any live request (what the pool must hold for one request alone)."""
        m = 0
        for t in (self.R, self.P, self.Q):
            if t.size:
                m = max(m, int((t.col("prompt") + t.col("total")).max()))
        return m

    def check_conserved(self) -> None:
        """Every request this lane accepted is done, running, preempted or queued (accounting.check_conserved)."""
        st = self.stats
        check_conserved("fast lane" if self.fast else "lane", st.accepted, st.completed, self.R.n, self.Q.size,
                        self.P.n, aborted=st.aborted)

    # ---- arrivals -----------------------------------------------------------------------------
    def arrive_until(self, t: float) -> None:
        """Take every request due at or before t into the queue without stepping (the run's end: see
        Engine.run)."""
        if self.next_arrival <= t:
            self.draw_due(t)

    def draw_due(self, t: float) -> None:
        """Every request this lane's source has due at or before t joins the queue (drawn into its tail)."""
        src = self.source
        before = src.clipped
        q = self.Q
        k = src.draw_into(t, q)
        if k:
            st = self.stats
            st.clipped += src.clipped - before
            st.accepted += k
            if src.script is not None:  # only a script's requests carry content (group, body) that can be shared
                self.note_content(q.cols.pick(slice(q.n - k, q.n)))

    def note_content(self, r: Rows) -> None:
        """Requests joining this lane: once any shares content with another (a group prefix or a body), blocks
        are keyed as they fill (with prefix caching on); until then nothing can be found in the cache."""
        if self.caching and not self.shared_content and (r.group.any() or r.body.any()):
            self.shared_content = True

    # ---- scheduling ---------------------------------------------------------------------------
    def _plan_running(self) -> tuple[np.ndarray | None, np.ndarray | None, int]:
        """Tokens each running row computes this step (None: one each, pure decode), new-block mask, blocks needed."""
        n = self.R.n
        if n == 0:
            return None, None, 0
        c = self.R.cols
        cached = c.cached[:n]
        if self.n_pf == 0:
            if self.spec_k:
                # A verify step writes K+1 tokens per row (no more than the row still has to write) before
                # the rejected ones are rolled back.
                q = np.minimum(self.spec_k + 1, c.total[:n] - c.gen[:n])
                return None, None, int((blocks_for(cached + q) - c.blocks[:n]).sum())
            if n > _FEW_ROWS:
                # Many rows: the lane's aggregates (steps.CacheAggs) say how many open a block, counted again only if
                # something else moved the caches since the last decode or join step kept them; no mask (the step
                # finds the rows' blocks again).
                aggs = self.aggs
                if aggs.at != (self.clock, n):
                    aggs.count(cached, (self.clock, n))
                return None, None, aggs.need()
            # A few rows (the usual busy batch): count the rows whose next token opens a block in Python, and build
            # the mask only when some does (numpy's two calls and count cost ~4 us, the list ~0.5 us). The aggregates
            # are not kept (nor adjusted by completions) below many rows.
            self.aggs.at = None
            need = [x & (BLOCK - 1) for x in cached.tolist()].count(0)
            if not need:
                return None, steps.no_rows(n), 0
            return None, (cached & (BLOCK - 1)) == 0, need  # the rows whose next token opens a new block
        rem = c.target[:n] - cached
        pf = rem > 0
        new = np.where(pf, rem, 1)
        new[pf] = self.sched.prefill_chunks(rem[pf], int(n - np.count_nonzero(pf)))
        need = int((blocks_for(cached + new) - c.blocks[:n]).sum())
        return new, None, need

    def _preempt_newest(self) -> int:
        """Evict the newest running request: free its blocks; it waits (ahead of fresh arrivals) to be recomputed."""
        if self.caching:
            keying.fill(self, np.array([self.R.n - 1]), every=True)  # its own blocks too: it will want them back
        self.aggs.at = None  # (rows that change between steps: the next plan counts the aggregates again)
        row = self.R.pop_last()
        keying.release(self, row)
        if row.cached[0] < row.target[0]:
            self.n_pf -= 1
        # Recompute every known token (prompt + generated) before decoding resumes.
        row.target[0] = row.prompt[0] + row.gen[0]
        row.cached[0] = 0
        row.blocks[0] = 0
        row.full[0] = 0
        row.hkey[0] = 0
        row.preempts[0] += 1
        t = self.clock  # evictions happen between steps
        if not np.isnan(row.mark[0]):
            spend(row, t, row.rec, row.rec_v)  # evicted part-way through a recompute
        row.mark[0] = t
        self.P.append(row)
        self.stats.preemptions += 1
        return int(row.id[0])











    # ---- one tick -----------------------------------------------------------------------------
    def step(self, limit: float, tick: int, want: bool = True) -> TickResult | None:
        """Run one step of this lane (or an idle jump to its next arrival, at most to `limit`) and return its
        TickResult. With `want` False a step returns None (a headless run reads totals: no ids are copied, no
        StepCost is built); an idle tick returns its small result either way."""
        t0 = self.clock
        if self.source.next_time <= t0:  # (self.next_arrival without its property call)
            self.draw_due(t0)
        R = self.R
        n_run = R.n
        # Under async scheduling this step's batch was chosen when the previous busy step started (chosen_at):
        # requests that arrived since wait for the next step (with nothing running, nothing was chosen ahead).
        cut = t0 if self.chosen_at is None or n_run == 0 else self.chosen_at
        self.chosen_at = t0 if self.async_sched else None
        Q = self.Q
        if (n_run <= _LONE_ROWS and Q.n - Q.head == 1 and not self.n_pf and not self.P.n and not self.spec_k
                and not self.load_s and self.lora is None and not self.shared_content and self.sm.plain
                and steps.STEP_KINDS == steps._BUILT_IN):  # (steps.built_in_only without its call)
            # The usual join at low load (one request waiting, at most one row running): its plan, admission and
            # step on Python numbers in two calls (admission.admit_lone, steps.join_lone), unless admission refuses.
            got = admission.admit_lone(self, n_run, t0, cut)
            if got is not None:
                admitted = R.cols.id[n_run:n_run + 1].copy() if want else _EMPTY
                return steps.join_lone(self, n_run, got[0], got[1], tick, admitted, want)
        pool = self.pool
        # 1. Keep the running batch going; under KV pressure evict the newest until the step fits.
        new, nb, need = self._plan_running()
        free = pool.available - need  # (read once: nothing takes blocks until admission)
        preempted: list[int] = []
        if free < 0:
            while need > pool.available:
                preempted.append(self._preempt_newest())
                new, nb, need = self._plan_running()
            n_run = R.n
            free = pool.available - need
        tokens_planned = n_run if new is None else int(new.sum())
        # Decode rows add one token each; anything beyond that is prefill already in this step.
        prefill_planned = new is not None and tokens_planned > n_run - self.n_pf
        # 2. Admit while blocks, batch slots and the token budget allow.
        chunks, whole = admission.admit(self, free, tokens_planned, prefill_planned, t0, cut)
        n = R.n
        if want:
            admitted = R.cols.id[n_run:n].copy() if n > n_run else _EMPTY
            pre = np.array(preempted, dtype=np.int64) if preempted else _EMPTY
        else:
            admitted = pre = _EMPTY
        if n == 0:
            return self._idle(limit, tick, admitted, pre)
        # 3. The first step kind that takes the plan builds its batch record, prices it and applies it.
        # (tuple.__new__ with every field: StepPlan's own __new__ costs ~0.3 us more)
        return steps.run(self, tuple.__new__(StepPlan, (n_run, n, new, nb, need, chunks, whole, tick, admitted, pre,
                                                        want)))

    # Run up to `max_steps` quiet decode steps at once; returns how many ran (engine.serving.steps.jump, the method
    # itself: lane.jump(stop, max_steps) is steps.jump(lane, stop, max_steps), without a wrapper's call: a fleet
    # replica asks ~2.5 times a request).
    jump = steps.jump

    def price(self, b: Batch) -> tuple[float, StepParts]:
        """Price one step's batch record (StepModel.price): its time and parts, kept as the last step. With
        multi-LoRA the record gets the batch's distinct adapters, and the step waits for the adapters loaded for it."""
        lo = self.lora
        if lo is not None:
            d = int(LoraSlots.in_batch(self.R.col("adapter")).size)
            b = b._replace(adapters=d)
            p = self.sm.price(b)
            lo.step(d, 1, float(p.lora_bytes), float(p.bytes_total))
            if lo.pending_s:
                p = p._replace(time=p.time + lo.take_pending())
        else:
            p = self.sm.price(b)
        self.priced = partial(self.sm.record, b, p)
        return p.time, p

    def advance(self, dt: float) -> float:
        """Move the lane's clock by a step of dt seconds; returns the step's end."""
        t1 = self.clock + dt
        self.clock = t1
        return t1

    def result(self, tick: int, dt: float, ids: np.ndarray, counts: np.ndarray, admitted: np.ndarray,
                pre: np.ndarray, completed: np.ndarray) -> TickResult:
        """The TickResult of the step just accounted (its StepCost built now, from the lazy record)."""
        return TickResult(tick, self.clock, dt, self.last_cost, self.fast, ids, counts, admitted, pre, completed)

    def end_recomputes(self, done: np.ndarray, t: float) -> None:
        """Running rows (mask `done`) whose recompute after a preemption ends with the step ending at t: count the
        time it took (tables.spend) and clear their mark."""
        idx = np.flatnonzero(done)
        if idx.size:
            c = self.R.cols
            r = c.pick(idx)
            spend(r, t, r.rec, r.rec_v)
            c.f[:, idx] = r.f

    def account(self, p: StepParts, tokens: int, n: int, n_emit: int, vis_tokens: int, in_new: int,
                 recomputed: int, share_in: float, t1: float, dt: float, share_cached: float = 0.0) -> None:
        """Add one priced step (parts `p`) of `tokens` tokens over `n` sequences to the lane's totals and per-tick
        history."""
        st = self.stats
        st.ticks += 1
        st.out_tokens += n_emit
        st.visible_tokens += vis_tokens
        st.in_tokens += in_new
        st.recomputed_tokens += recomputed
        st.busy_s += dt
        c_in = dt * share_in
        c_cached = dt * share_cached
        st.charge_in_s += c_in
        st.charge_cached_s += c_cached
        st.charge_out_s += dt - c_in - c_cached
        ftot = p.flops_total
        st.flops += ftot
        useful = ftot * (1.0 - recomputed / tokens) if recomputed else ftot
        st.flops_useful += useful
        b = p.bytes_total
        st.bytes += b
        mb = st.max_batch
        st.batch_hist[n if n <= mb else mb] += 1
        st.hist.push_row((t1, dt, self.pool.util, self.waiting, n, n_emit, in_new, c_in, dt - c_in, useful, b))
        st.last_batch = n
        if self.rec is not None:
            self.rec.step(self, t1, dt, tokens, n, b, ftot)

    def _idle(self, limit: float, tick: int, admitted: np.ndarray, pre: np.ndarray) -> TickResult:
        """Nothing runnable: jump to the next arrival (or `limit`), a zero-token tick."""
        t0 = self.clock
        self.chosen_at = None  # nothing ran: the next step's batch is chosen when it starts
        # With an empty batch every waiting request fits (lengths are clipped to the pool), so a queue here is a bug.
        assert self.Q.size == 0 and self.P.n == 0, "requests wait but none can be admitted into an empty batch"
        nxt = self.next_arrival
        if nxt == math.inf:
            nxt = t0 + IDLE_TICK_S
        t1 = max(t0, min(nxt, limit))
        self.clock = t1
        st = self.stats
        st.ticks += 1
        st.batch_hist[0] += 1
        st.hist.push_row((t1, t1 - t0, self.pool.util, self.Q.size + self.P.n, 0, 0, 0, 0.0, 0.0, 0.0, 0.0))
        st.last_batch = 0
        return idle_result(tick, t1, t1 - t0, self.fast, admitted, pre)

    def complete(self, gone: np.ndarray, t: float) -> np.ndarray:
        """Finished rows (`gone`: their sorted row numbers, or a mask of them): hand them to the accounting, free
        their blocks, start their users thinking, drop them. A tick's usual one finished row wakes its user by
        Source.wake_one, its user read as a Python int (the same draw as wake's), unless it has none (an open-loop
        arrival); Table.drop and keying.release take their own one-row paths."""
        R = self.R
        if gone.dtype is _MASK:  # a mask (a quiet run's last step): its row numbers
            gone = gone.nonzero()[0]  # (np.flatnonzero's wrappers cost more than the call on a tick's few rows)
        c = R.cols
        di, df = c.i.take(gone, axis=1), c.f.take(gone, axis=1)
        d = Rows(di, df)
        df[_DONE] = t
        k = gone.size
        if self.aggs.at is not None:  # (kept or about to be found stale: adjusting costs less than asking which)
            self.aggs.tally(di[_CACHED], -1)
        keying.release(self, d)
        R.drop(gone)
        st = self.stats
        st.completed += k
        if self.staged:
            st.stage_done += np.bincount(d.stage, minlength=st.stages)
        else:
            st.stage_done[0] += k
        st.finish(d)
        if self.spec.debug:
            total = d.total
            bad = d.gen != total
            assert not bad.any(), f"finished request {int(d.id[bad][0])} generated " \
                f"{int(d.gen[bad][0])} tokens, asked for {int(total[bad][0])}"
        if self.rec is not None:
            self.rec.done(self, finished_times(d))
        if self.on_done is not None:
            self.on_done(d)
        # Closed-loop users think, then send again (if still active and the run still takes requests).
        if k == _ONE_ROW:
            user = di.item(_USER, 0)
            if user >= 0:  # (-1: an open-loop arrival, no user to wake, as Arrivals.think_one's first test: ~2 us of
                self.source.wake_one(user, t)  # calls a fleet replica's completion skips, through its Feed)
        else:
            self.source.wake(di[_USER], t)  # (fields by plain ints: Rows' properties index by IntEnum, ~0.3 us each)
        return di[_ID]

    def abort(self, rid: int) -> bool:
        """Drop request `rid` wherever it is (its client went away, as vLLM aborts a request on disconnect): a
        running one gives back its blocks (keyed ones stay cached for others), and it is counted aborted, never
        finished. False if no request here has that id (it already finished)."""
        for table in (self.R, self.P, self.Q):
            hit = np.flatnonzero(table.col("id") == rid)
            if not hit.size:
                continue
            row = table.remove_at(int(hit[0]))
            if table is self.R:
                self.aggs.at = None  # (rows that change between steps: the next plan counts the aggregates again)
                keying.release(self, row)
                if row.cached[0] < row.target[0]:
                    self.n_pf -= 1
            self.stats.aborted += 1
            return True
        return False

    # ---- invariants ---------------------------------------------------------------------------
    def check(self, prev_clock: float) -> None:
        """Every invariant of the loop; AssertionError with the first one that fails."""
        R, P, Q = self.R, self.P, self.Q
        r, p, q = R.rows(), P.rows(), Q.rows()
        lane = "fast lane" if self.fast else "lane"
        assert self.clock >= prev_clock, f"{lane}: clock went back from {prev_clock} to {self.clock}"
        self.check_conserved()
        pool = self.pool
        private = int((r.blocks - r.full).sum())
        assert private == pool.private, f"{lane}: private blocks held by requests {private} != pool's {pool.private}"
        assert (r.full <= r.cached >> SHIFT).all(), f"{lane}: a request holds a keyed block it has not filled"
        if self.caching:
            pool.check()
            held = int(r.full.sum())
            refs = int(pool._ref.sum())
            assert held == refs, f"{lane}: keyed blocks held by requests {held} != the pool's references {refs}"
        else:
            assert not r.full.any(), f"{lane}: keyed blocks with prefix caching off"
        if self.lora is not None:
            assert LoraSlots.in_batch(r.adapter).size <= self.lora.slots.size, f"{lane}: more adapters than slots"
        assert self.pool.used <= self.pool.total, \
            f"{lane}: KV blocks used {self.pool.used} exceed capacity {self.pool.total}"
        assert (r.blocks == blocks_for(r.cached)).all(), \
            f"{lane}: a running request holds the wrong number of blocks for its cache"
        assert not p.blocks.any() and not q.blocks.any(), f"{lane}: a waiting request holds KV blocks"
        assert not p.cached.any() and not q.cached.any(), f"{lane}: a waiting request has a cache"
        dec = r.cached >= r.target
        assert (r.cached[dec] == r.prompt[dec] + r.gen[dec] - 1).all(), \
            f"{lane}: a decoding request's cache is not prompt + generated - 1"
        assert (r.gen < r.total).all(), f"{lane}: a running request has all its tokens"
        assert self.n_pf == int(np.count_nonzero(~dec)), f"{lane}: prefill count out of step"
        aggs = self.aggs
        if aggs.at == (self.clock, R.n):  # kept for the next step: what counting them again gives
            kept = CacheAggs()
            kept.count(r.cached, aggs.at)
            assert aggs.total == kept.total, f"{lane}: kept cache total {aggs.total} != {kept.total}"
            opens = [aggs.opens[(j - aggs.phase) & (BLOCK - 1)] for j in range(BLOCK)]
            assert opens == kept.opens, f"{lane}: kept cache lengths mod {BLOCK} {opens} != {kept.opens}"
        a = self.source.arrivals
        assert (a.u_next[~a.u_pending] == np.inf).all(), f"{lane}: a user not waiting has a send time"
        ids = np.concatenate([r.id, p.id, q.id])
        assert np.unique(ids).size == ids.size, f"{lane}: a request is in two states at once"
