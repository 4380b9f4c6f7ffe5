"""A fleet: several replicas of one deployment on one clock, a router choosing where each request goes.

The fleet owns the workload: one engine built on the whole configuration, never stepped, draws the requests
(closed-loop users, Poisson, a workload file's stages and shared prefixes, a trace) with the lane's own code,
so every replica count and router sees the same requests. Each replica is an engine with no workload of its
own, fed through the Engine's public seam (accept, step_lane, on_complete, pin, admit_copied). The fleet
always moves the replica furthest behind, and hands a request to a replica before that replica steps past its
arrival, so a request is admitted at the first step boundary of its replica after it arrives, exactly as on
one engine. Open-loop fleets need not stop every replica at every arrival: round-robin deals requests ahead
(_run_prerouted), least-loaded and kv-aware move a replica up to an arrival only when the router could see
a difference there (_run_lazy); both give the event-ordered loop's numbers.

Routers (what they read is each replica's state at the arrival):
- round-robin: replica i, i+1, ... in turn;
- least-loaded: fewest requests queued, preempted or running;
- kv-aware: the most KV room (free blocks less what the requests already waiting there need);
- prefix-aware: the replica whose prefix cache holds the longest run of the request's leading blocks (a
  group's shared prefix, a session's history), read from each replica's block pool; else the least loaded.

Replica-level detail (injecting rows, reading pools and latencies) lives in `_Replica`, the one place
that knows the serving loop's tables.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine.config import EngineConfig
from engine.errors import InputError
from engine.physics.batch import Batch
from engine.physics.step import StepModel
from engine.serving.accounting import H, Percentiles, explain, rolling, run_metrics
from engine.serving.engine import Engine, prefix_keys
from engine.serving.lane import Lane
from engine.serving.snapshot import Snapshot
from engine.serving.tables import BLOCK, Rows, blocks_for

ROUTERS = ("round-robin", "least-loaded", "kv-aware", "prefix-aware")
MAX_REPLICAS = 4096
# Fixed cost of one KV copy between a prefill and a decode replica (connection handshake, descriptor
# exchange, completion notice): an assumed 1 ms, not fitted to a measurement.
KV_LINK_LATENCY_S = 1e-3
DRAW_AHEAD_S = 10.0  # open-loop fleets draw their requests this far ahead (fewer, larger draws; the same rows)
ROUTE_LOG = 8  # the router's latest decisions kept for the app (Fleet.routes)
# A pre-dealt fleet runs its replicas in a process pool only with at least this many requests: below it,
# starting the processes and shipping the replicas back costs more than it saves (benchmarks/fleet.md).
PARALLEL_MIN_REQUESTS = 5000
KV_HISTORY = 128  # steps of KV fill each replica's row carries (ReplicaState.kv_history)


@dataclass(frozen=True, slots=True)
class Route:
    """One routing decision, as the router saw it: request -> replica, and why."""

    req_id: int
    user: int  # closed-loop user (-1: open loop)
    replica: int
    why: str  # "round-robin", "least-loaded", "kv-aware", "prefix", "only" (a single front replica)
    figure: int  # what decided it: the replica's load (least-loaded), free KV blocks (kv-aware), prefix tokens
    time_s: float


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One replica at a glance (the app's fleet rows): role, KV fill, batch, queue, answers, busy time."""

    index: int
    role: str  # "both", "prefill", "decode"
    clock_s: float
    kv_used: int  # blocks held (copies' pins included)
    kv_total: int
    held: int  # blocks pinned by KV copies on their way
    batch: int  # requests running (copies on their way to the batch not included)
    queued: int  # requests queued or preempted
    done: int  # requests finished here (a prefill replica: prompts read)
    busy_s: float  # simulated seconds spent stepping
    kv_history: tuple[float, ...] = ()  # KV pool fill (0-1) after each of its last KV_HISTORY steps, oldest first


@dataclass(frozen=True, slots=True)
class CopyState:
    """A P/D KV copy not yet landed: from a prefill replica to a decode replica (dst -1: not started)."""

    req_id: int
    src: int
    dst: int
    tokens: int  # KV positions copied
    lands_s: float  # when it lands (nan: waiting for a decode replica with room)


def parse_pd(text: str) -> tuple[int, int]:
    """'P:D' -> (P, D) with P, D >= 1 (a split with no prefill or no decode replica is an error)."""
    p, sep, d = text.partition(":")
    try:
        pp, dd = int(p), int(d)
    except ValueError:
        raise InputError(f"--pd takes P:D, prefill and decode replica counts such as 1:3, got {text!r}") from None
    if not sep:
        raise InputError(f"--pd takes P:D, prefill and decode replica counts such as 1:3, got {text!r}")
    if dd < 1:
        raise InputError(f"--pd {text} leaves no decode replica: every answer needs one; try {max(pp, 1)}:1")
    if pp < 1:
        raise InputError(f"--pd {text} leaves no prefill replica: every prompt needs one; try 1:{dd}")
    return pp, dd


@dataclass(frozen=True, slots=True)
class FleetSpec:
    """A fleet: the per-replica configuration (workload included), how many replicas, router, P/D split."""

    config: EngineConfig
    replicas: int = 1
    router: str = "round-robin"
    pd: tuple[int, int] | None = None  # (prefill replicas, decode replicas); their sum is `replicas`
    kv_link_gbps: float | None = None  # P/D KV transfer link (default: the GPU's interconnect)


