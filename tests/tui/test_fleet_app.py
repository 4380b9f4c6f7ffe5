"""The app on a fleet: the overview, a replica's floor on selection (keys and a click), rebuilds, the CLI, snapshots.

Snapshots: plain `def` tests, a paused app stepped an exact number of replica steps, fixed size and theme, no animation.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from engine.fleet.fleet import Fleet, FleetSpec
from engine.fleet.spec import ScaleSpec
from engine.serving.engine import Engine
from tests.tui.test_snapshots import ticks
from tui.app import TokensimApp
from tui.cli import build_parser
from tui.commands.app_cmd import config_from_args
from tui.commands.run_cmd import fleet_spec
from tui.defaults import default_config
from tui.render import fleet as fleet_render
from tui.widgets.fleet_panel import FleetPanel

SIZE = (120, 40)
TICKS = 400  # replica steps (every replica's, together) before a snapshot


def make_app(replicas: int = 4, router: str = "least-loaded", pd: tuple[int, int] | None = None,
             link: float | None = None, lang: str = "en", scale: ScaleSpec | None = None, **cfg: Any) -> TokensimApp:
    """Paused, seeded, no animation, a fixed theme: the same steps always draw the same screen."""
    config = replace(default_config(), seed=0, **cfg)
    app = TokensimApp(config, lang=lang, autoplay=False, seed=0,
                      fleet=FleetSpec(config, replicas=replicas, router=router, pd=pd, kv_link_gbps=link, scale=scale))
    app.animation_level = "none"
    app.theme = "textual-dark"
    return app


async def test_keys_pick_a_replicas_floor_and_go_back_to_the_overview() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.advance_time(3.0)
        fleet = app.fleet
        assert fleet is not None and app.selected is None and app.frame.fleet is not None
        top = app.screen.query_one("#top")
        assert not top.display and app.screen.query_one("#fleet").display  # the overview: rows only
        await pilot.press("3")
        assert app.selected == 2 and app.frame.fleet.selected == 2 and top.display
        assert app.engine is fleet.replica_engine(2)
        snap = app.frame.snapshot  # the floor is replica 3's own
        assert snap.kv_blocks_used == fleet.replica_states()[2].kv_used and snap.tick == fleet.replica_engine(2).tick
        await pilot.press("tab")
        assert app.selected == 3
        await pilot.press("tab")
        assert app.selected is None  # after the last replica, the overview
        await pilot.press("shift+tab")
        assert app.selected == 3
        await pilot.press("9")  # no replica 9: nothing changes
        assert app.selected == 3
        await pilot.press("0")
        assert app.selected is None and not top.display


async def test_a_click_on_a_replicas_row_shows_its_floor() -> None:
    app = make_app(replicas=3)
    async with app.run_test(size=SIZE) as pilot:
        app.advance_time(1.0)
        await pilot.pause()
        panel = app.screen.query_one(FleetPanel)
        assert app.frame.fleet is not None
        # Content row 2 is replica 2 (row 0 the column names); the panel's border and padding come first.
        assert fleet_render.replica_at(app.frame.fleet, panel.content_size.height, 2) == 1
        region = panel.content_region
        await pilot.click(offset=(region.x + 3, region.y + 2))
        await pilot.pause()
        assert app.selected == 1


async def test_the_fleet_moves_with_the_view_clock_and_every_answer_is_counted() -> None:
    app = make_app(pd=(1, 3))
    async with app.run_test(size=SIZE):
        app.advance_time(4.0)
        fleet = app.fleet
        v = app.frame.fleet
        assert fleet is not None and v is not None and fleet.now == pytest.approx(4.0)
        assert app.frame.clock_s == pytest.approx(4.0) and v.pd == (1, 3)
        assert [r.role for r in v.replicas] == ["prefill", "decode", "decode", "decode"]
        assert v.done == fleet.requests_completed == sum(r.done for r in v.replicas[1:]) > 0
        assert v.routes and all(r.why == "only" and r.replica == 0 for r in v.routes)


async def test_slow_motion_plays_the_shown_replicas_step() -> None:
    app = make_app(replicas=2)
    async with app.run_test(size=SIZE):
        app.advance_time(1.0)
        app.select_replica(1)
        app.set_speed(0.01)
        app.show_step_part(0.4)
        f = app.frame
        assert f.in_step and f.progress == pytest.approx(0.4) and f.step is not None
        assert f.snapshot.tick == app.engine.tick - 1  # the floor shows replica 2 before the step in flight
        assert f.layer == int(0.4 * f.layers) + 1
        app.advance_time(0.3 * f.step.time_s)  # the view clock moves inside the step: the same state, further on
        assert app.frame.progress == pytest.approx(0.7) and app.frame.snapshot.tick == app.engine.tick - 1
        app.advance_time(0.31 * f.step.time_s)  # past its end: the state after it, the next step in flight
        assert app.frame.snapshot.tick == f.snapshot.tick + 1 and app.frame.step_tick == f.step_tick + 1


async def test_n_steps_the_replica_shown_or_the_fleet() -> None:
    app = make_app(replicas=3)
    async with app.run_test(size=SIZE) as pilot:
        app.advance_time(1.0)
        fleet = app.fleet
        assert fleet is not None
        before = fleet.ticks
        await pilot.press("n")  # the overview: one step of whichever replica is furthest behind
        assert fleet.ticks == before + 1
        await pilot.press("2")
        ticks = [fleet.replica_engine(i).tick for i in range(3)]
        await pilot.press("n")  # replica 2's floor: exactly one step of replica 2, shown whole
        assert fleet.replica_engine(1).tick == ticks[1] + 1
        assert app.frame.snapshot.tick == ticks[1] + 1 and not app.frame.in_step
    one = make_app(replicas=3, users=1)  # least-loaded sends the one user to replica 1 every time
    async with one.run_test(size=SIZE) as pilot:
        one.advance_time(1.0)
        await pilot.press("3", "n")  # replica 3 never steps: n gives up, says so, and the view stays put
        assert one.fleet is not None and one.fleet.replica_engine(2).tick == 0 and one.selected == 2


async def test_help_lists_the_fleets_keys_only_on_a_fleet() -> None:
    from tui.screens.help import help_text

    assert "h_replica" not in str(help_text("en")) and "overview" not in help_text("en").plain
    text = help_text("en", fleet=True).plain
    assert "next replica's own floor" in text and "back to the overview" in text and "router's last choices" in text
    app = make_app(replicas=2)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert app.screen.id == "help" and getattr(app.screen, "fleet", False)


async def test_e_explains_the_shown_replicas_figures_not_the_overview() -> None:
    from tui.screens.explain import ExplainScreen

    app = make_app(replicas=2)
    async with app.run_test(size=SIZE) as pilot:
        app.advance_time(1.0)
        await pilot.press("e")
        assert not isinstance(app.screen, ExplainScreen)  # the overview has no floor figure to explain
        await pilot.press("2", "e")
        assert isinstance(app.screen, ExplainScreen)


async def test_one_replica_keeps_the_single_engine_floor_and_its_keys() -> None:
    config = replace(default_config(), seed=0)
    app = TokensimApp(config, autoplay=False, seed=0, fleet=FleetSpec(config))
    async with app.run_test(size=SIZE) as pilot:
        assert app.fleet is None and isinstance(app.engine, Engine) and app.frame.fleet is None
        assert not app.screen.query_one("#fleet").display
        await pilot.press("2", "tab", "0")
        assert app.selected is None and app.fleet is None


async def test_apply_setup_rebuilds_on_a_fleet_and_back() -> None:
    app = make_app(replicas=1)
    async with app.run_test(size=SIZE) as pilot:
        engine = app.engine
        assert app.apply_setup(FleetSpec(app.config, replicas=3, router="kv-aware"))
        assert isinstance(app.fleet, Fleet) and app.frame.fleet is not None and app.frame.fleet.router == "kv-aware"
        await pilot.press("2")
        assert app.selected == 1
        assert not app.apply_setup(FleetSpec(app.config, replicas=3, pd=(3, 0)))  # refused: the fleet runs on
        assert isinstance(app.fleet, Fleet) and len(app.fleet.reps) == 3
        assert app.apply_setup(FleetSpec(app.config))
        assert app.fleet is None and isinstance(app.engine, Engine) and app.engine is not engine
        assert not app.screen.query_one("#fleet").display and app.screen.query_one("#top").display


async def test_users_and_knobs_restart_the_fleet_with_the_new_setting() -> None:
    app = make_app(replicas=2)
    async with app.run_test(size=SIZE) as pilot:
        app.advance_time(2.0)
        await pilot.press("2", "plus")
        assert app.config.users == 8 and app.fleet is not None and app.fleet.config.users == 8
        assert app.selected == 1 and app.engine is app.fleet.replica_engine(1)  # the replica stays in view
        assert app.fleet.now == 0.0 and app.frame.fleet is not None and app.frame.fleet.users == 8
        await pilot.press("c")
        assert app.fleet.replica_engine(1).step_model.opts.compute_mult == 2.0


def test_the_app_takes_runs_fleet_options() -> None:
    argv = ["--replicas", "4", "--router", "prefix-aware", "--pd", "1:3", "--kv-link-gbps", "50"]
    args = build_parser(argv).parse_args(argv)
    spec = fleet_spec(args, config_from_args(args))
    assert (spec.replicas, spec.router, spec.pd, spec.kv_link_gbps) == (4, "prefix-aware", (1, 3), 50.0)
    args = build_parser(["--pd", "2:2"]).parse_args(["--pd", "2:2"])
    assert fleet_spec(args, config_from_args(args)).replicas == 4


@pytest.mark.parametrize("argv", [["--pd", "2:0"], ["--replicas", "3", "--pd", "1:1"], ["--replicas", "0"],
                                  ["--replicas", "2", "--fast-share", "0.2"]])
def test_a_fleet_that_cannot_be_is_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from tui.cli import main

    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own refusals exit directly
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


# ---- snapshots ------------------------------------------------------------------------------------------


def test_snapshot_fleet_overview(snap_compare: Any) -> None:
    """Four replicas behind least-loaded: a row each, and the router's last eight choices with their reasons."""
    assert snap_compare(make_app(users=24), terminal_size=SIZE, run_before=ticks(TICKS))


