"""Admission: which waiting requests join a lane's running batch this step, and with which first chunk.

Preempted requests go first (lowest id first), then the queue in arrival order, while batch slots, free KV
blocks and the scheduler's token budget allow. With prefix caching a candidate first reuses the longest run
of its content's blocks found in the cache (engine.serving.keying), then takes blocks for the rest of its
chunk. Functions of the lane: its tables, pool and scheduler stay the lane's.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING

import numpy as np

from engine.serving import keying
from engine.serving.lora_slots import WINDOW, LoraSlots, allowed
from engine.serving.tables import BLOCK, SHIFT, FloatCol, IntCol, Rows, blocks_for, spend

if TYPE_CHECKING:
    from engine.serving.lane import Lane

_EMPTY = np.zeros(0, dtype=np.int64)
_EMPTY.flags.writeable = False
_FEW_QUEUED = 16  # up to this many queued rows the async cut is found in a Python list
_FEW_ADMIT = 8  # up to this many queued candidates are tried in Python (_admit_queued)
_SEQ, _BLOCKS, _ADMIT = int(IntCol.SEQ), int(IntCol.BLOCKS), int(FloatCol.ADMIT)  # plain ints index faster
_CACHED, _TARGET, _ARRIVAL = int(IntCol.CACHED), int(IntCol.TARGET), int(FloatCol.ARRIVAL)


def closed(lane: Lane) -> bool:
    """No waiting request can join whatever the blocks: no slot, a policy that admits only into an empty
    batch, or nobody waiting."""
    if not lane.waiting:  # first: the usual answer when a lane is not overloaded
        return True
    n = lane.R.n
    return lane.sched.max_batch <= n or (n > 0 and not lane.sched.admits_while_running())


def blocked(lane: Lane, free: int, tokens_planned: int, prefill_planned: bool) -> bool:
    """No waiting request can join now. Admission takes a leading run of candidates, and a policy's answer
    for a candidate depends only on those ahead of it, so the first in line decides whether any joins."""
    if closed(lane):
        return True
    P = lane.P
    # Preempted requests go first, lowest id first; then the queue's head.
    if lane.lora is not None:  # the first whose adapter fits a slot
        head = _lora_head(lane)
        if head is None:
            return True
    elif P.n:
        j = int(np.argmin(P.col("id")))
        head = P.cols.pick(slice(j, j + 1))
    elif lane.caching and lane.shared_content:
        head = lane.Q.cols.pick(slice(lane.Q.head, lane.Q.head + 1))
    else:  # the queue's head, nothing to look up in the cache: its target as an int is all the rule reads
        return not _fits_one(lane, int(lane.Q.cols.target[lane.Q.head]), free, tokens_planned, prefill_planned)[1]
    if lane.caching and (lane.shared_content or P.n):  # _admit's own test for looking in the cache
        return admit_cached(lane, head, free, tokens_planned, prefill_planned, dry=True)[0] == 0
    return not _fits_one(lane, int(head.target[0]), free, tokens_planned, prefill_planned)[1]


def _fits_one(lane: Lane, target: int, free: int, tokens_planned: int, prefill_planned: bool) -> tuple[int, bool]:
    """One candidate's first chunk (Scheduler.admit_one) and whether it joins: it fits the token budget, and its
    chunk's blocks fit the `free` blocks."""
    chunk, ok = lane.sched.admit_one(target, tokens_planned, prefill_planned)
    return chunk, ok and blocks_for(chunk) <= free


def _lora_allowed(lane: Lane, w: int) -> tuple[np.ndarray, np.ndarray]:
    """Multi-LoRA: the preempted rows in admission order (lowest id first), and which of them and of the queue's
    first `w` rows may join for their adapter (engine.serving.lora_slots.allowed)."""
    P, Q = lane.P, lane.Q
    order = np.argsort(P.col("id"), kind="stable") if P.n else _EMPTY
    cand = np.concatenate([P.col("adapter")[order], Q.col("adapter")[:w]])
    running = LoraSlots.in_batch(lane.R.col("adapter"))
    return order, allowed(cand, running, lane.lora.slots.size - running.size)


