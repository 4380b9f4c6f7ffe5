"""The one task that runs the engine: its clock follows the wall clock, and each request's stream is woken
when the step that makes its tokens ends.

Mapping: sim = (wall - start) * time_scale, so --time-scale 1 is real time and 10 runs the engine ten times
faster than the wall. A step is computed when the wall reaches its start (so every request sent before it is
in it) and its tokens are published when the wall reaches its end. If the host cannot compute steps as fast
as the mapping needs, the engine falls behind: tokensim:engine_lag_seconds says by how much and a log line
says so (never a silent drift).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from engine.fleet.live import LiveFleet
from engine.serving.live import Emission, LiveEngine
from tui.api.metrics import Metrics

if TYPE_CHECKING:
    from prometheus_client import Histogram

log = logging.getLogger("tokensim.api")
LAG_WARN_S = 0.1  # wall seconds behind before the log says so
LAG_LOG_EVERY_S = 5.0  # at most one lag line this often
MAX_STEPS = 64  # steps per catch-up pass, so handlers get to run while the engine catches up
IDLE_POLL_S = 0.5  # an idle driver re-reads the clock this often (keeps lag and gauges fresh)


class QueueFull(Exception):
    """The waiting queue is at its cap (--max-waiting): the door answers 503."""


@dataclass(slots=True, eq=False)
class Stream:
    """One request's channel from the driver to its handler: tokens available so far, whether it is done."""

    rid: int
    prompt: int
    total: int
    arrival: float
    replica: int = 0
    gen: int = 0
    done: bool = False
    last_t: float = 0.0  # engine time of the last token
    wall0: float = 0.0  # monotonic wall time it was sent
    last_wall: float = 0.0  # monotonic wall time its last token went out
    event: asyncio.Event = field(default_factory=asyncio.Event)


class ReplicaView:
    """One replica of the driver's fleet as its own /metrics reads it (serve-api --replica-ports)."""

    def __init__(self, driver: Driver, i: int) -> None:
        self.d, self.i, self.eng = driver, i, driver.live.replicas[i]

    running = property(lambda self: self.eng.running)
    waiting = property(lambda self: self.eng.waiting)
    kv_usage = property(lambda self: self.eng.kv_usage)
    preemptions = property(lambda self: self.eng.preemptions)
    prefix_queries = property(lambda self: self.eng.prefix_queries)
    prefix_hits = property(lambda self: self.eng.prefix_hits)
    aborted = property(lambda self: self.eng.aborted)
    prompt_tokens = property(lambda self: self.d.by_replica[self.i][0])
    generation_tokens = property(lambda self: self.d.by_replica[self.i][1])
    rejected = property(lambda self: self.d.by_replica[self.i][2])
    lag_s = property(lambda self: self.d.lag_s)


