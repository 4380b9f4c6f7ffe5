"""`tokensim serve-api --floor`: the factory floor drawing the engine that serves the HTTP clients.

The app is the usual TokensimApp with one change: its playback (the frame producer) never steps the engine and
has no simulated users; each frame shows the engine as the server's driver left it (the last step it took,
the requests of the HTTP clients in the users list, one row per request, #id). The HTTP server (uvicorn) runs
as a task on the app's own event loop, beside the driver, so the engine is only ever touched from that loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path
from typing import Any

import uvicorn

import tui.app
from engine.config import EngineConfig
from tui.app import TokensimApp
from tui.playback import Playback

# What the floor's keys may not do to a served engine: change its workload or rebuild it under the server.
_ENGINE_ACTIONS = frozenset({"more_users", "fewer_users", "compute", "bandwidth", "fp8", "pick_model", "pick_gpu",
                             "settings", "reset", "step_once"})


class ServedPlayback(Playback):
    """A playback that only watches: every move shows the engine's state as the server's driver left it."""

    def advance(self, sim_dt: float, budget_s: float | None = None, speed: float | None = None) -> None:
        """Show the engine as it is now (the driver moves it on the wall clock; the view never steps it)."""
        tick = self.snap.tick
        self.resync(last_step=True)
        self.steps_in_frame = max(0, self.snap.tick - tick)

    def ticks(self, n: int) -> None:
        """Stepping is the driver's: show the engine as it is."""
        self.advance(0.0)

    def part(self, fraction: float) -> bool:
        """Stepping is the driver's: show the engine as it is (never moved by the view)."""
        self.advance(0.0)
        return False


class ServeFloorApp(TokensimApp):
    """The floor of the engine `server` serves on `sock` (its app's driver runs that engine); the server runs
    with the app."""

    CSS_PATH = str(Path(tui.app.__file__).with_name("app.tcss"))  # the floor's stylesheet (a relative path would
    # be read next to this module)

    def __init__(self, server: uvicorn.Server, sock: socket.socket, engine: Any, config: EngineConfig,
                 **kw: Any) -> None:
        super().__init__(config, engine=engine, **kw)
        self.playback = ServedPlayback.start(engine)
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