def _lora_head(lane: Lane) -> Rows | None:
    """Multi-LoRA: the first waiting row whose adapter fits a slot (None: none does)."""
    order, ok = _lora_allowed(lane, min(lane.Q.size, WINDOW))
    if not ok.any():
        return None
    j = int(ok.argmax())
    if j < len(order):
        return lane.P.cols.pick(slice(int(order[j]), int(order[j]) + 1))
    q = lane.Q.head + j - len(order)
    return lane.Q.cols.pick(slice(q, q + 1))


def _lora_candidates(lane: Lane, slots: int, w: int, t: float) -> tuple[np.ndarray, int, np.ndarray] | None:
    """_candidates under multi-LoRA: the preempted rows and the queue's first `w` rows (those that arrived by the
    async cut) whose adapters fit, at most `slots`. Queued ones that fit move ahead of those that do not (keeping
    their order, as vLLM's skipped requests keep theirs), and the ones passed over start waiting for a slot."""
    P, Q = lane.P, lane.Q
    order, ok = _lora_allowed(lane, w)
    npre = len(order)
    seen = ok[:slots]
    if not seen.all():  # passed over among those a free batch slot would have taken
        miss = np.flatnonzero(~seen)
        lane.lora.passed_over(P.cols.f, order[miss[miss < npre]], t)
        lane.lora.passed_over(Q.cols.f, Q.head + miss[miss >= npre] - npre, t)
    okq = ok[npre:]
    if not okq.all():
        perm = np.concatenate([np.flatnonzero(okq), np.flatnonzero(~okq)]) + Q.head
        span = slice(Q.head, Q.head + w)
        Q.cols.i[:, span] = Q.cols.i[:, perm]
        Q.cols.f[:, span] = Q.cols.f[:, perm]
    order = order[ok[:npre]][:slots]
    mq = min(slots - len(order), int(np.count_nonzero(okq)))
    if not len(order) and not mq:
        return None
    return order, mq, np.concatenate([P.col("target")[order], Q.col("target")[:mq]])


def admit(lane: Lane, free: int, tokens_planned: int, prefill_planned: bool, t: float,
          cut: float = math.inf) -> tuple[np.ndarray, bool]:
    """Admit waiting requests (preempted first, by id, then FIFO) while slots, `free` blocks and the scheduler's
    budget allow; they move to the end of R holding their first chunk's blocks. Queued requests that arrived
    after `cut` (async scheduling: when this step's batch was chosen) wait.

    Returns the tokens each admitted row prefills this step, and whether they are whole prompts read from an
    empty cache (no cache hit and no prompt split: waiting requests hold no cache).
    """
    if closed(lane):
        return _EMPTY, False
    if not lane.P.n and lane.lora is None and not (lane.caching and lane.shared_content):
        # Only the queue (no preempted row, no adapters, nothing to find in the cache), and a few candidates: the
        # usual admission (the queue rarely holds more at moderate load; a busy batch frees a slot or a few a step).
        Q = lane.Q
        h = Q.head
        mq = min(lane.sched.max_batch - lane.R.n, Q.n - h)
        if mq <= _FEW_ADMIT:
            if cut < t:  # async scheduling: those of them that arrived by the cut (the queue is in arrival order)
                mq = bisect.bisect_right(Q.cols.arrival[h:h + mq].tolist(), cut)
                if not mq:
                    return _EMPTY, False
            return _admit_queued(lane, mq, free, tokens_planned, prefill_planned, t)
    picked = _candidates(lane, t, cut)
    if picked is None:
        return _EMPTY, False
    order, mq, target = picked
    # Nothing can be found in the cache unless some content is shared or a preempted request left its own.
    if lane.caching and (lane.shared_content or lane.P.n > 0):
        return _admit_rows(lane, order, mq, True, free, tokens_planned, prefill_planned, t)
    return _admit_rows(lane, order, mq, False, free, tokens_planned, prefill_planned, t, target)


