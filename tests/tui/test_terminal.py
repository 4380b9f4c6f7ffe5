"""What the terminal shows after every key equals a full redraw: no stale or garbled cells.

The app runs for real on a pseudo-terminal and pyte decodes every byte it writes, so Textual's row
and segment diffing is under test, not only our renderers. After each key the emulated screen is
compared with a full repaint (a resize away and back). Textual's private `Widget._size` shadowed by a
panel once left the last row and two columns of every panel stale (issue 17, item 1): this catches it.
"""

from __future__ import annotations

import time

import pytest

pyte = pytest.importorskip("pyte")

from tests.tui.ptyterm import PtyApp, stale_rows  # noqa: E402


def _check(app: PtyApp, what: str) -> None:
    seen = app.lines()
    bad = stale_rows(seen, app.redrawn())
    assert not bad, f"after {what}, the terminal disagrees with a full redraw:\n" + "\n".join(bad)


def test_terminal_matches_a_full_redraw_after_every_key() -> None:
    """Step, switch language, change speed, play and pause, add users, resize: never a stale cell."""
    with PtyApp(["--speed", "0.01", "--paused", "--lang", "en", "--seed", "1"]) as app:
        app.wait_for("paused")
        app.settle(updates=0)
        for key, what in (("n", "one step"), ("l", "l (to Chinese)"), ("n", "a step in Chinese"),
                          ("l", "l (back to English)"), ("]]]]]]]]]", "nine presses of ]")):
            app.press(key)
            _check(app, what)
        app.press(" ", settle=False)
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            app.settle(quiet=0.05, limit=0.1)  # keep reading while it plays
        app.press(" ")
        _check(app, "playing at x5, then pausing")
        app.press("+")
        _check(app, "+ (more users)")
        app.resize(80, 24)
        app.press("n")
        _check(app, "a step at 80x24")
        assert "paused" in "\n".join(app.lines()) or "暂停" in "\n".join(app.lines())
