"""Fast-forward lets the engine skip quiet decode runs; slow motion still steps one tick at a time."""

from __future__ import annotations

import pytest

from engine.serving.engine import Engine
from engine.serving.lane import Lane
from tui.app import TokensimApp
from tui.defaults import default_config


def _count_lane_steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patch Lane.step to count its calls (a quiet run skipped by jump() never calls it)."""
    calls = [0]
    real = Lane.step

    def counted(self: Lane, limit: float, tick: int, want: bool = True) -> object:
        calls[0] += 1
        return real(self, limit, tick, want)

    monkeypatch.setattr(Lane, "step", counted)
    return calls


def test_fast_forward_skips_quiet_ticks_with_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    ref = Engine(default_config())
    while ref.clock < 20.0:
        ref.step()
    calls = _count_lane_steps(monkeypatch)
    app = TokensimApp(default_config(), lang="en", autoplay=False)
    app.advance_time(20.0)
    eng = app.engine
    assert eng.tick == ref.tick and eng.clock == ref.clock
    assert eng.requests_completed == ref.requests_completed
    assert calls[0] < eng.tick // 2  # most ticks were quiet decode steps priced in one go
    assert app.frame.step == ref.snapshot().last_step  # the frame shows the last step as stepping would


def test_slow_motion_steps_one_tick_per_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    app = TokensimApp(default_config(), lang="en", autoplay=False)
    app.advance_ticks(50)
    calls = _count_lane_steps(monkeypatch)
    tick = app.engine.tick
    app.advance_time(1e-6)  # inside one step: the view crosses it in slow motion
    assert app.engine.tick == tick + 1 and calls[0] == 1