def _admit_rows(lane: Lane, order: np.ndarray, mq: int, cached_path: bool, free: int, tokens_planned: int,
                prefill_planned: bool, t: float, target: np.ndarray = _EMPTY) -> tuple[np.ndarray, bool]:
    """admit() for any candidates (the preempted rows at `order` in P, then the queue's first `mq` rows, whose
    targets are `target`): looking in the prefix cache if `cached_path`, else the leading run that fits."""
    P, Q = lane.P, lane.Q
    if cached_path:
        cand = Rows.join([P.rows().pick(order), Q.rows(mq)]) if len(order) else Q.rows(mq)
        k, chunk, hit, hkey = admit_cached(lane, cand, free, tokens_planned, prefill_planned)
        whole = False
    else:
        chunk, ok = lane.sched.admit_chunks(target, tokens_planned, prefill_planned)
        bl = blocks_for(chunk)
        took = bl.cumsum()  # blocks the first j + 1 candidates take
        ok &= took <= free
        k = len(ok) if np.count_nonzero(ok) == len(ok) else int(ok.argmin())  # (.all() costs 4x on a few rows)
        whole = lane.sched.whole_prompts or bool((chunk[:k] == target[:k]).all())
        assert not (lane.spec.debug and lane.sched.whole_prompts) or (chunk[:k] == target[:k]).all(), \
            f"scheduler {lane.sched.name!r} says whole_prompts but split a prompt"
    if k == 0:
        return _EMPTY, False
    chunk = chunk[:k].copy()
    kp = min(k, len(order))
    # The admitted rows move to the end of R; `a` is a view of them there.
    a = lane.R.append_view(Rows.join([P.rows().pick(order[:kp]), Q.rows(k - kp)]) if kp else Q.rows(k))
    a.seq[:] = np.arange(lane.seq, lane.seq + k)
    lane.seq += k
    if cached_path:
        _start_cached(lane, a, hit[:k], hkey[:k], chunk)
    else:
        lane.pool.alloc(int(took[k - 1]))
        a.blocks[:] = bl[:k]  # a waiting request holds no cache: its chunk's blocks
    _leave_waiting(lane, a, k, kp, order, t)
    if lane.lora is not None:
        lane.lora.admitted(a, LoraSlots.in_batch(lane.R.col("adapter")), t)
    return chunk, whole


def _admit_queued(lane: Lane, mq: int, free: int, tokens_planned: int, prefill_planned: bool,
                  t: float) -> tuple[np.ndarray, bool]:
    """_admit_rows for the queue's first `mq` rows (a few: no cache to look in, no preempted row, no adapters): the
    same steps on plain ints, lists and whole-column writes, since numpy's per-call cost (~1 us) dwarfs a few
    rows' work. The scheduler's chunk rule is its admit_few (admit_one for one row); the tests check this path
    against _admit_rows call by call and on whole runs."""
    sched = lane.sched
    Q, R = lane.Q, lane.R
    h = Q.head
    if mq == 1:  # the usual lone candidate: the loop below for one row, without its lists
        tg = [Q.cols.target.item(h)]
        c, ok = sched.admit_one(tg[0], tokens_planned, prefill_planned)
        took = blocks_for(c)
        if not ok or took > free:
            return _EMPTY, False
        chunks, blocks = [c], [took]
    else:
        tg = Q.cols.target[h:h + mq].tolist()
        chunks, took = leading_fit(sched.admit_few(tg, tokens_planned, prefill_planned), free)
        if not chunks:
            return _EMPTY, False
        blocks = [blocks_for(c) for c in chunks]
    k = len(chunks)
    whole = sched.whole_prompts or chunks == tg[:k]
    assert not (lane.spec.debug and sched.whole_prompts) or chunks == tg[:k], \
        f"scheduler {sched.name!r} says whole_prompts but split a prompt"
    n = R.n
    R.append_buf(Q.cols.b[:, h:h + k])  # every field in one copy (may grow R's arrays: read them after)
    ri, rf = R.cols.i, R.cols.f
    seq = lane.seq
    adm = rf[_ADMIT]
    # Scalar writes, row by row (a sequence written into a few rows' slice costs ~0.5 us more than a few of them).
    for j, nb in enumerate(blocks, n):
        ri[_SEQ, j] = seq + j - n
        ri[_BLOCKS, j] = nb  # a waiting request holds no cache: its chunk's blocks
        if math.isnan(adm[j]):  # _leave_waiting: first admitted now
            adm[j] = t
    lane.seq = seq + k
    lane.pool.alloc(took)
    Q.pop(k)
    lane.n_pf += k
    return np.array(chunks, dtype=np.int64), whole