def test_snapshot_fleet_overview_80x24(snap_compare: Any) -> None:
    """The overview stays usable at 80x24: every replica's row, the figures, the keys."""
    assert snap_compare(make_app(users=24), terminal_size=(80, 24), run_before=ticks(TICKS))


def test_snapshot_pd_overview_with_copies_in_flight(snap_compare: Any) -> None:
    """P/D 1:3 on a slow 2 GB/s link: the prefill replica's pinned blocks (▒) and the copies on their way."""
    assert snap_compare(make_app(users=24, pd=(1, 3), link=2.0), terminal_size=SIZE, run_before=ticks(TICKS))


def test_snapshot_a_decode_replicas_floor(snap_compare: Any) -> None:
    """Replica 3 of P/D 1:3 selected: its own factory floor under a strip of the fleet's rows, fleet-wide header."""
    assert snap_compare(make_app(users=24, pd=(1, 3)), terminal_size=SIZE,
                        run_before=ticks(TICKS, lambda a: a.select_replica(2)))


def test_snapshot_a_replicas_floor_80x24(snap_compare: Any) -> None:
    """A replica's floor at 80x24: the compact floor, the replica named in the header."""
    assert snap_compare(make_app(users=24), terminal_size=(80, 24),
                        run_before=ticks(TICKS, lambda a: a.select_replica(1)))