class _Replica:
    """One replica: an engine lane fed by the fleet (it draws no arrivals of its own)."""

    __slots__ = ("eng", "lane", "index", "role", "queue_peak", "held", "inflight", "finished_rows", "calm", "eventful",
                 "hint")

    def __init__(self, cfg: EngineConfig, index: int, role: str = "both") -> None:
        # No users, no rate, no bounds: the lane only serves what the fleet injects.
        self.eng = Engine(replace(cfg, users=0, rate=0.0, requests=None, duration=None, fast_share=0.0, workload=None,
                                  trace=None))
        self.lane: Lane = self.eng.lane
        self.index = index
        self.role = role  # "both", or "prefill" / "decode" in a disaggregated fleet
        self.queue_peak = 0
        self.held = 0  # KV blocks pinned by copies (prefill: until the copy lands; decode: reserved for it)
        self.inflight = 0  # decode: batch slots reserved for copies on their way
        self.finished_rows: list[Rows] = []
        self.calm = -math.inf  # no step that could finish a request starts before this time (see Fleet._calm)
        self.eventful = 0  # steps ahead that admit a new request, so cannot be a quiet run (see step)
        self.hint = False  # take those steps one by one (set by an open-loop fleet, see Fleet.__init__)
        # The fleet hears of every finished request (a prefill replica's prompt to copy, a closed-loop user to
        # wake), however the lane ran the step.
        self.eng.on_complete(self.finished_rows.append)

    @property
    def clock(self) -> float:
        return self.lane.clock

    @clock.setter
    def clock(self, t: float) -> None:
        self.lane.clock = t

    @property
    def busy(self) -> bool:
        """Something queued, preempted or running."""
        return self.lane.has_work

    @property
    def load(self) -> int:
        """Requests queued, preempted or running here."""
        return self.lane.R.n + self.lane.waiting

    @property
    def running(self) -> int:
        """Requests in the batch, plus copies on their way to it."""
        return self.lane.R.n + self.inflight

    @property
    def free_blocks(self) -> int:
        """KV blocks neither a running request nor a copy holds (queued requests will want some of them)."""
        return self.lane.pool.available  # cached blocks count: they are reclaimed when needed

    @property
    def kv_headroom(self) -> int:
        """Free KV blocks less what the requests waiting here (queued or preempted) need to start: the room a new
        request really finds. Free blocks alone read a replica with a long queue behind a full batch (or the
        batch-size cap) as roomy, so a KV-bound fleet would keep feeding its longest queue."""
        ln = self.lane
        want = 0
        if ln.waiting:
            want = int(blocks_for(ln.Q.col("target")).sum()) + int(blocks_for(ln.P.col("target")).sum())
        return self.free_blocks - want

    @property
    def blocked(self) -> bool:
        """Nothing running and the head of its queue cannot get blocks while copies pin them: wait for a landing."""
        ln = self.lane
        if ln.R.n or not self.held or not ln.waiting:
            return False
        head = int(ln.P.col("target").min()) if ln.P.n else int(ln.Q.col("target")[0])
        need = 1 if ln.sched.name == "chunked" else int(blocks_for(head))
        return self.free_blocks < need

    @property
    def cap_tokens(self) -> int:
        """The longest request (prompt + generated) this replica's context and pool can hold."""
        return int(self.lane.cap_tokens)

    def hold(self, blocks: int) -> None:
        """Pin (or, negative, release) blocks for a KV copy: the pool counts them as used."""
        self.held += blocks
        self.eng.pin(blocks)

    def inject(self, rows: Rows) -> None:
        """Queue requests (already clipped to fit) at the tail of this replica's FIFO."""
        if self.hint:  # with a batch running, async scheduling admits it a step later
            self.eventful = 2 if self.lane.R.n else 1
        self.eng.accept(rows)
        self.queue_peak = max(self.queue_peak, self.lane.waiting)

    def land(self, row: Rows) -> None:
        """A copied request joins the running batch: its reserved blocks become its own."""
        self.held -= int(row.blocks[0])  # the pool already counts them: they change hands, not state
        self.inflight -= 1
        self.eng.admit_copied(row)  # it still computes one token of its prompt (see Fleet._handoff)

    def steps_to_finish(self) -> int:
        """The fewest steps after which a request here can finish: each step emits at most one token per request
        (no speculative decoding), so a request needs as many steps as tokens it has left (0: nothing here)."""
        ln = self.lane
        m = 0
        for t in (ln.R, ln.P, ln.Q):
            if t.size:
                left = int((t.col("total") - t.col("gen")).min())
                m = left if not m else min(m, left)
        return m

    def step(self, limit: float, max_steps: int) -> int:
        """Move this replica on without crossing `limit` (the fleet's next event): a run of up to `max_steps`
        quiet decode steps priced at once when the lane can (the same numbers as one by one), else one step.
        Returns the steps taken. With `hint`, the steps right after a request joins (which admit it, so are
        rarely quiet) are taken one by one without asking for a quiet run: the same numbers, found sooner."""
        if self.eventful:
            self.eventful -= 1
            max_steps = 1
        k = self.eng.step_lane(limit, max_steps)
        self.queue_peak = max(self.queue_peak, self.lane.waiting)
        return k

    def latencies(self) -> np.ndarray:
        """Latency rows of the answers it finished (TTFT, raw TTFT, TPOT, e2e, queue delay)."""
        return self.lane.stats.lat.last()

    def summary(self, sim: float) -> dict[str, Any]:
        """This replica's row in `run --json`'s replicas list (busy: share of the fleet's `sim` seconds)."""
        ln = self.lane
        sm = self.eng.step_model
        return {"requests_completed": ln.stats.completed,
                "kv_peak_bytes": ln.pool.peak * BLOCK * sm.kv_bytes_per_token,
                "busy": ln.stats.busy_s / sim if sim else 0.0, "queue_peak": self.queue_peak, "role": self.role}