class Driver:
    """Owns the LiveEngine: handlers submit and abort through it, and read nothing else of the engine."""

    def __init__(self, live: LiveEngine | LiveFleet, time_scale: float, model: str,
                 max_waiting: int | None = None) -> None:
        self.live = live if isinstance(live, LiveFleet) else LiveFleet.of(live)
        self.scale = time_scale
        self.max_waiting = max_waiting
        self.streams: dict[int, Stream] = {}
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.rejected = 0
        self.lag_s = 0.0
        self._last_lag_log = -LAG_LOG_EVERY_S
        self._start = time.monotonic()
        self._wake = asyncio.Event()
        self.block_tokens = self.live.replicas[0].block_tokens  # tokens per KV block (the prefix cache's unit)
        self.task: asyncio.Task[None] | None = None  # run()'s task, while the fleet's app serves
        self.metrics = Metrics(self, model, time_scale != 1)
        n = len(self.live.replicas)
        self.by_replica = [[0, 0, 0] for _ in range(n)]  # prompt tokens, generation tokens, rejected
        self.replica_metrics = [Metrics(ReplicaView(self, i), model, time_scale != 1) for i in range(n)] \
            if n > 1 else []

    # ---- the clock ----------------------------------------------------------------------------
    def sim_now(self) -> float:
        """The engine time the wall clock stands at."""
        return (time.monotonic() - self._start) * self.scale

    def _wall(self, sim: float) -> float:
        """The monotonic wall time of an engine time."""
        return self._start + sim / self.scale

    # ---- handlers' side -----------------------------------------------------------------------
    def submit(self, prompt: int, output: int, prefix_text: str = "", prompt_text: str = "",
               prefix_tokens: int = 0, replica: int | None = None, blocks: np.ndarray | None = None) -> Stream:
        """A request arriving now, for `replica` (None: the fleet's router picks); QueueFull when the waiting
        queue (of that replica, or of the fleet) is at its cap. Prefix-cache keys: `blocks` (one hash per
        full block, LiveEngine.submit), else the texts."""
        door = replica is None or self.live.replicas[replica].role == "decode"  # P/D: prompts go to prefill ones
        i = self.live.pick(prompt, blocks) if door else replica
        if self.max_waiting is not None and self.live.replicas[i].waiting >= self.max_waiting:
            self.rejected += 1
            self.by_replica[i][2] += 1
            raise QueueFull
        t = self.sim_now()
        rid = self.live.submit(prompt, output, t, prefix_text=prefix_text, prompt_text=prompt_text,
                               prefix_tokens=prefix_tokens, replica=i, blocks=blocks)
        s = Stream(rid, prompt, output, t, i, wall0=time.monotonic())
        self.streams[rid] = s
        self._wake.set()
        return s

    def abort(self, s: Stream) -> None:
        """The client left before its answer ended: the request leaves the engine and frees its KV."""
        if self.streams.pop(s.rid, None) is not None and not s.done:
            self.live.abort(s.rid)

    # ---- what /metrics reads ------------------------------------------------------------------
    running = property(lambda self: self.live.running)
    waiting = property(lambda self: self.live.waiting)
    kv_usage = property(lambda self: self.live.kv_usage)
    preemptions = property(lambda self: self.live.preemptions)
    prefix_queries = property(lambda self: self.live.prefix_queries)
    prefix_hits = property(lambda self: self.live.prefix_hits)
    aborted = property(lambda self: self.live.aborted)

    # ---- the engine's side --------------------------------------------------------------------
    async def run(self) -> None:
        """Forever: take the steps the wall clock has reached, publish each at its end, sleep until the next."""
        while True:
            ems = self.live.advance(self.sim_now(), MAX_STEPS)
            for e in ems:
                wait = self._wall(e.t) - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                self._publish(e)
            self._finish()
            self._note_lag()
            if ems:
                await asyncio.sleep(0)  # let handlers send what was published
            elif self.live.busy:
                await asyncio.sleep(max(0.0, self._wall(self.live.clock) - time.monotonic()))
            else:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), IDLE_POLL_S)
                except TimeoutError:
                    pass

    def _metrics_of(self, replica: int) -> tuple[Metrics, ...]:
        """The registries a request on `replica` is counted in: the door's, and its replica's own if it has one."""
        return (self.metrics, self.replica_metrics[replica]) if self.replica_metrics else (self.metrics,)

    def _publish(self, e: Emission) -> None:
        """Wake every stream whose count grew in this step. The wall-clock latencies (vLLM's names) are stamped
        here, as the tokens go out; the engine-clock ones from the step's time. A replica's own registry counts
        the tokens it made, and the prompts sent to it (P/D: prompts on the prefill replica, tokens and
        latencies on the decode one)."""
        streams, now = self.streams, time.monotonic()
        for rid, g in zip(e.ids.tolist(), e.gen.tolist(), strict=True):
            s = streams.get(rid)
            if s is None or g <= s.gen:
                continue
            k = g - s.gen
            for m in self._metrics_of(e.replica):
                if s.gen:
                    _observe(m.wall.itl, (now - s.last_wall) / k, k)
                    if m.engine is not None:
                        _observe(m.engine.itl, (e.t - s.last_t) / k, k)
                else:
                    m.wall.ttft.observe(now - s.wall0)
            if not s.gen:
                self.prompt_tokens += s.prompt
                self.by_replica[s.replica][0] += s.prompt
            self.generation_tokens += k
            self.by_replica[e.replica][1] += k
            s.gen, s.last_t, s.last_wall = g, e.t, now
            s.event.set()
        for rid in e.done.tolist():
            s = streams.pop(rid, None)
            if s is not None:
                for m in self._metrics_of(e.replica):
                    m.wall.e2e.observe(now - s.wall0)
                s.done = True
                s.event.set()

    def _finish(self) -> None:
        """The engine-clock latencies of the requests that finished, and their queue time (the engine's admit
        time mapped to the wall: no token marks it)."""
        for f in self.live.pop_finished():
            for m in self._metrics_of(f.replica):
                m.wall.queue.observe((f.admit - f.arrival) / self.scale)
                if m.engine is not None:
                    m.engine.ttft.observe(f.first - f.arrival)
                    m.engine.e2e.observe(f.done - f.arrival)
                    m.engine.queue.observe(f.admit - f.arrival)

    def _note_lag(self) -> None:
        """How far (wall seconds) the engine clock is behind, with a log line when it is more than LAG_WARN_S."""
        behind = self.sim_now() - self.live.clock if self.live.busy else 0.0
        self.lag_s = max(0.0, behind / self.scale)
        now = time.monotonic()
        if self.lag_s > LAG_WARN_S and now - self._last_lag_log >= LAG_LOG_EVERY_S:
            self._last_lag_log = now
            log.warning("engine clock %.3f s behind the wall (%d running, %d waiting): this host cannot keep up"
                        " at --time-scale %g", self.lag_s, self.running, self.waiting, self.scale)


def _observe(h: Histogram, v: float, k: int) -> None:
    """k observations of v (a stream that lagged gets several tokens in one step, evenly spaced)."""
    for _ in range(k):
        h.observe(v)
