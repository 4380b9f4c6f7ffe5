"""Tiers of KV memory below the GPU: host memory, a local disk and a remote store a fleet's replicas share.

A keyed block the GPU's prefix cache reclaims (engine.serving.prefix_cache) is not lost: it is copied to the first
tier there is (host memory, vLLM's --kv-offloading-size), a block that tier's policy pushes out goes to the next
(local disk), and from there to the remote store (or, past the last tier, it is dropped). A request whose prefix is
found in a tier has those blocks copied back at that tier's bandwidth plus one latency before its prefill can use
them (the step waits: engine.serving.steps._with_load), unless recomputing them is quicker
(engine.serving.keying.worth_loading).

Host memory and disk are one GPU's own and hold a block at most once between them (a block the GPU reclaims again
after a load from disk goes back to host memory, and leaves the disk); the remote tier is one object that every
replica of a fleet holds (engine.fleet.fleet), so a prefix one replica spilled there is a hit for the others.
vLLM's offload connector and LMCache store a block as soon as it is computed; tokensim spills it when the GPU
reclaims it, so only what a GPU had to let go reaches the lower tiers.

Which block a full tier pushes out is a policy (TIER_POLICIES, --kv-tier-policy): LRU, or ARC (Megiddo and Modha,
"ARC: A Self-Tuning, Low Overhead Replacement Cache", USENIX FAST 2003), which vLLM's CPU offload also offers: a
block read back once is kept apart from blocks stored and never read again, so a scan of one-off prompts cannot
flush a hot shared prefix. Per block the tiers keep a dict entry (keys are 64-bit ints), never a request object.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from engine.serving.tables import KV_BLOCK_TOKENS

TIER_NAMES = ("host", "disk", "remote")
HOST, DISK, REMOTE = range(3)


@dataclass(frozen=True, slots=True)
class TierSpec:
    """One tier: its capacity in KV blocks, the GB/s a copy back to the GPU runs at, and that copy's latency."""

    blocks: int
    gbps: float
    latency_s: float = 0.0


class Policy:
    """The interface of a tier's replacement policy: which keys it holds and which it pushes out.

    `offer(keys)` stores blocks (refreshing those it has) and returns how many were new and the keys pushed out to
    make room, in eviction order; `hit(key)` marks a held key as read back; `remove(key)` forgets one."""

    name: ClassVar[str] = ""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)

    def __contains__(self, key: int) -> bool:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def offer(self, keys: Iterable[int]) -> tuple[int, list[int]]:
        """Store these (distinct) keys, then push out what does not fit."""
        raise NotImplementedError

    def hit(self, key: int) -> None:
        """A held key was read back."""
        raise NotImplementedError

    def remove(self, key: int) -> None:
        """Forget a key (it moved up a tier); absent keys are ignored."""
        raise NotImplementedError

    def keys(self) -> set[int]:
        """The keys held (for checks)."""
        raise NotImplementedError

    def hit_many(self, keys: list[int]) -> None:
        """Several held keys read back, in order."""
        for k in keys:
            self.hit(k)


class Lru(Policy):
    """Least recently stored or read goes first."""

    name = "lru"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.order: OrderedDict[int, None] = OrderedDict()

    def __contains__(self, key: int) -> bool:
        return key in self.order

    def __len__(self) -> int:
        return len(self.order)

    def offer(self, keys: Iterable[int]) -> tuple[int, list[int]]:
        o = self.order
        new = 0
        for k in keys:
            if k in o:
                o.move_to_end(k)
            else:
                o[k] = None
                new += 1
        out = [o.popitem(last=False)[0] for _ in range(len(o) - self.capacity)]
        return new, out

    def hit(self, key: int) -> None:
        self.order.move_to_end(key)

    def remove(self, key: int) -> None:
        self.order.pop(key, None)

    def keys(self) -> set[int]:
        return set(self.order)

    def hit_many(self, keys: list[int]) -> None:
        move = self.order.move_to_end
        for k in keys:
            move(k)