class Fleet:
    """Replicas of one deployment behind a router, on one clock: run(), metrics(), latencies()."""

    def __init__(self, spec: FleetSpec, preroute: bool = True, workers: int = 1) -> None:
        cfg = spec.config
        _validate(spec)
        self.spec = spec
        n_pf = spec.pd[0] if spec.pd else 0
        roles = ["prefill"] * n_pf + ["decode"] * (spec.replicas - n_pf) if spec.pd else ["both"] * spec.replicas
        # The workload, drawn once for the whole fleet by an engine on the full config that is never stepped: the
        # same streams, lengths, content and stages a lone engine's lane draws (force: it prices no steps).
        self.src = Engine(replace(cfg, force=True))
        self.limit, self.duration = self.src.bounds
        self.reps = [_Replica(cfg, i, role) for i, role in enumerate(roles)]
        if self.src.stages:
            for r in self.reps:
                r.eng.count_stages(len(self.src.stages))
        # Open loop: when requests come does not depend on when answers finish (no users in any stage). Then how a
        # replica's steps are grouped into quiet runs cannot change any number, and hints may regroup them. (In a
        # closed loop a user's next send can fall before a replica's clock, and the router reads that replica as
        # far as it ran, so the grouping is kept as it is.)
        open_loop = cfg.users == 0 and not any(st.users for st in self.src.stages)
        for r in self.reps:
            r.hint = open_loop
        self._sort_roles()
        sm = self.reps[0].eng.step_model
        self.price_per_gpu_hour = cfg.price_per_hour if cfg.price_per_hour is not None else sm.hw.price_per_hour
        # P/D: each GPU of a tp group sends its own KV shard over its own link, one direction of it
        # (interconnect_gbps is the total of both directions).
        gbps = spec.kv_link_gbps if spec.kv_link_gbps is not None else sm.hw.interconnect_gbps / 2
        self.link_bytes_s = gbps * 1e9
        self.kv_bytes_per_token = sm.kv_bytes_per_token  # per GPU
        self.link_free = [0.0] * len(self.reps)  # when each prefill replica's outgoing link is next idle
        self.waiting: list[_Copy] = []  # copies not yet started, oldest first
        self.landings: list[tuple[float, int, _Copy]] = []  # copies under way: a heap by landing time
        self.transfers = 0
        self.transfer_s: list[float] = []
        self.pending: dict[int, tuple[int, int]] = {}  # P/D: request id -> (think, total) while its prompt is read
        self.ticks = 0
        self.rr = 0
        self.route_log: deque[Route] = deque(maxlen=ROUTE_LOG)  # the router's latest choices with why, newest last
        self.now = 0.0  # the time advance_to() last moved the fleet to
        # Replicas with a step to take, a heap by (clock, index): the one furthest behind steps next.
        self.ready: list[tuple[float, int]] = []
        self.queued = [False] * len(self.reps)
        # Round-robin over open-loop arrivals routes without looking at any replica: each replica gets an inbox
        # of requests dealt to it in advance, and runs to its own next one (see _run_prerouted).
        self.inbox: list[deque[Rows]] | None = None
        # Pre-dealt replicas are independent: with workers > 1 they may run in a process pool (_run_parallel).
        # 1 by default, so a fleet inside a plan worker (already one process of a pool) never nests a pool.
        self.workers = max(1, int(workers))
        self.ahead: deque[Rows] = deque()  # open-loop requests drawn ahead, not yet routed (_run_lazy)
        if preroute and spec.router == "round-robin" and open_loop and spec.pd is None and spec.replicas > 1:
            self.inbox = [deque() for _ in self.reps]
            self.ready = [(0.0, i) for i in range(len(self.reps))]
            self.queued = [True] * len(self.reps)
        # Least-loaded over open-loop arrivals reads only how many requests each replica holds, which changes only
        # when one finishes: a replica need not stop at an arrival it provably finishes nothing before
        # (_run_lazy). Speculative decoding can emit several tokens a step, so it takes the event-ordered loop.
        # Kv-aware reads free blocks, which change every step: it moves every replica up to an arrival unless one
        # known exactly there has its whole pool free (a replica still running holds blocks, so cannot beat it).
        self.lazy = (preroute and spec.router in ("least-loaded", "kv-aware") and open_loop and spec.pd is None
                     and spec.replicas > 1 and not cfg.spec_tokens and not cfg.kv_offload_gb)
        # The cheapest step this model can take (one token, no context; a decode replaying a full CUDA graph or a
        # prefill chunk without logits), less a margin for rounding in the lanes' clock sums.
        self.dt_min = 0.999 * min(sm.price(Batch(tokens=1, seqs=1, sum_ctx=0.0, sum_win=0.0, attn_full=0.5,
                                                 attn_win=0.5, logits=lg, attn_decode=ad)).time
                                  for lg, ad in ((1, 0.5), (0, 0.0)))

    # ---- what `tokensim run` reads (the same names as Engine's) ----------------------------------
    @property
    def config(self) -> EngineConfig:
        """The per-replica configuration, workload included."""
        return self.spec.config

    @property
    def step_model(self) -> StepModel:
        """The step model every replica prices its steps with."""
        return self.reps[0].eng.step_model

    @property
    def tick(self) -> int:
        """Replica steps taken so far, every replica."""
        return self.ticks

    @property
    def requests_accepted(self) -> int:
        """Requests the fleet has taken so far (drawn and routed)."""
        return self.src.requests_accepted

    @property
    def prefix_caching(self) -> bool:
        """Whether the replicas cache prefixes (the config's choice or the runtime's default)."""
        return self.reps[0].eng.prefix_caching

    @property
    def bounds(self) -> tuple[int | None, float | None]:
        """The run's request limit and duration (a workload file or a trace sets them when the config does not)."""
        return self.limit, self.duration

    @property
    def requests_completed(self) -> int:
        """Answers finished so far (by the replicas that write answers)."""
        return sum(r.lane.stats.completed for r in self.back)

    # ---- cost ---------------------------------------------------------------------------------
    @property
    def gpus(self) -> int:
        """Every GPU of every replica."""
        return self.spec.config.tp * self.spec.replicas

    @property
    def cost_per_hour(self) -> float:
        """Dollars per hour for every GPU of the fleet."""
        return self.price_per_gpu_hour * self.gpus

    # ---- the clock ----------------------------------------------------------------------------
    def _steppable(self) -> list[_Replica]:
        """Replicas with a step to take now (busy, not waiting on a copy, inside the run's duration)."""
        d = self.duration
        return [r for r in self.reps if r.busy and not r.blocked and (d is None or r.clock < d)]

    @property
    def clock(self) -> float:
        """The earliest clock among replicas with work (every event before it is final)."""
        busy = [r.clock for r in self._steppable()]
        return min(busy) if busy else max(r.clock for r in self.reps)

    @property
    def finished(self) -> bool:
        """No request will come, no copy is under way, and every replica has drained (or the duration passed)."""
        return (self.src.next_arrival == math.inf and not self.landings and not self.waiting
                and not (self.inbox and any(self.inbox)) and not self._steppable())

    def run(self, max_ticks: int | None = None, until: float = math.inf) -> int:
        """Run to the bound (--requests served or --duration passed), or only the events before `until`;
        returns replica steps taken.

        Events go in time order: an arrival or a copy landing at or before the earliest busy replica's
        clock happens first, so no replica steps past a request meant for it.
        """
        if until == math.inf and self.limit is None and self.duration is None:
            raise InputError("an unbounded workload never finishes: give --requests N or --duration S")
        if self.inbox is not None:
            if until < math.inf:
                raise ValueError("a pre-routed fleet runs only to its bound: build it with preroute=False")
            if max_ticks is None and self.workers > 1 and not self.ticks:
                return self._run_parallel()
            return self._run_prerouted(max_ticks)
        if self.lazy and max_ticks is None and until == math.inf:
            return self._run_lazy()
        n = 0
        ready = self.ready
        reps = self.reps
        d = self.duration
        while max_ticks is None or n < max_ticks:
            ta = self.src.next_arrival
            tl = self.landings[0][0] if self.landings else math.inf
            tmin = ready[0][0] if ready else math.inf
            if until < math.inf and min(ta, tl, tmin) >= until:
                break  # every event before `until` has happened
            if tl <= tmin and tl <= ta and tl < math.inf:
                self._land()
                continue
            if ta <= tmin and ta < math.inf:
                self._arrive(ta)
                continue
            if not ready:
                break
            _, i = heapq.heappop(ready)
            self.queued[i] = False
            r = reps[i]
            if not r.busy or r.blocked or (d is not None and r.clock >= d):
                continue  # it waits for a copy to land (which wakes it) or is past the run's end
            stop = min(ta, tl, until) if d is None else min(ta, tl, d, until)
            k = r.step(stop, (1 << 20) if max_ticks is None else max_ticks - n)
            n += k
            self.ticks += k
            if r.finished_rows:
                if r.role == "prefill":
                    self._handoff(r)
                else:
                    self._think(r)
            if self.waiting and r.role == "decode":
                self._start_copies(r.clock)
            self._wake(r)
        return n

    def advance_to(self, t: float, max_ticks: int | None = None) -> int:
        """Every event before simulated time t (the app's clock: the workload may be unbounded); returns replica
        steps taken. A replica's last step may end past t, as an engine's does; `max_ticks` bounds the work."""
        n = self.run(max_ticks, until=t)
        if max_ticks is None or n < max_ticks:
            self.now = max(self.now, t)
        return n

    def _sort_roles(self) -> None:
        """Arrivals go to the replicas that read prompts (front); answers are written by those that decode (back)."""
        self.front = [r for r in self.reps if r.role != "decode"]
        self.back = [r for r in self.reps if r.role != "prefill"]

    def _run_prerouted(self, max_ticks: int | None) -> int:
        """run() when every request's replica is known before it arrives (round-robin over open-loop arrivals):
        each replica then runs to its own next request, not to everyone's, so its quiet decode runs are
        long. The requests, their replicas and every step are those of the event-ordered loop."""
        inbox = self.inbox
        assert inbox is not None
        ready = self.ready
        reps = self.reps
        d = self.duration
        n = 0
        while ready and (max_ticks is None or n < max_ticks):
            _, i = heapq.heappop(ready)
            self.queued[i] = False
            r = reps[i]
            box = inbox[i]
            while not box and self.src.next_arrival < math.inf:
                self._deal(self._draw(self.src.next_arrival + DRAW_AHEAD_S))
            nxt = float(box[0].arrival[0]) if box else math.inf
            if nxt < math.inf and (nxt <= r.clock or not r.busy):
                row = box.popleft()
                r.inject(row)
                self.route_log.append(Route(int(row.id[0]), int(row.user[0]), i, "round-robin", i, nxt))
                r.clock = max(r.clock, nxt)
            elif r.busy and (d is None or r.clock < d):
                k = r.step(nxt if d is None else min(nxt, d), (1 << 20) if max_ticks is None else max_ticks - n)
                n += k
                self.ticks += k
                r.finished_rows.clear()  # open loop: nobody to wake
            else:
                continue  # drained, nothing more coming: it leaves the heap
            heapq.heappush(ready, (r.clock, i))
            self.queued[i] = True
        return n

    def _run_parallel(self) -> int:
        """_run_prerouted with the replicas in a process pool: every request is drawn and dealt first (drawing
        does not depend on the replicas), then each replica serves its share alone, as it does in the serial
        loop (which only interleaves independent replicas), and comes back whole for metrics(). Serial when
        the fleet has too few requests to pay for the processes (PARALLEL_MIN_REQUESTS)."""
        parts = []
        while self.src.next_arrival < math.inf:
            parts.append(self._draw(self.src.next_arrival + DRAW_AHEAD_S))
        rows = Rows.join(parts) if parts else Rows.new(0)
        nrep = len(self.reps)
        rr0 = self.rr
        self.rr = (rr0 + len(rows)) % nrep
        shares = [(r, rows.pick(slice((r.index - rr0) % nrep, None, nrep)).copy(), self.duration) for r in self.reps]
        tail = [(int(rows.id[j]), int(rows.user[j]), (rr0 + j) % nrep, float(rows.arrival[j]))
                for j in range(max(0, len(rows) - 16), len(rows))]
        if len(rows) < PARALLEL_MIN_REQUESTS:
            done = [_serve_share(job) for job in shares]
        else:
            from engine.fleet.plan import pool_map  # here: engine.fleet.plan imports this module

            done = [r for _, r in sorted(pool_map(shares, self.workers, _serve_share), key=lambda x: x[0])]
        n = 0
        for rep, k in done:
            self.reps[rep.index] = rep
            n += k
        self._sort_roles()  # the replicas came back from the workers as new objects
        self.ticks += n
        self.ready = []
        self.queued = [False] * nrep
        self.inbox = [deque() for _ in self.reps]
        # The router's latest choices as dealt (the serial loop logs them as each replica reaches them).
        self.route_log.extend(Route(rid, user, i, "round-robin", i, t) for rid, user, i, t in tail)
        return n

    def _run_lazy(self) -> int:
        """run() for least-loaded and kv-aware over open-loop arrivals: a replica is moved up to an arrival only
        when a request of its could finish before it (its load changes only then; kv-aware may need every replica
        there, see _arrive_lazy), or when the arrival is routed to it. The others keep their long quiet decode
        runs. The routes and every step are those of the event-ordered loop: each replica still takes exactly its
        steps that start before each arrival."""
        d = self.duration
        end = math.inf if d is None else d
        n = 0
        while ahead := self._ahead():
            row = ahead.popleft()
            t = float(row.arrival[0])
            stop = min(t, end)
            for r in self.reps:
                if r.calm < stop:
                    n += self._catch_up(r, stop)
            n += self._arrive_lazy(row, t, stop)
        for r in self.reps:
            n += self._catch_up(r, end, calm=False)
        return n

    def _arrive_lazy(self, row: Rows, t: float, stop: float) -> int:
        """_arrive for the lazy loop: the chosen replica takes its steps before t, then gets the request."""
        n = 0
        if self.spec.router == "kv-aware":
            known = [r for r in self.reps if not r.busy or r.clock >= stop]  # their state at t is exact
            rep, room = _kv_pick(known) if known else (None, 0)
            if rep is None or room < rep.lane.pool.total:
                for r in self.reps:
                    n += self._catch_up(r, stop, calm=False)
                choice = self._route()
            else:
                choice = rep, "kv-aware", room
        else:
            choice = self._route(row)
        rep = choice[0]
        n += self._catch_up(rep, stop, calm=False)
        self._give(choice, row, t)
        rep.calm = self._calm(rep)
        return n

    def _ahead(self) -> deque[Rows]:
        """Open loop: the next requests, one row each, drawn DRAW_AHEAD_S at a time (when they come does not depend
        on the replicas, and drawing a stretch at once gives the same rows as drawing each when it is due)."""
        q = self.ahead
        if not q and (t := self.src.next_arrival) < math.inf:
            rows = self._draw(t + DRAW_AHEAD_S)
            q.extend(rows.pick(slice(j, j + 1)).copy() for j in range(len(rows)))
        return q

    def _catch_up(self, r: _Replica, stop: float, calm: bool = True) -> int:
        """Take replica r's steps that start before `stop`; with `calm`, only as far as needed to be sure no
        request of its finishes in them unseen. Returns the steps taken."""
        n = 0
        while r.busy and r.clock < stop and not (calm and r.calm >= stop):
            k = r.step(stop, 1 << 20)
            n += k
            self.ticks += k
            if r.finished_rows:
                self._think(r)
            r.calm = self._calm(r)
        return n

    def _calm(self, r: _Replica) -> float:
        """A time before which no step of r can finish a request: after m - 1 more steps at the least, each no
        shorter than the cheapest step this model can take (every cost term grows with tokens and context)."""
        m = r.steps_to_finish()
        return math.inf if not m else r.clock + (m - 1) * self.dt_min

    def _deal(self, rows: Rows) -> None:
        """Deal drawn requests to the replicas' inboxes in turn (round-robin decided at the draw)."""
        assert self.inbox is not None
        for j in range(len(rows)):
            self.inbox[self.rr].append(rows.pick(slice(j, j + 1)).copy())
            self.rr = (self.rr + 1) % len(self.front)

    def _wake(self, r: _Replica) -> None:
        """Put a replica with a step to take on the heap of ready replicas (by clock, then index), once."""
        d = self.duration
        if not self.queued[r.index] and r.busy and not r.blocked and (d is None or r.clock < d):
            heapq.heappush(self.ready, (r.clock, r.index))
            self.queued[r.index] = True

    # ---- arrivals and routing -----------------------------------------------------------------
    def _arrive(self, t: float) -> None:
        """Every request due at t: draw its lengths (as a lane would), route it, queue it."""
        rows = self._draw(t)
        for j in range(len(rows)):
            self._send(rows.pick(slice(j, j + 1)).copy(), t)

    def _draw(self, t: float) -> Rows:
        """The requests due at t (in time order) with their ids, seeded lengths and content, clipped to fit."""
        return self.src.draw_due(t)

    @property
    def clipped(self) -> int:
        """Requests whose drawn lengths were cut to fit the context and the pool, each counted once."""
        return self.src.lane.stats.clipped

    def _send(self, row: Rows, t: float) -> None:
        """One request to the replica the router picks."""
        self._give(self._route(row), row, t)

    def _give(self, choice: tuple[_Replica, str, int], row: Rows, t: float) -> None:
        """Queue one request on the replica the router picked, logged with why (a prefill replica reads only its
        prompt)."""
        rep, why, figure = choice
        rid = int(row.id[0])
        self.route_log.append(Route(rid, int(row.user[0]), rep.index, why, figure, t))
        if rep.role == "prefill":
            # It reads the prompt and computes one token; the answer comes from a decode replica.
            self.pending[rid] = (int(row.think[0]), int(row.total[0]))
            row.think[0] = 0
            row.total[0] = 1
        rep.inject(row)
        rep.clock = max(rep.clock, t)
        self._wake(rep)

    def _route(self, row: Rows | None = None) -> tuple[_Replica, str, int]:
        """The replica (of those that read prompts) the router picks for a request (None: any request, for a
        router that does not read it), with why and the figure that decided it, as the router read them."""
        reps = self.front
        if len(reps) == 1:
            return reps[0], "only", 0
        name = self.spec.router
        if name == "round-robin":
            i = self.rr
            self.rr = (i + 1) % len(reps)
            return reps[i], "round-robin", i
        if name == "kv-aware":
            rep, room = _kv_pick(reps)
            return rep, "kv-aware", room
        if name == "prefix-aware" and row is not None and reps[0].eng.prefix_caching:
            keys = prefix_keys(row)
            if len(keys):
                # The longest cached run of this request's blocks wins; ties (and no hit anywhere) go to the least
                # loaded, then the lowest index.
                (miss, _, _), best = min(((-r.eng.cached_blocks(keys), r.load, r.index), r) for r in reps)
                if miss:
                    return best, "prefix", -miss * BLOCK  # tokens of the request's prefix cached there
        rep = min(reps, key=lambda r: (r.load, r.index))
        return rep, "least-loaded", rep.load

    def _think(self, r: _Replica) -> None:
        """Closed-loop users whose answers a replica just finished think, then send again."""
        for rows in r.finished_rows:
            self.src.wake(rows.user, float(rows.done[0]))
        r.finished_rows.clear()

    # ---- prefill/decode disaggregation --------------------------------------------------------
    def _handoff(self, r: _Replica) -> None:
        """Prompts a prefill replica just finished: pin their blocks there and queue their KV copies."""
        for rows in r.finished_rows:
            for j in range(len(rows)):
                row = rows.pick(slice(j, j + 1)).copy()
                think, total = self.pending.pop(int(row.id[0]))
                pinned = int(row.blocks[0])
                r.hold(pinned)
                # The decode replica receives the prompt's KV but the last position, and computes the
                # first token itself: one query token on top of prompt - 1 cached ones.
                p = int(row.prompt[0])
                row.think[0] = think
                row.total[0] = total
                row.cached[0] = p - 1
                row.target[0] = p
                row.gen[0] = 0
                row.input[0] = p  # its input tokens were counted where they were read
                # The copy arrives as blocks of its own: nothing of it is in the decode replica's prefix cache.
                row.full[0] = row.hkey[0] = row.hit[0] = 0
                row.blocks[0] = blocks_for(p - 1)
                row.first[0] = row.visible[0] = row.done[0] = np.nan
                self.waiting.append(_Copy(r.clock, r.index, pinned, -1, row))
        r.finished_rows.clear()
        if self.waiting:
            self._start_copies(r.clock)

    def _start_copies(self, now: float) -> None:
        """Start waiting copies, oldest first, on decode replicas with a free slot and the blocks (reserved now)."""
        still: list[_Copy] = []
        for c in self.waiting:
            b = int(c.row.blocks[0])
            room = [d for d in self.back if d.running < d.lane.sched.max_batch and d.free_blocks >= b]
            if not room or still:  # FIFO: a copy that cannot start holds back the ones behind it
                still.append(c)
                continue
            d = min(room, key=lambda x: (x.running, x.index))
            d.hold(b)
            d.inflight += 1
            c.dst = d.index
            start = max(c.ready, now, self.link_free[c.src])
            wire = int(c.row.cached[0]) * self.kv_bytes_per_token / self.link_bytes_s
            self.link_free[c.src] = start + wire  # the link carries one copy at a time
            secs = wire + KV_LINK_LATENCY_S
            self.transfers += 1
            self.transfer_s.append(secs)
            heapq.heappush(self.landings, (start + secs, self.transfers, c))
        self.waiting = still

    def _land(self) -> None:
        """The earliest copy lands: the prefill replica lets go of its blocks, the decode replica runs it."""
        t, _, c = heapq.heappop(self.landings)
        self.reps[c.src].hold(-c.pinned)
        d = self.reps[c.dst]
        c.row.xfer[0] = t - c.ready  # waiting for a decode slot, then the wire: the transfer part of its latency
        d.land(c.row)
        d.clock = max(d.clock, t)
        self._wake(d)
        self._wake(self.reps[c.src])  # its pinned blocks are free again: it may have been waiting for them
        if self.waiting:
            self._start_copies(t)

    # ---- reading ------------------------------------------------------------------------------
    @property
    def routes(self) -> tuple[Route, ...]:
        """The router's latest decisions, oldest first (at most ROUTE_LOG)."""
        return tuple(self.route_log)

    def replica_states(self) -> tuple[ReplicaState, ...]:
        """Every replica at a glance, in index order (cheap: a few integers each)."""
        return tuple(ReplicaState(r.index, r.role, r.clock, r.lane.pool.used, r.lane.pool.total, r.held,
                                  r.lane.R.n, r.lane.waiting, r.lane.stats.completed, r.lane.stats.busy_s,
                                  tuple(r.lane.stats.hist.last(KV_HISTORY)[:, H.KV].tolist()))
                     for r in self.reps)

    def copies(self) -> tuple[CopyState, ...]:
        """P/D KV copies not yet landed: those under way (by landing time), then those waiting for room."""
        moving = [CopyState(int(c.row.id[0]), c.src, c.dst, int(c.row.cached[0]), t)
                  for t, _, c in sorted(self.landings, key=lambda x: (x[0], x[1]))]
        return (*moving, *(CopyState(int(c.row.id[0]), c.src, -1, int(c.row.cached[0]), math.nan)
                           for c in self.waiting))

    def rolling_metrics(self) -> dict[str, float]:
        """Fleet-wide figures now: output tok/s summed over the replicas that write answers (each over its own
        recent window) and TTFT / TPOT p50 over their recent answers."""
        pooled = rolling([r.lane for r in self.back], self.reps[0].eng._rates())
        out = 0.0
        for r in self.back:  # each replica's rate over its own window (as Engine's rolling tok/s), summed
            h = r.lane.stats.hist.last()
            span = float(h[:, H.DT].sum()) if len(h) else 0.0
            out += float(h[:, H.OUT].sum()) / span if span > 0 else 0.0
        return {"tok_s_out": out, "ttft_p50": pooled.ttft_p50, "tpot_p50": pooled.tpot_p50}

    def replica_engine(self, i: int) -> Engine:
        """Replica i's engine, to read (its tick, config, step model); the fleet alone moves it."""
        return self.reps[i].eng

    def replica_snapshot(self, i: int) -> Snapshot:
        """Replica i's own engine snapshot (its floor), on its own clock."""
        r = self.reps[i]
        return replace(r.eng.snapshot(), time_s=r.clock)

    def latencies(self) -> np.ndarray:
        """Latency rows (columns accounting.L) of every answer the fleet finished, the last LATENCY_SAMPLES per
        replica that writes answers: Engine.latencies() for a fleet."""
        return np.concatenate([r.latencies() for r in self.back])

    def explain(self) -> dict[str, Any]:
        """Where the answers' TTFT and E2E went, over the replicas that write answers (`run --json --explain`)."""
        return explain([r.lane for r in self.back])

    def _metrics_of(self, reps: list[_Replica]) -> dict[str, Any]:
        """The run metrics over some replicas (their lanes pooled, as an engine pools its lanes)."""
        cfg = self.spec.config
        sm = self.step_model
        slo = cfg.slo_ttft is not None or cfg.slo_tpot is not None
        return run_metrics([r.lane for r in reps], self.reps[0].eng.rates(), self.ticks, sm.kv_capacity_bytes,
                           sm.kv_bytes_per_token, slo, cfg.tp, self.src.stages).as_dict()

    def metrics(self) -> dict[str, Any]:
        """`run --json`'s fleet-wide keys over every replica, plus `replicas` (one summary each) and the router.

        With P/D, answers (latencies, output tokens) are read from the decode replicas and prompts (input
        tokens, queueing) from the prefill replicas; utilisation and cost count every GPU.
        """
        m = self._metrics_of(self.reps)
        if self.spec.pd:
            back = self._metrics_of(self.back)
            front = self._metrics_of(self.front)
            for k in ("requests_completed", "output_tokens", "visible_tokens", "ttft_s", "ttft_raw_s", "tpot_s",
                      "e2e_s", "latency_samples", "goodput_req_s", "goodput_tok_s", "slo_attainment",
                      "cost_per_mtok_out", "batch_p50", "stages"):
                m[k] = back[k]
            m["cost_per_mtok_in"] = front["cost_per_mtok_in"]
            m["queue_delay_s"] = front["queue_delay_s"]
            sim = m["sim_time_s"]
            m["throughput_out_tok_s"] = m["output_tokens"] / sim if sim else 0.0
            m["pd"] = f"{self.spec.pd[0]}:{self.spec.pd[1]}"
            m["kv_transfers"] = self.transfers
            m["kv_transfer_s"] = Percentiles.of(np.array(self.transfer_s))._asdict()
            m["kv_link_gbps"] = self.link_bytes_s / 1e9
        m["requests_accepted"] = self.src.requests_accepted
        m["clipped_requests"] = self.clipped
        m["gpus"] = self.gpus
        m["cost_per_hour"] = self.cost_per_hour
        m["router"] = self.spec.router
        m["replicas"] = [r.summary(m["sim_time_s"]) for r in self.reps]
        m["kv_peak_bytes"] = max(s["kv_peak_bytes"] for s in m["replicas"])
        return m