def admit_lone(lane: Lane, n_run: int, t: float, cut: float) -> tuple[int, int] | None:
    """The usual join at low load, planned and admitted on Python ints: at most one running row, decoding (n_run
    0 or 1), and one request queued, nothing preempted, no adapters, nothing to find in the cache (Lane.step checks
    these). What Lane._plan_running, closed, admit and _admit_queued do for it, in one call: returns the admitted
    row's chunk and the blocks the running row's next token opens (0 or 1), or None, changing nothing but the
    plan's dropped aggregates, where the general path must run instead (no slot, the async cut, preemption, the
    budget or the blocks refuse it, or a split prompt: a mixed step). steps.join_lone runs the step."""
    sched = lane.sched
    if sched.max_batch <= n_run or (n_run and not sched.admits_while_running()):  # closed()
        return None
    Q = lane.Q
    h = Q.head
    qi = Q.cols.i
    if cut < t and Q.cols.f.item(_ARRIVAL, h) > cut:  # async scheduling: it arrived after the batch was chosen
        return None
    need = 0
    if n_run:  # _plan_running of one decoding row: its next token opens a block when its cache fills one
        lane.aggs.at = None
        if not lane.R.cols.i.item(_CACHED, 0) & (BLOCK - 1):
            need = 1
    free = lane.pool.available - need
    if free < 0:  # preemption first
        return None
    tg = qi.item(_TARGET, h)
    c, ok = sched.admit_one(tg, n_run, False)  # (tokens planned: one a decoding row; no prefill planned)
    took = blocks_for(c)
    if not ok or took > free or not (sched.whole_prompts or c == tg):
        return None
    assert not (lane.spec.debug and sched.whole_prompts) or c == tg, \
        f"scheduler {sched.name!r} says whole_prompts but split a prompt"
    # _admit_queued's one row (lane.n_pf is left at 0: the join step ends the admitted row's prefill)
    R = lane.R
    R.append_buf(Q.cols.b[:, h:h + 1])
    ri, rf = R.cols.i, R.cols.f
    ri[_SEQ, n_run] = lane.seq
    ri[_BLOCKS, n_run] = took  # a waiting request holds no cache: its chunk's blocks
    if math.isnan(rf.item(_ADMIT, n_run)):  # _leave_waiting: first admitted now
        rf[_ADMIT, n_run] = t
    lane.seq += 1
    lane.pool.alloc(took)
    Q.pop(1)
    return c, need