class Arc(Policy):
    """Adaptive Replacement Cache (Megiddo and Modha, FAST 2003). T1 holds blocks stored and not read back since,
    T2 blocks read back at least once; B1 and B2 remember the keys each pushed out lately (ghosts, no data). A
    ghost stored again says its list was too short: p, T1's target size, moves towards that list. Full, the
    tier pushes out T1's oldest while T1 is above p, else T2's. Stores come in batches (a step's reclaimed
    blocks): the batch is stored, then what exceeds the capacity is pushed out, so the paper's tie rule for a
    B2 ghost at |T1| = p is not applied."""

    name = "arc"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()
        self.p = 0.0

    def __contains__(self, key: int) -> bool:
        return key in self.t1 or key in self.t2

    def __len__(self) -> int:
        return len(self.t1) + len(self.t2)

    def offer(self, keys: Iterable[int]) -> tuple[int, list[int]]:
        t1, t2, b1, b2 = self.t1, self.t2, self.b1, self.b2
        new = 0
        for k in keys:
            if k in t1:
                t1.move_to_end(k)  # stored again, not read: still recency only
            elif k in t2:
                t2.move_to_end(k)
            else:
                new += 1
                if k in b1:  # the paper's case II: T1 was too short
                    self.p = min(float(self.capacity), self.p + max(1.0, len(b2) / len(b1)))
                    del b1[k]
                    t2[k] = None
                elif k in b2:  # case III: T2 was too short
                    self.p = max(0.0, self.p - max(1.0, len(b1) / len(b2)))
                    del b2[k]
                    t2[k] = None
                else:  # case IV: new to the tier
                    t1[k] = None
        out: list[int] = []
        while len(t1) + len(t2) > self.capacity:
            if t1 and (len(t1) > self.p or not t2):
                k = t1.popitem(last=False)[0]
                b1[k] = None
            else:
                k = t2.popitem(last=False)[0]
                b2[k] = None
            out.append(k)
        for ghost in (b1, b2):  # each ghost list remembers at most a tier's worth of keys
            for _ in range(len(ghost) - self.capacity):
                ghost.popitem(last=False)
        return new, out

    def hit(self, key: int) -> None:
        if key in self.t1:  # case I: read back, so frequently used
            del self.t1[key]
            self.t2[key] = None
        else:
            self.t2.move_to_end(key)

    def remove(self, key: int) -> None:
        if self.t1.pop(key, None) is None:
            self.t2.pop(key, None)

    def keys(self) -> set[int]:
        return set(self.t1) | set(self.t2)


TIER_POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in (Lru, Arc)}


