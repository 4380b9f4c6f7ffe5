"""The scene player in the app: → and ← walk the director's steps; each scene's key moment as a snapshot."""

from __future__ import annotations

from typing import Any

import pytest

from scenes.director import Director
from scenes.schema import FLOOR_PARTS, find_scene, load_shipped
from tui.scene_app import SceneApp
from tui.screens.explain import ExplainScreen
from tui.screens.question import QuestionScreen
from tui.widgets import PART_WIDGETS, part_widget

SIZE = (120, 40)
SCENES = load_shipped()


def make_app(scenes: list[Any], **kw: Any) -> SceneApp:
    """A paused, deterministic scene player."""
    app = SceneApp(scenes, lang=kw.pop("lang", "en"), autoplay=False, **kw)
    app.animation_level = "none"
    return app


def _engine_state(engine: Any) -> tuple[Any, ...]:
    snap = engine.snapshot()
    return (snap.tick, snap.time_s, engine.config, snap.queued, snap.running, snap.kv_blocks_used)


async def test_next_and_previous_walk_the_steps_and_keep_the_floor_consistent() -> None:
    scene = find_scene("compute-x2")
    app = make_app([scene])
    straight = Director(scene, "en")
    expected = [_engine_state(straight.engine)]
    while straight.next():
        expected.append(_engine_state(straight.engine))
    async with app.run_test(size=SIZE) as pilot:
        assert app.director.index == 0 and app.highlight == part_widget(scene.steps[0].highlight)
        assert app.narration is not None and "1/4" in app.narration[0]
        await pilot.press("right")  # step 2 asks first (predict, then reveal): the floor waits for the answer
        assert app.director.index == 0 and isinstance(app.screen, QuestionScreen)
        await pilot.press("3")
        assert app.director.index == 1 and "2/4" in app.narration[0]
        assert app.highlight == part_widget(scene.steps[1].highlight)
        assert app.engine is app.director.engine
        assert _engine_state(app.engine) == expected[1]
        assert app.frame.snapshot.tick == expected[1][0], "the floor shows the director's engine"
        await pilot.press("right", "right")
        assert app.director.index == 3 and _engine_state(app.engine) == expected[3]
        await pilot.press("right")  # past the last step of a single scene: stays
        assert app.director.index == 3
        await pilot.press("left", "left")
        assert app.director.index == 1 and _engine_state(app.engine) == expected[1]
        assert app.highlight == part_widget(scene.steps[1].highlight)
        await pilot.press("left", "left")  # before the first step: stays
        assert app.director.index == 0 and _engine_state(app.engine) == expected[0]


async def test_every_floor_part_a_scene_may_name_is_drawn_by_one_widget_of_the_app() -> None:
    assert set(PART_WIDGETS) == set(FLOOR_PARTS)
    app = make_app([SCENES[0]])
    async with app.run_test(size=SIZE):
        for part in FLOOR_PARTS:
            assert len(app.screen.query(f"#{part_widget(part)}")) == 1, part


async def test_the_tour_crosses_from_one_scene_to_the_next_and_back() -> None:
    first, second = SCENES[0], SCENES[1]
    app = make_app([first, second])
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(len(first.steps) - 1):
            await pilot.press("right")
            if isinstance(app.screen, QuestionScreen):
                await pilot.press("escape")  # skip the question: the step runs all the same
        assert app.director.scene.id == first.id and app.director.at_end
        await pilot.press("right")
        assert app.director.scene.id == second.id and app.director.index == 0
        assert app.engine is app.director.engine and app.config == app.director.config
        assert "2/2" in app.narration[0]
        await pilot.press("left")
        assert app.director.scene.id == first.id and app.director.index == len(first.steps) - 1
        assert app.narration[0].endswith("→ next · ← back")


async def test_the_last_step_of_the_tour_says_it_is_the_end_in_the_guide() -> None:
    """Not in a toast, which covered the narration's last line."""
    first, second = SCENES[0], SCENES[1]
    app = make_app([first, second], scene=1, step=len(second.steps) - 1)
    async with app.run_test(size=SIZE) as pilot:
        assert app.narration[0].endswith("end of the tour · ← back · q quit")
        await pilot.press("right")
        await pilot.pause()
        assert app.director.scene.id == second.id and not app.screen.query("Toast")


async def test_l_switches_the_narration_language_too() -> None:
    app = make_app([find_scene("warehouse")])
    async with app.run_test(size=SIZE) as pilot:
        assert "warehouse" in " ".join(app.narration)
        await pilot.press("l")
        assert app.lang == "zh" and "仓库" in " ".join(app.narration)


def _prepare(pilot: Any) -> Any:
    async def run_before(pilot: Any) -> None:
        pilot.app.theme = "textual-dark"
        pilot.app.animation_level = "none"
        await pilot.pause()
    return run_before(pilot)


@pytest.mark.parametrize("sid", [s.id for s in SCENES])
def test_snapshot_of_each_scenes_key_moment(sid: str, snap_compare: Any) -> None:
    scene = find_scene(sid)
    app = make_app([scene], step=scene.key_step)
    assert snap_compare(app, terminal_size=SIZE, run_before=_prepare)


def test_the_narration_names_a_bound_step_with_the_floors_word() -> None:
    from scenes.words import LANGS
    from tui.i18n import t

    scene = find_scene("reading-fast-writing-slow")
    for lang in LANGS:
        d = Director(scene, lang)
        d.goto(next(i for i, s in enumerate(scene.steps) if "{decode_bound}" in s.narration.get(lang)))
        assert d.value("decode_bound") == "memory"
        assert t(lang, "memory") in d.current_narration()


async def test_a_fleet_scene_walks_in_the_app_with_the_fleets_figures_beside_one_gpus_floor() -> None:
    scene = find_scene("router")
    app = make_app([scene])
    straight = Director(scene, "en")
    straight.next()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("right")  # the router scene asks before its second fleet runs
        assert isinstance(app.screen, QuestionScreen)
        await pilot.press("3")
        assert app.director.index == 1
        p90 = f"{straight.value('fleet_ttft_p90_s'):.2f} s"
        assert p90 in " ".join(app.narration), "the narration shows the fleet's figure, as headless"
        assert app.frame.snapshot.tick == app.director.engine.snapshot().tick  # the floor is the director's one GPU


async def test_over_the_explain_screen_the_arrows_move_its_figure_not_the_scene() -> None:
    app = make_app([find_scene("compute-x2")])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("e")
        assert isinstance(app.screen, ExplainScreen)
        first = app.screen.figure
        await pilot.press("right")
        assert app.director.index == 0, "the scene's page stays put under the explain screen"
        assert isinstance(app.screen, ExplainScreen) and app.screen.figure != first
        await pilot.press("left", "escape")
        assert app.director.index == 0 and not isinstance(app.screen, ExplainScreen)
        await pilot.press("right")  # back on the floor, → turns the page again (step 2 asks its question first)
        assert isinstance(app.screen, QuestionScreen)
