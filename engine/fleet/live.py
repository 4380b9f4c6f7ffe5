"""A fleet of live engines behind one door: `tokensim serve-api --replicas N --router R` (issue 29).

Each replica is an engine.serving.live.LiveEngine with its own lane and KV pool; a request is given to the
replica the fleet's router picks (engine.fleet.routers, reading each replica as it stands when the request
comes), or to a replica named by the caller (one port per replica, for an external router to balance). The
replicas run side by side on one clock: advance takes every replica's steps up to a time and hands back their
token events merged in time order, as a single engine's are. Request ids are unique across the fleet
(replica i numbers its requests i, i + N, i + 2N, ...), so a request's id names the replica it was sent to.

With prefill/decode disaggregation (`serve-api --pd P:D`) the first P replicas read prompts and the router picks
among them; the prompt's KV is copied to a decode replica with room, on the link, by engine.fleet.pd's KVCopies
(the same copies as `tokensim run --pd`), and the decode replica computes the first token and the rest under the
request's id. As vLLM's disaggregated proxy, the client's tokens all come from the decode replica (the prefill
instance answers max_tokens=1 to the proxy, which drops it): its first token comes after the prefill, the copy
and one decode step. Every event is taken in time order: a copy landing before the next step of any replica
lands first, and the replica whose clock is earliest steps next, so no replica steps past a copy meant for it.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from engine.config import EngineConfig
from engine.fleet.pd import KVCopies
from engine.fleet.routers import make_router
from engine.serving.live import Emission, Finished, LiveEngine, text_keys


class LiveFleet:
    """N LiveEngines and a router: the same surface as one LiveEngine, plus `replicas` to read one of them."""

    def __init__(self, cfg: EngineConfig, replicas: int = 1, router: str = "round-robin",
                 pd: tuple[int, int] | None = None, kv_link_gbps: float | None = None) -> None:
        """`pd` (P, D): the first P of the replicas read prompts, the other D decode (P + D = replicas); their KV
        copies cross a link of `kv_link_gbps` per GPU, one direction (default: half the GPU's interconnect, both
        directions, as `tokensim run --pd`)."""
        n_pf = pd[0] if pd else 0
        roles = ["prefill"] * n_pf + ["decode"] * (replicas - n_pf) if pd else ["both"] * replicas
        self.replicas = [LiveEngine(cfg, i, replicas, role) for i, role in enumerate(roles)]
        self.router = make_router(router)
        self._wanted = "wanted_blocks" in self.router.reads
        self._cached = "cached_blocks" in self.router.reads and cfg.prefix_caching
        self.pd = pd
        self.front = [r for r in self.replicas if r.role != "decode"]  # replicas a request is sent to
        self.copies: KVCopies | None = None
        self._dropped: set[int] = set()  # requests whose clients left while their KV was being copied
        if pd:
            sm = self.replicas[0].engine.step_model
            gbps = kv_link_gbps if kv_link_gbps is not None else sm.hw.interconnect_gbps / 2
            self.copies = KVCopies(replicas, gbps * 1e9, sm.kv_bytes_per_token)
            for r in self.front:
                r.on_submit = self.copies.prompt_only

    @classmethod
    def of(cls, engine: LiveEngine) -> LiveFleet:
        """A fleet of one existing engine."""
        f = cls.__new__(cls)
        f.replicas, f.router, f._wanted, f._cached = [engine], make_router("round-robin"), False, False
        f.pd, f.front, f.copies, f._dropped = None, f.replicas, None, set()
        return f

    def replica_of(self, rid: int) -> int:
        """The replica serving request `rid`."""
        return rid % len(self.replicas)

    # ---- requests in and out ------------------------------------------------------------------
    def pick(self, prompt: int = 0, blocks: np.ndarray | None = None) -> int:
        """The replica the router picks for a request arriving now; a prefix-aware router reads how many of its
        prompt's leading blocks (their hashes: `blocks`) each replica's cache holds."""
        if len(self.front) == 1:
            return self.front[0].index
        keys = text_keys(blocks, prompt) if self._cached and blocks is not None else None
        return self.router.pick([r.routing(self._wanted, keys) for r in self.front]).index

    def submit(self, prompt: int, output: int, t: float, prefix_text: str = "", prompt_text: str = "",
               prefix_tokens: int = 0, replica: int | None = None, blocks: np.ndarray | None = None) -> int:
        """A request sent at sim time t to `replica` (None, or a decode replica: the router's pick); returns its
        id."""
        i = self.pick(prompt, blocks) if replica is None or self.replicas[replica].role == "decode" else replica
        return self.replicas[i].submit(prompt, output, t, prefix_text=prefix_text, prompt_text=prompt_text,
                                       prefix_tokens=prefix_tokens, blocks=blocks)

    def abort(self, rid: int) -> bool:
        """The request's client went away: its replica drops it and frees its KV (False: already done). P/D: a
        request whose KV is on its way is dropped where it lands."""
        if self.replicas[self.replica_of(rid)].abort(rid):
            if self.copies is not None:
                self.copies.pending.pop(rid, None)
            return True
        if self.copies is None:
            return False
        if any(c.req_id == rid for c in self.copies.states()):
            self._dropped.add(rid)
            return True
        return any(r.abort(rid) for r in self.replicas if r.role == "decode")

    def advance(self, t: float, max_steps: int = 256) -> list[Emission]:
        """Every replica's steps that start by sim time t (at most max_steps each), merged in time order (P/D: at
        most max_steps in all, and only the decode replicas' steps are reported: they make the answer)."""
        if self.copies is not None:
            return self._advance_pd(t, max_steps, self.copies)
        runs = [r.advance(t, max_steps) for r in self.replicas]
        if len(runs) == 1:
            return runs[0]
        return list(heapq.merge(*runs, key=lambda e: e.t))

    def _advance_pd(self, t: float, max_steps: int, copies: KVCopies) -> list[Emission]:
        """P/D's advance: events in time order up to t (see the module's docstring), as Fleet._run_events takes
        them: a landing at or before the earliest replica's clock first, then that replica's step (ties: the lower
        index); a prefill replica's finished prompts are handed to the copies, a decode replica's room may start
        waiting ones."""
        engines = [r.engine for r in self.replicas]
        back = [r.engine for r in self.replicas if r.role == "decode"]
        out: list[Emission] = []
        steps = 0
        while steps < max_steps:
            for r in self.front:
                r.join(t)
            ready = [r for r in self.replicas if r.engine.busy and not r.engine.blocked]
            nxt = min(ready, key=lambda r: (r.clock, r.index)) if ready else None
            tmin = nxt.clock if nxt is not None else math.inf
            tl = copies.next_landing
            if tl <= tmin and tl <= t:
                _, d, tl = copies.land(engines)
                rid = int(d.lane.R.col("id")[-1])  # the landed request joined the batch last
                if rid in self._dropped:
                    self._dropped.discard(rid)
                    self.replicas[d.index].abort(rid)
                if copies.waiting:
                    copies.start(tl, back)
                continue
            if nxt is None or tmin > t:
                break
            e = nxt.step()
            steps += 1
            if nxt.role == "prefill":
                if nxt.engine.finished_rows:
                    copies.handoff(nxt.engine, back)
                    nxt.handed_off()
            else:
                out.append(e)
                if copies.waiting:
                    copies.start(nxt.clock, back)
        for r in self.front:  # an idle prefill replica's clock follows t (a decode one's waits for a landing)
            if not r.busy and r.clock < t:
                r.engine.clock = t
        return out

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
        """The earliest clock of a replica with work ahead, or of a KV copy's landing (every event before it is
        done)."""
        busy = [r.clock for r in self.replicas if r.busy]
        if self.copies is not None and not self.copies.idle:
            busy.append(self.copies.next_landing)  # (a copy waiting for room starts at a decode step)
        return min(busy) if busy else max(r.clock for r in self.replicas)

    @property
    def busy(self) -> bool:
        """Some replica has work ahead, or a KV copy is waiting or under way."""
        return any(r.busy for r in self.replicas) or (self.copies is not None and not self.copies.idle)

    running = property(lambda self: sum(r.running for r in self.replicas), doc="Requests in the batches.")

    @property
    def waiting(self) -> int:
        """Requests waiting anywhere: queued, preempted, or (P/D) their KV not yet landed on a decode replica (as
        vLLM's decode instance counts a request waiting for remote KV)."""
        moving = len(self.copies.landings) + len(self.copies.waiting) if self.copies is not None else 0
        return sum(r.waiting for r in self.replicas) + moving

    preemptions = property(lambda self: sum(r.preemptions for r in self.replicas), doc="Evictions so far.")
    aborted = property(lambda self: sum(r.aborted for r in self.replicas), doc="Requests dropped by clients.")
    prefix_queries = property(lambda self: sum(r.prefix_queries for r in self.front),
                              doc="Prompt tokens looked up in the prefix caches (where prompts are read).")
    prefix_hits = property(lambda self: sum(r.prefix_hits for r in self.front),
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