def _candidates(lane: Lane, t: float, cut: float) -> tuple[np.ndarray, int, np.ndarray] | None:
    """Who may be admitted, in order: the preempted rows' positions in P (lowest id first), how many of the
    queue's head follow them, and all their targets; None when none may (async scheduling's cut)."""
    P, Q = lane.P, lane.Q
    slots = lane.sched.max_batch - lane.R.n
    w = qn = Q.size
    if cut < t and qn:  # the queue is in arrival order
        if qn <= _FEW_QUEUED:  # a short queue: bisect a list (searchsorted's call costs ~2 us; same answer)
            h = Q.head
            w = bisect.bisect_right(Q.cols.arrival[h:h + qn].tolist(), cut)
        else:
            w = int(Q.col("arrival").searchsorted(cut, side="right"))
        slots = min(slots, P.n + w)
        if slots <= 0:
            return None
    if lane.lora is not None:
        return _lora_candidates(lane, slots, min(w, WINDOW), t)
    if P.n:
        order = np.argsort(P.col("id"), kind="stable")[:slots]
        mq = min(slots - len(order), qn)
        return order, mq, np.concatenate([P.col("target")[order], Q.col("target")[:mq]])
    mq = min(slots, qn)
    return _EMPTY, mq, Q.cols.target[Q.head:Q.head + mq]  # Q.col("target")[:mq]


def _start_cached(lane: Lane, a: Rows, hit: np.ndarray, hkey: np.ndarray, chunk: np.ndarray) -> None:
    """Admitted rows `a` start with the blocks they found in the prefix cache and hold blocks for their chunk."""
    # Reused blocks are in the cache already: the row starts with them, computes the rest.
    a.full[:] = hit
    a.hkey[:] = hkey
    a.cached[:] = hit * BLOCK
    if lane.pool.tiers is not None:
        # Blocks found only in a tier below the GPU came back over its link before the step could run.
        lane.load_s += lane.pool.tiers.take_load_s(lane.sm.kv_bytes_per_token)
    fresh = np.maximum(np.minimum(a.cached, a.prompt) - a.input, 0)  # prompt tokens never read before
    a.input[:] += fresh
    a.hit[:] += fresh
    nf = int(fresh.sum())
    lane.stats.in_tokens += nf
    lane.stats.cached_in_tokens += nf
    a.blocks[:] = blocks_for(a.cached + chunk)


def _leave_waiting(lane: Lane, a: Rows, k: int, kp: int, order: np.ndarray, t: float) -> None:
    """The k admitted rows `a` (the first kp of them preempted ones, at `order` in P) leave P and Q at t."""
    P, Q = lane.P, lane.Q
    first = np.isnan(a.admit)
    a.admit[first] = t
    if kp:
        back = a.pick(slice(0, kp))  # readmitted after a preemption: their wait ends, their recompute starts
        spend(back, t, back.pre, back.pre_v)
        back.mark[:] = t  # (views: this writes a's rows)
    if kp:
        keep = np.ones(P.n, dtype=bool)
        keep[order[:kp]] = False
        P.keep(keep)
    if k > kp:
        Q.pop(k - kp)
    lane.n_pf += k


