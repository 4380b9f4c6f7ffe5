"""The Engine facade: builds the lanes from an EngineConfig, steps them on one clock, reads them out.

The fast lane (fast_share > 0) is modelled as a second, dedicated GPU group of the same kind serving
only fast users at a batch cap of fast_max_batch. Sharing one GPU cannot make anyone faster: if the
GPU alternated a small fast batch with the normal batch, every user would get one token per
alternation, so fast users would gain nothing; strict priority would starve the normal lane. Dedicated
capacity at a small batch is how such a tier is served, and it shows the claim's trade (C21): the
small batch is faster per user and costs more per token. Each lane is an independent `Lane` with its
own KV pool, queue and clock; the Engine steps whichever lane is furthest behind, so time moves
forward for both (a fleet of replicas is more lanes on the same clock, with a router in front).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from engine import budget
from engine import validation as V
from engine.config import SCHEDULERS, EngineConfig
from engine.errors import InputError
from engine.physics import lora
from engine.physics.specs import WEIGHT_DTYPES, Hardware, Model, load_hardware, load_model
from engine.physics.speculative import Drafter
from engine.physics.speculative import check as check_spec
from engine.physics.step import StepModel, StepOptions
from engine.serving import lora_slots, open_loop, saturated
from engine.serving.accounting import H, Rates, Split, explain, lanes_split, rolling, run_metrics
from engine.serving.kv_tiers import TIER_POLICIES, TierSpec, hit_rates, tier_report
from engine.serving.lane import IDLE_TICK_S, Lane, LaneSpec, TickResult, idle_result
from engine.serving.scheduler import POLICIES, Scheduler, make_scheduler
from engine.serving.tables import BLOCK, done_view
from engine.traffic.arrivals import Budget, Script
from engine.traffic.source import RequestSource, Workload, load_script, run_bounds
from engine.traffic.workload import Stream, seeded_streams

if TYPE_CHECKING:
    from engine.fleet.spec import FleetSpec
    from engine.serving.snapshot import Snapshot

SNAPSHOT_QUEUE_ROWS = 1024  # queued requests shown in a snapshot (the count is always exact)
assert set(SCHEDULERS) == set(POLICIES), "config.SCHEDULERS and the scheduler classes name the same policies"


class Engine:
    """The serving engine: build from an EngineConfig, then step(), advance(), snapshot(), metrics().

    Live knobs between ticks: set_users, set_compute_mult, set_bandwidth_mult, set_weight_dtype,
    set_scheduler; reset(config) rebuilds (e.g. another model or GPU) with the same workload.
    """

    def __init__(self, config: EngineConfig | None = None,
                 step_models: Callable[[Hardware, Model, StepOptions], StepModel] = StepModel) -> None:
        # run() and advance() price runs of quiet decode steps in one call (same results); step() is one tick.
        self.skip_quiet = True
        # Where the engine gets its step model: a new one, or one shared with engines of the same hardware, model
        # and options (engine.fleet.fleet.StepModels: a fleet's replicas, a plan's points), whose price memo and
        # quiet-run tables (pure functions of those) they then fill once.
        self._step_models = step_models
        self._build(config or EngineConfig())

    # ---- building -----------------------------------------------------------------------------
    def _build(self, cfg: EngineConfig) -> None:
        """Validate the config (InputError, one line) and lay out the lanes."""
        check_config(cfg)
        hw = load_hardware(cfg.hardware)
        model = load_model(cfg.model)
        lora.check(model, cfg.lora_adapters, cfg.max_loras, cfg.max_lora_rank)  # vLLM's rules, however built
        # Every step option the config names (tp, dtypes, ideal, runtime, multipliers, ...) is passed through.
        opts = StepOptions(**{f.name: getattr(cfg, f.name) for f in fields(StepOptions) if hasattr(cfg, f.name)})
        sm = self._step_models(hw, model, opts)
        sm.check_fits()
        self._cfg = cfg
        self._sm = sm
        self._wl = Workload.of(cfg)
        check_spec(cfg.spec_tokens, cfg.spec_accept)
        self._drafter = Drafter(sm, cfg.spec_draft, cfg.spec_tokens) if cfg.spec_tokens else None
        blocks = self._pool_blocks(sm)
        script = load_script(cfg)
        if script is None:  # a file's lengths are clipped to the pool and context, and reported
            self._check_lengths(sm, blocks)
        # One estimate for every way work enters (the config's users or rate, a workload file, a trace); a script
        # always ends (its stages' time, its rows), so its steps are always checked.
        wl = self._wl
        self.estimate = budget.for_run(cfg, sm, blocks, script, wl.prompt, wl.output, wl.think, wl.think_time)
        budget.check(self.estimate, bounded=script is not None or cfg.requests is not None or cfg.duration is not None,
                     force=cfg.force)
        self._budget = Budget(*run_bounds(cfg, script))
        rngs = seeded_streams(cfg.seed, 10)
        self._lanes = [self._lane(False, blocks, rngs[:5], script)]
        if cfg.fast_share > 0:
            self._lanes.append(self._lane(True, blocks, rngs[5:], script))
        self._tick = 0
        self._clock = 0.0

    def _lane(self, fast: bool, blocks: int, rngs: list[Stream], script: Script | None) -> Lane:
        """One lane of this engine and the source of its requests: the fast one serves fast_share of the users
        at fast_max_batch (its own arrivals and lengths, the engine's ids and bounds)."""
        cfg, wl = self._cfg, self._wl
        share = cfg.fast_share if fast else 1.0 - cfg.fast_share
        cap = min(self._sm.model.max_context, blocks * BLOCK)
        src = RequestSource(wl, self._budget, rngs, cap, script, fast, cfg.fast_share, cfg.rate * share)
        spec = LaneSpec(fast=fast, think=wl.think, slo_ttft=cfg.slo_ttft, slo_tpot=cfg.slo_tpot, debug=cfg.debug,
                        prefix_caching=prefix_caching(cfg), spec_tokens=cfg.spec_tokens, spec_accept=cfg.spec_accept,
                        drafter=self._drafter, seed=cfg.seed, tiers=self._tiers(), tier_policy=cfg.kv_tier_policy)
        lane = Lane(spec, self._sm, self._scheduler(fast), blocks, src, max(1, len(src.stages)))
        src.outstanding = partial(users_out, lane)  # a stage re-activating users skips those with a request here
        return lane

    def _tiers(self) -> tuple[TierSpec | None, ...]:
        """KV offload: the tiers below the GPU (engine.serving.kv_tiers), per GPU as the pool: --kv-offload-gb of
        host memory over the host link, --kv-disk-gb of local disk, --kv-remote-gb of a remote store (None: off)."""
        cfg, hw = self._cfg, self._sm.hw
        host = self._tier("--kv-offload-gb", cfg.kv_offload_gb, hw.host_link_gbps, 0.0)
        # Disk and remote copies reach the GPU through its PCIe link too (GPUDirect Storage / RDMA): the slower wins.
        disk = self._tier("--kv-disk-gb", cfg.kv_disk_gb, _or(cfg.kv_disk_gbps, hw.kv_disk_gbps),
                          _or(cfg.kv_disk_latency_ms, hw.kv_disk_latency_ms), hw.host_link_gbps)
        # The remote store's size is the deployment's (each GPU of a tp group keeps its shard of a block there).
        remote = self._tier("--kv-remote-gb", cfg.kv_remote_gb, _or(cfg.kv_remote_gbps, hw.kv_remote_gbps),
                            _or(cfg.kv_remote_latency_ms, hw.kv_remote_latency_ms), hw.host_link_gbps, cfg.tp)
        if cfg.kv_tier_policy not in TIER_POLICIES:
            raise InputError(f"--kv-tier-policy must be one of {', '.join(TIER_POLICIES)}, got {cfg.kv_tier_policy!r}")
        return host, disk, remote

    def _tier(self, flag: str, gb: float, gbps: float, latency_ms: float, link: float = math.inf, gpus: int = 1
              ) -> TierSpec | None:
        """One tier of `gb` GB over `gpus` GPUs (None for 0), its copies back at min(gbps, link) GB/s per GPU after
        latency_ms."""
        for what, v in ((flag, gb), (flag.replace("-gb", "-gbps"), gbps), (flag.replace("-gb", "-latency-ms"),
                                                                           latency_ms)):
            if not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
                raise InputError(f"{what} must be a finite number >= 0, got {v!r}")
        if not gb:
            return None
        if not prefix_caching(self._cfg):
            raise InputError(f"{flag} keeps blocks the prefix cache reclaims: it needs --prefix-caching on")
        if not gbps:
            raise InputError(f"{flag.replace('-gb', '-gbps')} must be > 0 for a tier of {gb:g} GB")
        return TierSpec(int(gb * 1e9 // (BLOCK * self._sm.kv_bytes_per_token * gpus)), min(gbps, link),
                        latency_ms / 1e3)

    def _scheduler(self, fast: bool) -> Scheduler:
        """The config's policy for one lane; the fast lane's batch is capped at fast_max_batch."""
        cfg = self._cfg
        mb = min(cfg.max_batch, cfg.fast_max_batch) if fast else cfg.max_batch
        return make_scheduler(cfg.scheduler, mb, cfg.max_batched_tokens)

    def _pool_blocks(self, sm: StepModel) -> int:
        """KV pool in 16-token blocks: per-GPU capacity over per-GPU bytes per block (or the config's override)."""
        if self._cfg.kv_pool_blocks is not None:
            return int(self._cfg.kv_pool_blocks)
        d = getattr(self, "_drafter", None)
        if d is not None:  # the drafter's weights and its own KV per token live beside the model's
            return max(0, int((sm.kv_capacity_bytes - d.extra_weight_bytes)
                              // (BLOCK * (sm.kv_bytes_per_token + d.extra_kv_bytes_per_token))))
        return int(sm.kv_capacity_bytes // (BLOCK * sm.kv_bytes_per_token))

    def _check_lengths(self, sm: StepModel, blocks: int) -> None:
        """Fixed lengths that can never be served are an input error (sampled ones are clipped and reported)."""
        m = sm.model
        dp, dt_, do = self._wl.prompt, self._wl.think, self._wl.output
        if dp.is_fixed and dp.a >= m.max_context:
            raise InputError(f"--prompt {dp.a:g} is longer than {m.name}'s context of {m.max_context:,} tokens")
        if dp.is_fixed and dt_.is_fixed and do.is_fixed:
            total = round(dp.a) + round(dt_.a) + round(do.a)
            if total > m.max_context:
                raise InputError(f"--prompt {dp.a:g} plus {round(dt_.a) + round(do.a):,} generated tokens exceed "
                                 f"{m.name}'s context of {m.max_context:,} tokens")
            if total > blocks * BLOCK:
                gb = total * sm.kv_bytes_per_token / 1e9
                raise InputError(f"one request of {total:,} tokens needs {gb:.1f} GB of KV cache but the pool holds "
                                 f"{blocks * BLOCK:,} tokens ({blocks * BLOCK * sm.kv_bytes_per_token / 1e9:.1f} GB);"
                                 " use shorter lengths, --kv-dtype fp8, or more --tp")
        if blocks < 1:
            raise InputError("the KV pool has no room for a single 16-token block")

    # ---- properties ---------------------------------------------------------------------------
    @property
    def config(self) -> EngineConfig:
        """The live configuration (setters update it, so reset(replace(engine.config, ...)) keeps the knobs)."""
        return self._cfg

    @property
    def clock(self) -> float:
        """Simulated seconds: the earliest clock among lanes with work (every event before it is final)."""
        return self._clock

    @property
    def tick(self) -> int:
        """Ticks run since the start (idle ticks included)."""
        return self._tick

    @property
    def step_model(self) -> StepModel:
        """The StepModel pricing every step, with the live knobs applied."""
        return self._sm

    @property
    def finished(self) -> bool:
        """The run's bound is reached: --requests all served, or --duration elapsed."""
        b = self._budget
        if b.duration is not None and self._clock >= b.duration:
            return True
        if b.limit is not None and b.accepted >= b.limit:
            return all(not lane.has_work for lane in self._lanes)
        return False

    @property
    def requests_completed(self) -> int:
        """Answers finished so far, every lane (cheap: for progress bars)."""
        return sum(lane.stats.completed for lane in self._lanes)

    @property
    def prefix_caching(self) -> bool:
        """Whether the lanes cache prefixes (the config's choice or the runtime's default)."""
        return self._lanes[0].caching

    @property
    def bounds(self) -> tuple[int | None, float | None]:
        """The run's request limit and duration (a workload file or a trace sets them when the config does not)."""
        return self._budget.limit, self._budget.duration

    @property
    def kv_blocks_total(self) -> int:
        """KV pool size in 16-token blocks (per GPU group of the main lane)."""
        return self._lanes[0].pool.total

    # ---- running ------------------------------------------------------------------------------
    def step(self) -> TickResult:
        """Advance one tick: one step of the lane furthest behind, or an idle jump to the next arrival."""
        res = self._step(math.inf, True)
        assert res is not None
        return res

    def _next_lane(self) -> Lane | None:
        """The lane the next tick steps: the one furthest behind among those with work or arrivals to come."""
        lanes = self._lanes
        if len(lanes) == 1:
            return lanes[0]
        live = [ln for ln in lanes if not ln.dormant]
        if not live:
            return None
        return live[0] if len(live) == 1 else min(live, key=lambda ln: ln.clock)

    def _moved(self, lane: Lane, prev: float, lane_prev: float) -> None:
        """After `lane` ran: the engine clock is the earliest among lanes still live (every event before it is
        final); under debug, every invariant is checked."""
        lanes = self._lanes
        if len(lanes) == 1:
            self._clock = lane.clock
        else:
            live = [ln for ln in lanes if not ln.dormant]
            self._clock = max(prev, min(ln.clock for ln in live) if live else max(ln.clock for ln in lanes))
        if self._cfg.debug:
            assert self._clock >= prev, f"engine clock went back from {prev} to {self._clock}"
            lane.check(lane_prev)
            acc = sum(ln.stats.accepted for ln in lanes)
            assert acc == self._budget.accepted, f"lanes accepted {acc} != engine accepted {self._budget.accepted}"

    def _step(self, limit: float, want: bool) -> TickResult | None:
        """One tick; idle jumps stop at `limit` (advance's target or the run's duration). Its TickResult; with
        `want` False (run and advance read totals, not ticks) a step's is None and the lane skips building it."""
        prev = self._clock
        lane = self._next_lane()
        self._tick += 1
        if lane is None:
            # Nothing to run and nothing coming: let time pass (bounded by `limit`) so a UI clock runs.
            t1 = max(prev, min(prev + IDLE_TICK_S, limit))
            for ln in self._lanes:
                ln.clock = max(ln.clock, t1)
            self._clock = t1
            return idle_result(self._tick, t1, t1 - prev, False)
        lane_prev = lane.clock
        res = lane.step(limit, self._tick, want)
        self._moved(lane, prev, lane_prev)
        return res if res is None or len(self._lanes) == 1 else replace(res, time_s=self._clock)

    def _ticks(self, limit: float, max_ticks: float) -> int:
        """At most `max_ticks` ticks at once: a run of quiet decode steps when skip_quiet allows (each counts
        as a tick, with the same result as stepping them one by one), else one tick. Returns ticks run."""
        lanes = self._lanes
        # One lane and no debug checks (the usual run): it is the next lane, and the engine's clock is its clock
        # after it moves (_next_lane's and _moved's answers, without their calls: ~22k ticks in a 10k-request run).
        lone = len(lanes) == 1 and not self._cfg.debug
        if self.skip_quiet and max_ticks >= 2:
            lane = lanes[0] if lone else self._next_lane()
            if lane is not None:
                prev, lane_prev = self._clock, lane.clock
                d = self._budget.duration
                stop, most = limit if d is None else min(limit, d), int(min(max_ticks, 1 << 20))
                k = lane.jump(stop, most)
                if not k and lone:  # a saturated batch or a busy open loop: many join and decode steps at once
                    # (engine.serving.saturated, engine.serving.open_loop)
                    k = saturated.stretch(lane, stop, most) or open_loop.stretch(lane, stop, most)
                if k:
                    self._tick += k
                    if lone:
                        self._clock = lane.clock
                    else:
                        self._moved(lane, prev, lane_prev)
                    return k
        if lone:  # _step's tick, wanting no result
            lane = lanes[0]
            self._tick += 1
            lane.step(limit, self._tick, False)
            self._clock = lane.clock
            return 1
        self._step(limit, False)
        return 1

    def advance(self, sim_seconds: float, max_ticks: int | None = None) -> int:
        """Run ticks until the clock has moved `sim_seconds` (or the run is finished, or `max_ticks` ran, so a
        caller on a wall-time budget can look at its watch); quiet decode runs are skipped; returns ticks run."""
        if not sim_seconds > 0:
            return 0
        target = self._clock + sim_seconds
        n = 0
        while self._clock < target and not self.finished and (max_ticks is None or n < max_ticks):
            n += self._ticks(target, math.inf if max_ticks is None else max_ticks - n)
        return n

    def run(self, max_ticks: int | None = None) -> int:
        """Run until the run's bound (--requests or --duration) is reached; returns ticks run."""
        b = self._budget
        if b.limit is None and b.duration is None:
            raise InputError("an unbounded workload never finishes: give --requests N or --duration S")
        limit = math.inf if b.duration is None else b.duration
        n = 0
        while not self.finished and (max_ticks is None or n < max_ticks):
            n += self._ticks(limit, math.inf if max_ticks is None else max_ticks - n)
        if self.finished:
            self._close(b.duration)
        return n

    def _close(self, duration: float | None) -> None:
        """The run's end: requests that arrived by --duration (or a workload's last stage) while the last step
        ran are taken into the queue, unserved, and reported as queued; then every request is accounted for.
        Before, a run whose last step (a 120,000-token prefill) ran 5 s past its end reported 1 request of the ~20
        that arrived."""
        for lane in self._lanes:
            if duration is not None:
                lane.arrive_until(duration)
            lane.check_conserved()

    # ---- live changes -------------------------------------------------------------------------
    def set_users(self, n: int) -> None:
        """Closed-loop users: new ones send now; removed ones finish their current answer and stop."""
        if isinstance(n, bool) or int(n) != n or n < 0:
            raise InputError(f"users must be a whole number >= 0, got {n}")
        n = int(n)
        self._budget.users = n
        for lane in self._lanes:
            was_dormant = lane.dormant
            if was_dormant:
                lane.clock = max(lane.clock, self._clock)
            lane.source.set_users(n, max(lane.clock, self._clock) if was_dormant else lane.clock)
        self._cfg = replace(self._cfg, users=n)

    def _set_step_model(self, sm: StepModel) -> list[int]:
        """Install a new step model in every lane, resizing pools; returns preempted ids."""
        self._sm = sm
        out: list[int] = []
        blocks = self._pool_blocks(sm)
        for lane in self._lanes:
            lane.sm = sm
            if blocks != lane.pool.total:
                out += lane.set_pool(blocks)
        return out

    def set_compute_mult(self, x: float) -> None:
        """What-if: scale peak FLOP/s (x2 doubles compute)."""
        x = V.positive(x, "compute multiplier", hi=V.MAX_MULT)
        self._set_step_model(self._sm.with_options(compute_mult=x))
        self._cfg = replace(self._cfg, compute_mult=x)

    def set_bandwidth_mult(self, x: float) -> None:
        """What-if: scale HBM bandwidth."""
        x = V.positive(x, "bandwidth multiplier", hi=V.MAX_MULT)
        self._set_step_model(self._sm.with_options(bandwidth_mult=x))
        self._cfg = replace(self._cfg, bandwidth_mult=x)

    def set_weight_dtype(self, dtype: str | None) -> list[int]:
        """What-if: weights in another dtype. The pool is re-sized; if it shrinks, the newest requests are
        preempted until it fits. Returns the preempted ids. InputError (nothing changed) if it cannot fit."""
        if dtype is not None and dtype not in WEIGHT_DTYPES:
            raise InputError(f"weight dtype must be one of {', '.join(WEIGHT_DTYPES)}, got {dtype!r}")
        sm = self._sm.with_options(weight_dtype=dtype)
        sm.check_fits()
        blocks = self._pool_blocks(sm)
        self._check_lengths(sm, blocks)
        biggest = max(lane.max_request_tokens() for lane in self._lanes)
        if biggest > blocks * BLOCK:
            raise InputError(f"with {dtype} weights the KV pool holds {blocks * BLOCK:,} tokens, less than a live "
                             f"request's {biggest:,}")
        out = self._set_step_model(sm)
        self._cfg = replace(self._cfg, weight_dtype=dtype)
        return out

    def set_scheduler(self, name: str, max_batch: int | None = None, max_batched_tokens: int | None = None) -> None:
        """Switch scheduler or its knobs; running requests carry on under the new rules."""
        cfg = replace(self._cfg, scheduler=name, max_batch=self._cfg.max_batch if max_batch is None else max_batch,
                      max_batched_tokens=self._cfg.max_batched_tokens if max_batched_tokens is None
                      else max_batched_tokens)
        check_config(cfg)
        self._cfg = cfg
        for lane in self._lanes:
            lane.set_scheduler(self._scheduler(lane.fast))

    def reset(self, config: EngineConfig | None = None) -> None:
        """Start over at time 0: with `config` (e.g. another model or GPU, same workload) or the live one."""
        self._build(config or self._cfg)

    # ---- reading ------------------------------------------------------------------------------
    def rates(self) -> Rates:
        """Per-GPU peaks (the step model's roof, what-if knobs applied) and the price of one lane's GPU group."""
        sm, cfg = self._sm, self._cfg
        price = cfg.price_per_hour if cfg.price_per_hour is not None else sm.hw.price_per_hour
        return Rates(sm.roof.peak_flops, sm.roof.bandwidth, price * cfg.group_gpus / 3600.0)

    def snapshot(self) -> Snapshot:
        """A read-only frame: the rows the view draws (live requests, the first queued, the last finished),
        pool, queue, rolling metrics.

        The physical panels (pool, last step, bytes moved) describe the main lane's GPU; request rows and
        counts cover every lane (fast-lane rows have fast=True). Rows come lane by lane (running, preempted,
        queued, finished), not sorted: the view orders them itself.
        """
        from engine.serving.snapshot import Phase, RequestView, Snapshot  # the app's frame: a headless run never asks
        main = self._lanes[0]
        cols: dict[str, list[np.ndarray]] = {f: [] for f in ("id", "user", "prompt", "cached", "think", "total",
                                                            "gen", "blocks", "fast", "arrival", "phase")}
        queued = running = preempted = done = pre_total = 0
        for lane in self._lanes:
            R, P, Q = lane.R, lane.P, lane.Q
            qn = min(Q.size, SNAPSHOT_QUEUE_ROWS)
            d = done_view(lane.stats.recent.last())
            for t in (R.rows(), P.rows(), Q.rows(qn), d):
                for f in ("id", "user", "prompt", "cached", "think", "total", "gen", "blocks", "fast", "arrival"):
                    cols[f].append(getattr(t, f))
            r = R.rows()
            cols["phase"] += [np.where(r.cached < r.target, Phase.PREFILL,
                                       np.where(r.gen < r.think, Phase.THINKING, Phase.DECODING)),
                              np.full(P.n, Phase.PREEMPTED), np.full(qn, Phase.QUEUED), np.full(len(d), Phase.DONE)]
            queued += Q.size
            running += R.n
            preempted += P.n
            done += lane.stats.completed
            pre_total += lane.stats.preemptions
        c = {f: np.concatenate(v) for f, v in cols.items()}
        prompt = c["prompt"]
        view = RequestView(
            req_id=c["id"], user=c["user"], phase=c["phase"].astype(np.int8), prompt_len=prompt,
            prefilled=np.minimum(c["cached"], prompt), think_len=c["think"], output_len=c["total"] - c["think"],
            generated=c["gen"], kv_blocks=c["blocks"], fast=c["fast"].astype(bool), arrival_s=c["arrival"],
        )
        history = self.history()
        sm = self._sm
        hbm = main.stats.bytes
        tiers = [ln.pool.tiers for ln in self._lanes if ln.pool.tiers is not None]
        held = None if self._cfg.kv_pool_blocks is None else main.pool.total * BLOCK * sm.kv_bytes_per_token
        return Snapshot(
            tick=self._tick, time_s=self._clock, hardware=sm.hw, model=sm.model, opts=sm.opts, roof=sm.roof,
            scheduler=self._cfg.scheduler, users=self._budget.users, requests=view, last_step=main.last_cost,
            batch_size=main.stats.last_batch, kv_blocks_used=main.pool.used, kv_blocks_total=main.pool.total,
            weights_bytes=sm.weight_bytes_per_gpu, kv_capacity_bytes=sm.kv_capacity_bytes, kv_pool_bytes=held,
            reserve_bytes=sm.reserve_bytes, queued=queued, running=running, preempted=preempted, done=done,
            preemptions_total=pre_total,
            # Every HBM byte passes through L2 and into an SM's tray once (no on-chip reuse is modelled).
            bytes_moved={"hbm": hbm, "l2": hbm, "smem": hbm},
            metrics=self._floor_metrics(c), history=history,
            kv_tiers=hit_rates(tiers) if tiers else None,
        )

    def _floor_metrics(self, rows: dict[str, np.ndarray]) -> dict[str, float]:
        """The rolling metrics, plus what one user decoding alone would pay per output token at the mean context
        of the rows decoding now (cost_per_mtok_out_batch1; NaN when none decodes): batching's saving on screen."""
        from engine.physics.economics import solo_cost_per_mtok_out  # a snapshot's only: not loaded by a headless run
        from engine.serving.snapshot import Phase
        m = self.rolling_metrics()
        decoding = (rows["phase"] == Phase.DECODING) | (rows["phase"] == Phase.THINKING)
        m["cost_per_mtok_out_batch1"] = (
            solo_cost_per_mtok_out(self._sm, float(rows["cached"][decoding].mean()), self.rates().dollars_per_s)
            if decoding.any() else math.nan)
        return m

    def history(self) -> dict[str, tuple[float, ...]]:
        """The main lane's last HISTORY_POINTS ticks, oldest first: clock, KV fill, queue, output tok/s, step ms and
        batch per tick (Snapshot.history; `run --plot` reads it every few hundred ticks without a whole snapshot)."""
        h = self._lanes[0].stats.hist.last()
        dt = h[:, H.DT]
        with np.errstate(invalid="ignore", divide="ignore"):
            tok_s = np.where(dt > 0, h[:, H.OUT] / dt, 0.0)
        return {
            "time_s": tuple(h[:, H.TIME].tolist()), "kv_util": tuple(h[:, H.KV].tolist()),
            "queue": tuple(h[:, H.QUEUE].tolist()), "tok_s_out": tuple(tok_s.tolist()),
            "step_ms": tuple((dt * 1e3).tolist()), "batch": tuple(h[:, H.BATCH].tolist()),
        }

    @property
    def lanes(self) -> tuple[Lane, ...]:
        """The lanes (the main one first, then the fast lane if any), for readers such as engine.serving.trace_out."""
        return tuple(self._lanes)

    def explain(self) -> dict[str, Any]:
        """Where the finished requests' TTFT and E2E went (`run --json --explain`; engine.serving.accounting)."""
        return explain(self._lanes)

    def latency_split(self, last: int | None = None) -> Split:
        """Per finished request (the last `last` of each lane): its id and its TTFT and E2E parts."""
        return lanes_split(self._lanes, last)

    def latencies(self) -> np.ndarray:
        """Latency rows (columns accounting.L: TTFT, TPOT, ...) of the answers finished, the last ones each lane
        keeps: what percentiles over a run are taken from."""
        return np.concatenate([ln.stats.lat.last() for ln in self._lanes])

    def rolling_metrics(self) -> dict[str, float]:
        """What the UI shows now: rates over the last HISTORY_POINTS ticks, latencies over the last 256 answers."""
        return rolling(self._lanes, self.rates()).as_dict()

    def metrics(self, fast: bool | None = None) -> dict[str, Any]:
        """Run metrics (the `tokensim run --json` keys) plus the rolling ones; `fast` picks one lane."""
        lanes = self._lanes if fast is None else [ln for ln in self._lanes if ln.fast == fast]
        if not lanes:
            raise InputError("this engine has no fast lane (fast_share is 0)")
        cfg, sm = self._cfg, self._sm
        slo = cfg.slo_ttft is not None or cfg.slo_tpot is not None
        stages = self._lanes[0].source.stages
        out = run_metrics(lanes, self.rates(), self._tick, sm.kv_capacity_bytes, sm.kv_bytes_per_token, slo,
                          cfg.group_gpus, stages).as_dict()
        tiers = tier_report([ln.pool.tiers for ln in lanes if ln.pool.tiers is not None], sm.kv_bytes_per_token)
        if tiers is not None:
            out["kv_tiers"] = tiers
        lora = lora_slots.lanes_summary(lanes, cfg, sm)  # multi-LoRA's slots, loads and waits over these lanes
        if lora is not None:
            out["lora"] = lora
        return out

    @property
    def spec(self) -> FleetSpec:
        """This engine as a deployment (engine.simulator.Simulator): one replica of its live configuration."""
        from engine.fleet.spec import FleetSpec  # the simulator's question: a plain run never loads the fleet's spec
        return FleetSpec(self._cfg)


def _or(v: float | None, default: float) -> float:
    """An option's value, or the hardware file's when it was not given."""
    return default if v is None else v


def users_out(lane: Lane) -> np.ndarray:
    """Closed-loop users with a request queued, preempted or running in this lane."""
    return np.concatenate([lane.R.col("user"), lane.P.col("user"), lane.Q.col("user")])


# ---- validation -------------------------------------------------------------------------------------

# Runtimes that cache prefixes unless told not to: vLLM (enable_prefix_caching, on by default since its V1
# engine), SGLang (RadixAttention) and TensorRT-LLM (KV cache block reuse).
CACHING_RUNTIMES = ("vllm", "sglang", "trtllm")


def prefix_caching(cfg: EngineConfig) -> bool:
    """Whether this run caches prefixes: the config's choice, else what its runtime does."""
    if cfg.prefix_caching is not None:
        return bool(cfg.prefix_caching)
    return isinstance(cfg.runtime, str) and cfg.runtime in CACHING_RUNTIMES


def check_config(cfg: EngineConfig) -> None:
    """Contradictory or impossible options: one clear line each (the checks of engine.validation)."""
    V.text(cfg.scheduler, "--scheduler", choices=SCHEDULERS, what="scheduler")
    V.whole(cfg.max_batch, "--max-batch", lo=1)
    V.whole(cfg.max_batched_tokens, "--max-batched-tokens", lo=1)
    V.whole(cfg.fast_max_batch, "--fast-max-batch", lo=1)
    V.number(cfg.fast_share, "--fast-share", lo=0.0, hi=1.0)
    if cfg.fast_share >= 1.0:
        raise InputError("--fast-share 1 leaves no normal lane; use --max-batch to run everyone in a small batch")
    V.whole(cfg.users, "--users", lo=0)
    V.number(cfg.rate, "--rate", lo=0.0, hi=float(V.MAX_COUNT))
    # users = rate = 0 is an idle engine (a UI may add users later), and users with a rate run both
    # arrival streams together; `tokensim run` refuses both forms as contradictory or empty.
    V.whole(cfg.seed, "--seed", lo=0, hi=2**32 - 1)
    if cfg.requests is not None:
        V.whole(cfg.requests, "--requests", lo=1)
    if cfg.duration is not None:
        V.positive(cfg.duration, "--duration", hi=V.MAX_SECONDS)
    if cfg.price_per_hour is not None:
        V.number(cfg.price_per_hour, "--price-per-hour", lo=0.0, hi=1e9)
    for name, v in (("--slo-ttft", cfg.slo_ttft), ("--slo-tpot", cfg.slo_tpot)):
        if v is not None:
            V.positive(v, name, hi=V.MAX_SECONDS)
    if cfg.kv_pool_blocks is not None:
        V.whole(cfg.kv_pool_blocks, "--kv-blocks", lo=1)
    for name, v in (("--compute-mult", cfg.compute_mult), ("--bandwidth-mult", cfg.bandwidth_mult)):
        V.positive(v, name, hi=V.MAX_MULT)
