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


def test_the_first_frame_offers_the_tour_and_hands_its_rows_back() -> None:
    """Issue #31.6: `tokensim` opens with a line offering the tour (most newcomers start on the free floor)."""
    with PtyApp(["--paused", "--lang", "en", "--seed", "1"]) as app:
        app.wait_for("tokensim tour")
        app.settle(updates=0)
        screen = "\n".join(app.lines())
        assert "New here? Quit (q) and run `tokensim tour`" in screen and "paused" in screen
        app.press("l")
        assert "tokensim tour" in "\n".join(app.lines()) and "第一次来" in "\n".join(app.lines())


async def test_the_welcome_is_only_the_free_floors_and_goes_away() -> None:
    from tui.app import TokensimApp
    app = TokensimApp(lang="en", autoplay=False, welcome=True)
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.narration is not None and "tokensim tour" in app.narration[0]
        app.end_welcome()
        await pilot.pause()
        assert app.narration is None
        app.set_lang("zh")
        assert app.narration is None  # once gone, a language switch does not bring it back
    assert TokensimApp(lang="en", autoplay=False, welcome=True, narration=("a scene",)).narration == ("a scene",)


def test_the_welcome_counts_the_scenes_the_tour_plays() -> None:
    """The offer names as many scenes as scenes/data ships (it said 22 after scenes 23 and 24 were added)."""
    from scenes.schema import shipped_files
    from tui.app import _welcome

    n = len(shipped_files())
    assert f": {n} short guided scenes" in _welcome("en") and f"：{n} 个简短的导览场景" in _welcome("zh")
    assert "{" not in _welcome("en") + _welcome("zh")
