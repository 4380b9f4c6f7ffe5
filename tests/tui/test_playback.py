"""The playback clock: the view's time runs smoothly through the engine's atomic steps."""

from __future__ import annotations

import numpy as np
import pytest

from engine.serving.engine import Engine
from engine.serving.snapshot import Phase
from tui.defaults import default_config
from tui.playback import Playback


def test_slow_motion_shows_the_step_in_flight_and_its_results_at_its_end() -> None:
    pb = Playback.start(Engine(default_config()))
    first = pb.snap
    pb.advance(1e-6)  # the first step (four prompts) starts; the view is a sliver into it
    assert pb.steps_in_frame == 1 and pb.cost is not None
    span = pb.step_end - pb.step_start
    assert 0 < pb.progress() < 0.01
    pb.advance(span / 2)
    assert pb.progress() == pytest.approx((1e-6 + span / 2) / span)
    mid = pb.shown(pb.progress())
    r = mid.requests
    admitted = r.phase == Phase.PREFILL
    # The batch is in (the users list said "queued" here before), its prompts half read, no token yet.
    assert admitted.sum() == pb.cost.seqs == mid.running and first.running == 0
    assert np.all(r.prefilled[admitted] == (r.prompt_len[admitted] * ((1e-6 + span / 2) / span)).astype(int))
    assert np.all(r.generated == 0) and mid.tick == first.tick
    assert 0 < mid.bytes_moved["hbm"] < pb.snap.bytes_moved["hbm"]
    pb.advance(span)  # past its end (and into the next step)
    assert pb.snap.tick >= 1 and pb.shown(pb.progress()).requests.generated.max() >= 1


def test_fast_forward_shows_only_the_frames_end() -> None:
    pb = Playback.start(Engine(default_config()))
    pb.advance(2.0)
    assert pb.steps_in_frame > 1 and pb.progress() == 1.0 and pb.shown(1.0) is pb.snap
    assert pb.view_clock == pytest.approx(2.0) and pb.engine.clock >= 2.0


def test_ticks_part_and_resync() -> None:
    eng = Engine(default_config())
    pb = Playback.start(eng)
    pb.ticks(3)
    assert pb.snap.tick == 3 and pb.view_clock == eng.clock and pb.progress() == 1.0
    pb.part(0.25)
    assert pb.progress() == pytest.approx(0.25) and pb.shown(0.25).tick == 3 and pb.snap.tick == 4
    eng.step()  # someone else stepped it (a scene's director)
    pb.resync(last_step=True)
    assert pb.snap.tick == 5 and pb.cost is pb.snap.last_step and pb.steps_in_frame == 0
    eng.reset(default_config())
    pb.resync()
    assert pb.cost is None and pb.view_clock == 0.0


def test_a_replay_ends_when_the_sequences_it_ran_are_done() -> None:
    """At real time the opening prefill is replayed (a few seconds of sweep); once every request it ran has finished,
    the next frame replays a newer step instead of holding one whose answers are gone (issue 31, 3)."""
    pb = Playback.start(Engine(default_config()))
    pb.advance(1 / 30, speed=1.0)
    first = pb.replay
    assert first is not None and first.tick == 1 and bool((first.batch.new > 1).all())  # the opening prefill
    while not first.stale(pb.snap):
        assert pb.replay is first, "replaced while its requests still ran"
        pb.advance(1 / 30, speed=1.0)
    assert pb.view_clock < first.start + first.wall_s + 0.7  # finished before the replay's own end (sweep + hold)
    pb.advance(1 / 30, speed=1.0)
    assert pb.replay is not first and (pb.replay is None or pb.replay.tick > first.tick)
    if pb.replay is not None:
        assert not pb.replay.stale(pb.snap)
