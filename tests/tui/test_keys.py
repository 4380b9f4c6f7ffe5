"""Pilot tests: every key does what the footer says, and resizing never kills the app."""

from __future__ import annotations

import pytest
from textual.widgets import OptionList

from tui.app import SPEEDS, TokensimApp
from tui.defaults import default_config
from tui.screens.help import HelpScreen
from tui.screens.picker import PickerScreen

SIZE = (120, 40)


def make_app(**kw: object) -> TokensimApp:
    """A paused, deterministic app on the default configuration."""
    app = TokensimApp(default_config(), lang=kw.pop("lang", "en"), autoplay=False, **kw)  # type: ignore[arg-type]
    app.animation_level = "none"
    return app


async def test_space_toggles_play_and_pause() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert not app.playing
        await pilot.press("space")
        assert app.playing and app.frame.playing
        await pilot.press("space")
        assert not app.playing


async def test_n_advances_exactly_one_tick() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.advance_ticks(3)
        before = app.engine.tick
        await pilot.press("n")
        assert app.engine.tick == before + 1
        assert app.frame.snapshot.tick == before + 1
        await pilot.press("n", "n")
        assert app.engine.tick == before + 3


async def test_brackets_change_speed_along_the_ladder() -> None:
    app = make_app(speed=1.0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("left_square_bracket")
        assert app.speed == 0.5
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert app.speed == 2.0
        for _ in range(len(SPEEDS) + 2):
            await pilot.press("left_square_bracket")
        assert app.speed == SPEEDS[0]  # clamps at the slowest


async def test_plus_and_minus_change_users() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        n = app.engine.config.users
        await pilot.press("plus")
        assert app.engine.config.users > n
        assert app.frame.snapshot.users == app.engine.config.users
        await pilot.press("minus", "minus")
        assert app.engine.config.users < n


@pytest.mark.parametrize(("key", "field"), [("c", "compute_mult"), ("b", "bandwidth_mult")])
async def test_c_and_b_double_compute_and_bandwidth(key: str, field: str) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.advance_ticks(20)
        await pilot.press(key)
        assert getattr(app.engine.step_model.opts, field) == 2.0
        assert getattr(app.frame.snapshot.opts, field) == 2.0
        await pilot.press(key)  # a toggle: back to the real part
        assert getattr(app.engine.step_model.opts, field) == 1.0


async def test_bandwidth_x2_speeds_up_decode_and_compute_x2_does_not() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        base = app.engine.step_model.decode(1, 100)
        await pilot.press("c")
        assert app.engine.step_model.decode(1, 100).time_s == pytest.approx(base.time_s, rel=0.01)  # C08
        await pilot.press("c", "b")
        x2 = app.engine.step_model.decode(1, 100)
        assert x2.t_memory_s == pytest.approx(base.t_memory_s / 2)  # the byte-moving half of the step halves
        assert x2.time_s < base.time_s


async def test_f_sets_fp8_weights() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f")
        assert app.engine.step_model.opts.weight_dtype == "fp8"
        assert app.frame.snapshot.weights_bytes == pytest.approx(14e9, rel=0.01)
        await pilot.press("f")
        assert app.engine.step_model.opts.weight_dtype is None


async def test_m_picks_a_model_and_rebuilds() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.advance_ticks(5)
        await pilot.press("m")
        assert isinstance(app.screen, PickerScreen)
        ol = app.screen.query_one(OptionList)
        ol.highlighted = [o.id for o in ol.options].index("llama-3.1-8b")
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, PickerScreen)
        assert app.engine.config.model == "llama-3.1-8b"
        assert app.engine.tick == 0 and app.frame.snapshot.model.name == "llama-3.1-8b"


async def test_h_picks_a_gpu_and_escape_cancels() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("h")
        assert isinstance(app.screen, PickerScreen)
        await pilot.press("escape")
        assert app.engine.config.hardware == "h100-sxm"
        await pilot.press("h")
        ol = app.screen.query_one(OptionList)
        ol.highlighted = [o.id for o in ol.options].index("h200")
        await pilot.press("enter")
        await pilot.pause()
        assert app.engine.step_model.hw.name == "h200"
        assert "141" in app.query_one("#warehouse").border_title


