"""The serving loop: a tick-based engine that schedules requests onto a GPU and prices every step.

Per tick: arrivals join the queue, the scheduler keeps running requests going (preempting the newest
under KV pressure) and admits waiting ones while blocks, slots and the token budget allow, the step
model prices the batch from its aggregates, the clock advances by the step time, tokens are emitted,
finished requests leave and their users start thinking.

Per-request state is a struct of arrays: each table is a pair of 2-D numpy arrays (int64 and float64
columns) that grows by doubling. A request lives in exactly one table: the queue (FIFO), the
preempted set, or the running batch; when it finishes its latencies go to bounded rings and its row
is dropped. No Python object exists per request, and every history kept is bounded.

The fast lane (fast_share > 0) is modelled as a second, dedicated GPU group of the same kind serving
only fast users at a batch cap of fast_max_batch. Sharing one GPU cannot make anyone faster: if the
GPU alternated a small fast batch with the normal batch, every user would get one token per
alternation, so fast users would gain nothing; strict priority would starve the normal lane. Dedicated
capacity at a small batch is how such a tier is served, and it shows the claim's trade (C21): the
small batch is faster per user and costs more per token. Each lane is an independent `_Lane` with its
own KV pool, queue and clock; the Engine steps whichever lane is furthest behind, so time moves
forward for both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from engine.config import SCHEDULERS, EngineConfig
from engine.errors import InputError
from engine.snapshot import KV_BLOCK_TOKENS, Phase, RequestView, Snapshot
from engine.specs import WEIGHT_DTYPES, load_hardware, load_model
from engine.step import StepCost, StepModel, StepOptions
from engine.workload import Dist, Sampler, parse_dist, seeded_rngs

# ---- table layout -------------------------------------------------------------------------------
# int64 columns
I_ID, I_USER, I_PROMPT, I_THINK, I_TOTAL, I_TARGET, I_CACHED, I_GEN, I_BLOCKS, I_SEQ, I_FAST, I_PREEMPTS, \
    I_INPUT = range(13)
NI = 13
# float64 columns
F_ARRIVAL, F_ADMIT, F_FIRST, F_VISIBLE, F_DONE = range(5)
NF = 5

_BLOCK = KV_BLOCK_TOKENS
_SHIFT = 4  # log2(16): blocks for c cached tokens = (c + 15) >> 4
assert 1 << _SHIFT == _BLOCK

HISTORY_POINTS = 512  # per-tick UI history (kv_util, queue, tok/s, step time): the last 512 ticks
LATENCY_SAMPLES = 65_536  # per-request latencies for percentiles: a ring of the last 65,536 completions
ROLLING_SAMPLES = 256  # the UI's rolling TTFT/TPOT: the last 256 completions
RECENT_DONE = 64  # finished requests kept for the snapshot
SNAPSHOT_QUEUE_ROWS = 1024  # queued requests shown in a snapshot (the count is always exact)
IDLE_TICK_S = 0.1  # clock step of an engine with nothing to do and nothing coming (e.g. zero users)

_EMPTY = np.zeros(0, dtype=np.int64)
_EMPTY.flags.writeable = False
_ONES = np.ones(1 << 16, dtype=np.int64)
_ONES.flags.writeable = False

# history columns
H_TIME, H_DT, H_KV, H_QUEUE, H_BATCH, H_OUT, H_IN, H_CIN, H_COUT, H_FLOPS, H_BYTES = range(11)
NH = 11
# latency ring columns
L_TTFT, L_TTFT_RAW, L_TPOT, L_E2E, L_QUEUE = range(5)
NL = 5


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


class _Table:
    """Rows of requests as two 2-D arrays (int and float columns), grown by doubling."""

    __slots__ = ("i", "f", "n")

    def __init__(self, cap: int = 64) -> None:
        self.i = np.zeros((cap, NI), dtype=np.int64)
        self.f = np.full((cap, NF), np.nan)
        self.n = 0

    def reserve(self, extra: int) -> None:
        """Make room for `extra` more rows."""
        need = self.n + extra
        cap = self.i.shape[0]
        if need > cap:
            while cap < need:
                cap *= 2
            i = np.zeros((cap, NI), dtype=np.int64)
            f = np.full((cap, NF), np.nan)
            i[:self.n] = self.i[:self.n]
            f[:self.n] = self.f[:self.n]
            self.i, self.f = i, f

    def append(self, ri: np.ndarray, rf: np.ndarray) -> None:
        """Append rows (int part, float part) at the end."""
        k = ri.shape[0]
        self.reserve(k)
        self.i[self.n:self.n + k] = ri
        self.f[self.n:self.n + k] = rf
        self.n += k

    def keep(self, mask: np.ndarray) -> None:
        """Drop the rows where mask is False, keeping order."""
        m = int(np.count_nonzero(mask))
        self.i[:m] = self.i[:self.n][mask]
        self.f[:m] = self.f[:self.n][mask]
        self.n = m


class _Queue(_Table):
    """FIFO of waiting requests in arrival order: appended at the tail, admitted from the head."""

    __slots__ = ("head",)

    def __init__(self, cap: int = 64) -> None:
        super().__init__(cap)
        self.head = 0

    @property
    def size(self) -> int:
        """Requests waiting in the queue."""
        return self.n - self.head

    def reserve(self, extra: int) -> None:
        # Slide the live rows down before growing: admitted rows at the front are dead space.
        if self.head and self.n + extra > self.i.shape[0]:
            live = self.n - self.head
            self.i[:live] = self.i[self.head:self.n]
            self.f[:live] = self.f[self.head:self.n]
            self.n, self.head = live, 0
        super().reserve(extra)

    def pop(self, k: int) -> None:
        """Drop k rows from the head (they were admitted); an emptied queue rewinds."""
        self.head += k
        if self.head == self.n:
            self.head = self.n = 0


class _Ring:
    """A fixed-size ring of float rows: the last `cap` values appended, for bounded statistics."""

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


class _Shared:
    """What the lanes of one engine share: request ids, the request budget, the closed-loop user count."""

    __slots__ = ("next_id", "accepted", "limit", "users", "duration")

    def __init__(self, limit: int | None, users: int, duration: float | None) -> None:
        self.next_id = 0
        self.accepted = 0
        self.limit = limit
        self.users = users
        self.duration = duration


def _is_fast_user(u: np.ndarray, share: float) -> np.ndarray:
    """Spread fast users evenly over user indices: user u is fast when floor((u+1)f) steps past floor(uf)."""
    return np.floor((u + 1) * share) > np.floor(u * share)


class _Lane:
    """One GPU group (tp GPUs) with its own KV pool, queue and clock, serving its share of the users."""

    def __init__(self, eng: Engine, fast: bool, rngs: list[np.random.Generator]) -> None:
        cfg = eng._cfg
        self.eng = eng
        self.fast = fast
        self.sh: _Shared = eng._shared
        self.sm: StepModel = eng._sm
        self.clock = 0.0
        self.R = _Table(64)
        self.Q = _Queue(64)
        self.P = _Table(16)
        self.blocks_total = eng._blocks_total
        self.blocks_used = 0
        self.blocks_peak = 0
        self.n_pf = 0  # running rows still prefilling (cached < target)
        self.seq = 0  # admission order: the newest running request is the last row of R
        self.set_sched(cfg.scheduler, cfg.max_batch, cfg.max_batched_tokens)
        self.share = cfg.fast_share if fast else 1.0 - cfg.fast_share
        # samplers: independent streams, so lengths never depend on how arrivals interleave
        pool_tokens = self.blocks_total * _BLOCK
        cap = min(self.sm.model.max_context, pool_tokens)
        self.cap_tokens = cap
        self.s_prompt = Sampler(eng._d_prompt, rngs[0], True, 1, max(1, cap - 1))
        self.s_output = Sampler(eng._d_output, rngs[1], True, 1)
        self.s_think = Sampler(eng._d_think, rngs[2], True, 0)
        self.s_think_time = Sampler(eng._d_think_time, rngs[3], False, 0.0)
        self.s_gap = Sampler(Dist("exp", 1.0), rngs[4], False, 0.0)
        self.think_zero = eng._d_think.is_fixed and eng._d_think.a == 0
        self.clipped = 0
        # closed loop: next send time per (global) user; inf while a request is outstanding or not ours
        self.u_next = np.full(0, np.inf)
        self.u_pending = np.zeros(0, dtype=bool)  # user waits to send (thinking or about to send)
        self.next_user = math.inf
        self.rate = cfg.rate * self.share
        self.next_poisson = math.inf
        if self.rate > 0:
            self.next_poisson = float(self.s_gap.take(1)[0]) / self.rate
        self.set_users(self.sh.users, 0.0)
        # accounting (per GPU of this lane's group)
        self.ticks = 0
        self.accepted = 0
        self.completed = 0
        self.preemptions = 0
        self.out_tokens = 0
        self.visible_tokens = 0
        self.in_tokens = 0
        self.recomputed_tokens = 0
        self.busy_s = 0.0
        self.charge_in_s = 0.0
        self.charge_out_s = 0.0
        self.flops = 0.0
        self.flops_useful = 0.0
        self.bytes = 0.0
        self.slo_ok = 0
        self.slo_ok_tokens = 0
        self.batch_hist = np.zeros(max(self.max_batch, 1) + 1, dtype=np.int64)
        self.hist = _Ring(HISTORY_POINTS, NH)
        self.lat = _Ring(LATENCY_SAMPLES, NL)
        self.done_i = _Ring(RECENT_DONE, NI)
        self.done_f = _Ring(RECENT_DONE, NF)
        self.last_cost: StepCost | None = None
        self.last_batch = 0

    # ---- configuration ------------------------------------------------------------------------
    def set_sched(self, name: str, max_batch: int, max_batched_tokens: int) -> None:
        """Scheduler name and knobs; the fast lane's batch is capped at fast_max_batch."""
        self.sched = name
        self.chunked = name == "chunked"
        self.static = name == "static"
        self.max_batch = min(max_batch, self.eng._cfg.fast_max_batch) if self.fast else max_batch
        self.mbt = max_batched_tokens
        if hasattr(self, "batch_hist") and self.batch_hist.size <= self.max_batch:
            grown = np.zeros(self.max_batch + 1, dtype=np.int64)
            grown[:self.batch_hist.size] = self.batch_hist
            self.batch_hist = grown

    def set_users(self, n: int, t: float) -> None:
        """Users [0, n) are active; ours (by fast flag) start sending at t if idle; the rest stop after their answer."""
        old = self.u_next.size
        if n > old:
            grow = n - old
            self.u_next = np.concatenate([self.u_next, np.full(grow, np.inf)])
            self.u_pending = np.concatenate([self.u_pending, np.zeros(grow, dtype=bool)])
        u = np.arange(self.u_next.size)
        share = self.eng._cfg.fast_share
        if share > 0:
            mine = (u < n) & (_is_fast_user(u, share) == self.fast)
        else:
            mine = (u < n) & (not self.fast)
        # New or re-activated users that are neither waiting nor thinking send now.
        outstanding = self._outstanding_users()
        start = mine & ~self.u_pending & ~outstanding
        self.u_next[start] = t
        self.u_pending[start] = True
        stop = ~mine & self.u_pending
        self.u_next[stop] = np.inf
        self.u_pending[stop] = False
        self.n_users = n
        self._refresh_next_user()

    def _outstanding_users(self) -> np.ndarray:
        """Users that have a request somewhere in this lane (queued, preempted or running)."""
        out = np.zeros(self.u_next.size, dtype=bool)
        for ii in (self.R.i[:self.R.n], self.P.i[:self.P.n], self.Q.i[self.Q.head:self.Q.n]):
            us = ii[:, I_USER]
            us = us[(us >= 0) & (us < out.size)]
            out[us] = True
        return out

    def _refresh_next_user(self) -> None:
        """Recompute the earliest closed-loop send time."""
        self.next_user = float(self.u_next.min()) if self.u_next.size else math.inf

    # ---- state queries ------------------------------------------------------------------------
    @property
    def next_arrival(self) -> float:
        """Time of the next request this lane will get (inf past the run's bounds)."""
        t = min(self.next_user, self.next_poisson)
        d = self.sh.duration
        if d is not None and t > d:
            return math.inf
        if self.sh.limit is not None and self.sh.accepted >= self.sh.limit:
            return math.inf
        return t

    @property
    def has_work(self) -> bool:
        """Some request is queued, preempted or running here."""
        return self.R.n > 0 or self.Q.size > 0 or self.P.n > 0

    @property
    def dormant(self) -> bool:
        """Nothing to run and nothing coming: the lane needs no ticks."""
        return not self.has_work and self.next_arrival == math.inf

    # ---- arrivals -----------------------------------------------------------------------------
    def _arrive(self, t: float) -> None:
        """Turn every send and Poisson arrival at or before t into a queued request (in time order)."""
        times: list[np.ndarray] = []
        users: list[np.ndarray] = []
        if self.next_user <= t:
            u = np.flatnonzero(self.u_next <= t)
            times.append(self.u_next[u])
            users.append(u)
            self.u_next[u] = np.inf
            self.u_pending[u] = False
            self._refresh_next_user()
        if self.next_poisson <= t:
            ts = []
            nxt = self.next_poisson
            while nxt <= t:
                ts.append(nxt)
                nxt += float(self.s_gap.take(1)[0]) / self.rate
            self.next_poisson = nxt
            times.append(np.array(ts))
            users.append(np.full(len(ts), -1, dtype=np.int64))
        if not times:
            return
        tt = np.concatenate(times) if len(times) > 1 else times[0]
        uu = np.concatenate(users) if len(users) > 1 else users[0]
        if len(tt) > 1:
            order = np.argsort(tt, kind="stable")
            tt, uu = tt[order], uu[order]
        sh = self.sh
        if sh.duration is not None:
            keep = tt <= sh.duration
            if not keep.all():
                self._drop_users(uu[~keep])
                tt, uu = tt[keep], uu[keep]
        if sh.limit is not None:
            room = sh.limit - sh.accepted
            if len(tt) > room:
                self._drop_users(uu[room:])
                tt, uu = tt[:room], uu[:room]
        k = len(tt)
        if k:
            self._create(tt, uu)

    def _drop_users(self, uu: np.ndarray) -> None:
        """Users whose send fell past the run's bounds never send again (they are not requests)."""
        us = uu[uu >= 0]
        self.u_next[us] = np.inf
        self.u_pending[us] = False

    def _create(self, tt: np.ndarray, uu: np.ndarray) -> None:
        """Append k new requests to the queue, with seeded lengths clipped to what the model and pool allow."""
        k = len(tt)
        sh = self.sh
        prompt = self.s_prompt.take(k)
        think = self.s_think.take(k)
        output = self.s_output.take(k)
        # A request's whole cache (prompt + every generated token) must fit the context and the pool.
        room = self.cap_tokens - prompt
        over = think + output > room
        if over.any():
            self.clipped += int(over.sum())
            think = np.where(over, np.minimum(think, room - 1), think)
            output = np.where(over, np.maximum(1, room - think), output)
        self.clipped += self.s_prompt.clipped
        self.s_prompt.clipped = 0
        ri = np.zeros((k, NI), dtype=np.int64)
        ri[:, I_ID] = np.arange(sh.next_id, sh.next_id + k)
        ri[:, I_USER] = uu
        ri[:, I_PROMPT] = prompt
        ri[:, I_THINK] = think
        ri[:, I_TOTAL] = think + output
        ri[:, I_TARGET] = prompt
        if self.fast:
            ri[:, I_FAST] = 1
        rf = np.full((k, NF), np.nan)
        rf[:, F_ARRIVAL] = tt
        sh.next_id += k
        sh.accepted += k
        self.accepted += k
        self.Q.append(ri, rf)

    # ---- scheduling ---------------------------------------------------------------------------
    def _plan_running(self) -> tuple[np.ndarray | None, np.ndarray | None, int]:
        """Tokens each running row computes this step (None: one each, pure decode), new-block mask, blocks needed."""
        R = self.R
        n = R.n
        if n == 0:
            return None, None, 0
        cached = R.i[:n, I_CACHED]
        if self.n_pf == 0:
            nb = (cached & (_BLOCK - 1)) == 0  # the next token opens a new block
            return None, nb, int(np.count_nonzero(nb))
        rem = R.i[:n, I_TARGET] - cached
        pf = rem > 0
        new = np.where(pf, rem, 1)
        if self.chunked:
            # Decodes first (one token each), then prefill chunks, oldest first, in what budget is left.
            budget = max(0, self.mbt - int(n - np.count_nonzero(pf)))
            r = rem[pf]
            start = np.cumsum(r) - r
            new[pf] = np.clip(budget - start, 0, r)
        need = int((((cached + new + _BLOCK - 1) >> _SHIFT) - R.i[:n, I_BLOCKS]).sum())
        return new, None, need

    def _preempt_newest(self) -> int:
        """Evict the newest running request: free its blocks; it waits (ahead of fresh arrivals) to be recomputed."""
        R = self.R
        j = R.n - 1
        row_i = R.i[j:j + 1].copy()
        row_f = R.f[j:j + 1].copy()
        self.blocks_used -= int(row_i[0, I_BLOCKS])
        if row_i[0, I_CACHED] < row_i[0, I_TARGET]:
            self.n_pf -= 1
        # Recompute every known token (prompt + generated) before decoding resumes.
        row_i[0, I_TARGET] = row_i[0, I_PROMPT] + row_i[0, I_GEN]
        row_i[0, I_CACHED] = 0
        row_i[0, I_BLOCKS] = 0
        row_i[0, I_PREEMPTS] += 1
        R.n -= 1
        self.P.append(row_i, row_f)
        self.preemptions += 1
        return int(row_i[0, I_ID])

    def _admit(self, free: int, tokens_planned: int, prefill_planned: bool, t: float) -> np.ndarray:
        """Admit waiting requests (preempted first, then FIFO) while slots, blocks and the token budget allow.

        Returns the tokens each admitted row prefills this step (rows are appended to R in order).
        """
        R, P, Q = self.R, self.P, self.Q
        slots = self.max_batch - R.n
        if slots <= 0 or (self.static and R.n > 0) or (P.n == 0 and Q.size == 0):
            return _EMPTY
        if P.n:
            order = np.argsort(P.i[:P.n, I_ID], kind="stable")[:slots]
            mq = min(slots - len(order), Q.size)
            ci = np.concatenate([P.i[order], Q.i[Q.head:Q.head + mq]])
            cf = np.concatenate([P.f[order], Q.f[Q.head:Q.head + mq]])
        else:
            order = _EMPTY
            mq = min(slots, Q.size)
            ci = Q.i[Q.head:Q.head + mq]
            cf = Q.f[Q.head:Q.head + mq]
        target = ci[:, I_TARGET]
        if self.chunked:
            budget = self.mbt - tokens_planned
            start = np.cumsum(target) - target
            chunk = np.clip(budget - start, 0, target)
            ok = chunk > 0
        elif self.static:
            # A static batch reads every prompt in one step, whatever the token budget.
            chunk = target
            ok = np.ones(len(target), dtype=bool)
        else:
            # Whole prompts within the token budget; one prompt always goes if nothing else prefills,
            # so a prompt longer than the budget is not stuck forever.
            chunk = target
            ok = np.cumsum(target) <= self.mbt - tokens_planned
            if not prefill_planned:
                ok[0] = True
        ok &= np.cumsum((chunk + _BLOCK - 1) >> _SHIFT) <= free
        k = len(ok) if ok.all() else int(np.argmin(ok))
        if k == 0:
            return _EMPTY
        chunk = chunk[:k].copy()
        ai = ci[:k].copy()
        af = cf[:k].copy()
        ai[:, I_SEQ] = np.arange(self.seq, self.seq + k)
        self.seq += k
        ai[:, I_BLOCKS] = (chunk + _BLOCK - 1) >> _SHIFT
        first = np.isnan(af[:, F_ADMIT])
        af[first, F_ADMIT] = t
        R.append(ai, af)
        kp = min(k, len(order))
        if kp:
            keep = np.ones(P.n, dtype=bool)
            keep[order[:kp]] = False
            P.keep(keep)
        if k > kp:
            Q.pop(k - kp)
        self.blocks_used += int(ai[:, I_BLOCKS].sum())
        self.n_pf += k
        return chunk

    # ---- one tick -----------------------------------------------------------------------------
    def step(self, limit: float, tick: int) -> TickResult:
        """Run one step of this lane (or an idle jump to its next arrival, at most to `limit`)."""
        t0 = self.clock
        if self.next_arrival <= t0:
            self._arrive(t0)
        R = self.R
        # 1. Keep the running batch going; under KV pressure evict the newest until the step fits.
        new, nb, need = self._plan_running()
        preempted: list[int] = []
        while need > self.blocks_total - self.blocks_used:
            preempted.append(self._preempt_newest())
            new, nb, need = self._plan_running()
        n_run = R.n
        tokens_planned = n_run if new is None else int(new.sum())
        # Decode rows add one token each; anything beyond that is prefill already in this step.
        prefill_planned = new is not None and tokens_planned > n_run - self.n_pf
        # 2. Admit while blocks, batch slots and the token budget allow.
        chunks = self._admit(self.blocks_total - self.blocks_used - need, tokens_planned, prefill_planned, t0)
        n = R.n
        k = n - n_run
        admitted = R.i[n_run:n, I_ID].copy() if k else _EMPTY
        pre = np.array(preempted, dtype=np.int64) if preempted else _EMPTY
        if n == 0:
            return self._idle(limit, tick, admitted, pre)
        if k:
            new = np.concatenate([_ONES[:n_run] if new is None else new, chunks])
            nb = None
        self.blocks_used += need
        if self.blocks_used > self.blocks_peak:
            self.blocks_peak = self.blocks_used
        # 3. Price the step from aggregates and advance the clock.
        ti = R.i
        cached = ti[:n, I_CACHED]
        model = self.sm.model
        local = model.sliding_layers > 0
        if new is None:
            # Pure decode: every row adds one token on top of its cache.
            sum_ctx = float(cached.sum())
            attn = sum_ctx + 0.5 * n
            if local:
                sum_win = float(model.local_seen(cached).sum())
                attn_win = sum_win + 0.5 * n
            else:
                sum_win = attn_win = 0.0
            cost = self.sm.cost_agg(n, n, sum_ctx, sum_win, attn, attn_win, n, attn_decode=attn)
            share_in = 0.0
            in_new = recomputed = 0
            tokens = n
        else:
            target = ti[:n, I_TARGET]
            pf = cached < target
            fresh_end = cached + new
            emit = (fresh_end >= target) & (new > 0)
            seqs = int(np.count_nonzero(new))
            tokens = int(new.sum())
            nf = new.astype(np.float64)
            a = nf * (cached + nf / 2)
            attn = float(a.sum())
            sum_ctx = float(cached.sum())
            if local:
                sum_win = float(model.local_seen(cached).sum())
                attn_win = float(model.local_pairs(cached, nf).sum())
            else:
                sum_win = attn_win = 0.0
            logits = int(np.count_nonzero(emit))
            cost = self.sm.cost_agg(tokens, seqs, sum_ctx, sum_win, attn, attn_win, logits,
                                    attn_decode=float(a[~pf].sum()))  # rows past their prompt decode
            # Prompt tokens read for the first time are input; re-reading after a preemption is recompute.
            prompt = ti[:n, I_PROMPT]
            reach = np.minimum(fresh_end, prompt)
            gained = np.maximum(reach - ti[:n, I_INPUT], 0)
            in_new = int(gained.sum())
            ti[:n, I_INPUT] += gained
            t_pf = int(new[pf].sum())
            recomputed = t_pf - in_new
            # Cost rule: a step's time is split between prefill and decode by each side's share of the
            # step's FLOPs. Every token passes through the same weights, so the matmuls (and the weight
            # read they share) go by token count; attention goes to whoever attends; the LM head to
            # whoever needs logits. Prefill time is then charged to input tokens, decode time to output.
            share_in = 0.0
            if t_pf:
                fl = cost.flops
                ftot = cost.flops_total
                lg_pf = int(np.count_nonzero(emit & pf))
                part = fl["matmul"] * t_pf / tokens
                if attn:
                    part += fl["attention"] * float(a[pf].sum()) / attn
                if logits:
                    part += fl["lm_head"] * lg_pf / logits
                share_in = part / ftot if ftot else 0.0
        dt = cost.time_s
        t1 = t0 + dt
        self.clock = t1
        # 4. Apply: caches grow, tokens come out, first-token times are stamped.
        F = R.f
        gen = ti[:n, I_GEN]
        if new is None:
            ti[:n, I_CACHED] += 1
            ti[:n, I_BLOCKS] += nb
            gen += 1
            ids = ti[:n, I_ID].copy()
            counts = _ONES[:n]
            if not self.think_zero:
                vis = gen == ti[:n, I_THINK] + 1
                if vis.any():
                    F[:n, F_VISIBLE][vis] = t1
            n_emit = n
        else:
            ti[:n, I_CACHED] = fresh_end
            ti[:n, I_BLOCKS] = (fresh_end + _BLOCK - 1) >> _SHIFT
            gen += emit
            first = emit & (gen == 1)
            if first.any():
                F[:n, F_FIRST][first] = t1
            vis = emit & (gen == ti[:n, I_THINK] + 1)
            if vis.any():
                F[:n, F_VISIBLE][vis] = t1
            ids = ti[:n, I_ID][emit]
            n_emit = len(ids)
            counts = _ONES[:n_emit]
            self.n_pf = int(np.count_nonzero(ti[:n, I_CACHED] < target))
        if self.think_zero:
            vis_tokens = n_emit
        else:
            vis_tokens = int(np.count_nonzero(gen[:n] > ti[:n, I_THINK])) if new is None else \
                int(np.count_nonzero(emit & (gen > ti[:n, I_THINK])))
        done = gen >= ti[:n, I_TOTAL]
        completed = self._complete(done, t1) if done.any() else _EMPTY
        # 5. Account.
        self.ticks += 1
        self.out_tokens += n_emit
        self.visible_tokens += vis_tokens
        self.in_tokens += in_new
        self.recomputed_tokens += recomputed
        self.busy_s += dt
        c_in = dt * share_in
        self.charge_in_s += c_in
        self.charge_out_s += dt - c_in
        ftot = cost.flops_total
        self.flops += ftot
        useful = ftot * (1.0 - recomputed / tokens) if recomputed else ftot
        self.flops_useful += useful
        b = cost.bytes_total
        self.bytes += b
        mb = self.max_batch
        self.batch_hist[n if n <= mb else mb] += 1
        self.hist.push_row((t1, dt, self.blocks_used / self.blocks_total if self.blocks_total else 0.0,
                            self.Q.size + self.P.n, n, n_emit, in_new, c_in, dt - c_in, useful, b))
        self.last_cost = cost
        self.last_batch = n
        return TickResult(tick, t1, dt, cost, self.fast, ids, counts, admitted, pre, completed)

    def _idle(self, limit: float, tick: int, admitted: np.ndarray, pre: np.ndarray) -> TickResult:
        """Nothing runnable: jump to the next arrival (or `limit`), a zero-token tick."""
        t0 = self.clock
        # With an empty batch every waiting request fits (lengths are clipped to the pool), so a queue here is a bug.
        assert self.Q.size == 0 and self.P.n == 0, "requests wait but none can be admitted into an empty batch"
        nxt = self.next_arrival
        if nxt == math.inf:
            nxt = t0 + IDLE_TICK_S
        t1 = max(t0, min(nxt, limit))
        self.clock = t1
        self.ticks += 1
        self.batch_hist[0] += 1
        self.hist.push_row((t1, t1 - t0, self.blocks_used / self.blocks_total if self.blocks_total else 0.0,
                            self.Q.size + self.P.n, 0, 0, 0, 0.0, 0.0, 0.0, 0.0))
        self.last_batch = 0
        return TickResult(tick, t1, t1 - t0, None, self.fast, _EMPTY, _EMPTY, admitted, pre, _EMPTY)

    def _complete(self, done: np.ndarray, t: float) -> np.ndarray:
        """Finished rows: record latencies, free their blocks, start their users thinking, drop them."""
        R = self.R
        n = R.n
        di = R.i[:n][done]
        df = R.f[:n][done]
        df[:, F_DONE] = t
        k = len(di)
        self.blocks_used -= int(di[:, I_BLOCKS].sum())
        R.keep(~done)
        self.completed += k
        arr = df[:, F_ARRIVAL]
        ttft = df[:, F_VISIBLE] - arr
        ttft_raw = df[:, F_FIRST] - arr
        e2e = t - arr
        total = di[:, I_TOTAL]
        # TPOT: time per generated token after the first (hidden tokens included); undefined for 1 token.
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(total > 1, (t - df[:, F_FIRST]) / (total - 1), np.nan)
        qd = df[:, F_ADMIT] - arr
        self.lat.push(np.column_stack([ttft, ttft_raw, tpot, e2e, qd]))
        cfg = self.eng._cfg
        if cfg.slo_ttft is not None or cfg.slo_tpot is not None:
            ok = np.ones(k, dtype=bool)
            if cfg.slo_ttft is not None:
                ok &= ttft <= cfg.slo_ttft
            if cfg.slo_tpot is not None:
                ok &= ~(tpot > cfg.slo_tpot)
            self.slo_ok += int(ok.sum())
            self.slo_ok_tokens += int(total[ok].sum())
        if self.eng._cfg.debug:
            bad = di[:, I_GEN] != total
            assert not bad.any(), f"finished request {int(di[bad][0, I_ID])} generated " \
                f"{int(di[bad][0, I_GEN])} tokens, asked for {int(total[bad][0])}"
        kept = di.astype(np.float64)
        kept[:, I_BLOCKS] = 0  # their blocks went back to the pool
        self.done_i.push(kept)
        self.done_f.push(df)
        # Closed-loop users think, then send again (if still active and the run still takes requests).
        us = di[:, I_USER]
        us = us[us >= 0]
        if us.size:
            us = us[us < self.sh.users]
            if us.size:
                tt = t + self.s_think_time.take(us.size)
                self.u_next[us] = tt
                self.u_pending[us] = True
                m = float(tt.min())
                if m < self.next_user:
                    self.next_user = m
        return di[:, I_ID]

    # ---- live changes -------------------------------------------------------------------------
    def set_pool(self, blocks_total: int) -> list[int]:
        """Resize the KV pool; if it shrank below what is held, preempt the newest until it fits."""
        self.blocks_total = blocks_total
        self.cap_tokens = min(self.sm.model.max_context, blocks_total * _BLOCK)
        self.s_prompt.hi = max(1, self.cap_tokens - 1)
        out = []
        while self.blocks_used > self.blocks_total and self.R.n:
            out.append(self._preempt_newest())
        return out

    def max_request_tokens(self) -> int:
        """Largest prompt + generation of any live request (what the pool must hold for one request alone)."""
        m = 0
        for ii in (self.R.i[:self.R.n], self.P.i[:self.P.n], self.Q.i[self.Q.head:self.Q.n]):
            if len(ii):
                m = max(m, int((ii[:, I_PROMPT] + ii[:, I_TOTAL]).max()))
        return m

    # ---- invariants ---------------------------------------------------------------------------
    def check(self, prev_clock: float) -> None:
        """Every invariant of the loop; AssertionError with the first one that fails."""
        R, P, Q = self.R, self.P, self.Q
        ri, pi, qi = R.i[:R.n], P.i[:P.n], Q.i[Q.head:Q.n]
        lane = "fast lane" if self.fast else "lane"
        assert self.clock >= prev_clock, f"{lane}: clock went back from {prev_clock} to {self.clock}"
        count = R.n + P.n + Q.size + self.completed
        assert count == self.accepted, \
            f"{lane}: running {R.n} + preempted {P.n} + queued {Q.size} + done {self.completed}" \
            f" != accepted {self.accepted}"
        held = int(ri[:, I_BLOCKS].sum())
        assert held == self.blocks_used, f"{lane}: blocks held by requests {held} != pool's count {self.blocks_used}"
        assert self.blocks_used <= self.blocks_total, \
            f"{lane}: KV blocks used {self.blocks_used} exceed capacity {self.blocks_total}"
        assert (ri[:, I_BLOCKS] == (ri[:, I_CACHED] + _BLOCK - 1) >> _SHIFT).all(), \
            f"{lane}: a running request holds the wrong number of blocks for its cache"
        assert not pi[:, I_BLOCKS].any() and not qi[:, I_BLOCKS].any(), f"{lane}: a waiting request holds KV blocks"
        assert not pi[:, I_CACHED].any() and not qi[:, I_CACHED].any(), f"{lane}: a waiting request has a cache"
        dec = ri[:, I_CACHED] >= ri[:, I_TARGET]
        assert (ri[dec, I_CACHED] == ri[dec, I_PROMPT] + ri[dec, I_GEN] - 1).all(), \
            f"{lane}: a decoding request's cache is not prompt + generated - 1"
        assert (ri[:, I_GEN] < ri[:, I_TOTAL]).all(), f"{lane}: a running request has all its tokens"
        assert self.n_pf == int(np.count_nonzero(~dec)), f"{lane}: prefill count out of step"
        assert (self.u_next[~self.u_pending] == np.inf).all(), f"{lane}: a user not waiting has a send time"
        ids = np.concatenate([ri[:, I_ID], pi[:, I_ID], qi[:, I_ID]])
        assert np.unique(ids).size == ids.size, f"{lane}: a request is in two states at once"


