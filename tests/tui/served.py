"""`tokensim serve` as a child process on a free 127.0.0.1 port, for the serve tests; always ended afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple, TypeVar

import pytest

T = TypeVar("T")
SERVER_START_S = 15.0


class Served(NamedTuple):
    """A running `tokensim serve`: its port on 127.0.0.1 and its process (the leader of its process group)."""

    port: int
    proc: subprocess.Popen[bytes]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, probe: Callable[[], T | None], deadline: float) -> T:
    """Poll probe every 0.1 s until it returns something truthy; fail naming `what` at the deadline."""
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


@contextlib.contextmanager
def serving(log: Path, *options: str) -> Iterator[Served]:
    """`tokensim serve OPTIONS` on a free 127.0.0.1 port, once it listens.

    The server and every app process it starts share one new process group, which is ended on exit."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tui.cli", "serve", "--port", str(port), *options],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def listening() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"tokensim serve exited with {proc.returncode}: {log.read_text()[-500:]}")
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_for("tokensim serve to listen", listening, time.monotonic() + SERVER_START_S)
        yield Served(port, proc)
    finally:
        end_group(proc)


def end_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group (server and apps); SIGKILL whatever is left once the server is gone or in 5 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
