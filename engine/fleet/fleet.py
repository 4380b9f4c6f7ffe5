"""A fleet: several replicas of one deployment on one clock, a router choosing where each request goes.

The fleet's requests come from one request source for the whole workload (engine.traffic.source: closed-loop
users, Poisson, a workload file's stages and shared prefixes, a trace), drawn exactly as one engine's lane
draws its own, so every replica count and router sees the same requests. Each replica (engine.fleet.replica)
is an engine with no traffic of its own that the fleet feeds, steps and hears from. The fleet always moves
the replica furthest behind, and hands a request to a replica before that replica steps past its arrival, so
a request is admitted at the first step boundary of its replica after it arrives, exactly as on one engine.

Routers are classes in a registry (engine.fleet.routers) that read a small snapshot of each replica at the
arrival. Three run loops, each named for why it exists; all give the same numbers:
- `_run_events`: every event in time order. Always right; the one the app (advance_to), closed loops and
  P/D take.
- `_run_dealt`: a router that reads no replica (round-robin) over open-loop arrivals: every request's replica
  is known before anything runs, so each replica serves its share alone (in a process pool if it pays).
- `_run_lazy`: a router whose figures change only when requests join or finish (least-loaded), or that can
  settle many arrivals from the replicas already known (kv-aware), over open-loop arrivals: a replica is
  moved up to an arrival only when the router could see a difference there (engine.fleet.lazy).
P/D's KV copies live in engine.fleet.pd.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine import budget
from engine.config import EngineConfig
from engine.errors import InputError
from engine.fleet.autoscale import Autoscaler, cold_start_s
from engine.fleet.feed import Feed
from engine.fleet.lazy import DRAW_AHEAD_S, LazyLoop
from engine.fleet.pd import KV_LINK_LATENCY_S, CopyState, KVCopies
from engine.fleet.pool import pool_map
from engine.fleet.replica import KV_HISTORY, Replica, ReplicaState, prefix_keys
from engine.fleet.routers import ROUTERS, Pick, RoutingSnapshot, make_router
from engine.fleet.spec import FleetSpec, parse_pd
from engine.physics.batch import Batch
from engine.physics.calibration import Runtime, load_runtime
from engine.physics.energy import recent_power
from engine.physics.specs import Hardware, Model
from engine.physics.step import StepModel, StepOptions
from engine.serving import lora_slots
from engine.serving.accounting import H, T, check_conserved, explain, rolling, run_metrics
from engine.serving.engine import Engine, check_config, users_out
from engine.serving.kv_tiers import REMOTE, TIER_POLICIES, tier_report
from engine.serving.snapshot import Snapshot
from engine.serving.tables import Rows
from engine.traffic.source import RequestSource, Workload, load_script

__all__ = ["KV_HISTORY", "KV_LINK_LATENCY_S", "ROUTERS", "CopyState", "Fleet", "FleetSpec", "ReplicaState", "Route",
           "StepModels", "engine_for", "parse_pd", "scripted"]

MAX_REPLICAS = 4096
ROUTE_LOG = 8  # the router's latest decisions kept for the app (Fleet.routes)
# A dealt fleet runs its replicas in a process pool only with at least this many requests: below it,
# starting the processes and shipping the replicas back costs more than it saves (benchmarks/fleet.md).
PARALLEL_MIN_REQUESTS = 5000


@dataclass(frozen=True, slots=True)
class Route:
    """One routing decision, as the router saw it: request -> replica, and why."""

    req_id: int
    user: int  # closed-loop user (-1: open loop)
    replica: int
    why: str  # "round-robin", "least-loaded", "kv-aware", "prefix", "only" (a single front replica)
    figure: int  # what decided it: the replica's load (least-loaded), free KV blocks (kv-aware), prefix tokens
    time_s: float



def replica_states(reps: list[Replica], scaler: Autoscaler | None, now: float, energy: bool,
                   ) -> tuple[ReplicaState, ...]:
    """Each replica's state, with its autoscaling phase at `now` (scaler given) and its recent power (energy on)."""
    states = [r.state() for r in reps]
    if scaler is not None:
        for i, st in enumerate(states):
            phase, wait = scaler.phase(i, now)
            states[i] = replace(st, scale=phase, ready_in_s=wait)
    if energy and reps[0].step_model.hw.idle_power_w is not None and reps[0].step_model.hw.max_power_w is not None:
        for i, st in enumerate(states):
            if st.scale in ("serving", "draining"):  # a replica off or loading its weights writes nothing
                r = reps[i]
                w, j = recent_power(r.step_model.hw, r.rolling_metrics(), r.config.tp)
                states[i] = replace(st, power_w=w, j_per_token=j)
    return tuple(states)


