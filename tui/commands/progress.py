"""A plain progress line for logs (issue 30, class 3): long commands say they are alive when nobody watches a bar.

On a terminal, run and plan draw a Rich progress bar on stderr. When stderr is a file or a pipe (CI, nohup, a
job scheduler) a bar is carriage returns and escape codes, so instead a background thread writes one plain line
every PROGRESS_EVERY_S seconds: the command, where it stands (a callable the command passes, read from its
state) and the time elapsed. Nothing is written before the first interval ends, so a short command writes
nothing; nothing ever goes to stdout, so --json stays clean; --quiet silences it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

# Seconds between lines; TOKENSIM_PROGRESS_EVERY overrides it (the tests use a fraction of a second).
PROGRESS_EVERY_S = 10.0


def interval() -> float:
    """The seconds between progress lines: TOKENSIM_PROGRESS_EVERY when it is a positive number, else 10."""
    try:
        v = float(os.environ.get("TOKENSIM_PROGRESS_EVERY", "") or PROGRESS_EVERY_S)
    except ValueError:
        return PROGRESS_EVERY_S
    return v if 0 < v < 1e6 else PROGRESS_EVERY_S


def wanted(quiet: bool, stream: TextIO | None = None) -> bool:
    """Whether a plain line is due: not --quiet, and stderr is not a terminal (a terminal gets the Rich bar)."""
    s = stream or sys.stderr
    try:
        return not quiet and not s.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream: stay silent
        return False


@contextmanager
def heartbeat(command: str, status: Callable[[], str], on: bool, stream: TextIO | None = None) -> Iterator[None]:
    """While the block runs, write `tokensim COMMAND: STATUS, N s elapsed` every interval() seconds (when on)."""
    if not on:
        yield
        return
    out, every, t0 = stream or sys.stderr, interval(), time.monotonic()
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            try:
                where = status()
            except Exception:  # the state is read while the main thread changes it: skip this beat, not the run
                continue
            try:
                out.write(f"tokensim {command}: {where}, {time.monotonic() - t0:,.0f} s elapsed\n")
                out.flush()
            except (OSError, ValueError):  # stderr closed (the reader went away): stop writing, keep working
                return

    th = threading.Thread(target=beat, name=f"tokensim-{command}-progress", daemon=True)
    th.start()
    try:
        yield
    finally:
        stop.set()
        th.join(timeout=1.0)