async def test_a_model_that_does_not_fit_is_refused_and_the_old_one_kept() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert not app.apply_config(app.config.__class__(model="llama-3.1-405b"))
        await pilot.pause()
        assert app.engine.config.model == "generic-14b"


async def test_r_resets_the_run() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("b")
        app.advance_ticks(10)
        await pilot.press("r")
        assert app.engine.tick == 0 and app.engine.clock == 0.0
        assert app.engine.step_model.opts.bandwidth_mult == 2.0  # settings are kept


async def test_l_toggles_language() -> None:
    app = make_app(lang="en")
    async with app.run_test(size=SIZE) as pilot:
        assert app.query_one("#warehouse").border_title.startswith("HBM warehouse")
        await pilot.press("l")
        assert app.lang == "zh" and app.frame.lang == "zh"
        assert "仓库" in app.query_one("#warehouse").border_title
        await pilot.press("l")
        assert app.lang == "en"


async def test_question_mark_opens_help_and_escape_closes_it() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_q_quits() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert app._exit


async def test_palette_runs_an_action() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"compute")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause()
        assert app.engine.step_model.opts.compute_mult == 2.0


async def test_palette_entries_say_what_they_do_and_their_key() -> None:
    """Each entry's description names its key and its effect (it used to read 'tokensim' for all)."""
    app = make_app()
    async with app.run_test(size=SIZE):
        cmds = list(app.get_system_commands(app.screen))
    helps = {c.title: c.help for c in cmds if c.title in {"Compute ×2 (toggle)", "One step"}}
    assert helps == {"Compute ×2 (toggle)": "c · what if: compute ×2 (toggle)",
                     "One step": "n · advance exactly one engine step (tick)"}
    assert len({c.help for c in cmds}) > 14


async def test_resize_to_tiny_shows_the_note_and_back() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.advance_ticks(5)
        await pilot.resize_terminal(60, 20)
        await pilot.pause()
        assert app.query_one("#enlarge").display and not app.query_one("#floor").display
        app.advance_ticks(2)  # the engine keeps running behind the note
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert app.query_one("#floor").display and app.query_one("#floor").has_class("-compact")
        await pilot.resize_terminal(*SIZE)
        await pilot.pause()
        assert app.query_one("#floor").display and not app.query_one("#floor").has_class("-compact")
        assert app.is_running


async def test_playing_advances_simulated_time() -> None:
    app = make_app(speed=1.0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space")
        await pilot.pause(0.3)
        await pilot.press("space")
        assert app.engine.clock > 0 and app.frame.clock_s > 0


async def test_slow_motion_shows_a_step_part_way() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.advance_ticks(10)
        app.show_step_part(0.5)
        await pilot.pause()
        f = app.frame
        assert f.in_step and f.progress == pytest.approx(0.5)
        assert 1 < f.layer < f.layers
        assert f.snapshot.tick == app.engine.tick - 1  # the state before the step in flight
        app.advance_time(f.step.time_s)  # past its end: the state after it
        assert app.frame.snapshot.tick >= app.engine.tick - 1


async def test_scene_hooks_narration_and_highlight() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert not app.query_one("#narration").display
        app.narration = ("The L2 shelf holds 50 MB.",)
        app.highlight = "l2"
        await pilot.pause()
        assert app.query_one("#narration").display
        assert app.query_one("#l2").has_class("-highlight")
        app.highlight = "sm-grid"
        await pilot.pause()
        assert not app.query_one("#l2").has_class("-highlight") and app.query_one("#sm-grid").has_class("-highlight")
        app.narration = None
        await pilot.pause()
        assert not app.query_one("#narration").display


async def test_resize_and_scene_hooks_while_a_modal_is_open() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.resize_terminal(60, 20)
        app.narration = ("over the help",)
        app.highlight = "metrics"
        await pilot.pause()
        await pilot.press("escape")
        await pilot.resize_terminal(*SIZE)
        await pilot.pause()
        assert app.query_one("#floor").display and app.query_one("#narration").display
        assert app.query_one("#metrics").has_class("-highlight")
        assert app.is_running
