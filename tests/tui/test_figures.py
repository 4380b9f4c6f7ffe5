"""One truth per figure: a figure shown in two places has one definition, and its window is on screen."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.serving import Engine
from tui.defaults import default_config
from tui.frame import build_frame
from tui.render import figures, metrics, roofline, sm_grid, traffic, warehouse
from tui.render.fmt import pct


def _engine(ticks: int, **cfg: object) -> Engine:
    eng = Engine(EngineConfig(**cfg) if cfg else default_config())  # type: ignore[arg-type]
    for _ in range(ticks):
        eng.step()
    return eng


def test_one_step_window_gives_the_panels_and_the_metrics_the_same_figures() -> None:
    """After one step the rolling window IS that step: bandwidth use and MFU must agree to rounding."""
    eng = _engine(1)
    snap = eng.snapshot()
    frame = build_frame(snap)
    st = snap.last_step
    assert st is not None and st.tokens > 0
    assert figures.bandwidth_use(frame) == pytest.approx(st.bytes_total / st.time_s / snap.roof.bandwidth)
    assert figures.bandwidth_use(frame) == pytest.approx(snap.metrics["bw_util"], rel=1e-9)
    assert figures.mfu(frame) == pytest.approx(snap.metrics["mfu"], rel=1e-9)
    # The warehouse gauge, the belt and the SM grid all show these, saying "this step".
    gauge = warehouse.bandwidth_gauge(frame, 80).plain
    assert f"use {pct(figures.bandwidth_use(frame))} this step" in gauge
    assert traffic.density(frame) == figures.bandwidth_use(frame)
    assert f"MFU {pct(figures.mfu(frame))} this step" in sm_grid.title(frame)
    assert sm_grid.lit_count(frame) == max(1, round(figures.mfu(frame) * snap.hardware.sm_count))


def test_the_metrics_title_states_the_window() -> None:
    eng = _engine(400)
    snap = eng.snapshot()
    span, answers = figures.window(build_frame(snap))
    assert span == pytest.approx(eng.clock)  # fewer ticks than the history holds: the whole run
    assert answers == snap.done
    title = metrics.title(build_frame(snap))
    assert answers > 1
    assert title.startswith("metrics · last ") and f"p50 of {answers} answers" in title
    assert metrics.title(build_frame(_engine(3).snapshot())).endswith("no answer yet")
    assert metrics.title(build_frame(Engine(default_config()).snapshot())) == "metrics"
    assert "最近" in metrics.title(build_frame(snap, lang="zh"))


def test_roofline_batch_is_the_plotted_steps() -> None:
    """In slow motion the state shown is from before the step: the point's batch is the step's own."""
    eng = Engine(default_config())
    before = eng.snapshot()  # nobody admitted yet: batch 0
    cost = eng.step().cost
    frame = build_frame(before, step=cost, progress=0.3)
    assert before.batch_size == 0 and cost.seqs == 6
    assert "you (batch 6)" in roofline.header(frame, 80).plain
