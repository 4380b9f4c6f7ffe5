"""Random key sequences against the app: it stays up (every key handled) or it exits non-zero with one line.

Includes the audit's finds: enter pressed twice on the picker (closed it twice: ScreenStackError, then
exit status 0) and + pressed past a million users (froze, then MemoryError). CI plays a few fixed
seeded sequences; TOKENSIM_FUZZ_EXAMPLES=N plays N.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from textual.widgets import OptionList

from tests.fuzz.harness import examples
from tui.app import USER_LADDER, TokensimApp
from tui.commands.options import run_app
from tui.defaults import default_config
from tui.screens.picker import PickerScreen

SIZE = (120, 40)
# Not space: a playing clock makes the test's wall time depend on the machine (play is covered in test_keys).
KEYS = ["enter", "enter", "escape", "escape", "ctrl+p", "m", "h", "down", "up", "plus", "minus", "n", "c",
        "b", "f", "r", "l", "question_mark", "left_square_bracket", "right_square_bracket", "tab", "x", "1", "o"]


def make_app() -> TokensimApp:
    """A paused app on the default configuration."""
    app = TokensimApp(default_config(), lang="en", autoplay=False)
    app.animation_level = "none"
    return app


@pytest.mark.parametrize("seed", range(examples(3)))
async def test_random_keys_keep_the_app_up(seed: int) -> None:
    rng = random.Random(seed)
    keys = [rng.choice(KEYS) for _ in range(20)]
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:  # an exception inside the app is re-raised here
        for k in keys:
            await pilot.press(k)
        await pilot.pause()
        assert app.is_running, f"the app stopped after {keys}"
        assert app.screen_stack, keys
    assert not app.return_code, f"exit {app.return_code} after {keys}"


@pytest.mark.parametrize("kind", ["m", "h"])
async def test_enter_twice_closes_the_picker_once(kind: str) -> None:
    """Two selections queued before the picker is gone (keys typed ahead) close it once."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(kind)
        assert isinstance(app.screen, PickerScreen)
        ol = app.screen.query_one(OptionList)
        ol.action_select()
        ol.action_select()  # the second enter, delivered before the screen is popped
        await pilot.pause()
        await pilot.press("escape", "enter")
        assert not isinstance(app.screen, PickerScreen) and len(app.screen_stack) == 1
    assert not app.return_code


async def test_plus_stops_at_the_ladder_top() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.set_users(USER_LADDER[-2])
        await pilot.press("plus", "plus", "plus")
        assert app.config.users == USER_LADDER[-1] == app.engine.config.users


def test_a_crash_exits_1_with_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception inside the app: exit code 1 and one stderr line naming the error (details in a file)."""
    app = make_app()

    def boom(*_: Any) -> None:
        raise RuntimeError("wired wrong")
    monkeypatch.setattr(TokensimApp, "on_mount", boom)
    monkeypatch.setattr(TokensimApp, "run", _run_headless)
    assert run_app(app) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "wired wrong" in err[0] and "tokensim-crash-" in err[0], err


def _run_headless(self: TokensimApp) -> None:
    """App.run without a terminal (what run_app calls), so the crash path runs in a test."""
    import asyncio

    async def go() -> None:
        try:
            async with self.run_test(size=SIZE):
                pass
        except RuntimeError:
            pass  # run_test re-raises; a real run() does not, it prints to error_console and sets return_code
        self._print_error_renderables()
    asyncio.run(go())
