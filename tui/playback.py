"""The app's playback clock: the view's simulated time over an engine whose steps are atomic.

The engine jumps a whole step at a time; the view's clock runs smoothly through it (slow motion) or
across many steps per frame (fast-forward). `Playback` keeps the two together: the state before and after
the step in flight, that step's cost and the span of simulated time it covers, and how far the view
clock has got. The app owns one and builds each frame from it; nothing else changes these fields.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.snapshot import Snapshot
from engine.step import StepCost

if TYPE_CHECKING:
    from engine.serving import Engine

FF_TICKS = 64  # ticks per engine.advance() call in fast-forward, between looks at the wall-time budget


@dataclass(slots=True)
class Playback:
    """The view clock over `engine`. Build with `Playback.start(engine)`."""

    engine: Engine
    snap: Snapshot  # the engine's state after its last step
    pre: Snapshot  # the state before the in-flight step (the same as snap when none is in flight)
    view_clock: float  # simulated seconds the view shows
    step_start: float  # the span of simulated time the last step covers
    step_end: float
    cost: StepCost | None = None  # the step being shown (None: idle tick or none yet)
    steps_in_frame: int = 0  # steps the last move covered (>1: fast-forward, no in-step view)
    behind: bool = False  # the last move ran out of its wall-time budget

    @classmethod
    def start(cls, engine: Engine, cost: StepCost | None = None) -> Playback:
        """The engine as it is now, no step in flight."""
        snap = engine.snapshot()
        now = float(engine.clock)
        return cls(engine, snap, snap, now, now, now, cost)

    def _step(self) -> None:
        """Run one engine step and stamp it: its cost and the span of simulated time it covers."""
        start = float(self.engine.clock)
        self.cost = self.engine.step().cost
        self.step_start, self.step_end = start, float(self.engine.clock)

    def advance(self, sim_dt: float, budget_s: float | None = None) -> None:
        """Move the view clock on by sim_dt, stepping the engine until its clock covers the view's.

        With a wall-time budget (live play) the view stops at the engine's clock when stepping takes
        too long ("behind"); tests pass no budget, so the result never depends on the machine's speed.
        """
        target = self.view_clock + max(0.0, sim_dt)
        before = self.snap
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
            # Past the frame's first step only the frame's end is shown (fast-forward): let the engine skip
            # quiet decode runs. Slow motion (one step per frame) still steps one at a time.
            ran = self.engine.advance(target - start, max_ticks=FF_TICKS) if steps else 0
            if ran:
                skipped = True
                self.step_start, self.step_end = start, float(self.engine.clock)
            else:
                self._step()
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

    def ticks(self, n: int) -> None:
        """Step the engine exactly n ticks and show the state after the last one."""
        for _ in range(max(0, n)):
            self._step()
        self.steps_in_frame = 1 if n == 1 else max(0, n)
        if n > 0:
            self.snap = self.pre = self.engine.snapshot()
        self.view_clock = float(self.engine.clock)

    def part(self, fraction: float) -> None:
        """Run one more step and show it `fraction` of the way through (slow motion, frozen)."""
        before = self.snap
        self._step()
        self.snap = self.engine.snapshot()
        self.pre = before
        self.steps_in_frame = 1
        self.view_clock = self.step_start + min(1.0, max(0.0, fraction)) * (self.step_end - self.step_start)

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
        if self.snap.tick == 0:
            self.cost = None

    def progress(self) -> float:
        """How far through the last step the view clock is (1 when not in slow motion)."""
        span = self.step_end - self.step_start
        if self.steps_in_frame > 1 or span <= 0:
            return 1.0
        return min(1.0, max(0.0, (self.view_clock - self.step_start) / span))

    def shown(self, progress: float) -> Snapshot:
        """The state to draw: before the step while it is in flight, else the latest."""
        return self.pre if progress < 1.0 else self.snap