def _serve_share(job: tuple[_Replica, Rows, float | None]) -> tuple[_Replica, int]:
    """One pre-dealt replica serving its share of the requests to the run's end (a pool worker runs this):
    _run_prerouted's loop for one replica. Returns the replica as it ended and the steps it took."""
    r, rows, d = job
    arrival = rows.arrival
    m = len(rows)
    j = n = 0
    while True:
        nxt = float(arrival[j]) if j < m else math.inf
        if nxt < math.inf and (nxt <= r.clock or not r.busy):
            r.inject(rows.pick(slice(j, j + 1)).copy())
            j += 1
            r.clock = max(r.clock, nxt)
        elif r.busy and (d is None or r.clock < d):
            n += r.step(nxt if d is None else min(nxt, d), 1 << 20)
            r.finished_rows.clear()  # open loop: nobody to wake
        else:
            return r, n


def _kv_pick(reps: list[_Replica]) -> tuple[_Replica, int]:
    """Kv-aware's choice and its KV room: the most room once its waiting requests are placed, ties to the least
    loaded, then the lowest index (deterministic; indices differ, so two replicas are never compared). Each
    replica's room is read once."""
    (room, _, _), rep = min(((-r.kv_headroom, r.load, r.index), r) for r in reps)
    return rep, -room


