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

from engine.serving.live import Emission, LiveEngine
from tui.api.metrics import Metrics

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
    gen: int = 0
    done: bool = False
    last_t: float = 0.0
    event: asyncio.Event = field(default_factory=asyncio.Event)


class Driver:
    """Owns the LiveEngine: handlers submit and abort through it, and read nothing else of the engine."""

    def __init__(self, live: LiveEngine, time_scale: float, model: str, max_waiting: int | None = None) -> None:
        self.live = live
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
        self.metrics = Metrics(self, model)

    # ---- the clock ----------------------------------------------------------------------------
    def sim_now(self) -> float:
        """The engine time the wall clock stands at."""
        return (time.monotonic() - self._start) * self.scale

    def _wall(self, sim: float) -> float:
        """The monotonic wall time of an engine time."""
        return self._start + sim / self.scale

    # ---- handlers' side -----------------------------------------------------------------------
    def submit(self, prompt: int, output: int, prefix_text: str = "", prompt_text: str = "",
               prefix_tokens: int = 0) -> Stream:
        """A request arriving now; QueueFull when the waiting queue is at its cap."""
        if self.max_waiting is not None and self.live.waiting >= self.max_waiting:
            self.rejected += 1
            raise QueueFull
        t = self.sim_now()
        rid = self.live.submit(prompt, output, t, prefix_text=prefix_text, prompt_text=prompt_text,
                               prefix_tokens=prefix_tokens)
        s = Stream(rid, prompt, output, t)
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

    def _publish(self, e: Emission) -> None:
        """Wake every stream whose count grew in this step; inter-token gaps are observed here."""
        streams, itl = self.streams, self.metrics.itl
        for rid, g in zip(e.ids.tolist(), e.gen.tolist(), strict=True):
            s = streams.get(rid)
            if s is None or g <= s.gen:
                continue
            k = g - s.gen
            if s.gen:
                gap = (e.t - s.last_t) / k
                for _ in range(k):
                    itl.observe(gap)
            else:
                self.prompt_tokens += s.prompt
            self.generation_tokens += k
            s.gen, s.last_t = g, e.t
            s.event.set()
        for rid in e.done.tolist():
            s = streams.pop(rid, None)
            if s is not None:
                s.done = True
                s.event.set()

    def _finish(self) -> None:
        """Latency histograms of the requests that finished."""
        m = self.metrics
        for f in self.live.pop_finished():
            m.ttft.observe(f.first - f.arrival)
            m.e2e.observe(f.done - f.arrival)
            m.queue.observe(f.admit - f.arrival)

    def _note_lag(self) -> None:
        """How far (wall seconds) the engine clock is behind, with a log line when it is more than LAG_WARN_S."""
        behind = self.sim_now() - self.live.clock if self.live.busy else 0.0
        self.lag_s = max(0.0, behind / self.scale)
        now = time.monotonic()
        if self.lag_s > LAG_WARN_S and now - self._last_lag_log >= LAG_LOG_EVERY_S:
            self._last_lag_log = now
            log.warning("engine clock %.3f s behind the wall (%d running, %d waiting): this host cannot keep up"
                        " at --time-scale %g", self.lag_s, self.running, self.waiting, self.scale)