# Autoscaling 1 to 4 replicas for 24 users, 6 requests in flight each, a decision every 2 s, a 20 s cold start on top
# of the weights' load: at 2 s three replicas start (serving at ~22.4 s), by 30 s two drain, one restarts at 32 s.
SCALED = ScaleSpec(1, 4, "queue", 2.0, 6.0, 20.0)


def seconds(s: float) -> Any:
    """A run_before that plays the paused app on by `s` simulated seconds."""

    async def run_before(pilot: Any) -> None:
        pilot.app.advance_time(s)
        await pilot.pause()

    return run_before


async def test_the_overview_counts_down_a_cold_start_and_shows_draining_and_off() -> None:
    """Issue 32: a starting replica says when it will serve (its cold start counting down), then serves; a drained
    one says draining, then off; the rows read the fleet's autoscaler."""
    app = make_app(users=24, scale=SCALED)
    async with app.run_test(size=SIZE) as pilot:
        app.advance_time(5.0)
        await pilot.pause()
        rows = [fleet_render.replica_row(r, "en", 110, False).plain for r in app.frame.fleet.replicas]
        assert rows[0].split()[1] == "mixed" and all("starting" in r and "serves in" in r for r in rows[1:])
        wait = app.frame.fleet.replicas[1].ready_in_s
        assert 15 < wait < 20
        app.advance_time(5.0)
        await pilot.pause()
        assert app.frame.fleet.replicas[1].ready_in_s == pytest.approx(wait - 5.0, abs=0.05)
        app.advance_time(20.0)  # 30 s: all served a while, then the load per replica fell under the target
        await pilot.pause()
        phases = [r.scale for r in app.frame.fleet.replicas]
        assert "draining" in phases and "starting" not in phases
        app.advance_time(5.0)
        await pilot.pause()
        assert "off" in [r.scale for r in app.frame.fleet.replicas]
        text = " ".join(fleet_render.replica_row(r, "en", 110, False).plain for r in app.frame.fleet.replicas)
        assert "switched off" in text


