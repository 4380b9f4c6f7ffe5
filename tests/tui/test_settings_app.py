"""Pilot tests of the settings screen (o)."""

from __future__ import annotations

from dataclasses import replace

from textual.widgets import Button, Input, Select, Static

from engine.config import EngineConfig
from engine.options import BY_NAME
from tui.app import TokensimApp
from tui.defaults import default_config
from tui.i18n import ZH
from tui.screens.settings import SettingsScreen

SIZE = (120, 40)


def make_app(config: EngineConfig | None = None, lang: str = "en") -> TokensimApp:
    """A paused, deterministic app."""
    app = TokensimApp(config or default_config(), lang=lang, autoplay=False)
    app.animation_level = "none"
    return app


def note(app: TokensimApp, dest: str) -> Static:
    return app.screen.query_one(f"#note-{dest}", Static)


async def test_o_opens_settings_and_apply_restarts_with_tp_2() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.advance_ticks(5)
        await pilot.press("o")
        assert isinstance(app.screen, SettingsScreen)
        tp = app.screen.query_one("#field-tp", Input)
        assert tp.value == "1" and app.screen.query_one("#field-users", Input).placeholder == "6"  # blank: as now
        tp.value = ""
        tp.focus()
        await pilot.press("2", "enter")  # enter in a field applies
        await pilot.pause()
        assert not isinstance(app.screen, SettingsScreen)
        assert app.engine.config.tp == 2 and app.engine.step_model.opts.tp == 2 and app.config.tp == 2
        assert app.engine.tick == 0  # restarted, as r does
        assert replace(app.config, tp=1) == default_config()  # nothing else changed


async def test_cancel_leaves_everything_as_it_was() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.advance_ticks(5)
        before = (app.config, app.engine.tick, app.engine.clock)
        await pilot.press("o")
        app.screen.query_one("#field-tp", Input).value = "2"
        app.screen.query_one("#field-scheduler", Select).value = "chunked"
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, SettingsScreen)
        assert (app.config, app.engine.tick, app.engine.clock) == before
        await pilot.press("o")  # reopened: the running settings, not the cancelled edits
        assert app.screen.query_one("#field-tp", Input).value == "1"


async def test_a_bad_value_is_shown_beside_its_field_and_apply_keeps_the_screen() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        app.screen.query_one("#field-tp", Input).value = "0"
        await pilot.pause()
        assert "--tp: must be a whole number between 1" in str(note(app, "tp").render())
        assert note(app, "tp").has_class("-error")
        app.screen.query_one("#settings-apply", Button).press()
        await pilot.pause()
        assert isinstance(app.screen, SettingsScreen) and app.engine.config.tp == 1
        app.screen.query_one("#field-tp", Input).value = "2"
        await pilot.pause()
        assert not note(app, "tp").has_class("-error") and "tensor-parallel" in str(note(app, "tp").render())


async def test_a_misfit_says_why_beside_the_field_the_engine_names() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        app.screen.query_one("#field-model", Input).value = "qwen2.5-7b"
        app.screen.query_one("#field-tp", Input).value = "8"
        app.screen.query_one("#field-users", Input).value = "12"
        app.screen.query_one("#field-rate", Input).value = "5"
        await pilot.pause()
        app.screen.action_apply()
        await pilot.pause()
        assert "contradict" in str(note(app, "users").render()) and note(app, "users").has_class("-error")
        assert app.screen.focused is app.screen.query_one("#field-users")
        app.screen.query_one("#field-rate", Input).value = ""
        await pilot.pause()
        app.screen.action_apply()
        await pilot.pause()
        said = str(note(app, "tp").render())
        assert "28 attention heads (4 KV heads) do not split over tp 8" in said and "needs tp 4" in said
        assert app.engine.config.model == "generic-14b"
        app.screen.query_one("#field-tp", Input).value = "4"
        await pilot.pause()
        app.screen.action_apply()
        await pilot.pause()
        assert (app.engine.config.model, app.engine.config.tp, app.engine.config.users) == ("qwen2.5-7b", 4, 12)


async def test_apply_runs_a_fleet_and_back_to_one_engine() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        assert app.screen.query_one("#field-budget_per_hour", Input).disabled  # a check of run's, not a setting
        assert "tokensim run only" in str(note(app, "budget_per_hour").render())
        app.screen.query_one("#field-replicas", Input).value = "3"
        app.screen.query_one("#field-router", Select).value = "least-loaded"
        await pilot.pause()
        app.screen.action_apply()
        await pilot.pause()
        assert app.fleet is not None and len(app.fleet.reps) == 3 and app.fleet_spec.router == "least-loaded"
        await pilot.press("o")
        assert app.screen.query_one("#field-replicas", Input).value == "3"  # the running fleet, as it was set
        app.screen.query_one("#field-replicas", Input).value = ""
        await pilot.pause()
        app.screen.action_apply()
        await pilot.pause()
        assert app.fleet is None and app.fleet_spec.replicas == 1 and app.engine.config == app.config