class Engine:
    """The serving engine: build from an EngineConfig, then step(), advance(), snapshot(), metrics().

    Live knobs between ticks: set_users, set_compute_mult, set_bandwidth_mult, set_weight_dtype,
    set_scheduler; reset(config) rebuilds (e.g. another model or GPU) with the same workload.
    """

    def __init__(self, config: EngineConfig | None = None) -> None:
        self._build(config or EngineConfig())

    # ---- building -----------------------------------------------------------------------------
    def _build(self, cfg: EngineConfig) -> None:
        """Validate the config (InputError, one line) and lay out the lanes."""
        _validate(cfg)
        hw = load_hardware(cfg.hardware)
        model = load_model(cfg.model)
        # Every step option the config names (tp, dtypes, ideal, runtime, multipliers, ...) is passed through.
        opts = StepOptions(**{f.name: getattr(cfg, f.name) for f in fields(StepOptions) if hasattr(cfg, f.name)})
        sm = StepModel(hw, model, opts)
        sm.check_fits()
        self._cfg = cfg
        self._sm = sm
        self._d_prompt = parse_dist(cfg.prompt, "--prompt", 1)
        self._d_output = parse_dist(cfg.output, "--output", 1)
        self._d_think = parse_dist(cfg.think, "--think", 0)
        self._d_think_time = parse_dist(cfg.think_time, "--think-time", 0)
        self._blocks_total = self._pool_blocks(sm)
        self._check_lengths(sm, self._blocks_total)
        self._shared = _Shared(cfg.requests, cfg.users, cfg.duration)
        rngs = seeded_rngs(cfg.seed, 10)
        self._lanes = [_Lane(self, False, rngs[:5])]
        if cfg.fast_share > 0:
            self._lanes.append(_Lane(self, True, rngs[5:]))
        self._tick = 0
        self._clock = 0.0
        self._dtype_note = ""

    def _pool_blocks(self, sm: StepModel) -> int:
        """KV pool in 16-token blocks: per-GPU capacity over per-GPU bytes per block (or the config's override)."""
        if self._cfg.kv_pool_blocks is not None:
            return int(self._cfg.kv_pool_blocks)
        return int(sm.kv_capacity_bytes // (_BLOCK * sm.kv_bytes_per_token))

    def _check_lengths(self, sm: StepModel, blocks: int) -> None:
        """Fixed lengths that can never be served are an input error (sampled ones are clipped and reported)."""
        m = sm.model
        dp, dt_, do = self._d_prompt, self._d_think, self._d_output
        if dp.is_fixed and dp.a >= m.max_context:
            raise InputError(f"--prompt {dp.a:g} is longer than {m.name}'s context of {m.max_context:,} tokens")
        if dp.is_fixed and dt_.is_fixed and do.is_fixed:
            total = round(dp.a) + round(dt_.a) + round(do.a)
            if total > m.max_context:
                raise InputError(f"--prompt {dp.a:g} plus {round(dt_.a) + round(do.a):,} generated tokens exceed "
                                 f"{m.name}'s context of {m.max_context:,} tokens")
            if total > blocks * _BLOCK:
                gb = total * sm.kv_bytes_per_token / 1e9
                raise InputError(f"one request of {total:,} tokens needs {gb:.1f} GB of KV cache but the pool holds "
                                 f"{blocks * _BLOCK:,} tokens ({blocks * _BLOCK * sm.kv_bytes_per_token / 1e9:.1f} GB);"
                                 " use shorter lengths, --kv-dtype fp8, or more --tp")
        if blocks < 1:
            raise InputError("the KV pool has no room for a single 16-token block")

    # ---- properties ---------------------------------------------------------------------------
    @property
    def config(self) -> EngineConfig:
        """The live configuration (setters update it, so reset(replace(engine.config, ...)) keeps the knobs)."""
        return self._cfg

    @property
    def clock(self) -> float:
        """Simulated seconds: the earliest clock among lanes with work (every event before it is final)."""
        return self._clock

    @property
    def tick(self) -> int:
        """Ticks run since the start (idle ticks included)."""
        return self._tick

    @property
    def step_model(self) -> StepModel:
        """The StepModel pricing every step, with the live knobs applied."""
        return self._sm

    @property
    def finished(self) -> bool:
        """The run's bound is reached: --requests all served, or --duration elapsed."""
        sh = self._shared
        if sh.duration is not None and self._clock >= sh.duration:
            return True
        if sh.limit is not None and sh.accepted >= sh.limit:
            return all(not lane.has_work for lane in self._lanes)
        return False

    @property
    def requests_completed(self) -> int:
        """Answers finished so far, every lane (cheap: for progress bars)."""
        return sum(lane.completed for lane in self._lanes)

    @property
    def kv_blocks_total(self) -> int:
        """KV pool size in 16-token blocks (per GPU group of the main lane)."""
        return self._lanes[0].blocks_total

    # ---- running ------------------------------------------------------------------------------
    def step(self) -> TickResult:
        """Advance one tick: one step of the lane furthest behind, or an idle jump to the next arrival."""
        return self._step(math.inf)

    def _step(self, limit: float) -> TickResult:
        """One tick; idle jumps stop at `limit` (advance's target or the run's duration)."""
        lanes = self._lanes
        prev = self._clock
        if len(lanes) == 1:
            # One lane: it idles by itself (jumping to its next arrival), so no bookkeeping across lanes.
            lane = lanes[0]
            self._tick += 1
            res = lane.step(limit, self._tick)
            self._clock = lane.clock
            if self._cfg.debug:
                lane.check(prev)
                assert lane.accepted == self._shared.accepted, "lane and engine disagree on requests accepted"
            return res
        live = [ln for ln in lanes if not ln.dormant]
        if not live:
            # Nothing to run and nothing coming: let time pass (bounded by `limit`) so a UI clock runs.
            t1 = max(prev, min(prev + IDLE_TICK_S, limit))
            for ln in lanes:
                ln.clock = max(ln.clock, t1)
            self._clock = t1
            self._tick += 1
            return TickResult(self._tick, t1, t1 - prev, None, False, _EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY)
        lane = live[0] if len(live) == 1 else min(live, key=lambda ln: ln.clock)
        self._tick += 1
        lane_prev = lane.clock
        res = lane.step(limit, self._tick)
        live = [ln for ln in lanes if not ln.dormant]
        self._clock = max(prev, min(ln.clock for ln in live) if live else max(ln.clock for ln in lanes))
        if self._cfg.debug:
            assert self._clock >= prev, f"engine clock went back from {prev} to {self._clock}"
            lane.check(lane_prev)
            acc = sum(ln.accepted for ln in lanes)
            assert acc == self._shared.accepted, f"lanes accepted {acc} != engine accepted {self._shared.accepted}"
        if len(lanes) > 1:
            res = replace(res, time_s=self._clock)
        return res

    def advance(self, sim_seconds: float) -> int:
        """Run ticks until the clock has moved `sim_seconds` (or the run is finished); returns ticks run."""
        if not sim_seconds > 0:
            return 0
        target = self._clock + sim_seconds
        n = 0
        while self._clock < target and not self.finished:
            self._step(target)
            n += 1
        return n

    def run(self, max_ticks: int | None = None) -> int:
        """Run until the run's bound (--requests or --duration) is reached; returns ticks run."""
        sh = self._shared
        if sh.limit is None and sh.duration is None:
            raise InputError("an unbounded workload never finishes: give --requests N or --duration S")
        n = 0
        while not self.finished and (max_ticks is None or n < max_ticks):
            self._step(math.inf if sh.duration is None else sh.duration)
            n += 1
        return n

    # ---- live changes -------------------------------------------------------------------------
    def set_users(self, n: int) -> None:
        """Closed-loop users: new ones send now; removed ones finish their current answer and stop."""
        if isinstance(n, bool) or int(n) != n or n < 0:
            raise InputError(f"users must be a whole number >= 0, got {n}")
        n = int(n)
        self._shared.users = n
        for lane in self._lanes:
            was_dormant = lane.dormant
            if was_dormant:
                lane.clock = max(lane.clock, self._clock)
            lane.set_users(n, max(lane.clock, self._clock) if was_dormant else lane.clock)
        self._cfg = replace(self._cfg, users=n)

    def _set_step_model(self, sm: StepModel) -> list[int]:
        """Install a new step model in every lane, resizing pools; returns preempted ids."""
        self._sm = sm
        out: list[int] = []
        blocks = self._pool_blocks(sm)
        for lane in self._lanes:
            lane.sm = sm
            if blocks != lane.blocks_total:
                out += lane.set_pool(blocks)
        self._blocks_total = blocks
        return out

    def set_compute_mult(self, x: float) -> None:
        """What-if: scale peak FLOP/s (x2 doubles compute)."""
        x = _positive_number(x, "compute multiplier")
        self._set_step_model(self._sm.with_options(compute_mult=x))
        self._cfg = replace(self._cfg, compute_mult=x)

    def set_bandwidth_mult(self, x: float) -> None:
        """What-if: scale HBM bandwidth."""
        x = _positive_number(x, "bandwidth multiplier")
        self._set_step_model(self._sm.with_options(bandwidth_mult=x))
        self._cfg = replace(self._cfg, bandwidth_mult=x)

    def set_weight_dtype(self, dtype: str | None) -> list[int]:
        """What-if: weights in another dtype. The pool is re-sized; if it shrinks, the newest requests are
        preempted until it fits. Returns the preempted ids. InputError (nothing changed) if it cannot fit."""
        if dtype is not None and dtype not in WEIGHT_DTYPES:
            raise InputError(f"weight dtype must be one of {', '.join(WEIGHT_DTYPES)}, got {dtype!r}")
        sm = self._sm.with_options(weight_dtype=dtype)
        sm.check_fits()
        blocks = self._pool_blocks(sm)
        self._check_lengths(sm, blocks)
        biggest = max(lane.max_request_tokens() for lane in self._lanes)
        if biggest > blocks * _BLOCK:
            raise InputError(f"with {dtype} weights the KV pool holds {blocks * _BLOCK:,} tokens, less than a live "
                             f"request's {biggest:,}")
        out = self._set_step_model(sm)
        self._cfg = replace(self._cfg, weight_dtype=dtype)
        return out

    def set_scheduler(self, name: str, max_batch: int | None = None, max_batched_tokens: int | None = None) -> None:
        """Switch scheduler or its knobs; running requests carry on under the new rules."""
        cfg = replace(self._cfg, scheduler=name, max_batch=self._cfg.max_batch if max_batch is None else max_batch,
                      max_batched_tokens=self._cfg.max_batched_tokens if max_batched_tokens is None
                      else max_batched_tokens)
        _validate(cfg)
        self._cfg = cfg
        for lane in self._lanes:
            lane.set_sched(cfg.scheduler, cfg.max_batch, cfg.max_batched_tokens)

    def reset(self, config: EngineConfig | None = None) -> None:
        """Start over at time 0: with `config` (e.g. another model or GPU, same workload) or the live one."""
        self._build(config or self._cfg)

    # ---- reading ------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """A read-only frame: copies of the live rows (and the last finished ones), pool, queue, rolling metrics.

        The physical panels (pool, last step, bytes moved) describe the main lane's GPU; request rows and
        counts cover every lane (fast-lane rows have fast=True).
        """
        main = self._lanes[0]
        parts_i: list[np.ndarray] = []
        parts_f: list[np.ndarray] = []
        parts_p: list[np.ndarray] = []
        queued = running = preempted = done = pre_total = 0
        for lane in self._lanes:
            R, P, Q = lane.R, lane.P, lane.Q
            ri = R.i[:R.n]
            ph = np.where(ri[:, I_CACHED] < ri[:, I_TARGET], Phase.PREFILL,
                          np.where(ri[:, I_GEN] < ri[:, I_THINK], Phase.THINKING, Phase.DECODING))
            qn = min(Q.size, SNAPSHOT_QUEUE_ROWS)
            di = lane.done_i.last().astype(np.int64)
            parts_i += [ri, P.i[:P.n], Q.i[Q.head:Q.head + qn], di]
            parts_f += [R.f[:R.n], P.f[:P.n], Q.f[Q.head:Q.head + qn], lane.done_f.last()]
            parts_p += [ph, np.full(P.n, Phase.PREEMPTED), np.full(qn, Phase.QUEUED), np.full(len(di), Phase.DONE)]
            queued += Q.size
            running += R.n
            preempted += P.n
            done += lane.completed
            pre_total += lane.preemptions
        ii = np.concatenate(parts_i)
        ff = np.concatenate(parts_f)
        pp = np.concatenate(parts_p).astype(np.int8)
        order = np.argsort(ii[:, I_ID], kind="stable")
        ii, ff, pp = ii[order], ff[order], pp[order]
        view = RequestView(
            req_id=ii[:, I_ID].copy(), user=ii[:, I_USER].copy(), phase=pp,
            prompt_len=ii[:, I_PROMPT].copy(), prefilled=np.minimum(np.where(pp == Phase.DONE, ii[:, I_PROMPT],
                                                                             ii[:, I_CACHED]), ii[:, I_PROMPT]),
            think_len=ii[:, I_THINK].copy(), output_len=(ii[:, I_TOTAL] - ii[:, I_THINK]),
            generated=ii[:, I_GEN].copy(), kv_blocks=ii[:, I_BLOCKS].copy(), fast=ii[:, I_FAST].astype(bool),
            arrival_s=ff[:, F_ARRIVAL].copy(),
        )
        h = main.hist.last()
        dt = h[:, H_DT]
        with np.errstate(invalid="ignore", divide="ignore"):
            tok_s = np.where(dt > 0, h[:, H_OUT] / dt, 0.0)
        history = {
            "time_s": tuple(h[:, H_TIME].tolist()), "kv_util": tuple(h[:, H_KV].tolist()),
            "queue": tuple(h[:, H_QUEUE].tolist()), "tok_s_out": tuple(tok_s.tolist()),
            "step_ms": tuple((dt * 1e3).tolist()), "batch": tuple(h[:, H_BATCH].tolist()),
        }
        sm = self._sm
        hbm = main.bytes
        return Snapshot(
            tick=self._tick, time_s=self._clock, hardware=sm.hw, model=sm.model, opts=sm.opts, roof=sm.roof,
            scheduler=self._cfg.scheduler, users=self._shared.users, requests=view, last_step=main.last_cost,
            batch_size=main.last_batch, kv_blocks_used=main.blocks_used, kv_blocks_total=main.blocks_total,
            weights_bytes=sm.weight_bytes_per_gpu, kv_capacity_bytes=sm.kv_capacity_bytes,
            reserve_bytes=sm.reserve_bytes, queued=queued, running=running, preempted=preempted, done=done,
            preemptions_total=pre_total,
            # Every HBM byte passes through L2 and into an SM's tray once (no on-chip reuse is modelled).
            bytes_moved={"hbm": hbm, "l2": hbm, "smem": hbm},
            metrics=self.rolling_metrics(), history=history,
        )

    def rolling_metrics(self) -> dict[str, float]:
        """What the UI shows now: rates over the last HISTORY_POINTS ticks, latencies over the last 256 answers."""
        return _rolling(self, self._lanes)

    def metrics(self, fast: bool | None = None) -> dict[str, Any]:
        """Run metrics (the `tokensim run --json` keys) plus the rolling ones; `fast` picks one lane."""
        lanes = self._lanes if fast is None else [ln for ln in self._lanes if ln.fast == fast]
        if not lanes:
            raise InputError("this engine has no fast lane (fast_share is 0)")
        return _run_metrics(self, lanes)


# ---- validation and metrics -------------------------------------------------------------------------

def _positive_number(x: float, what: str) -> float:
    """A finite number > 0 for a live knob, or a one-line InputError."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a number > 0, got {x!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise InputError(f"{what} must be a finite number > 0, got {x!r}")
    return v


def _validate(cfg: EngineConfig) -> None:
    """Contradictory or impossible options: one clear line each."""
    if cfg.scheduler not in SCHEDULERS:
        raise InputError(f"--scheduler must be one of {', '.join(SCHEDULERS)}, got {cfg.scheduler!r}")
    for name, v in (("--max-batch", cfg.max_batch), ("--max-batched-tokens", cfg.max_batched_tokens),
                    ("--fast-max-batch", cfg.fast_max_batch)):
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise InputError(f"{name} must be a whole number >= 1, got {v}")
    if not 0.0 <= cfg.fast_share <= 1.0:
        raise InputError(f"--fast-share must be between 0 and 1, got {cfg.fast_share}")
    if cfg.fast_share >= 1.0:
        raise InputError("--fast-share 1 leaves no normal lane; use --max-batch to run everyone in a small batch")
    if isinstance(cfg.users, bool) or int(cfg.users) != cfg.users or cfg.users < 0:
        raise InputError(f"--users must be a whole number >= 0, got {cfg.users}")
    if not (cfg.rate >= 0 and math.isfinite(cfg.rate)):
        raise InputError(f"--rate must be a finite number >= 0, got {cfg.rate}")
    # users = rate = 0 is an idle engine (a UI may add users later), and users with a rate run both
    # arrival streams together; `tokensim run` refuses both forms as contradictory or empty.
    if cfg.requests is not None and (int(cfg.requests) != cfg.requests or cfg.requests < 1):
        raise InputError(f"--requests must be a whole number >= 1, got {cfg.requests}")
    if cfg.duration is not None and not (cfg.duration > 0 and math.isfinite(cfg.duration)):
        raise InputError(f"--duration must be a finite number of seconds > 0, got {cfg.duration}")
    if cfg.price_per_hour is not None and not (cfg.price_per_hour >= 0 and math.isfinite(cfg.price_per_hour)):
        raise InputError(f"--price-per-hour must be a number >= 0, got {cfg.price_per_hour}")
    for name, v in (("--slo-ttft", cfg.slo_ttft), ("--slo-tpot", cfg.slo_tpot)):
        if v is not None and not (v > 0 and math.isfinite(v)):
            raise InputError(f"{name} must be a number of seconds > 0, got {v}")
    if cfg.kv_pool_blocks is not None and (int(cfg.kv_pool_blocks) != cfg.kv_pool_blocks or cfg.kv_pool_blocks < 1):
        raise InputError(f"--kv-blocks must be a whole number >= 1, got {cfg.kv_pool_blocks}")


def _pcts(x: np.ndarray, qs: tuple[int, ...] = (50, 90, 99)) -> dict[str, float | None]:
    """Percentiles of the finite values (None where there are none)."""
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {f"p{q}": None for q in qs}
    v = np.percentile(x, qs)
    return {f"p{q}": float(a) for q, a in zip(qs, v, strict=True)}


def _price_per_s(eng: Engine) -> float:
    """Dollars per second of one lane's GPU group: $/GPU-hour x tp."""
    cfg = eng._cfg
    p = cfg.price_per_hour if cfg.price_per_hour is not None else eng._sm.hw.price_per_hour
    return p * cfg.tp / 3600.0


def _peaks(eng: Engine) -> tuple[float, float]:
    """Nominal per-GPU peak FLOP/s and HBM bytes/s, with the what-if knobs: the step model's roof."""
    roof = eng._sm.roof
    return roof.peak_flops, roof.bandwidth


def _per_mtok(dollars_s: float, seconds: float, tokens: float) -> float | None:
    """Dollars per million tokens for `seconds` of GPU time at `dollars_s` (None without tokens)."""
    return dollars_s * seconds / tokens * 1e6 if tokens else None


def _batch_p50(lanes: list[_Lane]) -> float:
    """Median batch over every stepping tick (idle ticks excluded), from the exact histogram."""
    size = max(ln.batch_hist.size for ln in lanes)
    h = np.zeros(size, dtype=np.int64)
    for ln in lanes:
        h[:ln.batch_hist.size] += ln.batch_hist
    h[0] = 0
    tot = int(h.sum())
    if not tot:
        return 0.0
    return float(np.searchsorted(np.cumsum(h), (tot + 1) / 2))


def _rolling(eng: Engine, lanes: list[_Lane]) -> dict[str, float]:
    """Rates over the last HISTORY_POINTS ticks of each lane and latencies over the last ROLLING_SAMPLES answers."""
    span = out = inp = cin = cout = fl = by = batch = kv = 0.0
    steps = 0
    for ln in lanes:
        h = ln.hist.last()
        if not len(h):
            continue
        d = float(h[:, H_DT].sum())
        span = max(span, d)
        out += h[:, H_OUT].sum()
        inp += h[:, H_IN].sum()
        cin += h[:, H_CIN].sum()
        cout += h[:, H_COUT].sum()
        fl += h[:, H_FLOPS].sum()
        by += h[:, H_BYTES].sum()
        busy = h[:, H_BATCH] > 0
        steps += int(busy.sum())
        batch += float(h[busy, H_BATCH].sum())
        kv = max(kv, float(h[-1, H_KV]))
    lat = np.concatenate([ln.lat.last(ROLLING_SAMPLES) for ln in lanes])
    peak, bw = _peaks(eng)
    ps = _price_per_s(eng)
    mean_batch = batch / steps if steps else 0.0
    tok_s_out = out / span if span else 0.0
    tt = _pcts(lat[:, L_TTFT], (50,))["p50"] if len(lat) else None
    tp = _pcts(lat[:, L_TPOT], (50,))["p50"] if len(lat) else None
    nl = len(lanes)
    out_d = {
        "tok_s_in": inp / span if span else 0.0,
        "tok_s_out": tok_s_out,
        # A decoding user gets one token per step: per-user speed is the output rate over the mean batch.
        "tok_s_per_user": tok_s_out / mean_batch if mean_batch else 0.0,
        "ttft_p50": float("nan") if tt is None else tt,
        "tpot_p50": float("nan") if tp is None else tp,
        "mfu": fl / (peak * span * nl) if span else 0.0,
        "bw_util": by / (bw * span * nl) if span else 0.0,
        "kv_util": kv,
        "cost_per_mtok_in": float("nan") if not inp else ps * cin / inp * 1e6,
        "cost_per_mtok_out": float("nan") if not out else ps * cout / out * 1e6,
        "batch": mean_batch,
        "queue": float(sum(ln.Q.size + ln.P.n for ln in lanes)),
    }
    return {k: float(v) for k, v in out_d.items()}


def _run_metrics(eng: Engine, lanes: list[_Lane]) -> dict[str, Any]:
    """The whole run: totals, latency percentiles over the last LATENCY_SAMPLES answers, utilisation, cost."""
    sim = max(ln.clock for ln in lanes)
    lat = np.concatenate([ln.lat.last() for ln in lanes])

    def col(c: int) -> np.ndarray:
        """One latency column."""
        return lat[:, c]
    peak, bw = _peaks(eng)
    ps = _price_per_s(eng)
    sm = eng._sm
    nl = len(lanes)
    completed = sum(ln.completed for ln in lanes)
    out = sum(ln.out_tokens for ln in lanes)
    inp = sum(ln.in_tokens for ln in lanes)
    kv_tok = sm.kv_bytes_per_token * _BLOCK
    peak_blocks = max(ln.blocks_peak for ln in lanes)
    cfg = eng._cfg
    slo = cfg.slo_ttft is not None or cfg.slo_tpot is not None
    slo_ok = sum(ln.slo_ok for ln in lanes)
    busy = sum(ln.busy_s for ln in lanes)
    m: dict[str, Any] = {
        "requests_completed": completed,
        "requests_accepted": sum(ln.accepted for ln in lanes),
        "input_tokens": inp,
        "output_tokens": out,
        "visible_tokens": sum(ln.visible_tokens for ln in lanes),
        "recomputed_tokens": sum(ln.recomputed_tokens for ln in lanes),
        "sim_time_s": sim,
        "ticks": eng._tick,
        "throughput_in_tok_s": inp / sim if sim else 0.0,
        "throughput_out_tok_s": out / sim if sim else 0.0,
        "ttft_s": _pcts(col(L_TTFT)),
        "ttft_raw_s": _pcts(col(L_TTFT_RAW)),
        "tpot_s": _pcts(col(L_TPOT)),
        "e2e_s": _pcts(col(L_E2E)),
        "queue_delay_s": _pcts(col(L_QUEUE)),
        "latency_samples": len(lat),
        "goodput_req_s": (slo_ok / sim if sim else 0.0) if slo else None,
        "goodput_tok_s": (sum(ln.slo_ok_tokens for ln in lanes) / sim if sim else 0.0) if slo else None,
        "slo_attainment": (slo_ok / completed if completed else None) if slo else None,
        "kv_capacity_bytes": sm.kv_capacity_bytes,
        "kv_blocks_total": lanes[0].blocks_total,
        "kv_peak_blocks": peak_blocks,
        "kv_peak_bytes": peak_blocks * kv_tok,
        "kv_util_peak": peak_blocks / lanes[0].blocks_total if lanes[0].blocks_total else 0.0,
        "preemptions": sum(ln.preemptions for ln in lanes),
        # MFU and bandwidth use wall (simulated) time, idle included; GPUs of every lane count.
        "mfu": sum(ln.flops_useful for ln in lanes) / (peak * sim * nl) if sim else 0.0,
        "bw_util": sum(ln.bytes for ln in lanes) / (bw * sim * nl) if sim else 0.0,
        "busy_fraction": busy / (sim * nl) if sim else 0.0,
        # Cost charges busy time only (a fleet fills idle time with other work): prefill time to input
        # tokens, decode time to output tokens (split by FLOP share in mixed steps, see _Lane.step).
        "price_per_hour": ps * 3600 / cfg.tp,
        "cost_per_mtok_in": _per_mtok(ps, sum(ln.charge_in_s for ln in lanes), inp),
        "cost_per_mtok_out": _per_mtok(ps, sum(ln.charge_out_s for ln in lanes), out),
        # Median batch of the first lane given (the main one when both are): mixing lanes' ticks would
        # mostly count the fast lane's many small steps.
        "batch_p50": _batch_p50(lanes[:1]),
        "clipped_requests": sum(ln.clipped for ln in lanes),
        "lanes": nl,
    }
    m.update({k: v for k, v in _rolling(eng, lanes).items() if k not in m})
    m["rolling"] = _rolling(eng, lanes)
    return m
