"""Traffic you can see: one step replayed time-dilated from the engine's clock, and what each panel draws
at a given point of a step (issue 17 item 2)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from engine.serving.engine import Engine
from engine.serving.snapshot import Phase
from tests.tui.snapdata import make_snapshot
from tui.defaults import default_config
from tui.frame import Batch, batch_of, build_frame
from tui.playback import REPLAY_HOLD_WALL_S, Playback, replay_wall
from tui.render import l2, palette, sm_grid, traffic, users, warehouse

FRAME = 1 / 30


def play(pb: Playback, seconds: float, speed: float = 1.0) -> None:
    """Wall `seconds` of live play at `speed`, 30 frames a second."""
    for _ in range(round(seconds / FRAME)):
        pb.advance(FRAME * speed, speed=speed)


def playing(seconds: float = 6.0) -> Playback:
    """The default floor after `seconds` of real-time play (past the first replay, of the first prompts)."""
    pb = Playback.start(Engine(default_config()))
    play(pb, seconds)
    return pb


def test_a_fast_step_is_replayed_slowly_while_the_counters_run_in_real_time() -> None:
    # At 7 s the replay is of a step whose answers run on past its sweep (a replay ends early once they are all
    # done: test_playback), so it plays whole here.
    pb = playing(7.0)
    rp = pb.replay
    assert rp is not None and rp.cost.time_s < 0.05  # a ~12 ms decode step: 48 layers in under half a frame
    wall = replay_wall(rp.cost.layers)
    assert wall == pytest.approx(4.8) and rp.factor == pytest.approx(wall / rp.cost.time_s)
    # The step picked is the one in flight when the replay began (picked in proportion to its time).
    assert rp.pre.time_s <= rp.start <= rp.post.time_s and rp.post.tick == rp.tick
    tick0, p0 = pb.snap.tick, rp.progress(pb.view_clock)
    play(pb, 1.0)
    view = pb.step_view()
    assert pb.replay is rp and view.step is rp.cost and view.dilation == rp.factor
    assert view.progress == pytest.approx(p0 + 1.0 / wall, abs=FRAME / wall)  # from the clock: 1 s of 4.8 s
    assert pb.snap.tick > tick0 + 50 and view.snapshot is pb.snap  # the live state ran on ~80 steps meanwhile
    play(pb, wall + REPLAY_HOLD_WALL_S)
    assert pb.replay is not rp and pb.replay is not None and pb.replay.tick > rp.tick


def test_the_replay_keeps_its_place_when_the_speed_changes() -> None:
    # Long answers: at 10x the replayed step's sequences still run a second later, so the replay is not ended
    # early for being stale (test_playback) and its pace alone is measured.
    pb = Playback.start(Engine(replace(default_config(), output="4000")))
    play(pb, 6.0)
    before = pb.replay.progress(pb.view_clock)
    pb.retime(10.0)
    assert pb.replay.progress(pb.view_clock) == pytest.approx(before)
    play(pb, 1.0, speed=10.0)  # the replay's wall pace does not change with the counters' speed
    assert pb.replay.progress(pb.view_clock) == pytest.approx(before + 1 / replay_wall(48), abs=0.02)


def test_slow_enough_steps_play_live_and_a_static_view_never_replays() -> None:
    pb = playing()
    pb.retime(0.001)  # as the app does on a speed change
    play(pb, 6.0, speed=0.001)  # 12 ms steps take 12 s each: watched live, no replay
    assert pb.replay is None and pb.step_view().dilation == 0.0
    still = Playback.start(Engine(default_config()))
    for _ in range(60):
        still.advance(FRAME)  # no speed: animation_level "none"
    assert still.replay is None


def test_the_batch_of_a_decode_step_and_of_a_prefill_step() -> None:
    eng = Engine(default_config())
    s0 = eng.snapshot()
    eng.step()
    s1 = eng.snapshot()
    first = batch_of(s0, s1)  # four prompts read whole, each with its first token
    r = s1.requests
    running = r.phase != Phase.QUEUED
    assert first.ids.tolist() == sorted(r.req_id[running].tolist())
    assert first.new.tolist() == (r.prompt_len[running] + 1).tolist() and not first.ctx.any()
    eng.step()
    second = batch_of(s1, eng.snapshot())  # the four answers, one token each, reading their prompts' KV
    decode = second.new == 1  # (with them, the two prompts that were waiting, read whole)
    assert second.ids[decode].tolist() == first.ids.tolist() and second.ctx[decode].tolist() == first.new.tolist()
    assert second.new[~decode].tolist() == (r.prompt_len[~running] + 1).tolist()


def frame_at(progress: float, phases: list[int], **kw: object) -> object:
    """A frame `progress` of the way through the snapshot's step, with its batch."""
    snap = make_snapshot(len(phases), phases=phases)
    r = snap.requests
    run = np.isin(r.phase, (Phase.PREFILL, Phase.THINKING, Phase.DECODING))
    new = np.where(r.phase == Phase.PREFILL, 600, 1)[run]
    batch = Batch(r.req_id[run], new, (r.prefilled + r.generated)[run])
    return build_frame(snap, progress=progress, batch=batch, **kw)


