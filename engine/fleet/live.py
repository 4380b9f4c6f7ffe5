"""A fleet of live engines behind one door: `tokensim serve-api --replicas N --router R` (issue 29).

Each replica is an engine.serving.live.LiveEngine with its own lane and KV pool; a request is given to the
replica the fleet's router picks (engine.fleet.routers, reading each replica as it stands when the request
comes), or to a replica named by the caller (one port per replica, for an external router to balance). The
replicas run side by side on one clock: advance takes every replica's steps up to a time and hands back their
token events merged in time order, as a single engine's are. Request ids are unique across the fleet
(replica i numbers its requests i, i + N, i + 2N, ...), so a request's id names its replica.
"""

from __future__ import annotations

import heapq

import numpy as np

from engine.config import EngineConfig
from engine.fleet.routers import make_router
from engine.serving.live import Emission, Finished, LiveEngine, text_keys


class LiveFleet:
    """N LiveEngines and a router: the same surface as one LiveEngine, plus `replicas` to read one of them."""

    def __init__(self, cfg: EngineConfig, replicas: int = 1, router: str = "round-robin") -> None:
        self.replicas = [LiveEngine(cfg, i, replicas) for i in range(replicas)]
        self.router = make_router(router)
        self._wanted = "wanted_blocks" in self.router.reads
        self._cached = "cached_blocks" in self.router.reads and cfg.prefix_caching

    @classmethod
    def of(cls, engine: LiveEngine) -> LiveFleet:
        """A fleet of one existing engine."""
        f = cls.__new__(cls)
        f.replicas, f.router, f._wanted, f._cached = [engine], make_router("round-robin"), False, False
        return f

    def replica_of(self, rid: int) -> int:
        """The replica serving request `rid`."""
        return rid % len(self.replicas)

    # ---- requests in and out ------------------------------------------------------------------
    def pick(self, prompt: int = 0, blocks: np.ndarray | None = None) -> int:
        """The replica the router picks for a request arriving now; a prefix-aware router reads how many of its
        prompt's leading blocks (their hashes: `blocks`) each replica's cache holds."""
        if len(self.replicas) == 1:
            return 0
        keys = text_keys(blocks, prompt) if self._cached and blocks is not None else None
        return self.router.pick([r.routing(self._wanted, keys) for r in self.replicas]).index

    def submit(self, prompt: int, output: int, t: float, prefix_text: str = "", prompt_text: str = "",
               prefix_tokens: int = 0, replica: int | None = None, blocks: np.ndarray | None = None) -> int:
        """A request sent at sim time t to `replica` (None: the router's pick); returns its id."""
        i = self.pick(prompt, blocks) if replica is None else replica
        return self.replicas[i].submit(prompt, output, t, prefix_text=prefix_text, prompt_text=prompt_text,
                                       prefix_tokens=prefix_tokens, blocks=blocks)

    def abort(self, rid: int) -> bool:
        """The request's client went away: its replica drops it and frees its KV (False: already done)."""
        return self.replicas[self.replica_of(rid)].abort(rid)

    def advance(self, t: float, max_steps: int = 256) -> list[Emission]:
        """Every replica's steps that start by sim time t (at most max_steps each), merged in time order."""
        runs = [r.advance(t, max_steps) for r in self.replicas]
        if len(runs) == 1:
            return runs[0]
        return list(heapq.merge(*runs, key=lambda e: e.t))

    def pop_finished(self) -> list[Finished]:
        """Requests finished on any replica since the last call."""
        return [f for r in self.replicas for f in r.pop_finished()]

    # ---- the clock and the gauges, over the fleet -------------------------------------------------
    @property
    def max_tokens_per_request(self) -> int:
        """The longest request every replica can hold (they are alike)."""
        return min(r.max_tokens_per_request for r in self.replicas)

    @property
    def clock(self) -> float:
        """The earliest clock of a replica with work ahead (every replica's step before it is done)."""
        busy = [r.clock for r in self.replicas if r.busy]
        return min(busy) if busy else max(r.clock for r in self.replicas)

    @property
    def busy(self) -> bool:
        """Some replica has work ahead."""
        return any(r.busy for r in self.replicas)

    running = property(lambda self: sum(r.running for r in self.replicas), doc="Requests in the batches.")
    waiting = property(lambda self: sum(r.waiting for r in self.replicas), doc="Requests waiting anywhere.")
    preemptions = property(lambda self: sum(r.preemptions for r in self.replicas), doc="Evictions so far.")
    aborted = property(lambda self: sum(r.aborted for r in self.replicas), doc="Requests dropped by clients.")
    prefix_queries = property(lambda self: sum(r.prefix_queries for r in self.replicas),
                              doc="Prompt tokens looked up in the prefix caches.")
    prefix_hits = property(lambda self: sum(r.prefix_hits for r in self.replicas),
                           doc="Prompt tokens found in the prefix caches.")

    @property
    def kv_usage(self) -> float:
        """The fleet's KV blocks in use over its pools' blocks (one replica: that replica's share)."""
        if len(self.replicas) == 1:
            return self.replicas[0].kv_usage
        return sum(r.kv_usage for r in self.replicas) / len(self.replicas)  # equal pools: the mean is the share

    def check(self) -> None:
        """Every replica's invariants (AssertionError naming the first that fails): for tests."""
        for r in self.replicas:
            r.check()
