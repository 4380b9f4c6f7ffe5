"""What a run will cost before it starts: memory for its tables and simulated steps, against fixed limits.

A command refuses a run that cannot finish (or cannot fit) with one line giving the estimate and the
limit; `--force` (EngineConfig.force) runs it anyway. The estimates are deliberately simple upper-ish
bounds from the configuration: they exist to catch 1e10 users or 23 days of simulated time, not to
predict a run's length to the percent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine.config import EngineConfig
from engine.errors import InputError
from engine.physics.step import StepModel
from engine.traffic.workload import Dist
from engine.validation import MAX_SECONDS

MEMORY_LIMIT_BYTES = 2e9  # request and user tables a run may hold (the engine itself needs ~100 MB more)
STEPS_LIMIT = 1e7  # simulated steps: about five minutes at the ~33k ticks/s of a small batch (measured)
ROW_BYTES = 2 * 18 * 8  # one request row: 18 int64/float64 columns, tables grow by doubling (x2)
USER_BYTES = 8 + 1 + 1 + 8  # per closed-loop user: next send time, waiting flag, outstanding flag, index
# A plan's whole grid: ten runs' worth, ~50 min on one core at that pace (less over a plan's worker pool).
PLAN_STEPS_LIMIT = 10 * STEPS_LIMIT
# What a replica costs beyond its steps, in steps: building its engine (tables, KV pool, prefix cache) and the
# fleet's per-replica bookkeeping. Measured: `run --rate 10 --duration 10` takes 0.41 s of CPU with 1 replica and
# 1.96 s with 2,048, ~0.75 ms a replica, or ~25 steps at ~30 us a step. A plan of thousands of points of
# thousands of replicas each simulates few steps but builds millions of replicas (issue 30, class 3).
REPLICA_STEPS = 25.0
POOL_BLOCK_BYTES = 6 * 8  # per KV block: the prefix cache's key, references, LRU stamp and free-slot stacks


@dataclass(frozen=True, slots=True)
class Estimate:
    """What a run is expected to need: peak table memory and simulated steps (inf: never finishes)."""

    memory_bytes: float
    steps: float
    step_s: float  # the shortest step it can take (a decode of one sequence): what bounds the clock's pace
    alone: float = math.inf  # steps if every request ran by itself (a fleet cannot take more: see for_fleet)
    sim_s: float = 0.0  # simulated seconds the run spans (its arrivals' span, or its --duration)


def _shortest_step(sm: StepModel, d_prompt: Dist) -> float:
    """The shortest step a run can take: a decode of one sequence at the mean prompt length."""
    return sm.decode(1, int(min(d_prompt.mean, sm.model.max_context - 1))).time_s


def estimate(cfg: EngineConfig, sm: StepModel, blocks: int, d_prompt: Dist, d_output: Dist, d_think: Dist,
             d_think_time: Dist, step_s: float | None = None) -> Estimate:
    """Memory and steps of the run `cfg` describes on step model `sm` with a pool of `blocks` blocks (`step_s`:
    the shortest step, when the caller has priced it already)."""
    lanes = 2 if cfg.fast_share > 0 else 1
    step_s = _shortest_step(sm, d_prompt) if step_s is None else step_s
    ctx = sm.model.max_context  # sampled lengths are clipped to the context, so no request needs more steps
    gen = max(1.0, min(d_output.mean + d_think.mean, ctx))  # decode steps one request needs
    # Requests the run will see: its --requests, or what arrives within --duration.
    if cfg.users:
        cycle = max(d_think_time.mean, gen * step_s, 1e-12)
        arriving = cfg.users * (cfg.duration / cycle + 1) if cfg.duration is not None else math.inf
    else:
        arriving = cfg.rate * cfg.duration + 1 if cfg.duration is not None else math.inf
    n_req = min(float(cfg.requests) if cfg.requests is not None else math.inf, arriving)
    # Memory: per-user state, the rows in flight (every user's one request, or an open loop's whole backlog
    # when it is overloaded), and the batch histogram (one counter per possible batch size).
    in_flight = cfg.users + (min(n_req, arriving) if cfg.rate else 0)
    if not math.isfinite(in_flight):
        in_flight = cfg.users + cfg.max_batch  # an unbounded open loop (the app) holds what it serves
    memory = lanes * (cfg.users * USER_BYTES + in_flight * ROW_BYTES + 8 * min(cfg.max_batch, blocks)
                      + POOL_BLOCK_BYTES * blocks)
    # Steps: the tokens of every request, shared over the batch that runs at once, plus one tick per arrival.
    held = min(d_prompt.mean, ctx) + gen / 2  # tokens a running request holds on average
    fit = max(1.0, blocks * 16 / held)  # requests the KV pool holds at once
    if cfg.users:
        together = min(cfg.max_batch, cfg.users, fit)
    else:
        together = min(cfg.max_batch, max(1.0, cfg.rate * gen * step_s), fit)
    steps = n_req * (gen / together + 1)
    if cfg.duration is not None and step_s > 0:
        steps = min(steps, cfg.duration / step_s + 2 * n_req)
    if not step_s > 0 and (cfg.duration is not None or n_req == math.inf):
        steps = math.inf  # a step that takes no time never moves the clock towards --duration
    if cfg.requests is None and cfg.duration is None:
        steps = math.inf
    return Estimate(memory_bytes=memory, steps=steps, step_s=step_s, alone=n_req * (gen + 1),
                    sim_s=_span(cfg, n_req, d_think_time.mean + gen * step_s))


def _span(cfg: EngineConfig, n_req: float, cycle: float) -> float:
    """Simulated seconds until the run's last request is sent: --duration, or --requests spread at --rate or over
    the users' send-think cycles (an open loop at 1e-300 req/s spans 1e300 s)."""
    if cfg.duration is not None:
        return cfg.duration
    if not math.isfinite(n_req):
        return 0.0  # unbounded (the app): its clock moves only as far as the user watches
    if cfg.users:
        return n_req / cfg.users * cycle
    return n_req / cfg.rate if cfg.rate > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Load:
    """One stretch of a scripted run (a workload file's stage, or a whole trace) in the terms estimate() takes."""

    duration: float
    rate: float  # Poisson requests/s (a trace: its rows over its span)
    users: int  # closed-loop users (0 for an open loop)
    prompt: Dist
    output: Dist
    think: Dist
    think_time: Dist
    requests: float | None = None  # a trace's row count: it sends no more than that