class StepModels:
    """Step models shared by the engines that ask for the same hardware, model and options (an Engine's
    `step_models`): the `keep` most recently asked for are held.

    A step model is a pure function of those three, and what it caches (StepModel._memo: the fixed terms of a step
    shape, run_table's quiet-run price tables) is too, so engines sharing one price every step to the same doubles;
    each table is priced once for all of them instead of once per replica (a fleet's) or per point (a plan's). The
    hardware, model and runtime profile are keyed by identity (their loaders return one object per name until a
    file is loaded again, which then gives a new one: a profile re-registered under its name is not priced with the
    old one), and held with the model so an id is never reused while its entry lives."""

    def __init__(self, keep: int = 1) -> None:
        self.keep = keep
        self._held: OrderedDict[tuple[int, int, int, StepOptions], tuple[Any, ...]] = OrderedDict()

    def __call__(self, hw: Hardware, model: Model, opts: StepOptions) -> StepModel:
        """The held step model for (hw, model, opts), or a new one held in the place of the least recently used."""
        rt = opts.runtime if isinstance(opts.runtime, Runtime) else load_runtime(opts.runtime)
        key = (id(hw), id(model), id(rt), opts)
        got = self._held.get(key)
        if got is not None:
            self._held.move_to_end(key)
            return got[-1]  # type: ignore[no-any-return]
        sm = StepModel(hw, model, opts)
        self._held[key] = (hw, model, rt, sm)
        while len(self._held) > self.keep:
            self._held.popitem(last=False)
        return sm