@dataclass(slots=True)
class _Copy:
    """One prompt's KV on its way from a prefill replica to a decode replica."""

    ready: float  # when the prompt finished
    src: int  # prefill replica (pins `pinned` blocks until the copy lands)
    pinned: int
    dst: int  # decode replica (-1 until the copy starts; it reserves the row's blocks then)
    row: Rows  # the request as the decode replica will run it

    def __lt__(self, other: _Copy) -> bool:  # heap ties are broken by the order number first; never reached
        return self.src < other.src


def engine_for(spec: FleetSpec, preroute: bool = True) -> Engine | Fleet:
    """One Engine for one replica without P/D, else a Fleet: the one place options become a simulator.

    `preroute=False` keeps a round-robin fleet on the event-ordered loop, which `advance_to` (the app) needs.
    """
    if spec.replicas == 1 and spec.pd is None:
        return Engine(spec.config)
    return Fleet(spec, preroute=preroute)


def scripted(cfg: EngineConfig) -> bool:
    """The workload comes from a file or a trace (the engine's scripts), not from users, rate and lengths."""
    return cfg.workload is not None or cfg.trace is not None


def _validate(spec: FleetSpec) -> None:
    """Fleet-level contradictions: one line each."""
    if spec.router not in ROUTERS:
        raise InputError(f"--router {spec.router!r} is not a router; choose from {', '.join(ROUTERS)}")
    if isinstance(spec.replicas, bool) or int(spec.replicas) != spec.replicas or not 1 <= spec.replicas <= MAX_REPLICAS:
        raise InputError(f"--replicas must be a whole number from 1 to {MAX_REPLICAS}, got {spec.replicas}")
    if spec.pd is not None:
        p, d = spec.pd
        if d < 1 or p < 1:
            raise InputError(f"--pd {p}:{d} needs at least one prefill and one decode replica")
        if p + d != spec.replicas:
            raise InputError(f"--pd {p}:{d} is {p + d} replicas, but --replicas is {spec.replicas}")
    if spec.config.fast_share > 0 and spec.replicas > 1:
        raise InputError("--fast-share is a second GPU group of one engine; with --replicas use one or the other")
