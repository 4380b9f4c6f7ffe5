"""`tokensim serve-api --floor`: the factory floor drawing the engine that serves the HTTP clients.

The app is the usual TokensimApp with one change: its playback (the frame producer) never steps the engine and
has no simulated users; each frame shows the engine as the server's driver left it (the last step it took,
the requests of the HTTP clients in the users list, one row per request, #id). The HTTP server (uvicorn) runs
as a task on the app's own event loop, beside the driver, so the engine is only ever touched from that loop.
A served fleet (--replicas, --pd) opens on the app's fleet overview, a row per replica (and P/D's KV copies),
read from the live fleet as the driver leaves it; 1-9 shows a replica's floor, as for a simulated fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

import uvicorn

import tui.app
from engine.config import EngineConfig
from engine.fleet.fleet import Fleet, FleetSpec, Route
from engine.fleet.live import LiveFleet
from engine.fleet.pd import CopyState
from engine.fleet.replica import Replica, ReplicaState
from engine.serving.snapshot import Snapshot
from tui.app import TokensimApp
from tui.fleet_playback import FleetPlayback
from tui.playback import Playback

# What the floor's keys may not do to a served engine: change its workload or rebuild it under the server.
_ENGINE_ACTIONS = frozenset({"more_users", "fewer_users", "compute", "bandwidth", "fp8", "pick_model", "pick_gpu",
                             "settings", "reset", "step_once"})


class _Watching:
    """A playback that only watches (mixed into Playback and FleetPlayback): every move shows the engine or fleet as
    the server's driver left it, which moves it on the wall clock; the view never steps it."""

    def advance(self, sim_dt: float, budget_s: float | None = None, speed: float | None = None) -> None:
        """Show the served engine or fleet as it is now."""
        tick = self.snap.tick  # type: ignore[attr-defined]
        self.resync(last_step=True)  # type: ignore[attr-defined]
        self.steps_in_frame = max(0, self.snap.tick - tick)  # type: ignore[attr-defined]

    def ticks(self, n: int) -> None:
        """Stepping is the driver's: show it as it is."""
        self.advance(0.0)

    def part(self, fraction: float) -> bool:
        """Stepping is the driver's: show it as it is (never moved by the view)."""
        self.advance(0.0)
        return False


class ServedPlayback(_Watching, Playback):
    """A playback that only watches the served engine (see _Watching)."""


class ServedFleet:
    """A live fleet (engine.fleet.live) read as the app reads a simulated Fleet: its replicas' rows, KV copies,
    floors and fleet-wide figures. Read only: the server's driver moves it."""

    def __init__(self, live: LiveFleet, cfg: EngineConfig, router: str, kv_link_gbps: float | None) -> None:
        self.live = live
        self.reps: list[Replica] = [r.engine for r in live.replicas]
        self.back = [r for r in self.reps if r.role != "prefill"]  # the replicas that write answers
        self.spec = FleetSpec(cfg, replicas=len(self.reps), router=router, pd=live.pd, kv_link_gbps=kv_link_gbps)
        self.config = cfg
        self.gpus = cfg.tp * len(self.reps)
        sm = self.reps[0].step_model
        self.cost_per_hour = (cfg.price_per_hour if cfg.price_per_hour is not None else sm.hw.price_per_hour) \
            * self.gpus
        self.routes: tuple[Route, ...] = ()  # the live door logs no routing decisions

    @property
    def now(self) -> float:
        """The latest replica clock: what the driver has moved the fleet to."""
        return max(r.clock for r in self.reps)

    @property
    def clock(self) -> float:
        """The earliest clock with work ahead (LiveFleet.clock)."""
        return self.live.clock

    ticks = property(lambda self: sum(r.tick for r in self.reps), doc="Replica steps taken so far.")
    requests_accepted = property(lambda self: sum(r.lane.stats.accepted for r in self.reps if r.role != "decode"),
                                 doc="Requests the door has given the replicas.")
    requests_completed = property(lambda self: sum(r.lane.stats.completed for r in self.back),
                                  doc="Answers finished.")
    transfers = property(lambda self: self.live.copies.transfers if self.live.copies else 0, doc="KV copies.")
    landings = property(lambda self: self.live.copies.landings if self.live.copies else [], doc="Copies moving.")
    waiting = property(lambda self: self.live.copies.waiting if self.live.copies else [], doc="Copies waiting.")

    def replica_states(self) -> tuple[ReplicaState, ...]:
        """Every replica at a glance, in index order."""
        return tuple(r.state() for r in self.reps)

    def copies(self) -> tuple[CopyState, ...]:
        """P/D KV copies not yet landed."""
        return self.live.copies.states() if self.live.copies else ()

    def replica_engine(self, i: int) -> Replica:
        """Replica i's engine, to read."""
        return self.reps[i]

    def replica_snapshot(self, i: int) -> Snapshot:
        """Replica i's floor, on its own clock."""
        r = self.reps[i]
        return replace(r.snapshot(), time_s=r.clock)

    def rolling_metrics(self) -> dict[str, float]:
        """Fleet-wide recent tok/s, TTFT and TPOT p50: a Fleet's figures (they read only `reps` and `back`)."""
        return Fleet.rolling_metrics(self)  # type: ignore[arg-type]


class ServedFleetPlayback(_Watching, FleetPlayback):
    """A fleet playback that only watches the live fleet (see _Watching)."""


class ServeFloorApp(TokensimApp):
    """The floor of the engine `server` serves on `sock` (its app's driver runs that engine); the server runs
    with the app."""

    CSS_PATH = str(Path(tui.app.__file__).with_name("app.tcss"))  # the floor's stylesheet (a relative path would
    # be read next to this module)

    def __init__(self, server: uvicorn.Server, sock: socket.socket, engine: Any, config: EngineConfig,
                 **kw: Any) -> None:
        """`engine`: the served engine, or a ServedFleet (the app opens on its overview)."""
        fleet = engine if isinstance(engine, ServedFleet) else None
        super().__init__(config, engine=fleet.reps[0] if fleet else engine, **kw)
        self.playback = ServedFleetPlayback.start(fleet) if fleet else ServedPlayback.start(engine)  # type: ignore
        self.frame = self._build_frame()
        self.server, self.sock = server, sock
        self.serving: asyncio.Task[None] | None = None

    def on_mount(self) -> None:
        """The floor as usual, then the HTTP server on this event loop."""
        super().on_mount()
        self.serving = asyncio.create_task(self.server.serve(sockets=[self.sock]))

    async def on_unmount(self) -> None:
        """Stop the HTTP server (its lifespan stops the driver) before the loop ends."""
        super().on_unmount()
        self.server.should_exit = True
        if self.serving is not None:
            with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
                await asyncio.wait_for(self.serving, 5.0)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The engine belongs to the server: keys that would change or step it do nothing here."""
        if action in _ENGINE_ACTIONS:
            return False
        return super().check_action(action, parameters)
