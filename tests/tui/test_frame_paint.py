"""The shortcuts the panels take to draw less (tui/widgets/panel.py) never leave the screen stale.

Panels repaint only the rows that changed, a changed title only its border row, and hand the compositor the
lines they painted last until a row is marked dirty: after many frames of partial repaints, each widget's lines
as the compositor gets them are compared with the same widget painted from scratch. Panels that declare their `inputs`
skip frames whose inputs repeat: over frames of three kinds of play, equal inputs must draw equal rows.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from engine.config import EngineConfig
from engine.serving.engine import Engine
from tui.app import TokensimApp
from tui.defaults import default_config
from tui.frame import Frame, build_frame
from tui.playback import Playback
from tui.widgets.panel import row_key
from tui.widgets.roofline import Roofline
from tui.widgets.sm_grid import SmGrid
from tui.widgets.xray_bar import XRayBar


def painted(w: Widget, fresh: bool = False) -> list[list[tuple[str, object]]]:
    """The widget's whole region as the compositor gets it: (text, style) per segment, row by row. `fresh`:
    painted from scratch (Textual's line cache emptied, the widget's kept lines bypassed)."""
    region = Region(0, 0, w.size.width, w.size.height)
    if fresh:
        w._styles_cache.clear()
        strips: list[Strip] = Widget.render_lines(w, region)
    else:
        strips = w.render_lines(region)
    return [[(seg.text, seg.style) for seg in strip] for strip in strips]


def test_partial_repaints_match_a_full_repaint() -> None:
    async def run() -> tuple[int, int, int]:
        app = TokensimApp(default_config(), lang="en", autoplay=False)
        titles: set[str | None] = set()
        changed_rows = 0
        async with app.run_test(size=(120, 40)) as pilot:
            app.advance_time(3.0)
            await pilot.pause()
            views = [v for v in app._panels if v.display]
            metrics = app.screen.query_one("#metrics")
            before = {v.id: painted(v) for v in views}
            for _ in range(45):
                app.advance_time(1 / 30)
                await pilot.pause()
                titles.add(metrics.border_title)
                for v in views:
                    incremental = painted(v)
                    assert incremental == painted(v, fresh=True), v.id
                    changed_rows += sum(a != b for a, b in zip(before[v.id], incremental, strict=True))
                    before[v.id] = incremental
            return len(titles), changed_rows, len(views)

    titles, changed, views = asyncio.run(run())
    assert titles > 10  # the metrics title ran with the clock: the border-row-only repaint was exercised
    assert changed > 45 and views >= 10  # and rows changed every frame


def frames(cfg: EngineConfig, speed: float, lang: str, n: int = 90) -> list[Frame]:
    """`n` frames of live play at `speed` (30 a second), built as the app builds them."""
    pb = Playback.start(Engine(cfg))
    out = []
    for _ in range(n):
        pb.advance(speed / 30, speed=speed)
        v = pb.step_view()
        out.append(build_frame(v.snapshot, step=v.step, step_tick=v.step_tick, progress=v.progress,
                               clock_s=pb.view_clock, speed=speed, playing=True, lang=lang,
                               steps_in_frame=pb.steps_in_frame, dilation=v.dilation, batch=v.batch))
    return out


@pytest.mark.parametrize(("cfg", "speed", "lang"), [
    (default_config(), 1.0, "en"),  # replayed steps, prefill and decode
    (replace(default_config(), users=200, ideal=True), 0.02, "zh"),  # slow motion: the live step in flight
    (replace(default_config(), users=40, tp=2), 5.0, "en"),  # fast-forward, two GPUs
])
def test_panels_that_skip_frames_draw_the_same_from_the_same_inputs(cfg: EngineConfig, speed: float,
                                                                    lang: str) -> None:
    """A panel with `inputs` is not rendered when they repeat: so equal inputs must always draw equal rows."""
    seen: dict[tuple[str, int, int], dict[object, list[tuple[object, ...]]]] = {}
    repeats = 0
    for f in frames(cfg, speed, lang):
        for panel in (Roofline(), XRayBar(), SmGrid()):
            for w, h in ((56, 6), (40, 3)):
                key = panel.inputs(f, w, h)
                drawn = [row_key(r) for r in panel.rows(f, w, h)]
                known = seen.setdefault((type(panel).__name__, w, h), {})
                k = repr(key)  # StepCost holds dicts (unhashable): its repr spells every field
                if k in known:
                    repeats += 1
                    assert known[k] == drawn, (type(panel).__name__, key)
                known[k] = drawn
    assert repeats > 100  # the skip is exercised: inputs do repeat from frame to frame
