"""Snapshot tests of the floor: a paused app stepped an exact number of ticks, static frames, fixed theme.

Review `snapshot_report.html` (or convert the SVGs) before any `pytest tests/tui --snapshot-update`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from textual.pilot import Pilot

from engine.config import EngineConfig
from tui.app import TokensimApp
from tui.defaults import default_config

TICKS = 60


def make_app(config: EngineConfig | None = None, lang: str = "en") -> TokensimApp:
    """Paused, seeded, no animation, a fixed theme: the same ticks always draw the same screen."""
    app = TokensimApp(config or default_config(), lang=lang, autoplay=False, seed=0)
    app.animation_level = "none"
    app.theme = "textual-dark"
    return app


def ticks(n: int, then: Callable[[TokensimApp], Any] | None = None) -> Callable[[Pilot[Any]], Awaitable[None]]:
    """A run_before that steps the engine n ticks (and then does `then`)."""

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, TokensimApp)
        app.advance_ticks(n)
        if then is not None:
            then(app)
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
def test_default_floor(snap_compare: Any, lang: str, size: tuple[int, int]) -> None:
    """Six users chatting on generic-14b / H100 after 60 ticks: every panel, both languages, both sizes."""
    assert snap_compare(make_app(lang=lang), terminal_size=size, run_before=ticks(TICKS))


def test_slow_motion_mid_step(snap_compare: Any) -> None:
    """One more step frozen at 40 %: layer 20 of 48, the conveyor and L2 shelf part-way."""
    assert snap_compare(make_app(), terminal_size=(120, 40), run_before=ticks(TICKS, lambda a: (
        a.set_speed(0.01), a.show_step_part(0.4))))


def test_full_kv_pool_with_a_queue(snap_compare: Any) -> None:
    """48 users with long prompts: the KV pool is ~96 % full, 21 requests queue, one is preempted."""
    cfg = EngineConfig(users=48, prompt="uniform:6000,10000", output="uniform:1000,3000", seed=0)
    assert snap_compare(make_app(cfg), terminal_size=(120, 40), run_before=ticks(300))


def test_help_screen(snap_compare: Any) -> None:
    """The help screen over the floor."""
    assert snap_compare(make_app(), terminal_size=(120, 40), run_before=ticks(TICKS, lambda a: a.action_help()))


def test_too_small_terminal(snap_compare: Any) -> None:
    """Below 80x24 the floor gives way to a note asking for a bigger terminal."""
    assert snap_compare(make_app(), terminal_size=(60, 20), run_before=ticks(5))


def test_settings_screen(snap_compare: Any) -> None:
    """o: every option of tokensim run, grouped, over the floor; the top of the form (hardware, model, traffic)."""
    assert snap_compare(make_app(), terminal_size=(120, 40), run_before=ticks(TICKS, lambda a: a.action_settings()))


def test_settings_screen_zh(snap_compare: Any) -> None:
    """o in Chinese: the section titles, the help beside each field, the buttons and the command line in Chinese;
    CJK help lines wrap inside their column as the English ones do."""
    assert snap_compare(make_app(lang="zh"), terminal_size=(120, 40),
                        run_before=ticks(TICKS, lambda a: a.action_settings()))


def test_picker_explains_a_misfit(snap_compare: Any) -> None:
    """m at tp 8: each preset that does not fit says why (heads over tp, weights over memory) and its fix; enter on
    qwen2.5-7b asks 'needs tp 4: apply?'."""

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, TokensimApp)
        app.advance_ticks(TICKS)
        await pilot.press("m")
        ol = app.screen.query_one("#picker-list")
        ol.highlighted = [o.id for o in ol.options].index("qwen2.5-7b")  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()

    cfg = EngineConfig(model="llama-3.1-70b", tp=8, users=6, seed=0)
    assert snap_compare(make_app(cfg), terminal_size=(120, 40), run_before=run_before)
