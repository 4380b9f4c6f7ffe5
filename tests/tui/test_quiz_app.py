"""Predict, then reveal in the app: → on a step with a question asks it; 1-4 (or a click) answers; a score."""

from __future__ import annotations

from typing import Any

from scenes.schema import find_scene
from tui.scene_app import SceneApp
from tui.screens.question import QuestionScreen, choice_text

SIZE = (120, 40)


def make_app(ids: list[str], **kw: Any) -> SceneApp:
    """A paused, deterministic scene player."""
    app = SceneApp([find_scene(i) for i in ids], lang=kw.pop("lang", "en"), autoplay=False, **kw)
    app.animation_level = "none"
    return app


async def test_a_question_holds_the_step_until_answered_and_the_tour_keeps_score() -> None:
    app = make_app(["compute-x2"])
    async with app.run_test(size=SIZE) as pilot:
        before = app.narration
        await pilot.press("right")
        assert isinstance(app.screen, QuestionScreen) and app.director.index == 0 and app.narration == before
        assert "11.99 ms" in app.screen.ask and len(app.screen.choices) == 3  # the vllm v0.15 profile's step
        await pilot.press("4")  # no fourth choice: nothing happens
        assert isinstance(app.screen, QuestionScreen)
        await pilot.press("3")
        assert not isinstance(app.screen, QuestionScreen) and app.director.index == 1
        assert app.score == (1, 1)
        assert "score 1/1" in app.narration[0]
        assert app.narration[1] == "✓ right: 3) the same time"
        assert app.narration[2].startswith("The step now takes 1.000x")
        # Back and forth: asked again, but the first answer is the one that counts.
        await pilot.press("left", "right")
        assert isinstance(app.screen, QuestionScreen)
        await pilot.press("1")
        assert app.score == (1, 1) and app.narration[1].startswith("✗ you said 1) half the time")
        # Moving on clears the reveal; the score stays in the indicator.
        await pilot.press("right")
        assert app.director.index == 2 and "score 1/1" in app.narration[0] and not app.narration[1].startswith("✗")


async def test_a_click_answers_and_escape_skips_without_scoring() -> None:
    app = make_app(["eight-ms-floor", "warehouse"])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("right")
        await pilot.click("#question-choice-1")
        assert app.director.index == 1 and app.score == (0, 1)
        assert app.narration[1].startswith("✗ you said 1) under a millisecond; the floor says 2) about 8")
        await pilot.press("right", "right")  # on to the next scene; its step 3 asks
        assert app.director.scene.id == "warehouse"
        await pilot.press("right", "right")
        assert isinstance(app.screen, QuestionScreen)
        await pilot.press("escape")
        assert app.director.index == 2 and app.score == (0, 1)
        assert app.narration[1].startswith("the floor says 3) about 500x")


async def test_the_question_speaks_the_apps_language() -> None:
    app = make_app(["compute-x2"], lang="zh")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("right")
        assert isinstance(app.screen, QuestionScreen) and "下一步要" in app.screen.ask
        await pilot.press("3")
        assert app.narration[1] == "✓ 答对了：3) 时间不变" and "得分 1/1" in app.narration[0]


def test_choice_text_shows_its_key() -> None:
    assert choice_text(1, "about 8 ms").plain == " 2  about 8 ms"


def _prepare(*keys: str) -> Any:
    async def run_before(pilot: Any) -> None:
        pilot.app.theme = "textual-dark"
        pilot.app.animation_level = "none"
        await pilot.press(*keys)
        await pilot.pause()
    return run_before


def test_snapshot_question_on_screen(snap_compare: Any) -> None:
    assert snap_compare(make_app(["compute-x2"]), terminal_size=SIZE, run_before=_prepare("right"))


def test_snapshot_reveal_after_a_wrong_answer(snap_compare: Any) -> None:
    assert snap_compare(make_app(["compute-x2"]), terminal_size=SIZE, run_before=_prepare("right", "1"))