class Fleet:
    """Replicas of one deployment behind a router, on one clock: run(), metrics(), latencies()."""

    def __init__(self, spec: FleetSpec, preroute: bool = True, workers: int = 1,
                 step_models: StepModels | None = None) -> None:
        _validate(spec)
        cfg = spec.config
        check_config(cfg)  # the workload's own options (users, rate, bounds): the replicas are built without them
        self.spec = spec
        n_pf = spec.pd[0] if spec.pd else 0
        roles = ["prefill"] * n_pf + ["decode"] * (spec.replicas - n_pf) if spec.pd else ["both"] * spec.replicas
        script = load_script(cfg)
        models = step_models or StepModels()  # every replica prices with one step model (or a caller's: a plan's)
        first = Replica(cfg, 0, roles[0], models)
        # Estimated before the rest are built: 4,096 replicas take gigabytes.
        self.estimate = _check_budget(cfg, first, script, spec.replicas)
        self.reps = [first, *(Replica(cfg, i, role, models) for i, role in enumerate(roles) if i)]
        _share_remote_tier(self.reps, cfg.kv_tier_policy)
        # The workload, drawn once for the whole fleet: the streams, lengths, content and stages one engine's main
        # lane draws, clipped to what a replica holds.
        self.src = RequestSource.for_config(cfg, first.cap_tokens, script)
        self.src.outstanding = self._users_out  # a stage re-activating users skips those with a request out
        self.limit, self.duration = self.src.budget.limit, self.src.budget.duration
        if self.src.stages:
            for r in self.reps:
                r.count_stages(len(self.src.stages))
        # Open loop: when requests come does not depend on when answers finish (no users in any stage). Then how a
        # replica's steps are grouped into quiet runs cannot change any number, and hints may regroup them. (In a
        # closed loop a user's next send can fall before a replica's clock, and the router reads that replica as
        # far as it ran, so the grouping is kept as it is.)
        open_loop = cfg.users == 0 and not any(st.users for st in self.src.stages)
        for r in self.reps:
            r.hint = open_loop
            r.content = self.src.script is not None  # only a script's requests carry content to note (Replica.content)
        self._sort_roles()
        self.router = make_router(spec.router)
        self.loop = self._loop(preroute and open_loop)
        sm = self.step_model
        self.scaler = None if spec.scale is None else Autoscaler(
            spec.scale, len(self.reps), cold_start_s(sm.weight_bytes_per_gpu, sm.hw.host_link_gbps,
                                                     spec.scale.cold_extra_s))
        self.price_per_gpu_hour = cfg.price_per_hour if cfg.price_per_hour is not None else sm.hw.price_per_hour
        # P/D: each GPU of a tp group sends its own KV shard over its own link, one direction of it
        # (interconnect_gbps is the total of both directions).
        gbps = spec.kv_link_gbps if spec.kv_link_gbps is not None else sm.hw.interconnect_gbps / 2
        self.xfer = KVCopies(len(self.reps), gbps * 1e9, sm.kv_bytes_per_token)
        self.ticks = 0
        # The router's latest choices (request row, pick, time), newest last: made Routes only when read (routes),
        # as the app reads eight of them now and then while a run logs every arrival.
        self.route_log: deque[tuple[Rows, Pick, float]] = deque(maxlen=ROUTE_LOG)
        self.now = 0.0  # the time advance_to() last moved the fleet to
        # Replicas with a step to take, a heap by (clock, index): the one furthest behind steps next.
        self.ready: list[tuple[float, int]] = []
        self.queued = [False] * len(self.reps)
        # A dealt fleet's replicas are independent: with workers > 1 they may run in a process pool. 1 by default,
        # so a fleet inside a plan worker (already one process of a pool) never nests a pool.
        self.workers = max(1, int(workers))
        self.ahead: deque[Rows] = deque()  # open-loop requests drawn ahead, not yet routed (_run_lazy)
        self.dt_min = _dt_min(sm)
        for r in self.reps:  # (each bounds its quiet runs' length with it: see Replica.step_before)
            r.dt_min = self.dt_min

    def _loop(self, open_loop: bool) -> str:
        """The loop run() takes for a whole run: "dealt" or "lazy" when the router and an open-loop workload allow
        it, else "events". Neither fast loop runs P/D; the lazy one needs at most one token per step (so not
        speculative decoding: see Replica.calm_bound) and no KV offload."""
        spec, cfg = self.spec, self.spec.config
        kind = self.router.loop
        if not open_loop or spec.pd is not None or spec.replicas < 2 or spec.scale is not None:
            return "events"
        if cfg.kv_remote_gb:  # a shared remote tier: what one replica spills, another reads, in time order
            return "events"
        if kind == "dealt" or (kind == "lazy" and not cfg.spec_tokens and not cfg.kv_offload_gb and not cfg.kv_disk_gb):
            return kind
        return "events"

    # ---- what `tokensim run` reads (the same names as Engine's) ----------------------------------
    @property
    def config(self) -> EngineConfig:
        """The per-replica configuration, workload included."""
        return self.spec.config

    @property
    def step_model(self) -> StepModel:
        """The step model every replica prices its steps with."""
        return self.reps[0].step_model

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
        return self.reps[0].prefix_caching

    @property
    def bounds(self) -> tuple[int | None, float | None]:
        """The run's request limit and duration (a workload file or a trace sets them when the config does not)."""
        return self.limit, self.duration

    @property
    def requests_completed(self) -> int:
        """Answers finished so far (by the replicas that write answers)."""
        return sum(r.lane.stats.completed for r in self.back)

    @property
    def clipped(self) -> int:
        """Requests whose drawn lengths were cut to fit the context and the pool, each counted once."""
        return self.src.clipped

    # ---- cost ---------------------------------------------------------------------------------
    @property
    def gpus(self) -> int:
        """Every GPU of every replica."""
        return self.spec.config.group_gpus * self.spec.replicas

    @property
    def cost_per_hour(self) -> float:
        """Dollars per hour for every GPU of the fleet."""
        return self.price_per_gpu_hour * self.gpus

    # ---- P/D copies, as the app reads them -------------------------------------------------------
    @property
    def transfers(self) -> int:
        """KV copies started so far."""
        return self.xfer.transfers

    @property
    def transfer_s(self) -> list[float]:
        """Each started copy's seconds (wire and fixed latency)."""
        return self.xfer.transfer_s

    @property
    def landings(self) -> list[Any]:
        """Copies under way (a heap by landing time)."""
        return self.xfer.landings

    @property
    def waiting(self) -> list[Any]:
        """Copies waiting for a decode replica with room, oldest first."""
        return self.xfer.waiting

    # ---- the clock ----------------------------------------------------------------------------
    def _steppable(self) -> list[Replica]:
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
        return self.src.next_time == math.inf and self.xfer.idle and not self._steppable()

    def run(self, max_ticks: int | None = None, until: float = math.inf) -> int:
        """Run to the bound (--requests served or --duration passed), or only the events before `until`, or at
        most `max_ticks` replica steps; returns replica steps taken. A whole run takes the fleet's loop; a part
        of one, the event-ordered loop."""
        if until == math.inf and self.limit is None and self.duration is None:
            raise InputError("an unbounded workload never finishes: give --requests N or --duration S")
        if max_ticks is None and until == math.inf:
            loops = {"dealt": self._run_dealt, "lazy": self._run_lazy}
            n = loops[self.loop]() if self.loop in loops else self._run_events(None, math.inf)
            conserved(self)
            return n
        return self._run_events(max_ticks, until)

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

    def _run_events(self, max_ticks: int | None, until: float) -> int:
        """Every event in time order: an arrival or a copy landing at or before the earliest busy replica's clock
        happens first, so no replica steps past a request meant for it."""
        n = 0
        ready = self.ready
        reps = self.reps
        d = self.duration
        xfer = self.xfer
        while max_ticks is None or n < max_ticks:
            ta = self.src.next_time
            tl = xfer.next_landing
            tmin = ready[0][0] if ready else math.inf
            ts = self.scaler.next_t if self.scaler is not None and (ready or ta < math.inf) else math.inf
            if until < math.inf and min(ta, tl, tmin, ts) >= until:
                break  # every event before `until` has happened
            if ts < math.inf and ts <= min(ta, tl, tmin) and (d is None or ts < d):
                self.scaler.decide(ts, reps)  # type: ignore[union-attr]  # ts is finite only with a scaler
                continue
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
            k = r.step_before(stop, (1 << 20) if max_ticks is None else max_ticks - n)
            n += k
            self.ticks += k
            if r.finished_rows:
                if r.role == "prefill":
                    xfer.handoff(r, self.back)
                else:
                    self._think(r)
            if xfer.waiting and r.role == "decode":
                xfer.start(r.clock, self.back)
            self._wake(r)
        return n

    def _run_dealt(self) -> int:
        """run() for a router that reads no replica (round-robin) over open-loop arrivals: every request is drawn
        (when requests come does not depend on the replicas) and dealt first, then each replica serves its share
        alone, as in the event-ordered loop (which only interleaves independent replicas), in a process pool
        when there are workers and requests enough to pay for the processes (PARALLEL_MIN_REQUESTS)."""
        parts = []
        while self.src.next_time < math.inf:
            got = self.src.draw(self.src.next_time + DRAW_AHEAD_S)
            if got is not None:
                parts.append(got)
        rows = Rows.join(parts) if parts else Rows.new(0)
        blind = [RoutingSnapshot(r.index, 0, 0, 0, 0) for r in self.front]  # it reads nothing but the indices
        picks = [self.router.pick(blind) for _ in range(len(rows))]
        where = np.fromiter((p.index for p in picks), dtype=np.int64, count=len(picks))
        shares = [(r, rows.pick(where == r.index), self.duration) for r in self.reps]
        if len(rows) < PARALLEL_MIN_REQUESTS:
            done = [_serve_share(job) for job in shares]
        else:
            done = [r for _, r in sorted(pool_map(shares, self.workers, _serve_share), key=lambda x: x[0])]
        n = 0
        for rep, k in done:
            self.reps[rep.index] = rep
            n += k
        self._sort_roles()  # the replicas may have come back from the workers as new objects
        self.ticks += n
        self.ready = []
        self.queued = [False] * len(self.reps)
        # The router's latest choices, as dealt.
        for j in range(max(0, len(rows) - ROUTE_LOG), len(rows)):
            p = picks[j]
            self.route_log.append((rows.pick(slice(j, j + 1)), p, float(rows.arrival[j])))
        return n

    def _run_lazy(self) -> int:
        """run() for a lazy router over open-loop arrivals: a replica is moved up to an arrival only when a request
        of its could finish before it (its load changes only then; a router that is not steady may need every
        replica there), or when the arrival is routed to it. The others keep their long quiet decode runs. The
        routes and every step are those of the event-ordered loop (engine.fleet.lazy)."""
        return LazyLoop(self).run()

    def _wake(self, r: Replica) -> None:
        """Put a replica with a step to take on the heap of ready replicas (by clock, then index), once."""
        d = self.duration
        if not self.queued[r.index] and r.busy and not r.blocked and (d is None or r.clock < d):
            heapq.heappush(self.ready, (r.clock, r.index))
            self.queued[r.index] = True

    # ---- arrivals and routing -----------------------------------------------------------------
    def _arrive(self, t: float) -> None:
        """Every request due at t (drawn as a lane would), routed and queued one by one."""
        rows = self.src.draw(t)
        if rows is None:
            return  # a workload stage began: no request came with it
        for j in range(len(rows)):
            row = rows.pick(slice(j, j + 1)).copy()
            self._give(self._route(row), row, t)

    def _snapshots(self, reps: list[Replica], row: Rows | None) -> list[RoutingSnapshot]:
        """What the router reads of these replicas for this request (None: a router that does not read it)."""
        reads = self.router.reads
        keys = None
        if row is not None and "cached_blocks" in reads and self.prefix_caching:
            keys = prefix_keys(row)
            if not len(keys):
                keys = None
        wanted = "wanted_blocks" in reads
        return [r.routing(wanted, keys) for r in reps]

    def _route(self, row: Rows | None = None) -> Pick:
        """The replica (of those that read prompts) the router picks for a request, with why and the figure that
        decided it, as the router read them."""
        reps = self.front
        if self.scaler is not None and row is not None:  # only replicas serving when the request comes
            t = float(row.arrival[0])
            reps = [r for r in reps if self.scaler.serving(r.index, t)]
        if len(reps) == 1:
            return Pick(reps[0].index, "only", 0)
        return self.router.pick(self._snapshots(reps, row))

    def _give(self, choice: Pick, row: Rows, t: float) -> None:
        """Queue one request on the replica the router picked, logged with why (a prefill replica reads only its
        prompt)."""
        rep = self.reps[choice.index]
        self.route_log.append((row, choice, t))
        if rep.role == "prefill":
            self.xfer.prompt_only(row)
        rep.inject(row)
        rep.clock = max(rep.clock, t)
        self._wake(rep)

    def _users_out(self) -> np.ndarray:
        """Closed-loop users with a request anywhere in the fleet: queued, running or preempted on a replica, or
        a KV copy on its way to a decode replica."""
        return np.concatenate([*(users_out(r.lane) for r in self.reps), self.xfer.users()])

    def _think(self, r: Replica) -> None:
        """Closed-loop users whose answers a replica just finished think, then send again."""
        for rows in r.finished_rows:
            self.src.wake(rows.user, float(rows.done[0]))
        r.finished_rows.clear()

    def _land(self) -> None:
        """The earliest copy lands; both its replicas may now step, and waiting copies may start."""
        src, d, t = self.xfer.land(self.reps)
        self._wake(d)
        self._wake(src)  # its pinned blocks are free again: it may have been waiting for them
        if self.xfer.waiting:
            self.xfer.start(t, self.back)

    # ---- reading ------------------------------------------------------------------------------
    @property
    def routes(self) -> tuple[Route, ...]:
        """The router's latest decisions, oldest first (at most ROUTE_LOG)."""
        return tuple(Route(int(row.id[0]), int(row.user[0]), p.index, p.why, p.figure, t)
                     for row, p, t in self.route_log)

    def replica_states(self) -> tuple[ReplicaState, ...]:
        """Every replica at a glance, in index order (cheap: a few integers each), with its autoscaling phase at the
        fleet's time and, with --energy, its recent power."""
        return replica_states(self.reps, self.scaler, self.now, self.config.energy)

    def copies(self) -> tuple[CopyState, ...]:
        """P/D KV copies not yet landed: those under way (by landing time), then those waiting for room."""
        return self.xfer.states()

    def rolling_metrics(self) -> dict[str, float]:
        """Fleet-wide figures now: output tok/s summed over the replicas that write answers (each over its own
        recent window) and TTFT / TPOT p50 over their recent answers."""
        pooled = rolling([r.lane for r in self.back], self.reps[0].rates())
        out = 0.0
        for r in self.back:  # each replica's rate over its own window (as Engine's rolling tok/s), summed
            h = r.lane.stats.hist.last()
            span = float(h[:, H.DT].sum()) if len(h) else 0.0
            out += float(h[:, H.OUT].sum()) / span if span > 0 else 0.0
        return {"tok_s_out": out, "ttft_p50": pooled.ttft_p50, "tpot_p50": pooled.tpot_p50}

    def replica_engine(self, i: int) -> Engine:
        """Replica i's engine, to read (its tick, config, step model); the fleet alone moves it."""
        return self.reps[i]

    def replica_snapshot(self, i: int) -> Snapshot:
        """Replica i's own engine snapshot (its floor), on its own clock."""
        r = self.reps[i]
        return replace(r.snapshot(), time_s=r.clock)

    def latencies(self) -> np.ndarray:
        """Latency rows (columns accounting.L) of every answer the fleet finished, the last LATENCY_SAMPLES per
        replica that writes answers: Engine.latencies() for a fleet."""
        return np.concatenate([r.latencies() for r in self.back])

    def explain(self) -> dict[str, Any]:
        """Where the answers' TTFT and E2E went, over the replicas that write answers (`run --json --explain`)."""
        return explain([r.lane for r in self.back])

    def _metrics_of(self, reps: list[Replica]) -> dict[str, Any]:
        """The run metrics over some replicas (their lanes pooled, as an engine pools its lanes)."""
        cfg = self.spec.config
        sm = self.step_model
        slo = cfg.slo_ttft is not None or cfg.slo_tpot is not None
        return run_metrics([r.lane for r in reps], self.reps[0].rates(), self.ticks, sm.kv_capacity_bytes,
                           sm.kv_bytes_per_token, slo, cfg.group_gpus, self.src.stages).as_dict()

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
            m.update(self.xfer.metrics())
        m["requests_accepted"] = self.src.requests_accepted
        m["clipped_requests"] = self.clipped
        m["gpus"] = self.gpus
        m["cost_per_hour"] = self.cost_per_hour
        m["router"] = self.spec.router
        m["replicas"] = [r.summary(m["sim_time_s"]) for r in self.reps]
        m["kv_peak_bytes"] = max(s["kv_peak_bytes"] for s in m["replicas"])
        m.update(_optional_blocks(self.reps, self.spec.config, self.step_model))
        if self.scaler is not None:
            times = np.concatenate([r.lane.stats.times.last() for r in self.back])
            cfg = self.spec.config
            m["autoscale"] = self.scaler.report(m["sim_time_s"], cfg.group_gpus, times[:, T.ARRIVAL],
                                                self.latencies()[:, 0], cfg.slo_ttft)
        return m


