"""Prefix cache: content keys (shared where token histories agree) and the block pool's invariants."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.serving.prefix_cache import (
    _M,
    _ROOT,
    TAG_GROUP,
    TAG_PROMPT,
    TAG_REQUEST,
    TAG_SESSION,
    BlockPool,
    _mix,
    chain_keys,
    stream_id,
)

_MASK = (1 << 64) - 1


def keys_of(n: int, group: int, prefix: int, prompt_id: int, prompt_len: int, gen: int, first: int = 0,
            parent: int = 0) -> np.ndarray:
    """Keys of blocks first..first+n-1 of one request."""
    g = stream_id(TAG_GROUP, group) if group >= 0 else 0
    return chain_keys(np.array([parent], dtype=np.uint64), np.array([first]), np.array([n]), np.array([g]),
                      np.array([prefix]), np.array([stream_id(TAG_PROMPT, prompt_id)]), np.array([prompt_len]),
                      np.array([stream_id(TAG_REQUEST, gen)]))


def reference_keys(n: int, group: int, prefix: int, prompt_id: int, prompt_len: int, gen: int) -> list[int]:
    """The chained hash block by block, in Python integers: key_b = key_(b-1) * M + h(stream, b)."""
    out, parent = [], _ROOT
    for b in range(n):
        end = (b + 1) * 16
        s = int(stream_id(TAG_GROUP, group)) if end <= prefix else \
            int(stream_id(TAG_PROMPT, prompt_id)) if end <= prompt_len else int(stream_id(TAG_REQUEST, gen))
        with np.errstate(over="ignore"):
            h = int(_mix(np.array([s], dtype=np.uint64) * np.uint64(0xD6E8FEB86659FD93)
                         ^ _mix(np.array([b], dtype=np.uint64)))[0])
        parent = (parent * _M + h) & _MASK
        out.append(parent)
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 90), st.integers(0, 300), st.integers(1, 900), st.integers(0, 3), st.integers(0, 40))
def test_vectorised_chain_equals_block_by_block_hash(n: int, prefix: int, prompt_len: int, prompt_id: int,
                                                     cut: int) -> None:
    ref = reference_keys(n, 2, prefix, prompt_id, prompt_len, 7)
    assert keys_of(n, 2, prefix, prompt_id, prompt_len, 7).tolist() == ref
    # Continuing a chain from a parent key gives the same keys as computing it whole.
    cut = min(cut, n - 1)
    if cut > 0:
        tail = keys_of(n - cut, 2, prefix, prompt_id, prompt_len, 7, first=cut, parent=ref[cut - 1])
        assert tail.tolist() == ref[cut:]


def test_many_requests_at_once_equal_one_by_one() -> None:
    rng = np.random.default_rng(3)
    r = 40
    first = rng.integers(0, 5, r)
    count = rng.integers(0, 12, r)
    prefix = rng.integers(0, 100, r)
    plen = prefix + rng.integers(1, 200, r)
    group = rng.integers(0, 3, r)
    pid = rng.integers(0, 4, r)
    gen = np.arange(r)
    full = [reference_keys(int(first[i] + count[i]), int(group[i]), int(prefix[i]), int(pid[i]), int(plen[i]),
                           int(gen[i])) for i in range(r)]
    parent = np.array([full[i][first[i] - 1] if first[i] else 0 for i in range(r)], dtype=np.uint64)
    got = chain_keys(parent, first, count, stream_id(TAG_GROUP, group), prefix, stream_id(TAG_PROMPT, pid), plen,
                     stream_id(TAG_REQUEST, gen))
    want = [k for i in range(r) for k in full[i][first[i]:]]
    assert got.tolist() == want


def test_identical_prompts_share_every_block_and_groups_share_their_prefix() -> None:
    a = keys_of(40, 1, 100, prompt_id=5, prompt_len=547, gen=1)
    b = keys_of(40, 1, 100, prompt_id=5, prompt_len=547, gen=2)
    c = keys_of(40, 1, 100, prompt_id=6, prompt_len=547, gen=3)
    d = keys_of(40, 2, 100, prompt_id=7, prompt_len=547, gen=4)
    # Same prompt: every block wholly inside the prompt (547 // 16 = 34) agrees, then generation diverges.
    same = a == b
    assert same[:34].all() and not same[34:].any()
    # Same group, other prompt: the 6 blocks wholly inside the 100-token prefix agree, nothing after.
    assert (a == c)[:6].all() and not (a == c)[6:].any()
    assert not (a == d).any()


def test_a_session_reads_back_its_previous_turn() -> None:
    s = stream_id(TAG_SESSION, 9)
    one = lambda n, plen: chain_keys(np.zeros(1, np.uint64), np.array([0]), np.array([n]),  # noqa: E731
                                     np.array([0]), np.array([0]), np.array([s]), np.array([plen]), np.array([s]))
    turn1 = one(12, 100)  # 100 prompt tokens + ~92 generated: 12 full blocks
    turn2 = one(20, 330)  # the next prompt holds all of that, then the new question
    assert (turn1 == turn2[:12]).all()


def test_lru_reclaims_free_blocks_first_then_the_oldest_released_tail_first() -> None:
    pool = BlockPool(10)
    ka = keys_of(3, -1, 0, 1, 48, 1)
    kb = keys_of(3, -1, 0, 2, 48, 2)
    for k in (ka, kb):
        assert pool.alloc(3)
        pool.fill(k)
    pool.release(ka, 0)  # a released first: its blocks are the oldest
    pool.release(kb, 0)
    assert (pool.used, pool.cached, pool.free) == (0, 6, 4)
    assert pool.alloc(4) and pool.cached == 6  # free blocks go first: nothing evicted
    assert pool.alloc(1) and pool.cached == 5
    assert pool.match(ka) == 2  # a's last block was the least recently released
    assert pool.match(kb) == 3
    assert pool.alloc(2)
    assert pool.match(ka) == 0 and pool.match(kb) == 3  # the rest of a, from its tail end
    assert not pool.alloc(4)  # only 3 reclaimable: refused, nothing changed
    assert (pool.used, pool.cached, pool.free) == (7, 3, 0)
    pool.check()


def test_a_hit_revives_a_cached_block_and_shared_blocks_outlive_one_holder() -> None:
    pool = BlockPool(8)
    k = keys_of(4, -1, 0, 1, 64, 1)
    assert pool.alloc(4)
    pool.fill(k)
    pool.hold(k[:3])  # a second request hits the first three
    pool.release(k, 0)  # the first finishes: its 4th block is cached, the three shared ones stay held
    assert (pool.used, pool.cached) == (3, 1)
    assert pool.holders(k).tolist() == [1, 1, 1, 0]
    assert not pool.alloc(8) and pool.alloc(5)  # 4 free + the cached one; the held three are untouchable
    assert pool.match(k) == 3
    pool.check()


def test_admission_never_evicts_its_own_hits() -> None:
    pool = BlockPool(4)
    k = keys_of(4, -1, 0, 1, 64, 1)
    assert pool.alloc(4)
    pool.fill(k)
    pool.release(k, 0)  # all four cached, none free
    # A request reusing the first two needs 3 more blocks: only 2 are reclaimable without its own hits.
    assert not pool.admit(k[:2], 3)
    assert (pool.used, pool.cached) == (0, 4)
    assert pool.admit(k[:2], 2)
    assert pool.match(k) == 2 and pool.holders(k[:2]).tolist() == [1, 1]
    pool.check()


def test_filling_a_key_that_exists_shares_it_and_frees_the_copy() -> None:
    pool = BlockPool(8)
    k = keys_of(2, -1, 0, 1, 32, 1)
    assert pool.alloc(2) and pool.alloc(2)  # two requests computed the same two blocks side by side
    pool.fill(k)
    pool.fill(k)
    assert (pool.used, pool.free) == (2, 6) and pool.holders(k).tolist() == [2, 2]
    pool.release(k, 0)
    pool.release(k, 0)
    assert (pool.used, pool.cached, pool.free) == (0, 2, 6)
    pool.check()


def test_two_holders_released_in_one_call() -> None:
    pool = BlockPool(8)
    k = keys_of(3, -1, 0, 1, 48, 1)
    assert pool.alloc(3)
    pool.fill(k)
    pool.hold(np.concatenate([k[:2], k[:2]]))  # two more requests hit the first two blocks, taken together
    assert pool.holders(k).tolist() == [3, 3, 1]
    pool.release(np.concatenate([k, k[:2]]), 0)
    assert pool.holders(k).tolist() == [1, 1, 0] and (pool.used, pool.cached) == (2, 1)
    pool.release(k[:2], 0)
    assert (pool.used, pool.cached, pool.free) == (0, 3, 5)
    pool.check()


def test_offload_keeps_what_the_gpu_reclaims_and_brings_it_back() -> None:
    pool = BlockPool(4, host_total=3)
    a = keys_of(4, -1, 0, 1, 64, 1)
    b = keys_of(4, -1, 0, 2, 64, 2)
    assert pool.alloc(4)
    pool.fill(a)
    pool.release(a, 0)
    assert pool.alloc(4) and pool.offloaded == 4 and len(pool.host) == 3  # the host keeps the 3 newest
    pool.fill(b)
    pool.release(b, 0)
    # a's first three blocks are only in host memory now (its 4th, released first, fell off the host LRU).
    assert pool.match(a) == 3 and pool.on_host(a[:3]).all()
    assert pool.admit(a[:3], 1)  # 3 copied back + 1 new: four GPU blocks, reclaiming b's cached ones
    assert pool.loaded == 3 and pool.holders(a[:3]).tolist() == [1, 1, 1] and pool.used == 4
    pool.check()


def test_caching_off_keeps_nothing() -> None:
    pool = BlockPool(4, caching=False)
    k = keys_of(2, -1, 0, 1, 32, 1)
    assert pool.alloc(2)
    pool.fill(k)
    pool.release(np.zeros(0, np.uint64), 2)
    assert pool.match(k) == 0 and (pool.used, pool.cached, pool.free) == (0, 0, 4)
    pool.check()


# ---- the pool under random traffic against a reference model ----------------------------------------

_OPS = st.lists(st.tuples(st.sampled_from(["admit", "grow", "finish"]), st.integers(0, 7), st.integers(1, 80)),
                min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(_OPS, st.integers(4, 40), st.booleans(), st.integers(0, 12))
def test_pool_invariants_under_random_traffic(ops: list[tuple[str, int, int]], total: int, caching: bool,
                                              host: int) -> None:
    """Requests from 8 prompts (2 groups, 24-token prefix) admit with their cache hits, grow and finish.

    After every operation: the pool's own invariants hold (used + cached + free = pool, no negative
    count); every keyed block a live request holds has exactly as many references as holders, so it
    was never freed or evicted under them; private blocks add up.
    """
    pool = BlockPool(total, caching, host)  # with `host` blocks of offload memory behind the cache
    live: dict[int, dict[str, int]] = {}  # request -> prompt, tokens, full (keyed), priv
    nxt = 0

    def keys(r: dict[str, int], n: int) -> np.ndarray:
        return keys_of(n, r["p"] % 2, 24, r["p"], r["plen"], r["id"])

    for op, p, n in ops:
        if op == "admit":
            r = {"id": nxt, "p": p, "plen": 10 + 13 * p, "tokens": 0, "full": 0, "priv": 0}
            nxt += 1
            plen = r["plen"]
            k = keys(r, plen // 16)
            hit = pool.match(k[:(plen - 1) // 16])
            need = -(-plen // 16) - hit
            if not pool.admit(k[:hit], need):
                continue
            pool.fill(k[hit:])
            r.update(tokens=plen, full=plen // 16 if caching else 0, priv=need - (plen // 16 - hit) if caching
                     else need + hit)
            live[r["id"]] = r
        elif op == "grow" and live:
            r = live[sorted(live)[p % len(live)]]
            t1 = r["tokens"] + n
            need = -(-t1 // 16) - -(-r["tokens"] // 16)
            if not pool.alloc(need):
                continue
            r["priv"] += need
            if caching:
                newly = keys(r, t1 // 16)[r["full"]:]
                pool.fill(newly)
                r["priv"] -= len(newly)
                r["full"] = t1 // 16
            r["tokens"] = t1
        elif op == "finish" and live:
            r = live.pop(sorted(live)[p % len(live)])
            pool.release(keys(r, r["full"]), r["priv"])
        pool.check()
        held: dict[int, int] = {}
        for r in live.values():
            for key in keys(r, r["full"]).tolist():
                held[key] = held.get(key, 0) + 1
        if held:
            ks = np.array(list(held), dtype=np.uint64)
            assert pool.holders(ks).tolist() == list(held.values())
        assert pool.private == sum(r["priv"] for r in live.values())
        assert pool.used == len(held) + pool.private
        assert pool.used + pool.cached + pool.free == total
        assert len(pool.host) <= pool.host_total and pool.loaded <= pool.offloaded + pool.keys_added


def test_slots_are_handed_out_as_one_stack_of_every_slot_would() -> None:
    # The pool is built untouched (never-used slots are a counter, not a stack of all of them): a key takes a
    # slot given back if any (the last first), else the lowest never used; after a growth the new slots come
    # first (lowest first), then those given back, then the never used. As a stack n-1 ... 0 does.
    pool = BlockPool(6)

    def put(*keys: int) -> list[int]:
        assert pool.alloc(len(keys))
        pool.fill(np.array(keys, dtype=np.uint64))
        return [pool._slot[k] for k in keys]

    assert put(11, 12, 13) == [0, 1, 2]
    pool.release(np.array([11, 12, 13], dtype=np.uint64), 0)  # cached; 13 (the tail) is reclaimed first
    assert pool.alloc(3) and pool.alloc(1)  # the 3 free blocks, then one reclaimed: 13's slot 2 given back
    assert 13 not in pool._slot
    assert put(21) == [1]  # its block reclaims 12's: slot 1 given back on top of 2, and taken
    assert put(22) == [0]  # (11's slot 0 likewise)
    pool.give(4)
    assert put(23) == [2]  # the last given back
    assert put(24) == [3]  # then the lowest never used
    pool.check()
    pool.resize(9)
    assert put(31, 32, 33) == [6, 7, 8]  # the new slots, then those never used
    assert put(34) == [4]
    pool.check()


def _pool_state(pool: BlockPool) -> tuple[object, ...]:
    """Everything a pool's reads can see, with its slot arrays as the full-size ones would hold them (zeros past
    the slots used) and its LRU as the live (slot, stamp) entries in order."""
    n = pool._n

    def full(a: np.ndarray) -> list[int]:
        return a.tolist() + [0] * (n - a.size)

    live = slice(pool._head, pool._tail)
    lru = [(s, t) for s, t in zip(pool._lru[live].tolist(), pool._lru_stamp[live].tolist(), strict=True)
           if pool._stamp[s] == t]
    return (pool.total, n, pool.private, pool.keyed_used, pool.cached, pool.evicted, pool.peak, pool.keys_added,
            pool.free, dict(pool._slot), full(pool._key), full(pool._ref), full(pool._stamp),
            pool._spare[:pool._n_spare].tolist(), pool._fresh, lru, pool._clock)


_GROW_OPS = st.lists(st.tuples(st.sampled_from(["admit", "grow", "finish", "resize"]), st.integers(0, 7),
                               st.integers(1, 80)), min_size=1, max_size=80)


@settings(max_examples=120, deadline=None)
@given(_GROW_OPS, st.integers(4, 120), st.integers(1, 5))
def test_growing_slot_arrays_read_as_full_size_ones(ops: list[tuple[str, int, int]], total: int, start: int
                                                   ) -> None:
    """Slot arrays starting at `start` slots (doubling up to the pool) against full-size ones, under the same
    admissions, growth, releases and resizes (up past the arrays and down): every result and every read agree."""
    import engine.serving.prefix_cache as pc
    small_start, big_start = start, 1 << 20
    pools = []
    for first in (small_start, big_start):
        old, pc._SLOTS_START = pc._SLOTS_START, first
        try:
            pools.append(BlockPool(total))
        finally:
            pc._SLOTS_START = old
    small, big = pools
    assert small._key.size == min(total, start) and big._key.size == total
    live: dict[int, tuple[int, int, int, int]] = {}  # request -> prompt, tokens, full (keyed), priv
    nxt = 0

    def keys(p: int, rid: int, n: int) -> np.ndarray:
        return keys_of(n, p % 2, 24, p, 10 + 13 * p, rid)

    for op, p, n in ops:
        if op == "admit":
            plen = 10 + 13 * p
            k = keys(p, nxt, plen // 16)
            hit = small.match(k[:(plen - 1) // 16])
            assert big.match(k[:(plen - 1) // 16]) == hit
            need = -(-plen // 16) - hit
            ok = small.admit(k[:hit], need)
            assert big.admit(k[:hit], need) == ok
            if ok:
                small.fill(k[hit:])
                big.fill(k[hit:])
                live[nxt] = (p, plen, plen // 16, need - (plen // 16 - hit))
            nxt += 1
        elif op == "grow" and live:
            rid = sorted(live)[p % len(live)]
            q, tokens, full, priv = live[rid]
            t1 = tokens + n
            need = -(-t1 // 16) - -(-tokens // 16)
            ok = small.alloc(need)
            assert big.alloc(need) == ok
            if ok:
                newly = keys(q, rid, t1 // 16)[full:]
                small.fill(newly)
                big.fill(newly)
                live[rid] = (q, t1, t1 // 16, priv + need - len(newly))
        elif op == "finish" and live:
            rid = sorted(live)[p % len(live)]
            q, _, full, priv = live.pop(rid)
            small.release(keys(q, rid, full), priv)
            big.release(keys(q, rid, full), priv)
        elif op == "resize":
            size = max(small.used, total + n - 40)
            small.resize(size)
            big.resize(size)
        small.check()
        assert _pool_state(small) == _pool_state(big)
        if live:
            ks = np.concatenate([keys(q, rid, full) for rid, (q, _, full, _) in live.items()])
            assert small.holders(ks).tolist() == big.holders(ks).tolist()