async def test_energy_shows_each_replicas_power_and_joules_per_token() -> None:
    """Issue 32: with --energy the overview adds W per GPU and J per output token per replica, on the engine's
    power model (idle 70 W to 700 W on an H100 SXM; a decode batch is memory-bound, well under the limit)."""
    app = make_app(users=24, energy=True)
    async with app.run_test(size=SIZE) as pilot:
        app.advance_time(10.0)
        await pilot.pause()
        v = app.frame.fleet
        assert v.energy and "W/GPU" in fleet_render.column_header("en", 110, True).plain
        for r in v.replicas:
            assert 70 < r.power_w < 700 and 0 < r.j_per_token < 10
            assert f"{r.power_w:,.0f}" in fleet_render.replica_row(r, "en", 110, False, True).plain
    plain = make_app(users=24)
    async with plain.run_test(size=SIZE) as pilot:
        plain.advance_time(1.0)
        await pilot.pause()
        assert not plain.frame.fleet.energy and all(math.isnan(r.power_w) for r in plain.frame.fleet.replicas)


def test_the_app_takes_autoscale_and_energy() -> None:
    args = build_parser([]).parse_args(["--autoscale", "1:4", "--cold-start-s", "20", "--energy"])
    assert args.autoscale == "1:4" and args.energy and config_from_args(args).energy


def test_snapshot_autoscaled_fleet_starting_and_off(snap_compare: Any) -> None:
    """At 35 s: two replicas serving, one starting again (its cold start counting down), one switched off."""
    assert snap_compare(make_app(users=24, scale=SCALED), terminal_size=SIZE, run_before=seconds(35.0))


def test_snapshot_autoscaled_fleet_draining_with_energy(snap_compare: Any) -> None:
    """At 30 s with --energy: two replicas draining, and every replica's W per GPU and J per output token."""
    assert snap_compare(make_app(users=24, scale=SCALED, energy=True), terminal_size=SIZE, run_before=seconds(30.0))