async def test_the_command_line_follows_the_fields() -> None:
    app = make_app(replace(default_config(), users=0, rate=5.0, think_time="0"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        cmd = app.screen.query_one("#settings-cmd", Static)
        assert str(cmd.render()) == "as a command: tokensim --rate 5"
        app.screen.query_one("#field-scheduler", Select).value = "chunked"
        await pilot.pause()
        assert str(cmd.render()) == "as a command: tokensim --rate 5 --scheduler chunked"


async def test_the_palette_offers_settings() -> None:
    app = make_app()
    async with app.run_test(size=SIZE):
        titles = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert titles["Settings"].startswith("o · ")


async def test_apply_reads_what_the_fields_hold_and_its_refusal_stays() -> None:
    """Apply before the field's change event has arrived: it reads the widget, and the late event does not wipe
    the refusal off the screen."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("o")
        app.screen.query_one("#field-tp", Input).value = "3"
        app.screen.action_apply()
        await pilot.pause()
        assert isinstance(app.screen, SettingsScreen) and app.engine.config.tp == 1
        assert "40 attention heads (8 KV heads) do not split over tp 3 · needs tp 4" in str(note(app, "tp").render())
        assert str(app.screen.query_one("#settings-cmd", Static).render()) == "as a command: tokensim --tp 3"


async def test_the_help_beside_each_field_reads_in_the_apps_language() -> None:
    """In Chinese every field's note is its Chinese line (the app's default filled in), and comes back after a refusal
    is fixed; in English it is the option's --help text."""
    app = make_app(lang="zh")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        screen = app.screen
        assert isinstance(screen, SettingsScreen)
        assert str(note(app, "tp").render()) == "张量并行的 GPU 数（默认 1）"
        assert str(note(app, "users").render()) == BY_NAME["users"].zh.format(default=6)
        assert str(note(app, "budget_per_hour").render()) == ZH["cli_only"]
        shown = {f.dest: str(note(app, f.dest).render()) for f in screen.fields if f.live}
        assert [d for d, text in shown.items() if text == next(f.help for f in screen.fields if f.dest == d)] == []
        titles = [str(s.render()) for s in screen.query(".settings-section").results(Static)]
        assert titles[:2] == [ZH["s_hardware"], ZH["s_model"]] and len(titles) == 7
        assert str(screen.query_one("#settings-apply", Button).label) == "应用"
        screen.query_one("#field-tp", Input).value = "0"
        await pilot.pause()
        assert "--tp: must be a whole number" in str(note(app, "tp").render())  # validation speaks English
        screen.query_one("#field-tp", Input).value = "2"
        await pilot.pause()
        assert str(note(app, "tp").render()) == "张量并行的 GPU 数（默认 1）" and not note(app, "tp").has_class("-error")
        assert "[[stage]]" in str(note(app, "workload").render())
        assert "；[prompt]；[output]）" in str(note(app, "workload").render())
    app = make_app(lang="en")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        assert str(note(app, "tp").render()) == "tensor-parallel GPUs (default 1)"
        # Shown as written: the TOML tables in --workload's help are text, not markup to strip; so is a value typed.
        assert "([[stage]] rate or users, duration; [prompt]; [output]);" in str(note(app, "workload").render())
        app.screen.query_one("#field-trace", Input).value = "[b]x.csv"
        await pilot.pause()
        assert str(app.screen.query_one("#settings-cmd", Static).render()) == "as a command: tokensim --trace '[b]x.csv'"


async def _pick_then_apply_settings(key: str, option_id: str, replicas: int) -> TokensimApp:
    """Press `key` (m or h), pick `option_id`, press o, press Apply: the app after it (a fleet when replicas > 1)."""
    from textual.widgets import OptionList

    from engine.fleet.fleet import FleetSpec
    from tui.screens.picker import PickerScreen

    app = TokensimApp(default_config(), lang="en", autoplay=False,
                      fleet=FleetSpec(default_config(), replicas=replicas) if replicas > 1 else None)
    app.animation_level = "none"
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(key)
        assert isinstance(app.screen, PickerScreen)
        ol = app.screen.query_one(OptionList)
        ol.highlighted = [o.id for o in ol.options].index(option_id)
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, PickerScreen)
        await pilot.press("o")
        assert isinstance(app.screen, SettingsScreen)
        field = "model" if key == "m" else "hardware"
        assert app.screen.query_one(f"#field-{field}", Input).value == option_id  # the form shows the pick
        app.screen.query_one("#settings-apply", Button).press()
        await pilot.pause()
        assert not isinstance(app.screen, SettingsScreen)
    return app


async def test_a_model_picked_with_m_is_kept_by_settings_apply() -> None:
    """m, another model, o, Apply: the picked model runs on (Apply used to switch back to the launch model)."""
    app = await _pick_then_apply_settings("m", "qwen2.5-7b", replicas=1)
    assert app.config.model == app.engine.config.model == app.fleet_spec.config.model == "qwen2.5-7b"
    assert app.engine.step_model.model.name == "qwen2.5-7b"


async def test_a_gpu_picked_with_h_is_kept_by_settings_apply_on_one_engine_and_a_fleet() -> None:
    """h, another GPU, o, Apply: the picked GPU runs on, for one engine and for a fleet of 2 replicas."""
    for replicas in (1, 2):
        app = await _pick_then_apply_settings("h", "a100-80g", replicas=replicas)
        assert app.config.hardware == app.fleet_spec.config.hardware == "a100-80g", replicas
        assert app.engine.step_model.hw.name == "a100-80g" and app.fleet_spec.replicas == replicas
