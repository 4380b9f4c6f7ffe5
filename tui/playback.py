"""The app's playback clock: the view's simulated time over an engine whose steps are atomic.

The engine jumps a whole step at a time; the view's clock runs smoothly through it (slow motion) or
across many steps per frame (fast-forward). `Playback` keeps the two together: the state before and after
the step in flight, that step's cost and the span of simulated time it covers, and how far the view
clock has got. When steps are too fast to watch (a 12 ms step at real time crosses 48 layers in under
half a frame), it replays one of them time-dilated (`Replay`) while the counters keep the live clock.
The app owns one and builds each frame from it; nothing else changes these fields.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from engine.physics.step import StepCost
from engine.serving.snapshot import Phase, Snapshot
from tui.frame import Batch, batch_of, match_rows, taken

if TYPE_CHECKING:
    from engine.fleet.fleet import Fleet
    from engine.serving.engine import Engine
    from engine.simulator import Simulator
    from tui.frame import FleetView

FF_TICKS = 64  # ticks per engine.advance() call in fast-forward, between looks at the wall-time budget
# A replayed step crosses one layer in this many wall seconds: three frames at 30 fps, the least in which
# the eye follows crates from the warehouse to the shelf. The whole step takes at least / at most:
REPLAY_LAYER_WALL_S = 0.1
REPLAY_WALL_S = (3.0, 8.0)
REPLAY_HOLD_WALL_S = 0.7  # the replayed step's result (a token in each answer) stays this long before the next
PICK_STEPS = 8  # a replay is picked among the frame's last steps, run one by one within this many step times


def replay_wall(layers: int) -> float:
    """Wall seconds a replayed step of `layers` layers takes on screen (its sweep, without the hold)."""
    lo, hi = REPLAY_WALL_S
    return min(hi, max(lo, layers * REPLAY_LAYER_WALL_S))


@dataclass(frozen=True, slots=True)
class Replay:
    """One past step shown time-dilated: its cost and the states around it, and where on the view clock it plays.

    It spans `wall_s * speed` simulated seconds of the view clock (wall_s wall seconds at the speed it
    started with), then holds its end for REPLAY_HOLD_WALL_S; `factor` is how much slower than real time
    the step is shown.
    """

    cost: StepCost
    tick: int  # the engine tick that ran it
    pre: Snapshot  # the engine's state before the step and after it
    post: Snapshot
    start: float  # view clock (simulated seconds) at which the replay began
    wall_s: float  # wall seconds its sweep takes on screen
    speed: float  # simulated seconds per wall second it is timed at
    batch: Batch  # the sequences it ran (from pre and post, once)

    @property
    def factor(self) -> float:
        """How many times slower than real time the step is shown."""
        return self.wall_s / self.cost.time_s if self.cost.time_s > 0 else 0.0

    def progress(self, clock: float) -> float:
        """How far through the step the replay is at view clock `clock` (0..1)."""
        return min(1.0, max(0.0, (clock - self.start) / (self.wall_s * self.speed)))

    def over(self, clock: float) -> bool:
        """True once the sweep and the hold after it have both played at view clock `clock`."""
        return clock >= self.start + (self.wall_s + REPLAY_HOLD_WALL_S) * self.speed

    def stale(self, now: Snapshot) -> bool:
        """True when none of the sequences the step ran is still running in `now`: their answers are done (or
        they were preempted), so the step no longer shows what the GPU is doing (an opening prefill stayed on
        the floor ~5 s after its answers finished)."""
        r = now.requests
        running = (r.phase == Phase.PREFILL) | (r.phase == Phase.DECODING) | (r.phase == Phase.THINKING)
        return not bool(np.isin(r.req_id[running], self.batch.ids).any())

    def retimed(self, clock: float, speed: float) -> Replay:
        """The same replay at a new speed, at the same point of it: a speed change never jumps the picture."""
        done_wall = (clock - self.start) / self.speed
        return replace(self, start=clock - done_wall * speed, speed=speed)


def in_flight(pre: Snapshot, post: Snapshot, progress: float) -> Snapshot:
    """The state `progress` of the way through the step from `pre` to `post` (live slow motion).

    The batch is already in (post's rows, phases and KV blocks: admission happens before the step runs),
    prompts fill as the layers pass, and what the step's end brings (one token for each sequence,
    finished answers, the accounting) is still to come. Vectorised over the rows.
    """
    if progress >= 1.0:
        return post
    q, r = pre.requests, post.requests
    found, src = match_rows(np.asarray(q.req_id), np.asarray(r.req_id))
    pre_fill = taken(q.prefilled, found, src, 0)
    pre_gen = taken(q.generated, found, src, 0)
    pre_phase = taken(q.phase, found, src, int(Phase.QUEUED))
    grow = np.maximum(0, r.prefilled - pre_fill)
    prefilled = pre_fill + (grow * max(0.0, progress)).astype(np.int64)
    running_before = np.isin(pre_phase, (Phase.PREFILL, Phase.THINKING, Phase.DECODING))
    # A sequence keeps its phase until the step's end (a finished answer is still decoding); a prompt being
    # read is in prefill whatever it will be after.
    phase = np.where(found & running_before, pre_phase, r.phase)
    phase = np.where(grow > 0, Phase.PREFILL, phase).astype(np.int8)
    finishing = int(np.count_nonzero((r.phase == Phase.DONE) & found & running_before))
    view = replace(r, phase=phase, prefilled=prefilled, generated=pre_gen)
    moved = {k: pre.bytes_moved.get(k, 0.0) + progress * (v - pre.bytes_moved.get(k, 0.0))
             for k, v in post.bytes_moved.items()}
    return replace(post, tick=pre.tick, time_s=pre.time_s + progress * (post.time_s - pre.time_s), requests=view,
                   running=post.running + finishing, done=post.done - finishing, bytes_moved=moved,
                   last_step=pre.last_step, metrics=pre.metrics, history=pre.history)


@dataclass(frozen=True, slots=True)
class View:
    """What a frame shows of the playback: the state, the step, how far through it, and which sequences it ran."""

    snapshot: Snapshot
    step: StepCost | None
    step_tick: int
    progress: float
    dilation: float  # > 0: a replay, this many times slower than real time
    batch: Batch | None


@dataclass(slots=True)
class Playback:
    """The view clock over `engine`. Build with `Playback.start(engine)` (or tui.fleet_playback.playback_for, which
    picks this or the fleet's for any simulator).

    The app's one handle on what it runs: `sim` is the simulator (engine.simulator.Simulator), `engine` the engine
    whose floor is shown; `fleet`, `selected`, select() and view() are a fleet's (here: none, None, no-op, None)."""

    fleet: ClassVar[Fleet | None] = None  # FleetPlayback's own field: the fleet
    selected: ClassVar[int | None] = None  # FleetPlayback's own field: the replica shown (None: the overview)

    engine: Engine
    snap: Snapshot  # the engine's state after its last step
    pre: Snapshot  # the state before the in-flight step (the same as snap when none is in flight)
    view_clock: float  # simulated seconds the view shows
    step_start: float  # the span of simulated time the last step covers
    step_end: float
    cost: StepCost | None = None  # the step being shown (None: idle tick or none yet)
    steps_in_frame: int = 0  # steps the last move covered (>1: fast-forward, no in-step view)
    behind: bool = False  # the last move ran out of its wall-time budget
    replay: Replay | None = None  # a past step shown time-dilated (steps too fast to watch), or None

    @classmethod
    def start(cls, engine: Engine, cost: StepCost | None = None) -> Playback:
        """The engine as it is now, no step in flight."""
        snap = engine.snapshot()
        now = float(engine.clock)
        return cls(engine, snap, snap, now, now, now, cost)

    @property
    def sim(self) -> Simulator:
        """The simulator this view plays: the engine (a fleet's playback: the fleet)."""
        return self.engine

    def select(self, index: int | None) -> None:
        """Show replica `index`'s floor: one engine has only its own, so nothing changes."""

    def view(self) -> FleetView | None:
        """A fleet's rows for the frame: one engine has none."""
        return None

    def _step(self) -> None:
        """Run one engine step and stamp it: its cost and the span of simulated time it covers."""
        start = float(self.engine.clock)
        self.cost = self.engine.step().cost
        self.step_start, self.step_end = start, float(self.engine.clock)

    def advance(self, sim_dt: float, budget_s: float | None = None, speed: float | None = None) -> None:
        """Move the view clock on by sim_dt, stepping the engine until its clock covers the view's.

        With a wall-time budget (live play) the view stops at the engine's clock when stepping takes
        too long ("behind"); tests pass no budget, so the result never depends on the machine's speed.
        `speed` (simulated seconds per wall second; None: never replay) lets steps too fast to watch be
        replayed time-dilated: when one is due, the step in flight at the frame's end is picked (so a step
        is picked in proportion to the time it takes, as a glance at the GPU would catch it).
        """
        target = self.view_clock + max(0.0, sim_dt)
        rp = self.replay
        due = speed is not None and speed > 0 and (rp is None or rp.over(target) or rp.stale(self.snap))
        # When a replay is due, the frame's last few steps run one by one, each with the state before it.
        near = PICK_STEPS * max(self.cost.time_s if self.cost is not None else 0.0, 1e-4)
        before = self.snap
        picked: tuple[Snapshot, StepCost, int] | None = None
        steps = 0
        skipped = False
        deadline = None if budget_s is None else time.perf_counter() + budget_s
        self.behind = False
        while self.engine.clock < target:
            if deadline is not None and steps and time.perf_counter() > deadline:
                self.behind = True
                target = float(self.engine.clock)
                break
            start = float(self.engine.clock)
            single = not steps or (due and target - start <= near)
            # Past the frame's first step only the frame's end is shown (fast-forward): let the engine skip
            # quiet decode runs. Slow motion (one step per frame) still steps one at a time.
            ran = 0 if single else self.engine.advance(target - start - (near if due else 0.0), max_ticks=FF_TICKS)
            if ran:
                skipped = True
                picked = None
                self.step_start, self.step_end = start, float(self.engine.clock)
            else:
                pre = (self.engine.snapshot() if steps else before) if due else before
                self._step()
                picked = (pre, self.cost, self.engine.tick) if due and self.cost is not None else None
                ran = 1
            steps += ran
            if self.engine.clock <= start:  # no time passed (should not happen): never spin
                break
        self.steps_in_frame = steps
        if steps:
            self.snap = self.engine.snapshot()
            if skipped:
                self.cost = self.snap.last_step
            self.pre = before if steps == 1 else self.snap
        self.view_clock = target
        if due and speed is not None:
            self._pick(picked, speed)

    def _pick(self, picked: tuple[Snapshot, StepCost, int] | None, speed: float) -> None:
        """Start replaying the step just picked if it is too fast to watch live; drop a finished replay when
        the live steps are slow enough to watch (slow motion)."""
        live = self.cost
        if picked is not None:
            pre, cost, tick = picked
            wall = replay_wall(cost.layers)
            if cost.tokens > 0 and cost.time_s / speed < wall:
                self.replay = Replay(cost, tick, pre, self.snap, self.view_clock, wall, speed, batch_of(pre, self.snap))
                return
        if live is None or live.tokens <= 0 or live.time_s / speed >= replay_wall(live.layers):
            self.replay = None  # idle, or slow enough to watch live: no replay (a finished one holds otherwise)

    def retime(self, speed: float) -> None:
        """The view's speed changed: keep the replay where it is and play the rest at the new speed."""
        if self.replay is not None and speed > 0:
            self.replay = self.replay.retimed(self.view_clock, speed)

    def ticks(self, n: int) -> None:
        """Step the engine exactly n ticks and show the state after the last one."""
        for _ in range(max(0, n)):
            self._step()
        self.steps_in_frame = 1 if n == 1 else max(0, n)
        if n > 0:
            self.snap = self.pre = self.engine.snapshot()
            self.replay = None
        self.view_clock = float(self.engine.clock)

    def part(self, fraction: float) -> bool:
        """Run one more step and show it `fraction` of the way through (slow motion, frozen); True: it moved."""
        before = self.snap
        self._step()
        self.snap = self.engine.snapshot()
        self.pre = before
        self.steps_in_frame = 1
        self.replay = None
        self.view_clock = self.step_start + min(1.0, max(0.0, fraction)) * (self.step_end - self.step_start)
        return True

    def resync(self, last_step: bool = False) -> None:
        """The engine changed under the view (reset, a knob, a director): show its state as of now.

        `last_step`: show the step the engine ran last (a director stepped it); otherwise keep the step
        shown unless the engine is back at tick 0.
        """
        self.snap = self.pre = self.engine.snapshot()
        if last_step:
            self.cost = self.snap.last_step
        self.view_clock = self.step_start = self.step_end = float(self.engine.clock)
        self.steps_in_frame = 0
        self.replay = None
        if self.snap.tick == 0:
            self.cost = None

    def progress(self) -> float:
        """How far through the last step the view clock is (1 when not in slow motion)."""
        span = self.step_end - self.step_start
        if self.steps_in_frame > 1 or span <= 0:
            return 1.0
        return min(1.0, max(0.0, (self.view_clock - self.step_start) / span))

    def shown(self, progress: float) -> Snapshot:
        """The state to draw for the live step: part-way through it while it is in flight, else the latest."""
        return in_flight(self.pre, self.snap, progress) if progress < 1.0 and self.pre is not self.snap else self.snap

    def step_view(self) -> View:
        """What the frame shows: a replay (the live state, a past step time-dilated) or the live step."""
        rp = self.replay
        if rp is not None:
            return View(self.snap, rp.cost, rp.tick, rp.progress(self.view_clock), rp.factor, rp.batch)
        p = self.progress()
        one = self.steps_in_frame <= 1 and self.pre is not self.snap  # 0: no step began this frame, one is in flight
        return View(self.shown(p), self.cost, self.snap.tick, p, 0.0, batch_of(self.pre, self.snap) if one else None)