def lit_cells(frame: object, width: int = 60, height: int = 5) -> list[int]:
    """Indices of the lit SM cells."""
    rows = sm_grid.render(frame, width, height)
    cells = "".join(row.plain.replace(" ", "") for row in rows)
    return [i for i, ch in enumerate(cells) if ch == sm_grid.LIT]


def test_a_quarter_into_a_decode_step_a_few_workstations_work_at_a_quarter_of_the_grid() -> None:
    f = frame_at(0.25, [Phase.DECODING])
    assert f.layer == 13 and sm_grid.lit_count(f) == 1
    assert lit_cells(f) == [33]  # int(0.25 x 132): one lap of the grid per step
    assert lit_cells(frame_at(0.5, [Phase.DECODING])) == [66]
    # Weights: the cell holding layer 13 of 48 is the one being read; the KV in use lights with it.
    row = warehouse.capacity_bar(f, 60)
    heads = [i for i, ch in enumerate(row.plain) if ch == "▓"]
    weights_cells = row.plain.index("░") - 1  # the weights then the (one-cell) KV in use
    assert heads == [int(12 / 48 * weights_cells), weights_cells]
    styles = {str(span.style) for span in row.spans}
    assert palette.WEIGHTS_HOT in styles and palette.KV_READ in styles


def test_a_prefill_lights_whole_rows_a_decode_step_a_few() -> None:
    prefill = frame_at(0.25, [Phase.PREFILL, Phase.DECODING])
    decode = frame_at(0.25, [Phase.DECODING, Phase.DECODING])
    _, per_row = sm_grid.layout(132, 60, 5)
    p, d = lit_cells(prefill), lit_cells(decode)
    assert len(p) >= 2 * per_row and len(d) <= 2
    assert p[0] % per_row == 0  # whole rows, starting at a row's first cell
    assert traffic.kind(prefill) == "prefill 600 tok + decoding ×1" and traffic.kind(decode) == "decoding ×2"


def test_the_shelf_fills_and_empties_with_each_layer() -> None:
    layer = 1 / 48
    at = [l2.fill(frame_at(12 * layer + k * layer / 4, [Phase.DECODING])) for k in range(4)]
    assert at == pytest.approx([0.0, 0.25, 0.5, 0.75], abs=1e-9)
    half = l2.shelf(frame_at(12.5 * layer, [Phase.DECODING]), 60).plain
    assert half.count("▤") + half.count("▦") + half.count("▥") == pytest.approx(half.count("·"), abs=1)
    assert "▦" in half  # the users' KV crates sit on the shelf with the weights
    assert l2.fill(frame_at(1.0, [Phase.DECODING])) == 1.0


def test_the_conveyor_moves_one_train_per_layer() -> None:
    a = traffic.conveyor(frame_at(0.25, [Phase.DECODING]), 60).plain
    b = traffic.conveyor(frame_at(0.25 + 1 / 48, [Phase.DECODING]), 60).plain
    w = a.index(" L2 ") - 4
    belt_a, belt_b = a[4:4 + w], b[4:4 + w]
    assert belt_b[traffic.TRAIN:] == belt_a[:w - traffic.TRAIN] and traffic.CRATE in belt_a


def test_users_in_the_step_have_their_kv_read_then_get_a_token() -> None:
    phases = [Phase.DECODING, Phase.QUEUED, Phase.DECODING]
    mid, end = frame_at(0.4, phases), frame_at(1.0, phases)
    r = mid.snapshot.requests
    for y in range(3):
        i = int(mid.rows[y])
        in_step = int(r.phase[i]) == Phase.DECODING
        pieces = users.row_pieces(mid, y, 100)
        assert (palette.KV_READ in [style for _, style in pieces]) is in_step
        assert ("▾" in users.row(end, y, 100).plain) is in_step
    none = build_frame(mid.snapshot, progress=0.4)  # no batch known: no marks
    assert "▸" not in users.row(none, 0, 100).plain


def test_the_title_says_how_much_slower_the_step_is_shown() -> None:
    f = replace(frame_at(0.3, [Phase.DECODING]), dilation=411.4)
    assert traffic.title(f) == "traffic · one step, shown 411× slower"
    assert "411" in traffic.title(replace(f, lang="zh"))
    assert traffic.title(replace(f, dilation=0.0)) == "traffic HBM → L2 → SM"