def _dt_min(sm: StepModel) -> float:
    """The cheapest step this model can take (one token, no context; a decode replaying a full CUDA graph or a
    prefill chunk without logits), less a margin for rounding in the lanes' clock sums."""
    return 0.999 * min(sm.price(Batch(tokens=1, seqs=1, sum_ctx=0.0, sum_win=0.0, attn_full=0.5, attn_win=0.5,
                                      logits=lg, attn_decode=ad)).time for lg, ad in ((1, 0.5), (0, 0.0)))


def _share_remote_tier(reps: list[Replica], policy: str) -> None:
    """The remote KV tier is one store for the whole fleet: every replica's pool spills to and reads from the same
    one (engine.serving.kv_tiers), so the prefix-aware router can send a request where another replica's spill is
    found."""
    tiers = reps[0].lane.pool.tiers
    spec = None if tiers is None else tiers.specs[REMOTE]
    if spec is None:
        return
    shared = TIER_POLICIES[policy](spec.blocks)
    for r in reps:
        r.lane.pool.tiers.share_remote(shared)  # type: ignore[union-attr]


def _serve_share(job: tuple[Replica, Rows, float | None]) -> tuple[Replica, int]:
    """One dealt replica serving its share of the requests to the run's end (a pool worker may run this): the
    event-ordered loop's steps for one replica, its share handed to its lane as its source (Feed: the lane draws
    each request at its first step boundary after the arrival, as it is queued there on that loop). Returns the
    replica as it ended and the steps it took."""
    r, rows, d = job
    end = math.inf if d is None else d
    feed = Feed(r, None)
    for j, t in enumerate(rows.arrival.tolist()):
        feed.push(rows.pick(slice(j, j + 1)), t)
    feed.install()
    ln = r.lane
    n = 0
    while True:
        if not ln.has_work:  # idle: it waits for its next request (as Fleet._give moves its clock)
            if feed.next_time == math.inf:
                break
            r.clock = max(r.clock, feed.next_time)
        if r.clock >= end:
            break
        n += r.step_before(end, 1 << 20)
        r.finished_rows.clear()  # open loop: nobody to wake
    feed.remove()
    return r, n


