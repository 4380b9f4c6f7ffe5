"""The real `tokensim` app in a pseudo-terminal, read back through a terminal emulator (pyte).

What a user sees is what the app WROTE, after Textual's row and segment diffing, not what the app
thinks it drew. `PtyApp` spawns the app on a pty, feeds every byte it writes into a pyte screen, and
can force a full redraw (a resize away and back) to get the app's own idea of the screen to compare.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Sequence
from pathlib import Path

import pyte

ROOT = Path(__file__).resolve().parents[2]
# Textual wraps each screen update in synchronized output: it begins with SYNC_BEGIN and ends with SYNC_END.
# The app asks whether the terminal can (SYNC_QUERY); we answer yes, as modern terminals do.
SYNC_BEGIN, SYNC_END = b"\x1b[?2026h", b"\x1b[?2026l"
SYNC_QUERY, SYNC_YES = b"\x1b[?2026$p", b"\x1b[?2026;2$y"


class PtyApp:
    """`python -m tui.cli ARGS` on a pty of `cols` x `rows`, with its output decoded by pyte."""

    def __init__(self, args: Sequence[str], cols: int = 120, rows: int = 40) -> None:
        """Start the app; the caller must `close()` it (use as a context manager)."""
        self.cols, self.rows = cols, rows
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.master, slave = os.openpty()
        self._set_winsize(slave, cols, rows)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TEXTUAL")}
        env.update(TERM="xterm-256color", COLORTERM="truecolor", PYTHONPATH=str(ROOT), LANG="C.UTF-8")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tui.cli", *args], stdin=slave, stdout=slave, stderr=slave, env=env,
            cwd=ROOT, start_new_session=True, close_fds=True,
        )
        os.close(slave)
        self.written = 0  # bytes the app has written so far

    def __enter__(self) -> PtyApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _set_winsize(fd: int, cols: int, rows: int) -> None:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def _read(self, timeout: float) -> bytes:
        """Whatever the app wrote within `timeout` seconds (b'' if nothing)."""
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return b""
        try:
            data = os.read(self.master, 1 << 16)
        except OSError:  # the app exited and the pty closed
            return b""
        if SYNC_QUERY in data:
            os.write(self.master, SYNC_YES)
        self.stream.feed(data)
        self.written += len(data)
        return data

    def settle(self, quiet: float = 0.1, limit: float = 10.0, updates: int = 1) -> None:
        """Read until the app has written `updates` whole screen updates, then nothing for `quiet` seconds.

        Waiting for an update (not only for silence) keeps a slow, shared machine from passing off the
        screen before a key as the screen after it.
        """
        end = time.monotonic() + limit
        tail = b""
        done = 0
        last = time.monotonic()
        while time.monotonic() < end and self.proc.poll() is None:
            data = self._read(0.02)
            if data:
                done += (tail[-8:] + data).count(SYNC_END)
                tail = (tail + data)[-4096:]
                last = time.monotonic()
            elif done >= updates and time.monotonic() - last >= quiet and tail.rfind(SYNC_BEGIN) <= tail.rfind(SYNC_END):
                return  # quiet, and not in the middle of an update

    def wait_for(self, text: str, limit: float = 20.0) -> None:
        """Read until `text` is on the screen (the app is up) or raise."""
        end = time.monotonic() + limit
        while time.monotonic() < end:
            self._read(0.1)
            if text in "\n".join(self.lines()):
                return
            if self.proc.poll() is not None:
                break
        raise AssertionError(f"{text!r} never appeared; screen:\n" + "\n".join(self.lines()))

    def press(self, keys: str, settle: bool = True) -> None:
        """Type keys (e.g. 'n' or ' '; each must change the screen) and wait for the screen to settle."""
        os.write(self.master, keys.encode())
        if settle:
            self.settle()

    def resize(self, cols: int, rows: int) -> None:
        """Resize the terminal (as a window manager would) and wait for the redraw."""
        self.cols, self.rows = cols, rows
        self.screen.resize(rows, cols)
        self._set_winsize(self.master, cols, rows)
        os.killpg(self.proc.pid, signal.SIGWINCH)
        self.settle()

    def lines(self) -> list[str]:
        """The emulated terminal's rows as text."""
        return list(self.screen.display)

    def redrawn(self) -> list[str]:
        """The app's own full picture: ctrl+l repaints every cell."""
        self.press("\x0c")
        return self.lines()

    def close(self) -> None:
        """Quit the app (q, then a signal if it hangs) and close the pty."""
        if self.proc.poll() is None:
            try:
                os.write(self.master, b"q")
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        os.close(self.master)


def stale_rows(seen: list[str], redrawn: list[str]) -> list[str]:
    """The rows where what the terminal showed differs from a full redraw, side by side."""
    return [f"row {y}:\n  shown   {a}\n  redrawn {b}" for y, (a, b) in enumerate(zip(seen, redrawn, strict=True))
            if a != b]
