"""A checkpoint shows on screen what headless says (issue #31, item 1).

Headless (`tokensim scene --json`, Director.play_headless) judges a step's checkpoints the moment its actions
end. On screen the floor runs on while a person reads, and the narration panel (tui.scene_app.narration_lines)
re-judges the same checkpoints live. Scene 11 showed ✗ C20 at 3.3x for over a minute while headless passed at
4.6x, read at one instant of a swinging rolling window. This test plays every step of every shipped scene,
reads the panel's verdict line at the step's end and again after a reader's minute of the floor running, and
asserts both equal the headless verdict (and that it passes).
"""

from __future__ import annotations

import pytest

from scenes.director import Director
from scenes.schema import Scene, load_shipped
from tui.scene_app import SceneApp, narration_lines

# Wall seconds a newcomer spends on a step: the narration is two short paragraphs, read at ~4 words a second.
READ_WALL_S = 60.0
SCENES = load_shipped()


def _verdict_line(director: Director) -> str:
    """The panel's last line: '✓ C20  ✗ C21', one mark per claim the step checks."""
    return narration_lines(director)[-1]


def _headless_line(director: Director) -> str:
    """The same line built from the checkpoint results headless records."""
    held: dict[str, bool] = {}
    for r in director.evaluate():
        held[r.claim] = held.get(r.claim, True) and r.ok
    return "  ".join(f"{'✓' if ok else '✗'} {claim}" for claim, ok in held.items())


@pytest.mark.parametrize("scene", SCENES, ids=[s.id for s in SCENES])
def test_every_checkpoint_shows_on_screen_what_headless_says(scene: Scene) -> None:
    director = Director(scene)
    for i, step in enumerate(scene.steps):
        if not step.checkpoints:
            continue
        director.goto(i)
        headless = _headless_line(director)
        assert "✗" not in headless, f"{scene.id} step {i + 1}: headless fails: {headless}"
        assert _verdict_line(director) == headless
        director.engine.advance(READ_WALL_S * director.speed)  # the floor runs on at the scene's speed
        shown = _verdict_line(director)
        assert shown == headless, f"{scene.id} step {i + 1}: after {READ_WALL_S:.0f} s on screen {shown!r}"


async def test_scene_11_in_the_app_keeps_c20_held_while_the_floor_runs() -> None:
    """Through the real app: scene 11's key step, its floor run on for a minute, the panel still shows ✓ C20."""
    scene = next(s for s in SCENES if s.number == 11)
    app = SceneApp([scene], lang="en", autoplay=False, step=scene.key_step)
    app.animation_level = "none"
    async with app.run_test(size=(120, 40)) as pilot:
        assert "✓ C20" in app.narration[-1]
        app.director.engine.advance(READ_WALL_S * app.director.speed)
        app.show_director()
        await pilot.pause()
        assert app.narration[-1] == "✓ C20"
        assert "✗" not in " ".join(app.narration)