def engine_for(spec: FleetSpec, preroute: bool = True, step_models: StepModels | None = None) -> Engine | Fleet:
    """One Engine for one replica without P/D, else a Fleet: the one place options become a simulator.

    `preroute=False` keeps a round-robin fleet on the event-ordered loop, which `advance_to` (the app) needs.
    `step_models`: step models shared with other simulators (a plan's points; None: the simulator's own).
    """
    if spec.single:
        return Engine(spec.config) if step_models is None else Engine(spec.config, step_models)
    return Fleet(spec, preroute=preroute, step_models=step_models)


def scripted(cfg: EngineConfig) -> bool:
    """The workload comes from a file or a trace (the engine's scripts), not from users, rate and lengths."""
    return cfg.workload is not None or cfg.trace is not None


def conserved(fleet: Fleet) -> None:
    """Every request the fleet's source handed out is answered, on a replica (running, queued, preempted), drawn
    but not yet routed, or (P/D) a read prompt on its way to a decode replica (accounting.check_conserved).
    With P/D a prefill replica's finished rows are prompts read, not answers: only decode replicas answer."""
    lanes = [r.lane for r in fleet.reps]
    moving = 0
    if fleet.spec.pd:
        done = sum(r.lane.stats.completed for r in fleet.back)
        moving = len(fleet.xfer.waiting) + len(fleet.xfer.landings) + sum(
            len(rows) for r in fleet.front for rows in r.finished_rows)
    else:
        done = sum(ln.stats.completed for ln in lanes)
    check_conserved("fleet", fleet.src.requests_accepted, done, sum(ln.R.n for ln in lanes),
                    sum(ln.Q.size for ln in lanes) + sum(len(rows) for rows in fleet.ahead),
                    sum(ln.P.n for ln in lanes), moving, sum(ln.stats.aborted for ln in lanes))


