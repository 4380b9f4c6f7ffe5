"""KV blocks with automatic prefix caching, as vLLM does it: full blocks keyed by their content, shared, kept.

A full 16-token block's key is a hash of its parent block's key and its own tokens, so equal keys mean
equal token histories. We have no token ids: a request's content is modelled by *streams*. Positions
[0, prefix_len) come from its group's stream (a shared system prompt), [prefix_len, prompt_len) from its
body stream (the prompt; equal prompt ids share it, a chat session keeps extending it) and generated
positions from its generation stream (request-unique, or the session's own so the next turn reads them
back). Block b's tokens are identified by (stream, b), so identical prompts share every full block and
same-group prompts share the blocks wholly inside their prefix. A request with real text (the simulated
server's, engine.serving.live) has a text stream (TAG_TEXT) whose block b is its own content hash, kept in the
lane's `texts` table: two prompts then share exactly the leading blocks whose tokens agree, as vLLM's do.

Keys chain as a polynomial hash, key_b = key_(b-1) * M + h(stream, b) mod 2^64, which numpy computes for
many blocks of many requests at once (a segment cumsum against powers of M^-1) instead of block by block.

The pool (`BlockPool`) counts blocks in three states: *used* (held by at least one request: shared
keyed blocks carry a reference count, a request's partial tail block is private), *cached* (keyed, no
request holds it; kept in an LRU and reclaimed only when an allocation finds no free block) and *free*.
Invariant: used + cached + free = pool. A request's keyed blocks are not stored per request: they are
the first `full` keys of its content, recomputed when it releases them.
"""

from __future__ import annotations

import numpy as np

from engine.serving.kv_tiers import HOST, REMOTE, KVTiers, Policy, TierSpec
from engine.serving.tables import KV_BLOCK_TOKENS

BLOCK = KV_BLOCK_TOKENS

# Stream namespaces (top bits of a stream id): a group's shared prefix, a prompt id, a chat session,
# one request's own tokens. Ids of different kinds never collide.
TAG_GROUP, TAG_PROMPT, TAG_SESSION, TAG_REQUEST = 1, 2, 3, 4
TAG_TEXT = 5  # a request keyed block by block from its text (its blocks' streams are in a `texts` table)
TAG_TEXT_BLOCK = 6  # the stream of one such block: a hash of its tokens and its parent's
_TAG_SHIFT = 56
NONE = 0  # no stream: a request without a shared prefix (its prefix_len is 0), or whose body is its own
NO_GROUP = NONE

_M = 0x9E3779B97F4A7C15  # odd, so invertible mod 2^64
_M_INV = pow(_M, -1, 1 << 64)
_ROOT = 0x243F6A8885A308D3  # the parent key of block 0
_U64 = np.uint64


def stream_id(tag: int, ids: np.ndarray | int) -> np.ndarray:
    """Stream ids of kind `tag` for the given non-negative ids (int64)."""
    return (np.int64(tag) << _TAG_SHIFT) | np.asarray(ids, dtype=np.int64)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a well-spread uint64 per input (wrapping arithmetic)."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


_SLOTS_START = 1024  # a BlockPool's slot arrays start at this many slots and double up to the pool's size
_pow_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """M^j and M^-j mod 2^64 for j < n (at least), as uint64 arrays."""
    size = 1 << max(10, (n - 1).bit_length())
    got = _pow_cache.get(size)
    if got is None:
        p = np.empty(size, dtype=np.uint64)
        q = np.empty(size, dtype=np.uint64)
        a = b = 1
        for j in range(size):  # once per power-of-two size; Python ints keep it exact
            p[j], q[j] = a, b
            a = a * _M & 0xFFFFFFFFFFFFFFFF
            b = b * _M_INV & 0xFFFFFFFFFFFFFFFF
        got = _pow_cache[size] = (p, q)
    return got


