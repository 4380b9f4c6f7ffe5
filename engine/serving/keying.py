"""Prefix-cache keying for a lane: which of a request's blocks are keyed by content, their keys, and what
happens to keyed blocks when rows fill them, leave the batch, or find them only in host memory.

A full block's key chains its parent's key with its own tokens (engine.serving.prefix_cache.chain_keys, as
vLLM's automatic prefix caching hashes blocks). A request's tokens are identified by streams: its group's
shared prefix, then its body (a shared prompt, or the request's own stream), then what it generates (the
body's stream in a session, so the next turn finds it). Functions of the lane's running rows: the pool and
the request table stay the lane's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.physics.batch import Batch
from engine.serving.prefix_cache import TAG_REQUEST, chain_keys, stream_id
from engine.serving.tables import BLOCK, SHIFT, IntCol, Rows

if TYPE_CHECKING:
    from engine.serving.lane import Lane

_ALL = np.int64(1) << 40  # "every block" in shareable
_FEW_ROWS = 32  # release(): up to this many rows sum their blocks in Python
_FULL, _BLOCKS = int(IntCol.FULL), int(IntCol.BLOCKS)


def block_keys(rid: np.ndarray, group: np.ndarray, prefix: np.ndarray, body: np.ndarray, sess: np.ndarray,
               prompt: np.ndarray, first: np.ndarray, count: np.ndarray, parent: np.ndarray,
               texts: dict[int, np.ndarray] | None = None) -> np.ndarray:
    """Content keys of blocks first..first+count-1 of these requests (flattened): the group's prefix, then the
    body (the request's own stream when it has none), then generated tokens (the body's stream in a session);
    a text body's blocks by their content (`texts`: the lane's table, prefix_cache.text_streams)."""
    own = stream_id(TAG_REQUEST, rid)
    b = np.where(body != 0, body, own)
    gen = np.where(sess != 0, b, own)
    return chain_keys(parent.astype(np.uint64), first, count, group, prefix, b, prompt, gen, texts)


def shareable(prompt: np.ndarray, prefix: np.ndarray, body: np.ndarray, sess: np.ndarray) -> np.ndarray:
    """Leading blocks another request could ask for: a session's every block, a shared prompt's full blocks,
    else the group prefix's. A request's own tokens are keyed only when it is preempted (so its return
    reuses them): no one else can hit them, and keying them would cost every request work for nothing."""
    return np.where(sess != 0, _ALL, np.where(body != 0, prompt >> SHIFT, prefix >> SHIFT))


def fill(lane: Lane, idx: np.ndarray, every: bool = False) -> None:
    """Running rows `idx` may have completed blocks: key the shareable ones (all of them when `every`) into
    the cache; where another request computed the same block, the row shares that one and its copy is freed."""
    c = lane.R.cols
    first = c.full[idx]
    full = c.cached[idx] >> SHIFT
    if not every:
        full = np.minimum(full, shareable(c.prompt[idx], c.prefix[idx], c.body[idx], c.sess[idx]))
    cnt = full - first
    grow = cnt > 0
    if not grow.all():
        idx, first, cnt = idx[grow], first[grow], cnt[grow]
    if not idx.size:
        return
    keys = block_keys(c.id[idx], c.group[idx], c.prefix[idx], c.body[idx], c.sess[idx], c.prompt[idx], first,
                      cnt, c.hkey[idx], lane.texts)
    lane.pool.fill(keys)
    c.full[idx] += cnt
    c.hkey[idx] = keys[np.cumsum(cnt) - 1].astype(np.int64)


def release(lane: Lane, r: Rows) -> None:
    """Rows leaving the batch give back every block: keyed ones go to the cache when no one else holds them."""
    i = r.i
    if i.shape[1] == 1:  # one row (a tick's usual finisher): its two counts read as Python ints
        if not lane.caching or not i.item(_FULL, 0):
            lane.pool.give(i.item(_BLOCKS, 0))
            return
    elif not lane.caching or not np.count_nonzero(r.full):  # (no keyed blocks without caching: check() holds it)
        b = r.blocks
        # (a tick's few rows: a Python sum of the list, 0.3 us against ndarray.sum's 1.2; exact either way)
        lane.pool.give(sum(b.tolist()) if b.size <= _FEW_ROWS else int(b.sum()))
        return
    private = int((r.blocks - r.full).sum())
    z = np.zeros(len(r), dtype=np.int64)
    keys = block_keys(r.id, r.group, r.prefix, r.body, r.sess, r.prompt, z, r.full, z, lane.texts)
    lane.pool.release(keys, private)


def worth_loading(lane: Lane, hits: np.ndarray) -> int:
    """How many of these matched blocks to reuse: all, unless some are only in a tier below the GPU (host memory,
    disk, remote) and copying them back over the tiers' links takes longer than computing them again (then the
    run stops before the first such block). A preempted request whose blocks went to host memory thus swaps back
    in or recomputes, whichever is cheaper."""
    back = lane.pool.on_host(hits)
    if not back.any():
        return len(hits)
    sm = lane.sm
    tiers = lane.pool.tiers
    assert tiers is not None, "blocks off the GPU with no tier below it"
    tokens = int(back.sum()) * BLOCK
    load = tiers.seconds(tiers.counts(hits[back].tolist()), sm.kv_bytes_per_token)  # each tier's link and latency
    # Recomputing them is a prefill of those tokens on top of what precedes them (the step's fixed costs
    # are shared with the rest of the batch, so only the marginal compute and KV traffic count).
    ctx = float(int(np.argmax(back)) * BLOCK)
    full = sm.price(Batch(tokens=tokens, seqs=1, sum_ctx=ctx, sum_win=0.0, attn_full=tokens * (ctx + tokens / 2),
                          attn_win=0.0, logits=0, attn_decode=0.0))
    recompute = full.t_cmp + full.t_attn_cmp
    return len(hits) if load <= recompute else int(np.argmax(back))