def _check_budget(cfg: EngineConfig, first: Replica, script: Any, replicas: int) -> budget.Estimate:
    """Refuse (one line, the estimate and the limit; --force overrides) a fleet whose tables would not fit in memory
    or whose steps would not finish: the run as one engine would take it, then per replica (engine.budget)."""
    wl = Workload.of(cfg)
    blocks = first.kv_blocks_total
    one = budget.for_run(cfg, first.step_model, blocks, script, wl.prompt, wl.output, wl.think, wl.think_time)
    bounded = script is not None or cfg.requests is not None or cfg.duration is not None
    est = budget.for_fleet(one, replicas, blocks, cfg.max_batch)
    budget.check(est, bounded=bounded, force=cfg.force)
    return est


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
    if spec.scale is not None and (spec.pd is not None or spec.scale.hi != spec.replicas):
        raise InputError(f"--autoscale {spec.scale.lo}:{spec.scale.hi} scales one pool of --replicas"
                         f" {spec.scale.hi}: give MAX = --replicas, without --pd")
    if spec.config.fast_share > 0 and spec.replicas > 1:
        raise InputError("--fast-share is a second GPU group of one engine; with --replicas use one or the other")


def _optional_blocks(reps: list[Replica], cfg: EngineConfig, sm: StepModel) -> dict[str, Any]:
    """The fleet's `kv_tiers` and `lora` blocks (as an engine's metrics have them), over every replica; each only
    when the run has KV tiers or LoRA adapters."""
    out: dict[str, Any] = {}
    tiers = tier_report([r.lane.pool.tiers for r in reps if r.lane.pool.tiers is not None], sm.kv_bytes_per_token)
    if tiers is not None:
        out["kv_tiers"] = tiers
    lora = lora_slots.lanes_summary([ln for r in reps for ln in r.lanes], cfg, sm)
    if lora is not None:
        out["lora"] = lora
    return out