class KVTiers:
    """The tiers below one GPU's KV pool (host, disk, remote: None where absent) and what moved through them."""

    __slots__ = ("specs", "levels", "live", "only", "resident", "written", "read", "pending", "asked", "gpu_hits")

    def __init__(self, specs: tuple[TierSpec | None, ...], policy: str = "lru", remote: Policy | None = None
                 ) -> None:
        self.specs = specs
        make = TIER_POLICIES[policy]
        self.levels: list[Policy | None] = [None if s is None else make(s.blocks) for s in specs]
        if remote is not None:
            self.levels[REMOTE] = remote
        self._relist()
        self.written = [0, 0, 0]  # blocks stored into each tier by this pool
        self.read = [0, 0, 0]  # blocks copied back from each tier to this GPU
        self.pending = [0, 0, 0]  # of those, blocks whose copy time no step has charged yet
        self.asked = 0  # blocks admitted requests looked up (what each could at most reuse)
        self.gpu_hits = 0  # of those, blocks found in the GPU's own cache

    def share_remote(self, remote: Policy) -> None:
        """Use a fleet's one remote tier instead of this pool's own."""
        self.levels[REMOTE] = remote
        self._relist()

    def _relist(self) -> None:
        """The tiers there are; with one, its index (`only`, else -1) and, if it is an LRU, its dict of keys
        (`resident`): a lookup is then one dict probe, as fast as host memory alone was before there were tiers."""
        self.live = [lv for lv in self.levels if lv is not None]
        self.only = next(t for t, lv in enumerate(self.levels) if lv is not None) if len(self.live) == 1 else -1
        one = self.live[0] if len(self.live) == 1 else None
        self.resident: dict[int, None] | None = one.order if isinstance(one, Lru) else None

    def remote(self) -> Policy | None:
        """The remote tier, if there is one."""
        return self.levels[REMOTE]

    def __contains__(self, key: int) -> bool:
        for lv in self.live:
            if key in lv:
                return True
        return False

    def where(self, key: int, local: bool = False) -> int:
        """The fastest tier holding key (HOST, DISK, REMOTE), or -1; `local`: host and disk only."""
        for t, lv in enumerate(self.levels[:REMOTE] if local else self.levels):
            if lv is not None and key in lv:
                return t
        return -1

    def spill(self, keys: list[int]) -> int:
        """Blocks the GPU reclaimed go down the tiers: each tier stores what reaches it and passes on what its
        policy pushes out; past the last, blocks are dropped. Returns how many blocks host memory newly stored."""
        host, disk = self.levels[HOST], self.levels[DISK]
        if host is not None and disk is not None:
            for k in keys:  # back in host memory: one local copy, so the disk lets its copy go
                disk.remove(k)
        carry = keys
        for t, lv in enumerate(self.levels):
            if lv is None or not carry:
                continue
            new, carry = lv.offer(carry)
            self.written[t] += new
        return self.written[HOST]

    def load(self, keys: list[int]) -> None:
        """These blocks are copied back to the GPU: each is read (and marked used) in the fastest tier holding it."""
        if self.only >= 0:  # one tier: every block comes from it
            self.live[0].hit_many(keys)
            self.read[self.only] += len(keys)
            self.pending[self.only] += len(keys)
            return
        for k in keys:
            t = self.where(k)
            if t >= 0:
                self.levels[t].hit(k)  # type: ignore[union-attr]
                self.read[t] += 1
                self.pending[t] += 1

    def counts(self, keys: list[int]) -> list[int]:
        """How many of these blocks the fastest tier holding each has (host, disk, remote)."""
        n = [0, 0, 0]
        if self.only >= 0:
            n[self.only] = len(keys)
            return n
        for k in keys:
            t = self.where(k)
            if t >= 0:
                n[t] += 1
        return n

    def seconds(self, counts: list[int], kv_bytes_per_token: float) -> float:
        """Time to copy back counts[t] blocks from each tier: bytes over its bandwidth, plus its latency once (the
        copies of one step from one tier overlap their round trips)."""
        s = 0.0
        for t, n in enumerate(counts):
            if n:
                spec = self.specs[t]
                assert spec is not None, f"blocks from a {TIER_NAMES[t]} tier that does not exist"
                s += n * KV_BLOCK_TOKENS * kv_bytes_per_token / (spec.gbps * 1e9) + spec.latency_s
        return s

    def take_load_s(self, kv_bytes_per_token: float) -> float:
        """The copy time of the blocks loaded since the last call (the step about to run waits for them)."""
        s = self.seconds(self.pending, kv_bytes_per_token)
        self.pending = [0, 0, 0]
        return s

    def check(self) -> None:
        """Each tier within its capacity, and host memory and disk never both holding a block."""
        for t, lv in enumerate(self.levels):
            if lv is not None:
                assert len(lv) <= lv.capacity, f"the {TIER_NAMES[t]} tier holds more blocks than it has room for"
        host, disk = self.levels[HOST], self.levels[DISK]
        if host is not None and disk is not None:
            assert not host.keys() & disk.keys(), "a block both in host memory and on disk"


def tier_report(tiers: list[KVTiers], kv_bytes_per_token: float) -> dict[str, object] | None:
    """`run --json`'s kv_tiers block over some pools: the share of looked-up blocks each tier supplied (GPU, host,
    disk, remote) and the bytes stored into and read back from each lower tier (None: no pool has a tier)."""
    if not tiers:
        return None
    asked = sum(t.asked for t in tiers)
    block_bytes = KV_BLOCK_TOKENS * kv_bytes_per_token
    first = tiers[0]
    out: dict[str, object] = {"policy": type(next(iter(first.live))).name if first.live else None,
                              "blocks_looked_up": asked, "hit_rate": hit_rates(tiers)}
    for i, name in enumerate(TIER_NAMES):
        spec = first.specs[i]
        if spec is None:
            continue
        read = sum(t.read[i] for t in tiers)
        out[name] = {"capacity_blocks": spec.blocks, "gbps": spec.gbps, "latency_ms": spec.latency_s * 1e3,
                     "blocks_stored": sum(t.written[i] for t in tiers), "blocks_read": read,
                     "bytes_stored": int(sum(t.written[i] for t in tiers) * block_bytes),
                     "bytes_read": int(read * block_bytes)}
    return out


def hit_rates(tiers: list[KVTiers]) -> dict[str, float]:
    """Of the blocks admitted requests looked up in these pools, the share each tier supplied: gpu, then each lower
    tier there is (host, disk, remote); 0 before any lookup."""
    asked = sum(t.asked for t in tiers)
    out = {"gpu": sum(t.gpu_hits for t in tiers) / asked if asked else 0.0}
    for i, name in enumerate(TIER_NAMES):
        if tiers and tiers[0].specs[i] is not None:
            out[name] = sum(t.read[i] for t in tiers) / asked if asked else 0.0
    return out
