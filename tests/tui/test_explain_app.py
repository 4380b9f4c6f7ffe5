"""The explain screen and the step x-ray bar: `e` and clicks open a figure's formula, the bar's segments are the
step's x-ray in proportion, and one snapshot of the screen over the floor."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import Static

from engine.evidence.explain import FIGURES
from engine.physics.xray import step_xray
from tui.app import TokensimApp
from tui.defaults import default_config
from tui.frame import build_frame
from tui.render import metrics, xray
from tui.screens.explain import ExplainScreen

SIZE = (120, 40)


def make_app(lang: str = "en") -> TokensimApp:
    """A paused, seeded app without animation on the default configuration, fixed theme."""
    app = TokensimApp(default_config(), lang=lang, autoplay=False, seed=0)
    app.animation_level = "none"
    app.theme = "textual-dark"
    return app


def _body(app: TokensimApp) -> str:
    """The explain screen's text."""
    return str(app.screen.query_one("#explain-body", Static).render())


async def test_e_opens_cycles_and_remembers() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.advance_ticks(40)
        await pilot.press("e")
        assert isinstance(app.screen, ExplainScreen) and app.screen.figure == "step"
        assert "step time = max(" in _body(app) and "x-ray" in _body(app)
        await pilot.press("e")
        assert app.screen.figure == FIGURES[1] and "bandwidth use = bytes" in _body(app)
        await pilot.press("left", "left")
        assert app.screen.figure == FIGURES[-1]
        await pilot.press("escape")
        assert not isinstance(app.screen, ExplainScreen)
        await pilot.press("e")
        assert app.screen.figure == FIGURES[-1]  # the next `e` opens the last one explained


async def test_click_on_a_figure_opens_its_own() -> None:
    app = make_app("zh")
    async with app.run_test(size=SIZE) as pilot:
        app.advance_ticks(200)
        panel = app.query_one("#metrics")
        w = panel.content_size.width
        # The TPOT figure: right half of the third row of the metrics panel (border 1, padding 1).
        await pilot.click("#metrics", offset=(2 + w * 3 // 4, 1 + 2))
        assert isinstance(app.screen, ExplainScreen) and app.screen.figure == "tpot"
        assert "TPOT = (最后一个 token" in _body(app)
        await pilot.press("escape")
        await pilot.click("#kvqueue", offset=(5, 1))
        assert isinstance(app.screen, ExplainScreen) and app.screen.figure == "kv"
        await pilot.press("escape")
        await pilot.click("#xray", offset=(5, 1))
        assert app.screen.figure == "step"
        # The warehouse: its memory bar is the KV pool's fill, its bandwidth row the bandwidth use.
        for y, fig in ((1, "kv"), (3, "bw")):
            await pilot.press("escape")
            await pilot.click("#warehouse", offset=(10, y))
            assert app.screen.figure == fig, y


def test_metrics_figure_at_matches_the_layout() -> None:
    for width, rows in ((50, metrics.PAIRS), (30, tuple((k,) for k in metrics.PRIORITY))):
        for y, names in enumerate(rows):
            for j, name in enumerate(names):
                # The batch-1 row is explained with $/Mtok out, the figure it is priced beside.
                want = "cost_out" if name == "cost_b1" else name
                assert metrics.figure_at(width, j * (width // len(names)) + 1, y) == want
        assert metrics.figure_at(width, 0, len(rows)) is None
    assert set(metrics.PRIORITY) - {"cost_b1"} <= set(FIGURES)  # (cost_b1 opens cost_out, above)


@pytest.mark.parametrize("seconds,width", [([9.86, 0.77, 0.0, 0.0, 1.5], 40), ([1.0, 0.0, 0.0, 0.0, 0.001], 10),
                                           ([0.0, 0.0, 3.0, 1.0, 1.0], 7), ([0, 0, 0, 0, 0], 5)])
def test_xray_widths_fill_the_bar_in_proportion(seconds: list[float], width: int) -> None:
    w = xray.widths(seconds, width)
    total = sum(seconds)
    assert sum(w) == (width if total else 0)
    for s, n in zip(seconds, w, strict=True):
        assert (n > 0) == (s > 0)
        if total:
            assert abs(n - s / total * width) <= 1.0 + 1e-9


def test_xray_rows_are_the_steps_segments() -> None:
    app = make_app()
    app.advance_ticks(40)
    frame = build_frame(app.engine.snapshot(), lang="en")
    x = step_xray(frame.step, frame.snapshot.opts.ideal)
    rows = xray.render(frame, 50, 2)
    assert len(rows) == 2 and all(r.cell_len == 50 for r in rows)
    tail = " = step " + xray.dur(x.time_s)  # the step total, labelled as such (issue #31)
    assert rows[0].plain.endswith(tail)
    cells = 50 - len(tail)
    # Each segment's run of the bar is its share of the step time, to a cell.
    runs = dict.fromkeys(xray.COLOURS.values(), 0)
    for sp in rows[0].spans:
        colour = str(sp.style).rsplit(" on ", 1)[-1]
        if colour in runs:
            runs[colour] += sp.end - sp.start
    for name, secs in x.segments():
        assert runs[xray.COLOURS[name]] == pytest.approx(secs / x.time_s * cells, abs=1.0), name
    assert f"weights {xray.dur(x.weights)}" in rows[0].plain  # the widest segment carries its label
    assert f"weights {xray.dur(x.weights)}" in rows[1].plain and f"fixed {xray.dur(x.overhead)}" in rows[1].plain
    idle = build_frame(app.engine.snapshot(), step=None, lang="en")
    assert [r.plain.strip() for r in xray.render(idle, 50, 2)] == ["", ""]


def test_snapshot_explain_screen(snap_compare: Any) -> None:
    """The step-time formula over the floor after 60 ticks, with the x-ray bar beside the roofline."""

    async def run_before(pilot: Any) -> None:
        pilot.app.advance_ticks(60)
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)