def text_streams(stream: np.ndarray, b: np.ndarray, texts: dict[int, np.ndarray]) -> np.ndarray:
    """The streams of blocks (stream[k], block b[k]) with a text stream's blocks replaced by their content
    streams from `texts` (text stream id -> one stream per full prompt block); blocks past its table (the
    answer's) keep the text stream, which is the request's own."""
    tagged = (stream >> _TAG_SHIFT) == TAG_TEXT
    if not tagged.any():
        return stream
    out = stream.copy()
    for sid in np.unique(stream[tagged]).tolist():
        table = texts.get(sid)
        if table is None:
            continue
        at = np.flatnonzero(stream == sid)
        inside = b[at] < table.size
        out[at[inside]] = table[b[at[inside]]]
    return out


def chain_keys(parent: np.ndarray, first: np.ndarray, count: np.ndarray, group: np.ndarray,
               prefix_len: np.ndarray, body: np.ndarray, prompt_len: np.ndarray, gen: np.ndarray,
               texts: dict[int, np.ndarray] | None = None) -> np.ndarray:
    """Keys of blocks first[r] .. first[r]+count[r]-1 of each request r, flattened in request order.

    parent[r] is the key of block first[r]-1 (ignored where first is 0: the root). A block whose 16
    tokens all lie in the prefix belongs to the group stream, else to the body while it ends inside
    the prompt, else to the generation stream. With `texts` (a lane's text table, non-empty only in the
    simulated server), a text stream's blocks take their content streams from it (text_streams).
    """
    count = np.asarray(count, dtype=np.int64)
    total = int(count.sum())
    if total == 0:
        return np.zeros(0, dtype=np.uint64)
    seg = np.repeat(np.arange(count.size), count)
    starts = np.cumsum(count) - count
    j = np.arange(total, dtype=np.int64) - starts[seg]
    b = np.asarray(first, dtype=np.int64)[seg] + j
    end = (b + 1) * BLOCK
    stream = np.where(end <= np.asarray(prefix_len)[seg], np.asarray(group)[seg],
                      np.where(end <= np.asarray(prompt_len)[seg], np.asarray(body)[seg], np.asarray(gen)[seg]))
    if texts:
        stream = text_streams(stream, b, texts)
    with np.errstate(over="ignore"):
        h = _mix(stream.astype(np.uint64) * _U64(0xD6E8FEB86659FD93) ^ _mix(b.astype(np.uint64)))
        pw, pinv = _powers(int(count.max()) + 1)
        par = np.where(np.asarray(first)[seg] == 0, _U64(_ROOT), np.asarray(parent, dtype=np.uint64)[seg])
        c = np.cumsum(h * pinv[j], dtype=np.uint64)
        before = np.where(starts > 0, c[starts - 1], _U64(0))[seg]
        # key_j = M^j (P M + sum_{i<=j} h_i M^-i): the chained hash in closed form.
        return pw[j] * (par * _U64(_M) + (c - before))