def stage_loads(stages: Sequence[Any]) -> list[Load]:
    """A workload file's stages (engine.traffic.workload_file.Stage) as loads."""
    return [Load(st.duration, st.rate, st.users, st.prompt.tokens, st.output, st.think, st.think_time)
            for st in stages]


def trace_load(arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> Load:
    """A trace's rows as one load: its row count over its span, at its mean lengths."""
    n = int(arrival.size)
    span = max(float(arrival[-1]) if n else 0.0, 1e-9)
    zero = Dist("fixed", 0.0)
    return Load(span, n / span, 0, _fixed_mean(prompt), _fixed_mean(output), zero, zero, requests=float(n))


def _fixed_mean(a: np.ndarray) -> Dist:
    """A fixed length at the mean of `a` (1 for none)."""
    return Dist("fixed", float(a.mean()) if a.size else 1.0)


def estimate_loads(cfg: EngineConfig, sm: StepModel, blocks: int, loads: Sequence[Load]) -> Estimate:
    """What a run driven by a workload file or a trace will need: each stretch estimated as a run of its own (its
    rate or users for its duration, as estimate() does for --rate/--users), the steps added up and the memory taken
    at the largest stretch; --requests and --duration cut the run short as they do the run. The shortest step is
    priced once per prompt length, so 100,000 stages cost 100,000 small sums, not 100,000 step pricings."""
    memory, steps, step_min, alone = 0.0, 0.0, math.inf, 0.0
    left_req = float(cfg.requests) if cfg.requests is not None else math.inf
    left_s = cfg.duration if cfg.duration is not None else math.inf
    priced: dict[float, float] = {}
    for ld in loads:
        if left_req <= 0 or left_s <= 0:
            break
        dur = min(ld.duration, left_s)
        cap = min(left_req, ld.requests if ld.requests is not None else math.inf)
        one = replace(cfg, users=ld.users, rate=ld.rate, duration=dur,
                      requests=int(cap) if math.isfinite(cap) else None)
        if ld.prompt.mean not in priced:
            priced[ld.prompt.mean] = _shortest_step(sm, ld.prompt)
        est = estimate(one, sm, blocks, ld.prompt, ld.output, ld.think, ld.think_time, priced[ld.prompt.mean])
        if not ld.rate and not ld.users:  # a quiet stretch: the clock jumps over it
            est = Estimate(est.memory_bytes, 1.0, est.step_s, 1.0)
        memory, steps, step_min = max(memory, est.memory_bytes), steps + est.steps, min(step_min, est.step_s)
        alone += est.alone
        left_s -= dur
        left_req -= min(cap, ld.rate * dur) if not ld.users else 0.0  # closed loops: charged to the end
    return Estimate(memory_bytes=memory, steps=steps, step_s=step_min if math.isfinite(step_min) else 0.0,
                    alone=alone)


def script_loads(script: Any) -> list[Load]:
    """A run's script (engine.traffic.arrivals: a workload file's PlanScript or a TraceScript) as loads."""
    plan = getattr(script, "plan", None)
    if plan is not None:
        return stage_loads(plan.wl.stages)
    t = script.trace
    return [trace_load(t.arrival, t.prompt, t.output)]


def for_run(cfg: EngineConfig, sm: StepModel, blocks: int, script: Any, d_prompt: Dist, d_output: Dist,
            d_think: Dist, d_think_time: Dist) -> Estimate:
    """One estimate for every way work enters a run: a workload file or a trace by its loads, else the config's
    own users or rate with the given length distributions."""
    if script is not None:
        return estimate_loads(cfg, sm, blocks, script_loads(script))
    return estimate(cfg, sm, blocks, d_prompt, d_output, d_think, d_think_time)


def for_fleet(one: Estimate, replicas: int, blocks: int, max_batch: int) -> Estimate:
    """A fleet of `replicas` serving the run `one` estimates for a single engine: every replica holds its own KV
    pool tables and batch histogram; the steps are the engine's, once per replica that has work (each steps on its
    own clock), but never more than every request running alone."""
    per_replica = POOL_BLOCK_BYTES * blocks + 8 * min(max_batch, blocks)
    memory = one.memory_bytes + (replicas - 1) * per_replica
    steps = min(replicas * one.steps, max(one.steps, one.alone))
    return Estimate(memory_bytes=memory, steps=steps, step_s=one.step_s, alone=one.alone, sim_s=one.sim_s)


def check(est: Estimate, bounded: bool, force: bool) -> None:
    """Refuse (one line: the estimate and the limit) what would not fit in memory or, for a bounded run, finish."""
    if est.sim_s > MAX_SECONDS:  # not a matter of patience, so --force does not lift it: the numbers would be wrong
        raise InputError(f"this run would span about {est.sim_s:.2g} simulated seconds, past the {MAX_SECONDS:.0e} s"
                         " in which a float64 clock still resolves a step of a millisecond; use a higher rate, a"
                         " shorter think time or fewer --requests")
    if force:
        return
    if est.memory_bytes > MEMORY_LIMIT_BYTES:
        raise InputError(f"this run would hold about {_bytes(est.memory_bytes)} of request and user tables, over"
                         f" the limit of {_bytes(MEMORY_LIMIT_BYTES)}; use fewer users, a lower rate or a shorter"
                         " run (--force to try anyway)")
    if bounded and est.steps > STEPS_LIMIT:
        what = ("never finishes: a step takes no simulated time" if not est.step_s > 0
                else f"would take about {_count(est.steps)} simulated steps")
        raise InputError(f"this run {what}, over the limit of {_count(STEPS_LIMIT)}; use fewer --requests or a"
                         " shorter --duration (--force to try anyway)")


def check_plan(steps: float, points: int, force: bool) -> None:
    """Refuse (one line: the estimate and the limit) a plan whose points' simulated steps add up past
    PLAN_STEPS_LIMIT: a grid is capped by its work, not only by its number of points."""
    if not force and steps > PLAN_STEPS_LIMIT:
        raise InputError(f"this plan would simulate about {_count(steps)} steps over its {points:,} configurations,"
                         f" over the limit of {_count(PLAN_STEPS_LIMIT)}; narrow the search space or the workload"
                         " (--force to try anyway)")


def _bytes(v: float) -> str:
    """1.2 TB, 340 MB."""
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if v >= scale:
            return f"{v / scale:,.1f} {unit}" if v < 1e6 * scale else f"{v / scale:.1e} {unit}"
    return f"{v / 1e3:,.0f} KB"


def _count(v: float) -> str:
    """2.0e+07, or 'an unbounded number of'."""
    return f"{v:.1e}" if math.isfinite(v) else "unbounded"
