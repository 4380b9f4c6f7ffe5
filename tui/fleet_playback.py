"""The app's playback clock over a fleet: the view's simulated time, the fleet's rows, one replica's floor.

The fleet moves every event before the view clock (`Fleet.advance_to`); each replica's steps stay atomic, as
an engine's do. The floor of the selected replica is played like one engine's (tui.playback.Playback): while
the view clock is inside that replica's last step, the floor shows the state from before it. The fleet's rows
(`FleetView`) are rebuilt only when the fleet moved.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.fleet.fleet import Fleet
from engine.serving.snapshot import Snapshot
from tui.frame import FleetView
from tui.playback import Playback

if TYPE_CHECKING:
    from engine.simulator import Simulator

FF_TICKS = 32  # replica steps per advance_to() call while playing, between looks at the wall-time budget
PART_MAX_STEPS = 5000  # fleet steps part() takes waiting for the shown replica's next step
_FOREVER = math.nextafter(math.inf, 0.0)  # "no time bound" for advance_to on an unbounded workload


@dataclass(slots=True, kw_only=True)
class FleetPlayback(Playback):
    """The view clock over `fleet`, with replica `selected`'s floor (None: the overview; replica 0 is fed).

    The base's fields describe the shown replica: `engine` is its engine (read, never stepped here), `snap` and
    `pre` its state after and before its step in flight; progress() and shown() are the base's."""

    fleet: Fleet
    selected: int | None
    _view: FleetView | None = None  # the fleet's rows, cached until the fleet moves
    _view_key: tuple[int | None, ...] = ()

    @classmethod
    def start(cls, fleet: Fleet, selected: int | None = None) -> FleetPlayback:
        """The fleet as it is now, showing replica `selected` (or the overview)."""
        i = selected or 0
        snap = fleet.replica_snapshot(i)
        now = fleet.now
        return cls(fleet.replica_engine(i), snap, snap, now, now, now, None if snap.tick == 0 else snap.last_step,
                   fleet=fleet, selected=selected)

    @property
    def shown_index(self) -> int:
        """The replica whose floor the frame carries."""
        return self.selected or 0

    def _ticks_of_shown(self) -> int:
        """Steps the shown replica has taken (its engine's tick count)."""
        return self.engine.tick

    def _moved(self, before_ticks: int, before: Snapshot) -> None:
        """After the fleet moved: take the shown replica's new state; one step of it is played, more are jumped."""
        k = self._ticks_of_shown() - before_ticks
        self.steps_in_frame = k
        if k <= 0:
            return
        self.snap = self.fleet.replica_snapshot(self.shown_index)
        self.pre = before if k == 1 else self.snap
        self.cost = self.snap.last_step
        self.step_end = self.snap.time_s
        self.step_start = self.step_end - (self.cost.time_s if self.cost is not None else 0.0)

    def advance(self, sim_dt: float, budget_s: float | None = None, speed: float | None = None) -> None:
        """Move the view clock on by sim_dt: every fleet event before it happens (within a wall-time budget).

        `speed` is taken for the base's sake and not used: a replica's floor plays its steps live, no replay."""
        target = self.view_clock + max(0.0, sim_dt)
        before, ticks = self.snap, self._ticks_of_shown()
        self.behind = False
        if budget_s is None:
            self.fleet.advance_to(target)
        else:
            deadline = time.perf_counter() + budget_s
            while self.fleet.now < target:
                self.fleet.advance_to(target, max_ticks=FF_TICKS)
                if self.fleet.now < target and time.perf_counter() > deadline:
                    self.behind = True  # show what is final: every event before the earliest busy replica's clock
                    target = max(self.view_clock, min(target, self.fleet.clock))
                    break
        self._moved(ticks, before)
        self.view_clock = target

    def ticks(self, n: int) -> None:
        """Take exactly n replica steps (whichever replicas are furthest behind) and show the state after them."""
        before, ticks = self.snap, self._ticks_of_shown()
        self.fleet.advance_to(_FOREVER, max_ticks=max(0, n))
        self._moved(ticks, before)
        self.pre = self.snap
        self.view_clock = max(self.view_clock, self.fleet.clock)

    def part(self, fraction: float) -> bool:
        """Run until the shown replica takes one more step, and show it `fraction` of the way through. False (nothing
        shown moved) when it takes no step within PART_MAX_STEPS of the fleet's (an idle replica may never)."""
        before, ticks = self.snap, self._ticks_of_shown()
        for _ in range(PART_MAX_STEPS):
            if self._ticks_of_shown() != ticks or not self.fleet.advance_to(_FOREVER, max_ticks=1):
                break
        if self._ticks_of_shown() == ticks:
            self.resync()
            return False
        self._moved(ticks, before)
        self.pre = before
        self.steps_in_frame = 1
        self.view_clock = self.step_start + min(1.0, max(0.0, fraction)) * (self.step_end - self.step_start)
        return True

    @property
    def sim(self) -> Simulator:
        """The simulator this view plays: the fleet."""
        return self.fleet

    def select(self, index: int | None) -> None:
        """Show replica `index`'s floor (None: the overview): its latest state, no step in flight."""
        self.selected = index
        self.engine = self.fleet.replica_engine(self.shown_index)
        self.resync(last_step=True)

    def resync(self, last_step: bool = False) -> None:
        """The fleet changed under the view (a rebuild, a new selection): show the shown replica as of now."""
        self.snap = self.pre = self.fleet.replica_snapshot(self.shown_index)
        self.cost = self.snap.last_step if last_step or self.snap.tick else None
        self.step_start = self.step_end = self.snap.time_s
        self.view_clock = max(self.view_clock, self.fleet.now) if self.snap.tick else self.fleet.now
        self.steps_in_frame = 0
        self._view_key = ()

    def view(self) -> FleetView:
        """The fleet's rows for the frame (rebuilt only when the fleet took a step or the selection changed)."""
        f = self.fleet
        key = (f.ticks, f.requests_accepted, f.transfers, len(f.landings), len(f.waiting), self.selected)
        if self._view is None or key != self._view_key:
            m = f.rolling_metrics()
            self._view = FleetView(
                replicas=f.replica_states(), routes=f.routes, copies=f.copies(), router=f.spec.router, pd=f.spec.pd,
                selected=self.selected, users=f.config.users, gpus=f.gpus, cost_per_hour=f.cost_per_hour,
                done=f.requests_completed,
                tok_s_out=m["tok_s_out"], ttft_p50=m["ttft_p50"], tpot_p50=m["tpot_p50"], energy=f.config.energy,
            )
            self._view_key = key
        return self._view


def playback_for(sim: Simulator, selected: int | None = None) -> Playback:
    """The view clock over any simulator: a fleet's (showing replica `selected`, None: its overview) or one
    engine's. The one place that asks which kind of simulator it is."""
    if isinstance(sim, Fleet):
        return FleetPlayback.start(sim, selected if selected is not None and selected < len(sim.reps) else None)
    return Playback.start(sim)  # type: ignore[arg-type]
