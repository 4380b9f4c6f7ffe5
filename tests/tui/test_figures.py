"""One truth per figure: a figure shown in two places has one definition, and its window is on screen."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.serving.engine import Engine
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
    assert before.batch_size == 0 and cost.seqs > 0
    assert f"you (batch {cost.seqs})" in roofline.header(frame, 80).plain


def test_the_calibrated_step_is_shown_as_its_floor_plus_overhead() -> None:
    """'16.0 ms = 8.48 ms floor + 7.53 ms overhead': the floor is the ideal step model's price of the same step."""
    from dataclasses import replace as dc_replace

    from engine.physics.batch import Batch
    from engine.physics.step import StepModel, StepOptions
    from tui.render.fmt import dur

    eng = Engine(dc_replace(default_config(), users=1, prompt="1", output="4000", think_time="0"))
    for _ in range(3):
        eng.step()
    snap = eng.snapshot()
    frame = build_frame(snap)
    st = snap.last_step
    # Batch-1 decode at context ~3: the ideal step model prices the same step (the floor of scene 1).
    ideal_sm = StepModel(snap.hardware, snap.model, StepOptions(ideal=True))
    ideal = ideal_sm.cost(Batch.of_rows(snap.model, [1], [3]))
    assert figures.floor_s(frame) == pytest.approx(ideal.time_s, rel=1e-3)
    over = st.time_s - figures.floor_s(frame)
    assert over > 0.001
    text = traffic.summary(frame, 80).plain
    assert f"{dur(st.time_s)} = {dur(figures.floor_s(frame))} floor + {dur(over)} overhead" in text


def test_more_users_fill_the_pool_and_build_a_queue_within_seconds() -> None:
    """The load knob teaches: + up the ladder to 192 users and half a minute of simulated time."""
    import asyncio

    from tui.app import TokensimApp

    async def go() -> tuple[float, int, int]:
        app = TokensimApp(default_config(), lang="en", autoplay=False)
        async with app.run_test(size=(120, 40)) as pilot:
            while app.config.users < 192:
                await pilot.press("+")
            app.advance_time(30.0)
            s = app.frame.snapshot
            return s.kv_blocks_used / s.kv_blocks_total, s.queued + s.preempted, s.preemptions_total

    kv, waiting, preempted = asyncio.run(go())
    assert kv > 0.95 and waiting > 0 and preempted > 0