class BlockPool:
    """A KV pool of `total` blocks: private (unkeyed) and shared keyed blocks with reference counts, an LRU
    of cached blocks, and free ones. With caching off every block is private and nothing is kept."""

    __slots__ = ("total", "caching", "private", "keyed_used", "cached", "_slot", "_key", "_ref", "_stamp",
                 "_spare", "_n_spare", "_fresh", "_n", "_lru", "_lru_stamp", "_head", "_tail", "_clock", "evicted",
                 "peak", "keys_added", "host_total", "tiers", "offloaded", "loaded")

    def __init__(self, total: int, caching: bool = True, host_total: int = 0, tiers: KVTiers | None = None) -> None:
        self.total = int(total)
        self.caching = caching
        self.private = 0  # used blocks without a key: partial tails, or every block with caching off
        self.keyed_used = 0  # keyed blocks some request holds
        self.cached = 0  # keyed blocks no request holds (in the LRU)
        self.evicted = 0  # cached blocks reclaimed so far
        self.peak = 0  # most blocks in use at once
        self.keys_added = 0  # keys ever filled (a match can only grow when this does)
        # KV offload: blocks reclaimed from the GPU go down the tiers below it (engine.serving.kv_tiers: host memory,
        # disk, a remote store) and come back on a hit, over the tier's link, instead of being recomputed.
        # host_total alone is host memory of that many blocks, an LRU behind a PCIe 5 x16 link (64 GB/s, the
        # hardware files' default host_link_gbps; a lane passes its hardware's own tiers).
        if tiers is None and host_total > 0:
            tiers = KVTiers((TierSpec(int(host_total), 64.0), None, None))
        self.tiers = tiers if caching else None
        host = None if self.tiers is None else self.tiers.specs[HOST]
        self.host_total = 0 if host is None else host.blocks
        self.offloaded = 0  # blocks copied out to host memory
        self.loaded = 0  # blocks copied back in on a hit
        n = self.total if caching else 0
        self._n = n  # slots [0, n): one per block
        self._slot: dict[int, int] = {}  # key -> slot of a keyed block
        # The slot arrays start small and double as slots come into use, up to n (_grow): a plan point or fleet
        # replica keys a few thousand blocks of a pool of 100,000, and freed memory the allocator hands out again
        # is zeroed by hand (np.zeros maps fresh zero pages only for the first big arrays). Slots are used in
        # ascending order and every slot read is one used before (a key's, a spare one, an LRU entry's), so the
        # arrays only ever need [0, _fresh); past their end every slot reads 0, as the full-size arrays did.
        # Stamps count from 1, 0 meaning "not cached"; and the free slots are a stack of those freed so far over
        # the never-used ones [_fresh, n), taken in ascending order (as a stack holding n-1 ... 0 gives them), so
        # `_spare` holds only slots given back (never more than _fresh of them).
        m = min(n, _SLOTS_START)
        self._key = np.zeros(m, dtype=np.uint64)
        self._ref = np.zeros(m, dtype=np.int64)
        self._stamp = np.zeros(m, dtype=np.int64)  # LRU stamp while cached, 0 otherwise
        self._spare = np.zeros(m, dtype=np.int64)  # slots given back and holding no keyed block (a stack)
        self._n_spare = 0
        self._fresh = 0  # slots [_fresh, n) were never used
        # The LRU: (slot, stamp) in release order; an entry is stale once the slot's stamp changed (stamps only
        # grow, so it never turns live again). It grows in _push by compacting away stale entries, which no read
        # sees, so its first size changes nothing but when that happens.
        self._lru = np.zeros(max(64, m), dtype=np.int64)
        self._lru_stamp = np.zeros(max(64, m), dtype=np.int64)
        self._head = self._tail = 0
        self._clock = 1  # the next LRU stamp (0: not cached)

    # ---- counts -------------------------------------------------------------------------------
    @property
    def used(self) -> int:
        """Blocks some request holds."""
        return self.private + self.keyed_used

    @property
    def free(self) -> int:
        """Blocks holding nothing."""
        return self.total - self.private - self.keyed_used - self.cached

    @property
    def util(self) -> float:
        """Fraction of the pool in use (cached blocks are not in use; 0 for an empty pool)."""
        return self.used / self.total if self.total else 0.0

    @property
    def available(self) -> int:
        """Blocks an allocation can get: free ones, then cached ones reclaimed in LRU order."""
        return self.total - self.private - self.keyed_used

    @property
    def host(self) -> Policy | dict[int, None]:
        """The host-memory tier (its keys: `in`, len), empty without one."""
        lv = None if self.tiers is None else self.tiers.levels[HOST]
        return {} if lv is None else lv

    # ---- lookups ------------------------------------------------------------------------------
    def match(self, keys: np.ndarray, remote: bool = True) -> int:
        """How many leading keys are present (held or cached, or in a tier below): the blocks a request can reuse.
        `remote` False: not counting the remote tier (what this GPU's own memory and disk hold)."""
        if not self.caching or not len(keys):
            return 0
        get = self._slot.get
        tiers = self.tiers
        n = 0
        if tiers is None:
            for k in keys.tolist():
                if get(k) is None:
                    break
                n += 1
            return n
        fast = tiers.resident
        if fast is not None and (remote or tiers.only != REMOTE):
            for k in keys.tolist():
                if get(k) is None and k not in fast:
                    break
                n += 1
            return n
        for k in keys.tolist():
            if get(k) is None and (k not in tiers if remote else tiers.where(k, local=True) < 0):
                break
            n += 1
        return n

    def holders(self, keys: np.ndarray) -> np.ndarray:
        """Reference counts of these keys (0 for cached or absent ones); for checks and tests."""
        get = self._slot.get
        s = [get(k, -1) for k in keys.tolist()]
        a = np.array(s, dtype=np.int64)
        return np.where(a >= 0, self._ref[np.maximum(a, 0)] if len(a) else a, 0)

    # ---- changes ------------------------------------------------------------------------------
    def hold(self, keys: np.ndarray) -> None:
        """A request starts holding these present keys (its cache hits): counts go up, cached ones leave the LRU."""
        if not len(keys):
            return
        slots = self._slots_of(keys)
        ref = self._ref
        u = np.unique(slots)
        revived = int(np.count_nonzero(ref[u] == 0))
        np.add.at(ref, slots, 1)  # several requests' keys at once may repeat a shared block
        self._stamp[u] = 0
        self.cached -= revived
        self.keyed_used += revived
        if self.used > self.peak:
            self.peak = self.used

    def revivable(self, keys: np.ndarray) -> int:
        """How many of these present keys are cached on the GPU (no one holds them): a request taking them
        makes them no longer reclaimable."""
        slot = self._slot
        on = [slot[k] for k in keys.tolist() if k in slot]
        return int(np.count_nonzero(self._ref[np.array(on, dtype=np.int64)] == 0)) if on else 0

    def on_host(self, keys: np.ndarray) -> np.ndarray:
        """Which of these matched keys are only in host memory (they must be copied back to be used)."""
        slot = self._slot
        return np.fromiter((k not in slot for k in keys.tolist()), dtype=bool, count=len(keys))

    def admit(self, hits: np.ndarray, n: int, reserve: int = 0, asked: int = 0) -> bool:
        """A request starts holding its cache hits and n private blocks, or (False) nothing changes.

        The hits are taken before anything is reclaimed, so an allocation never evicts the very blocks
        the request is about to reuse; cached hits count as no longer reclaimable. `reserve` blocks stay
        available for others (the running batch's growth this step). `asked`: the blocks the request looked up (of
        which `hits` were found), counted for the tiers' hit rates.
        """
        tiers = self.tiers
        back = self.on_host(hits) if tiers is not None else np.zeros(len(hits), dtype=bool)
        nb = int(back.sum())
        if n + nb > self.available - self.revivable(hits) - reserve:
            return False
        if tiers is not None:
            tiers.gpu_hits += len(hits) - nb
            tiers.asked += asked
        if nb:
            # Read from their tiers before the allocation below reclaims GPU blocks into those tiers.
            tiers.load(hits[back].tolist())  # type: ignore[union-attr]
            gpu = hits[~back]
            self.hold(gpu)
            self.alloc(nb)
            self.fill(hits[back])  # copied back in: GPU blocks again, held by this request
            self.loaded += nb
        elif len(hits):
            self.hold(hits)
        return self.alloc(n)

    def alloc(self, n: int) -> bool:
        """n private blocks for a request, reclaiming the least recently released cached blocks if no free
        ones are left; False (nothing changed) if even that is not enough."""
        if n <= 0:
            return n == 0
        avail = self.total - self.private - self.keyed_used  # (self.available and self.free = avail - cached, and
        if n > avail:  # self.used below, without their property calls: ~40k allocations in a 10k-request run)
            return False
        short = n - (avail - self.cached)
        if short > 0:
            self._evict(short)
        private = self.private = self.private + n
        used = private + self.keyed_used
        if used > self.peak:
            self.peak = used
        return True

    def take(self, n: int) -> None:
        """Hold n private blocks the caller checked are available (e.g. pinned for a KV copy)."""
        ok = self.alloc(n)
        assert ok, f"took {n} blocks with {self.available} available"

    def give(self, n: int) -> None:
        """Return n private blocks (requests that held no keyed block, or a rolled-back or pinned part)."""
        assert 0 <= n <= self.private, f"releasing {n} private blocks of {self.private}"
        self.private -= n

    def resize(self, total: int) -> None:
        """A new pool size: cached blocks beyond it are reclaimed (the caller preempts while used > total)."""
        self.total = int(total)
        if self.caching and self.total > self._n:
            old = self._n
            self._grow(old)  # every slot of the old size, then the new ones past them
            grow = self.total - old
            self._key = np.concatenate([self._key, np.zeros(grow, dtype=np.uint64)])
            self._ref = np.concatenate([self._ref, np.zeros(grow, dtype=np.int64)])
            self._stamp = np.concatenate([self._stamp, np.zeros(grow, dtype=np.int64)])
            # The new slots go on top of the stack, above those given back and the never-used ones (which the
            # stack now holds itself: none is left unused past them).
            spare = np.empty(self._key.size, dtype=np.int64)
            unused = np.arange(self._fresh, old, dtype=np.int64)[::-1]
            parts = (unused, self._spare[:self._n_spare], np.arange(old, old + grow, dtype=np.int64)[::-1])
            k = 0
            for part in parts:
                spare[k:k + len(part)] = part
                k += len(part)
            self._spare = spare
            self._n_spare = k
            self._fresh = self._n = self._key.size
        self.trim()

    def trim(self) -> None:
        """Reclaim cached blocks while the pool holds more than its size (after a shrink)."""
        excess = min(self.cached, self.used + self.cached - self.total)
        if excess > 0:
            self._evict(excess)

    def fill(self, keys: np.ndarray) -> None:
        """len(keys) of a request's private blocks are now full with these (distinct) keys: they become shared
        keyed blocks; where the key is already present the request holds that block and its own copy is freed."""
        k = len(keys)
        if not k or not self.caching:
            return
        assert self.private >= k, "filling more blocks than are held privately"
        self.private -= k
        if self._fresh + k > self._key.size:  # room for every slot this fill may take from the never-used ones
            self._grow(self._fresh + k)
        slot = self._slot
        ref, stamp = self._ref, self._stamp
        for key in keys.tolist():
            s = slot.get(key)
            if s is None:
                if self._n_spare:
                    self._n_spare -= 1
                    s = int(self._spare[self._n_spare])
                else:  # none given back: the lowest never used
                    s = self._fresh
                    self._fresh += 1
                slot[key] = s
                self._key[s] = key
                ref[s] = 1
                self.keyed_used += 1
                self.keys_added += 1
            else:
                if ref[s] == 0:
                    stamp[s] = 0
                    self.cached -= 1
                    self.keyed_used += 1
                ref[s] += 1

    def release(self, keys: np.ndarray, n_private: int) -> None:
        """Requests let go of their keyed blocks (each request's in block order, requests one after another)
        and n_private private ones. Keyed blocks no one else holds become cached, last ones first."""
        self.give(n_private)
        if not len(keys):
            return
        slots = self._slots_of(keys)
        ref = self._ref
        np.subtract.at(ref, slots, 1)  # several requests' keys at once may repeat a shared block
        assert (ref[slots] >= 0).all(), "released a block no one holds"
        # Tail first: vLLM frees a request's blocks in reverse, so its last blocks are reclaimed first.
        rev = slots[::-1]
        rev = rev[ref[rev] == 0]
        _, first = np.unique(rev, return_index=True)
        dead = rev[np.sort(first)]
        m = len(dead)
        if m:
            st = np.arange(self._clock, self._clock + m, dtype=np.int64)
            self._clock += m
            self._stamp[dead] = st
            self._push(dead, st)
            self.keyed_used -= m
            self.cached += m

    # ---- internals ----------------------------------------------------------------------------
    def _grow(self, need: int) -> None:
        """Slot arrays of at least `need` slots (at most the pool's n): double them, copying the used part (the
        rest is zeros, as it was). `_spare` keeps their size: it never holds more than the slots used so far."""
        size = self._key.size
        if need <= size or size >= self._n:
            return
        new = min(self._n, max(2 * size, need))
        for name in ("_key", "_ref", "_stamp", "_spare"):
            old = getattr(self, name)
            a = np.zeros(new, dtype=old.dtype)
            a[:size] = old
            setattr(self, name, a)

    def _slots_of(self, keys: np.ndarray) -> np.ndarray:
        """Slots of present keys (KeyError names a bug: the caller holds a key the pool does not know)."""
        slot = self._slot
        return np.fromiter((slot[k] for k in keys.tolist()), dtype=np.int64, count=len(keys))

    def _push(self, slots: np.ndarray, stamps: np.ndarray) -> None:
        """Append to the LRU's tail, compacting away consumed and stale entries when it is full."""
        m = len(slots)
        if self._tail + m > self._lru.size:
            live = slice(self._head, self._tail)
            ls, lt = self._lru[live], self._lru_stamp[live]
            ok = self._stamp[ls] == lt
            ls, lt = ls[ok], lt[ok]
            need = len(ls) + m
            size = self._lru.size
            while size < 2 * need:
                size *= 2
            self._lru = np.zeros(size, dtype=np.int64)
            self._lru_stamp = np.zeros(size, dtype=np.int64)
            self._lru[:len(ls)] = ls
            self._lru_stamp[:len(ls)] = lt
            self._head, self._tail = 0, len(ls)
        self._lru[self._tail:self._tail + m] = slots
        self._lru_stamp[self._tail:self._tail + m] = stamps
        self._tail += m

    def _evict(self, k: int) -> None:
        """Reclaim the k least recently released cached blocks: forget their keys, free their slots."""
        assert k <= self.cached, f"evicting {k} blocks with {self.cached} cached"
        out: list[np.ndarray] = []
        got = 0
        while got < k:
            w = min(self._tail - self._head, max(2 * (k - got), 64))
            ls = self._lru[self._head:self._head + w]
            ok = self._stamp[ls] == self._lru_stamp[self._head:self._head + w]
            idx = np.flatnonzero(ok)[:k - got]
            if len(idx) < k - got:
                self._head += w
            else:
                self._head += int(idx[-1]) + 1
            out.append(ls[idx])
            got += len(idx)
        dead = np.concatenate(out) if len(out) > 1 else out[0]
        slot = self._slot
        keys = self._key[dead].tolist()
        for key in keys:
            del slot[key]
        if self.tiers is not None:
            self.offloaded = self.tiers.spill(keys)  # offload: down the tiers below the GPU
        self._stamp[dead] = 0
        self._spare[self._n_spare:self._n_spare + k] = dead
        self._n_spare += k
        self.cached -= k
        self.evicted += k

    def check(self) -> None:
        """Every invariant of the pool; AssertionError naming the first that fails."""
        assert self.private >= 0 and self.keyed_used >= 0 and self.cached >= 0, "a negative block count"
        assert self.used + self.cached + self.free == self.total and self.free >= 0, \
            f"used {self.used} + cached {self.cached} + free {self.free} != pool {self.total}"
        if not self.caching:
            assert self.keyed_used == self.cached == 0, "keyed blocks with caching off"
            return
        slots = np.fromiter(self._slot.values(), dtype=np.int64, count=len(self._slot))
        ref = self._ref[slots]
        assert (self._ref >= 0).all(), "a negative reference count"
        assert int(np.count_nonzero(ref > 0)) == self.keyed_used, "held keyed blocks out of count"
        assert int(np.count_nonzero(ref == 0)) == self.cached, "cached blocks out of count"
        assert ((self._stamp[slots] > 0) == (ref == 0)).all(), "a held block sits in the LRU (or a cached one not)"
        assert self._n_spare + self._n - self._fresh + len(slots) == self._n, "slots lost"
        assert self._fresh <= self._key.size == self._ref.size == self._stamp.size == self._spare.size <= self._n, \
            "slot arrays shorter than the slots used"
        if self.tiers is not None:
            self.tiers.check()
        spare = np.zeros(self._n, dtype=bool)
        spare[self._spare[:self._n_spare]] = True
        spare[self._fresh:] = True
        assert not spare[slots].any(), "a keyed block's slot is also spare"
