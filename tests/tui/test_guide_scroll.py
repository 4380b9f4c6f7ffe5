"""At 80x24 the guide gets the few rows the floor can spare: the rest of its text scrolls into view."""

from __future__ import annotations

from scenes.schema import find_scene
from tui.scene_app import SceneApp
from tui.widgets.narration import Narration


async def test_the_guide_scrolls_when_its_text_is_taller_than_its_rows() -> None:
    app = SceneApp([find_scene("eight-ms-floor")], lang="en", autoplay=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        guide = app.screen_stack[0].query_one(Narration)
        rows = guide.scrollable_content_region.height
        text = guide.wrapped(guide.content_region.width)
        assert len(text) > rows > 0 and guide.virtual_size.height == len(text)
        assert guide.border_title == "guide · ↑↓ more"
        first = [guide.render_line(y).text.rstrip() for y in range(rows)]
        assert first == text[:rows]
        await pilot.press("down")
        await pilot.pause()
        assert guide.scroll_offset.y == 1
        assert [guide.render_line(y).text.rstrip() for y in range(rows)] == text[1:1 + rows]
        for _ in range(len(text)):
            await pilot.press("down")
        await pilot.pause()
        assert guide.scroll_offset.y == len(text) - rows  # down to the end of the text, and no further
        assert guide.render_line(rows - 1).text.rstrip() == text[-1]
        await pilot.press("up")
        await pilot.pause()
        assert guide.scroll_offset.y == len(text) - rows - 1


async def test_a_guide_that_fits_does_not_say_more() -> None:
    app = SceneApp([find_scene("eight-ms-floor")], lang="en", autoplay=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        guide = app.screen_stack[0].query_one(Narration)
        assert guide.border_title == "guide" and guide.max_scroll_y == 0
