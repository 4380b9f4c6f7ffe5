"""Pilot tests of the pickers (m, h): a preset that does not fit says why and offers its fix, applied on enter."""

from __future__ import annotations

from dataclasses import replace

from textual.widgets import OptionList, Static

from engine.config import EngineConfig
from tui.app import TokensimApp
from tui.defaults import default_config
from tui.screens.picker import PickerScreen

SIZE = (120, 40)


def make_app(config: EngineConfig | None = None) -> TokensimApp:
    """A paused, deterministic app."""
    app = TokensimApp(config or default_config(), lang="en", autoplay=False)
    app.animation_level = "none"
    return app


async def test_the_model_picker_offers_the_fix_and_applies_it_on_confirmation() -> None:
    app = make_app(replace(default_config(), model="llama-3.1-70b", tp=8))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("m")
        assert isinstance(app.screen, PickerScreen)
        ol = app.screen.query_one(OptionList)
        ol.highlighted = [o.id for o in ol.options].index("qwen2.5-7b")
        row = str(ol.get_option("qwen2.5-7b").prompt)
        assert "28 attention heads (4 KV heads) do not split over tp 8" in row and "needs tp 4" in row
        await pilot.press("enter")
        hint = str(app.screen.query_one("#picker-hint", Static).render())
        assert hint == "qwen2.5-7b needs tp 4 (68.2 GB KV per GPU, ~2,390 users): apply? enter yes · escape no"
        await pilot.press("escape")  # takes the question back, the picker stays
        assert isinstance(app.screen, PickerScreen) and app.screen.asking is None
        await pilot.press("enter", "enter")
        await pilot.pause()
        assert not isinstance(app.screen, PickerScreen)
        assert (app.engine.config.model, app.engine.config.tp) == ("qwen2.5-7b", 4) and app.engine.tick == 0


async def test_the_gpu_picker_offers_tp_for_a_model_too_big_for_one_gpu() -> None:
    app = make_app(replace(default_config(), model="llama-3.1-70b", tp=1, hardware="b200"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("h")
        ol = app.screen.query_one(OptionList)
        ol.highlighted = [o.id for o in ol.options].index("h100-sxm")
        await pilot.press("enter")
        assert app.screen.asking == "h100-sxm"
        await pilot.press("down")  # moving on takes the question back
        assert app.screen.asking is None
        await pilot.press("up", "enter", "enter")
        await pilot.pause()
        # tp 2 would hold the weights and KV for ~4 conversations; the 6 users on the floor get tp 4 (#31.4)
        assert (app.engine.config.hardware, app.engine.config.tp) == ("h100-sxm", 4)
