"""One engine driven request by request on a clock set from outside: the engine side of the simulated server.

`tokensim serve-api` (tui/api) turns each HTTP request into a request here and moves the clock to the wall
clock's reading; this module is all it knows of the engine. The engine is built with no workload of its own
(no users, no rate, no bounds), as a fleet builds its replicas, and every step is taken one at a time so each
step's tokens carry the time that step ends: that is when the server sends them.

What it offers: submit (prompt and output lengths, content keys for the prefix cache), advance (every step that
starts by a time, with the tokens each request holds after it), abort (a client went away: the request leaves and
its KV blocks go back), and the counters vLLM's /metrics reads (running, waiting, KV use, preemptions, prefix
cache queries and hits).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.config import EngineConfig
from engine.fleet.replica import Replica
from engine.fleet.routers import RoutingSnapshot
from engine.serving.prefix_cache import TAG_GROUP, TAG_PROMPT, TAG_TEXT, TAG_TEXT_BLOCK, chain_keys, stream_id
from engine.serving.tables import BLOCK, Rows

_ID_BITS = (1 << 56) - 1  # stream ids keep their tag in the top byte (prefix_cache.stream_id)


@dataclass(frozen=True, slots=True)
class Emission:
    """One step's outcome: at sim time `t` (the step's end), request ids[j] has generated gen[j] tokens.
    Finished requests are in `done` (their ids; gen[j] is then their whole answer)."""

    t: float
    ids: np.ndarray
    gen: np.ndarray
    done: np.ndarray
    replica: int = 0  # the replica that took the step (a fleet's index)


@dataclass(frozen=True, slots=True)
class Finished:
    """A finished request's times (sim seconds): sent, first admitted, first token, last token; and its lengths."""

    rid: int
    arrival: float
    admit: float
    first: float
    done: float
    prompt: int
    output: int
    hit: int  # prompt tokens read from the prefix cache
    replica: int = 0  # the replica that finished it (P/D: the decode replica)


def content_key(text: str) -> int:
    """A stream id for a piece of text: equal texts, equal ids (a stable hash, not Python's salted one)."""
    h = 1469598103934665603  # FNV-1a, 64-bit: cheap and stable across runs and processes
    for b in text.encode("utf-8", "surrogatepass")[:1 << 20]:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return int(h & _ID_BITS) or 1