def admit_cached(lane: Lane, cand: Rows, free: int, tokens_planned: int, prefill_planned: bool,
                 dry: bool = False) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Admission with prefix caching, candidate by candidate in order: each reuses the longest run of cached
    blocks of its content (never the block holding its last token, which must be computed), then takes
    blocks for the rest of its first chunk. Stops at the first that does not fit the budget or the pool.
    Returns how many were admitted, their chunks, reused blocks and last reused key. `dry`: only whether the
    first would join (1 or 0), changing nothing."""
    pool = lane.pool
    reserve = pool.available - free  # the running batch's growth this step
    n = len(cand)
    # The same head that did not fit last time still does not while nothing that could help has happened:
    # no more blocks to be had, no new keys in the cache, no more of the token budget.
    memo = (int(cand.id[0]), pool.keys_added)
    if lane.blocked_head[:2] == memo and free <= lane.blocked_head[2] and tokens_planned >= lane.blocked_head[3]:
        return 0, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    chunks = np.zeros(n, dtype=np.int64)
    hits = np.zeros(n, dtype=np.int64)
    hkeys = np.zeros(n, dtype=np.int64)
    planned, pf_planned = tokens_planned, prefill_planned
    maxhit = _max_hits(cand)
    if not maxhit.any():
        k, chunk = _admit_unkeyed(lane, cand, free, tokens_planned, prefill_planned, dry)
        return k, chunk, hits, hkeys
    j, batch = 0, 1
    while j < n:
        # Keys for a few candidates at a time (1, 4, 16, ...): a blocked queue head costs one request's keys.
        sl = slice(j, min(n, j + batch))
        mh = maxhit[sl]
        if j == 0 and lane.head_keys[0] == memo[0] and lane.head_keys[1].size == mh[0]:
            keys = lane.head_keys[1]  # a waiting head is tried every tick: its keys do not change
        else:
            keys = keying.block_keys(cand.id[sl], cand.group[sl], cand.prefix[sl], cand.body[sl], cand.sess[sl],
                                     cand.prompt[sl], np.zeros_like(mh), mh, np.zeros_like(mh), lane.texts)
            if j == 0:
                lane.head_keys = (memo[0], keys)
        ends = np.cumsum(mh)
        tg = cand.target[sl]
        for i in range(len(mh)):
            kk = keys[ends[i] - mh[i]:ends[i]]
            h = pool.match(kk)
            if h and pool.tiers is not None:
                h = keying.worth_loading(lane, kk[:h])
            rem = int(tg[i]) - h * BLOCK
            ch, ok = lane.sched.admit_one(rem, planned, pf_planned)
            nb = blocks_for(h * BLOCK + ch) - h
            if dry:
                fits = ok and nb <= pool.available - pool.revivable(kk[:h]) - reserve
                return int(fits), chunks, hits, hkeys
            if not ok or not pool.admit(kk[:h], nb, reserve, len(kk)):
                if j + i == 0:
                    lane.blocked_head = (*memo, free, tokens_planned)
                return j + i, chunks, hits, hkeys
            chunks[j + i], hits[j + i] = ch, h
            if h:
                hkeys[j + i] = np.int64(kk[h - 1].astype(np.int64))
            planned += ch
            pf_planned = True
        j += len(mh)
        batch *= 4
    return n, chunks, hits, hkeys


def _admit_unkeyed(lane: Lane, cand: Rows, free: int, tokens_planned: int, prefill_planned: bool,
                   dry: bool) -> tuple[int, np.ndarray]:
    """admit_cached when no candidate could find a block in the cache: the leading run that fits the budget and
    the free blocks, and their chunks (`dry`: 1 if the first fits, else 0, taking nothing)."""
    chunk, ok = lane.sched.admit_chunks(cand.target, tokens_planned, prefill_planned)
    ok &= np.cumsum(blocks_for(chunk)) <= free
    k = len(ok) if ok.all() else int(np.argmin(ok))
    if dry:
        return min(k, 1), chunk
    if k:
        lane.pool.alloc(int(blocks_for(chunk[:k]).sum()))
    return k, chunk


def _max_hits(cand: Rows) -> np.ndarray:
    """Blocks each candidate could find cached: never the one holding its last token (it must be computed), and
    only shareable ones unless it was preempted (its own blocks were cached when it left)."""
    maxhit = (cand.target - 1) >> SHIFT
    return np.where(cand.preempts > 0, maxhit, np.minimum(maxhit, keying.shareable(cand.prompt, cand.prefix,
                                                                                    cand.body, cand.sess)))


def leading_fit(fits: list[tuple[int, bool]], free: int) -> tuple[list[int], int]:
    """Admission's rule on ints (_admit_queued, and the saturated and open-loop stretches' plans): the leading run of
    the scheduler's (chunk, fits the budget) answers whose block counts, added up, fit the `free` blocks; returns
    their chunks and the blocks they take."""
    chunks: list[int] = []
    took = 0
    for c, ok in fits:
        nb = blocks_for(c)
        if not ok or took + nb > free:
            break
        chunks.append(c)
        took += nb
    return chunks, took