def block_streams(blocks: np.ndarray, prompt: int) -> np.ndarray:
    """The prefix cache's streams of a prompt's full blocks from their hashes (LiveEngine.submit's `blocks`)."""
    n = min(int(blocks.size), prompt // BLOCK)
    return stream_id(TAG_TEXT_BLOCK, blocks[:n].astype(np.int64) & _ID_BITS)


def text_keys(blocks: np.ndarray, prompt: int) -> np.ndarray:
    """The cache keys of the leading blocks of a prompt keyed by `blocks` that a request could find cached (never
    the block holding its last token, which is always computed): what a prefix-aware router looks up."""
    streams = block_streams(blocks, prompt)[:max(0, (prompt - 1) // BLOCK)]
    if not streams.size:
        return np.zeros(0, dtype=np.uint64)
    sid = int(stream_id(TAG_TEXT, 0))  # any text stream: its blocks' keys depend only on their block streams
    one = np.ones(1, dtype=np.int64)
    z = np.zeros(1, dtype=np.int64)
    return chain_keys(z.astype(np.uint64), z, one * streams.size, z, z, one * sid, one * streams.size * BLOCK,
                      one * sid, {sid: streams})


class LiveEngine:
    """An Engine fed one request at a time, stepped to a clock given from outside, reporting token events."""

    def __init__(self, cfg: EngineConfig, index: int = 0, stride: int = 1, role: str = "both") -> None:
        """`index` and `stride`: replica `index` of a fleet of `stride` numbers its requests index, index +
        stride, ... so ids are unique across the fleet (engine.fleet.live). `role`: "prefill" or "decode" in a
        disaggregated fleet (engine.fleet.live moves its requests between them)."""
        self._eng = Replica(cfg, index, role)  # a lane with no users or arrivals of its own, fed from outside
        self.role = role
        self.index = index
        self.on_submit: Callable[[Rows], None] | None = None  # sees each request's row as it is sent (P/D)
        self._eng.skip_quiet = False  # one step at a time: each step's tokens are sent at that step's end
        self._ln = self._eng.lane
        self._next_id = index
        self._stride = stride
        self._done: list[Rows] = self._eng.finished_rows  # finished since pop_finished (the lane appends them);
        # the first _seen of them already emitted
        self._seen = 0
        self._pending: dict[int, Rows] = {}  # sent, not yet reached by the lane's clock (in order of sending)
        self._lag = 0.0
        self.prefix_queries = 0  # prompt tokens looked up in the prefix cache (vLLM counts tokens)
        self.prefix_hits = 0  # of which found cached

    @property
    def engine(self) -> Replica:
        """The engine it steps, for read-only views (serve-api --floor draws its snapshots); never step it."""
        return self._eng

    # ---- what the door checks -----------------------------------------------------------------
    @property
    def max_tokens_per_request(self) -> int:
        """The longest request (prompt + answer) the context and the KV pool can hold."""
        return int(self._ln.cap_tokens)

    @property
    def clock(self) -> float:
        """The lane's simulated time: every step before it is done."""
        return float(self._ln.clock)

    # ---- requests in and out ------------------------------------------------------------------
    block_tokens = BLOCK  # tokens per KV block: what a caller's block hashes (submit's `blocks`) must cover

    def submit(self, prompt: int, output: int, t: float, prefix_text: str = "", prompt_text: str = "",
               prefix_tokens: int = 0, blocks: np.ndarray | None = None) -> int:
        """A request sent at sim time t; returns its id. It joins the lane's queue when the lane's clock reaches
        t (advance), so it is admitted at the first step boundary after it arrives, as on a plain run.
        Prefix-cache keys: `blocks`, one hash per full block of the prompt (block_tokens tokens), each covering
        its parent's, as vLLM hashes them: a prompt then hits every leading block it shares with one seen
        before (a chat whose history grows). Without them, `prompt_text` keys the whole prompt (identical
        prompts share every full block) and `prefix_text`, of `prefix_tokens` tokens, a shared leading part."""
        if prompt < 1 or output < 1 or prompt + output > self.max_tokens_per_request:
            raise ValueError(f"request of {prompt} + {output} tokens does not fit {self.max_tokens_per_request}")
        r = Rows.new(1)
        rid = self._next_id
        self._next_id += self._stride
        r.id[0], r.user[0], r.prompt[0], r.total[0], r.target[0] = rid, -1, prompt, output, prompt
        r.arrival[0] = t
        if blocks is not None and blocks.size:
            sid = int(stream_id(TAG_TEXT, rid))
            r.body[0] = sid
            self._ln.texts[sid] = block_streams(blocks, prompt)
        elif prompt_text:
            r.body[0] = int(stream_id(TAG_PROMPT, content_key(prompt_text)))
        if blocks is None and prefix_text and 0 < prefix_tokens < prompt:
            r.group[0] = int(stream_id(TAG_GROUP, content_key(prefix_text)))
            r.prefix[0] = prefix_tokens
        if self.on_submit is not None:
            self.on_submit(r)
        self._pending[rid] = r
        return rid

    def abort(self, rid: int) -> bool:
        """The request's client went away: drop it wherever it is and free its KV blocks (False: already done)."""
        if self._pending.pop(rid, None) is not None:
            self._forget(rid)
            return True
        gone = self._ln.abort(rid)
        self._forget(rid)
        return gone

    def _forget(self, rid: int) -> None:
        """A request left the lane (its blocks are released): its block table is no longer read."""
        if self._ln.texts:
            self._ln.texts.pop(int(stream_id(TAG_TEXT, rid)), None)

    def _join(self, t: float) -> None:
        """Queue the sent requests the lane's clock has reached; an idle lane's clock jumps to the next one sent
        by t (an idle GPU starts a request's first step when it arrives)."""
        ln = self._ln
        while self._pending:
            rid = next(iter(self._pending))
            r = self._pending[rid]
            a = float(r.arrival[0])
            if a > ln.clock:
                if ln.has_work or a > t:
                    return
                ln.clock = a
            del self._pending[rid]
            self._eng.inject(r)

    def advance(self, t: float, max_steps: int = 256) -> list[Emission]:
        """Take every step that starts at or before sim time t (at most max_steps: the caller reports lag), and
        with nothing to run let the clock follow t. One Emission per step, in order."""
        ln = self._ln
        out: list[Emission] = []
        while len(out) < max_steps:
            self._join(t)
            if not (ln.has_work and ln.clock <= t):
                break
            out.append(self.step())
        if not ln.has_work and not self._pending and ln.clock < t:
            ln.clock = t
        self._lag = max(0.0, t - ln.clock) if ln.has_work else 0.0
        return out

    def step(self) -> Emission:
        """Take the lane's next step (it has work, at its clock): the tokens each request holds after it."""
        ln = self._ln
        hits = ln.stats.cached_in_tokens
        reads = ln.stats.in_tokens
        self._eng.step_before(math.inf, 1)
        self.prefix_hits += ln.stats.cached_in_tokens - hits
        self.prefix_queries += ln.stats.in_tokens - reads
        return self._emission()

    def join(self, t: float) -> None:
        """Queue the requests sent by sim time t that the lane's clock has reached (advance does it itself)."""
        self._join(t)

    def handed_off(self) -> None:
        """The lane's finished rows were taken by a fleet (P/D: prompts whose KV is copied on): none to report."""
        self._eng.finished_rows.clear()
        self._seen = 0

    @property
    def lag(self) -> float:
        """Sim seconds of work the lane has not reached (0 when it keeps up): set by the last advance's t."""
        return self._lag

    def _emission(self) -> Emission:
        """The step just taken: every running request's count, and the ones that finished."""
        R = self._ln.R
        ids, gen = R.col("id").copy(), R.col("gen").copy()
        done = np.zeros(0, dtype=np.int64)
        fresh = self._done[self._seen:]
        self._seen = len(self._done)
        if fresh:
            d = Rows.join(fresh) if len(fresh) > 1 else fresh[0]
            done = d.id.copy()
            ids, gen = np.concatenate([ids, done]), np.concatenate([gen, d.gen])
            for rid in done.tolist():
                self._forget(rid)
        return Emission(float(self._ln.clock), ids, gen, done, self.index)

    def pop_finished(self) -> list[Finished]:
        """Requests finished since the last call, with their times (for latency histograms)."""
        rows = self._done[:]
        self._done.clear()  # (the same list: the engine's on_complete appends to it)
        self._seen = 0
        out: list[Finished] = []
        for d in rows:
            for j in range(len(d)):
                out.append(Finished(int(d.id[j]), float(d.arrival[j]), float(d.admit[j]), float(d.first[j]),
                                    float(d.done[j]), int(d.prompt[j]), int(d.gen[j]), int(d.hit[j]), self.index))
        return out

    def routing(self, wanted: bool, keys: np.ndarray | None = None) -> RoutingSnapshot:
        """What a fleet's router reads of this engine (requests sent but not yet reached count as queued), with
        the run of a prompt's leading blocks its prefix cache holds if given their `keys` (text_keys)."""
        snap = self._eng.routing(wanted, keys)
        return snap._replace(queued=snap.queued + len(self._pending))

    @property
    def busy(self) -> bool:
        """A request is queued, running or sent and not yet reached: the clock has work ahead."""
        return bool(self._pending) or self._ln.has_work

    # ---- what /metrics reads ------------------------------------------------------------------
    @property
    def running(self) -> int:
        """Requests in the batch."""
        return int(self._ln.R.n)

    @property
    def waiting(self) -> int:
        """Requests queued or preempted, and those sent that the clock has not reached."""
        return int(self._ln.waiting) + len(self._pending)

    @property
    def kv_usage(self) -> float:
        """Fraction of the KV pool's blocks in use (cached but unreferenced blocks count as free, as in vLLM)."""
        pool = self._ln.pool
        return float(pool.total - pool.available) / pool.total if pool.total else 0.0

    @property
    def preemptions(self) -> int:
        """Requests evicted so far."""
        return int(self._ln.stats.preemptions)

    @property
    def aborted(self) -> int:
        """Requests dropped because their clients left."""
        return int(self._ln.stats.aborted)

    def check(self) -> None:
        """Every invariant of the lane (AssertionError naming the first that fails): for tests."""
        self._ln.check(self._ln.clock)
