"""The pure renderers: frame in, rows of exactly the requested width out, in both languages."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from rich.cells import cell_len

from engine.physics.step import StepModel, StepOptions
from engine.serving.snapshot import Phase
from tests.tui.snapdata import make_snapshot
from tui.frame import Frame, build_frame, user_rows
from tui.i18n import EN, ZH, default_lang, t
from tui.render import header, kvqueue, l2, metrics, roofline, sm_grid, traffic, users, warehouse
from tui.render.answers import answer_tail, corpus
from tui.render.fmt import bar, crop_left, dur, fit, si

RENDERERS = [warehouse.render, traffic.render, l2.render, sm_grid.render, roofline.render, metrics.render,
             kvqueue.render]


def test_label_tables_have_the_same_keys() -> None:
    assert set(EN) == set(ZH)


def test_default_lang_follows_the_locale() -> None:
    assert default_lang({"LANG": "zh_CN.UTF-8"}) == "zh"
    assert default_lang({"LC_ALL": "en_US.UTF-8", "LANG": "zh_CN.UTF-8"}) == "en"
    assert default_lang({"LC_ALL": "zh_TW.UTF-8"}) == "zh"
    assert default_lang({}) == "en"


def test_fit_and_crop_count_cjk_as_two_cells() -> None:
    assert cell_len(fit("解码", 7)) == 7
    assert crop_left("abc解码", 4) == "解码"
    assert cell_len(crop_left("解码中文", 5)) == 5  # a half character is padded, never split
    assert fit("decoding", 3) == "dec"


def test_bar_is_exactly_as_wide_as_asked() -> None:
    for frac in (0.0, 0.01, 0.5, 0.999, 1.0, 2.0, float("nan")):
        for w in (1, 7, 30):
            assert cell_len(bar(frac, w)) == w
            assert cell_len(bar(frac, w, full="▤", empty="·")) == w


def test_number_formats() -> None:
    assert si(3.35e12, "B/s") == "3.35 TB/s"
    assert dur(0.00836) == "8.36 ms"
    assert dur(None) == "-"
    assert dur(float("nan")) == "-"


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("width", [30, 44, 58, 80])
def test_every_panel_row_is_exactly_the_width(lang: str, width: int) -> None:
    frame = build_frame(make_snapshot(8), progress=0.4, lang=lang, clock_s=1.0)
    for render in RENDERERS:
        rows = render(frame, width, 6)
        assert rows, render
        for row in rows:
            assert cell_len(row.plain) == width, (render.__module__, row.plain)
    assert cell_len(header.render(frame, width).plain) == width
    assert cell_len(header.keybar(lang, width).plain) == width
    for y in range(frame.row_count + 2):
        assert cell_len(users.row(frame, y, width + 40).plain) == width + 40


@pytest.mark.parametrize("fleet", [False, True])
def test_keybar_lists_every_bound_key_when_wide_and_drops_from_the_middle(fleet: bool) -> None:
    # Wide: every key the footer knows, settings (o) included; narrow: help and quit stay, the last knobs go first.
    wide = header.keybar("en", 400, fleet).plain
    for key, label in header.FLEET_KEYS if fleet else header.KEYS:
        assert f"{key} {t('en', label)}" in wide
    assert "o settings" in wide and "o 设置" in header.keybar("zh", 400, fleet).plain
    narrow = header.keybar("en", 100, fleet).plain
    assert narrow.rstrip().endswith("? help  q quit") and "o settings" not in narrow and "space play" in narrow


def test_panels_never_exceed_their_height() -> None:
    frame = build_frame(make_snapshot(4))
    for render in RENDERERS:
        assert len(render(frame, 50, 2)) <= 2
        assert render(frame, 50, 0) == []


def test_warehouse_split_adds_up_to_the_gpu_memory() -> None:
    frame = build_frame(make_snapshot(6))
    w, used, free, res = warehouse.capacity_split(frame)
    assert w + used + free + res == pytest.approx(frame.snapshot.hardware.memory_bytes)
    assert w == pytest.approx(28e9)  # C01: 14e9 parameters x 2 bytes
    bar_row = warehouse.capacity_bar(frame, 50).plain
    assert len(bar_row) == 50 and bar_row.startswith("█" * 17)  # 28/80 of 50 cells


def test_full_kv_pool_fills_the_kv_share() -> None:
    frame = build_frame(make_snapshot(6, kv_full=True))
    _, used, free, _ = warehouse.capacity_split(frame)
    assert free == 0 and used > 40e9
    assert "░" not in warehouse.capacity_bar(frame, 60).plain


def test_a_pool_held_small_with_kv_blocks_is_drawn_as_held() -> None:
    """--kv-blocks 3000 on qwen2.5-7b holds a 2.8 GB pool in 57 GB of room: the warehouse drew used blocks as a
    share of the whole room (KV 28.5/56.8 GB at half full); it draws the pool the engine runs."""
    s = make_snapshot(6)
    held = dataclasses.replace(s, kv_pool_bytes=4e9, kv_blocks_used=s.kv_blocks_total // 2)
    frame = build_frame(held)
    w, used, free, res = warehouse.capacity_split(frame)
    assert used == pytest.approx(2e9, rel=1e-3) and w + used + free + res == pytest.approx(s.hardware.memory_bytes)
    assert "KV 2.0/4.0" in warehouse.legend(frame, 80).plain
    assert warehouse.kv_pool(build_frame(s)) == s.kv_capacity_bytes  # no --kv-blocks: what memory leaves


def test_layer_follows_progress() -> None:
    snap = make_snapshot(4)
    assert build_frame(snap, progress=0.0).layer == 1
    assert build_frame(snap, progress=0.64).layer == 31  # int(0.64 * 48) + 1
    assert build_frame(snap, progress=1.0).layer == 48
    assert "layer 31/48" in traffic.layer_bar(build_frame(snap, progress=0.64), 60).plain


def test_static_frame_without_animation_does_not_depend_on_the_clock() -> None:
    snap = make_snapshot(4)
    a = build_frame(snap, clock_s=1.0, animate=False)
    b = build_frame(snap, clock_s=1.3, animate=False)
    assert a.phase == b.phase == 0.0
    assert traffic.conveyor(a, 60).plain == traffic.conveyor(b, 60).plain
    assert [r.plain for r in sm_grid.render(a, 60, 5)] == [r.plain for r in sm_grid.render(b, 60, 5)]


def test_animation_moves_with_the_steps_progress_only() -> None:
    snap = make_snapshot(4)
    a = build_frame(snap, progress=0.5, animate=True)
    b = build_frame(snap, progress=0.5 + 1 / 48 / 3, animate=True)  # a third of a layer on: two cells
    again = build_frame(snap, progress=0.5, clock_s=7.0, animate=True)
    assert traffic.conveyor(a, 60).plain == traffic.conveyor(again, 60).plain
    assert traffic.conveyor(a, 60).plain != traffic.conveyor(b, 60).plain


def test_sm_grid_lights_the_busy_share() -> None:
    # Batch-1 decode: compute is ~1 % of the step (C19), so 1-2 of 132 SMs are lit.
    snap = make_snapshot(1, phases=[Phase.DECODING])
    frame = build_frame(snap)
    assert 1 <= sm_grid.lit_count(frame) <= 2
    lit = sum(r.plain.count(sm_grid.LIT) for r in sm_grid.render(frame, 60, 5))
    assert lit == sm_grid.lit_count(frame)
    idle = build_frame(make_snapshot(2, phases=[Phase.QUEUED, Phase.DONE]))
    assert sm_grid.lit_count(idle) == 0


def test_roofline_puts_batch_one_decode_left_of_the_ridge() -> None:
    frame = build_frame(make_snapshot(1, phases=[Phase.DECODING]))
    ai, achieved = roofline.point(frame)
    peak, bw = roofline.roof(frame)
    assert ai < peak / bw
    assert achieved <= min(peak, ai * bw)
    text = "\n".join(r.plain for r in roofline.render(frame, 56, 8))
    assert "●" in text and "memory-bound" in text


def test_compute_x2_raises_the_roof() -> None:
    base = build_frame(make_snapshot(2))
    x2 = build_frame(make_snapshot(2, opts=StepOptions(compute_mult=2.0)))
    assert roofline.roof(x2)[0] == pytest.approx(2 * roofline.roof(base)[0])
    assert "compute×2" in header.render(x2, 120).plain


def test_metrics_show_dashes_for_unknown_figures() -> None:
    snap = make_snapshot(3)
    snap = dataclasses.replace(snap, metrics={"ttft_p50": float("nan")})
    text = " ".join(r.plain for r in metrics.render(build_frame(snap), 60, 6))
    assert "TTFT p50" in text and "-" in text


def test_zh_metrics_columns_line_up() -> None:
    frame = build_frame(make_snapshot(3), lang="zh")
    its = metrics.items(frame)
    rows = metrics.render(frame, 60, 7)
    starts = set()
    for row, names in zip(rows, metrics.PAIRS, strict=True):
        if len(names) < 2:
            continue  # a row of its own (at batch 1) spans the panel
        label, value, _ = its[names[0]]
        starts.add(cell_len(row.plain[:row.plain.index(value, len(label))]))
    assert len(starts) == 1  # every value starts in the same cell column, whatever its label's width


def test_sparkline_keeps_peaks_when_squeezed() -> None:
    s = kvqueue.sparkline([0.0] * 99 + [1.0] + [0.0] * 100, 10, 1.0)
    assert len(s) == 10 and "█" in s


def test_user_rows_one_per_user_latest_request() -> None:
    snap = make_snapshot(4)
    r = snap.requests
    # Give user 0 a second, newer request: the list shows only the newer one.
    req = dataclasses.replace(r, **{f.name: np.append(getattr(r, f.name), getattr(r, f.name)[0])
                                   for f in dataclasses.fields(r)})
    req.req_id[-1] = 9999
    rows = user_rows(dataclasses.replace(snap, requests=req))
    assert len(rows) == 4
    assert req.req_id[rows[0]] == 9999


def test_open_loop_requests_each_get_a_row() -> None:
    snap = make_snapshot(5, open_loop=True)
    assert len(user_rows(snap)) == 5
    assert users.row(build_frame(snap), 0, 80).plain.strip().startswith("#1000")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_user_row_per_phase(lang: str) -> None:
    frame = build_frame(make_snapshot(6), lang=lang)
    rows = [users.row(frame, y, 110).plain for y in range(6)]
    for y, key in enumerate(["phase_decoding", "phase_prefill", "phase_thinking", "phase_decoding", "phase_queued",
                             "phase_done"]):
        assert t(lang, key) in rows[y]
    assert "400/1,000" in rows[1]  # prefill progress
    assert "“" in rows[0] and "/200" in rows[0]  # the answer streaming, tokens of the answer
    assert "✓200" in rows[5]
    assert "KV" not in rows[5]  # a finished request holds no KV blocks


def test_answers_are_deterministic_and_fit() -> None:
    for lang in ("en", "zh"):
        tokens, starts = corpus(lang)
        assert len(tokens) > 300 and starts[0] == 0
        a = answer_tail(lang, 42, 120, 50)
        assert a == answer_tail(lang, 42, 120, 50)
        assert 0 < cell_len(a) <= 50
        assert answer_tail(lang, 42, 0, 50) == ""
        # One more token extends the same answer.
        assert answer_tail(lang, 42, 121, 10_000).startswith(answer_tail(lang, 42, 120, 10_000))
    assert answer_tail("en", 1, 3, 100).count(" ") == 2  # three words
    assert cell_len(answer_tail("zh", 1, 3, 100)) == 6  # three characters


def _engine_frame(**cfg: object) -> Frame:
    from engine.config import EngineConfig
    from engine.serving.engine import Engine

    eng = Engine(EngineConfig(**cfg))  # type: ignore[arg-type]
    res = None
    for _ in range(8):
        res = eng.step()
    return build_frame(eng.snapshot(), step=res.cost if res else None, progress=0.5, clock_s=eng.clock,
                       rate=float(cfg.get("rate", 0.0)))  # type: ignore[arg-type]


@pytest.mark.parametrize("model", ["generic-14b", "deepseek-v3", "gpt-oss-120b", "llama-3.1-405b", "qwen3-235b-a22b",
                                   "mixtral-8x7b"])
def test_real_engine_frames_render_for_big_and_moe_models(model: str) -> None:
    frame = _engine_frame(hardware="b200", model=model, tp=8, users=5, prompt="300", output="50")
    for render in RENDERERS:
        # The roofline's peak row may be one cell over on petaFLOP parts (its "1.98 P" label); the widget crops it.
        assert all(cell_len(r.plain) in (70, 71 if render is roofline.render else 70) for r in render(frame, 70, 6))
    assert cell_len(header.render(frame, 120).plain) == 120
    assert "×8" in header.render(frame, 120).plain


def test_open_loop_and_idle_frames_render() -> None:
    frame = _engine_frame(users=0, rate=5.0, prompt="200", output="20")
    assert frame.snapshot.users == 0
    assert "req/s" in header.render(frame, 120).plain
    for y in range(frame.row_count):
        assert cell_len(users.row(frame, y, 100).plain) == 100
    idle = build_frame(frame.snapshot, step=None)
    assert "idle" in traffic.layer_bar(idle, 60).plain or "no step" in traffic.layer_bar(idle, 60).plain


# ---- issue #31: lessons the floor shows on its own, one truth per figure ------------------------------------

def test_metrics_show_reading_beside_writing() -> None:
    snap = dataclasses.replace(make_snapshot(3), metrics={"tok_s_in": 52_000.0, "tok_s_out": 310.0})
    text = " ".join(r.plain for r in metrics.render(build_frame(snap), 60, 6))
    assert "tok/s in/out" in text and "52,000/310" in text


def test_metrics_batch_is_the_shown_steps_as_the_roofline_says() -> None:
    """The metrics' batch sits beside the shown step's time: both are of one step (a replayed one included), as the
    roofline's point is; the snapshot's batch only when no step is shown (issue 31, 3)."""
    snap = make_snapshot(6)
    one = StepModel(snap.hardware, snap.model, snap.opts).decode(1, 1000)
    frame = build_frame(dataclasses.replace(snap, batch_size=4), step=one, dilation=300.0)
    text = metrics.render(frame, 60, 1)[0].plain
    assert text.split("batch")[1].split()[0] == "1" and "(batch 1)" in roofline.header(frame, 60).plain
    idle = build_frame(dataclasses.replace(snap, batch_size=4), step=None)
    assert metrics.render(idle, 60, 1)[0].plain.split("batch")[1].split()[0] == "4"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_metrics_show_what_one_user_alone_would_pay(lang: str) -> None:
    """Batching's saving on the floor: $/Mtok out at batch 1 beside today's, and the ratio, on a row of its own."""
    snap = dataclasses.replace(make_snapshot(3), metrics={"cost_per_mtok_out": 1.44, "cost_per_mtok_out_batch1": 7.6})
    rows = [r.plain for r in metrics.render(build_frame(snap, lang=lang), 56, 7)]
    assert len(rows) == 7 and "1.44" in rows[5]
    want = "$/Mtok out 7.60 · 5.3x today's" if lang == "en" else "输出 $/百万 7.60 · 现在的 5.3 倍"
    assert ("at batch 1" if lang == "en" else "批大小为 1") in rows[6] and want in rows[6]
    assert metrics.figure_at(56, 30, 6) == "cost_out"  # a click on it explains $/Mtok out


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_users_title_counts_preemptions_so_far(lang: str) -> None:
    snap = dataclasses.replace(make_snapshot(6), preemptions_total=72)
    title = users.title(build_frame(snap, lang=lang))
    assert "72" in title and ("preempted 72 so far" in title if lang == "en" else "累计抢占 72" in title)


def test_xray_labels_the_step_total_as_the_step_not_a_segment() -> None:
    from tui.render import xray
    frame = build_frame(make_snapshot(6), progress=0.4)
    row = xray.render(frame, 56, 1)[0].plain
    assert row.rstrip().endswith(f"= step {dur(frame.step.time_s)}")


def test_l2_says_what_a_refill_count_means() -> None:
    frame = build_frame(make_snapshot(6), progress=0.4)
    st = frame.step
    words = l2.render(frame, 58, 2)[1].plain
    assert f"{si(float(st.bytes_total), 'B')} pass this 50 MB shelf" in words
    assert f"{-(-st.l2_refills // 1):,.0f} refills" in words
    idle = l2.render(build_frame(make_snapshot(6, phases=[Phase.DONE] * 6)), 58, 2)[1].plain
    assert "a step's - pass" in idle and ": - refills" in idle


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_behind_badge_says_what_it_means_when_there_is_room(lang: str) -> None:
    frame = dataclasses.replace(build_frame(make_snapshot(6), lang=lang), behind=True, speed=5.0)
    wide, narrow = header.render(frame, 120).plain, header.render(frame, 80).plain
    assert t(lang, "behind_long", s="5") in wide and "×5" in t(lang, "behind_long", s="5")
    assert t(lang, "behind") in narrow and t(lang, "behind_long", s="5") not in narrow
    assert cell_len(wide) == 120 and cell_len(narrow) == 80


def test_kv_tier_hits_are_one_short_line_on_the_kv_panel() -> None:
    """With KV tiers the KV panel's title carries their hit shares; without, the line is empty (title unchanged)."""
    from tui.widgets.kvqueue import KvQueue

    snap = dataclasses.replace(make_snapshot(4), kv_tiers={"gpu": 0.12, "host": 0.05, "disk": 0.7})
    assert kvqueue.tier_hits(build_frame(snap)) == "hits GPU 12 % · host 5.0 % · disk 70 %"
    assert kvqueue.tier_hits(build_frame(snap, lang="zh")) == "命中 GPU 12 % · 主机 5.0 % · 磁盘 70 %"
    assert KvQueue().title_for(build_frame(snap)) == "KV pool and queue over time · hits GPU 12 % · host 5.0 % · disk 70 %"
    assert kvqueue.tier_hits(build_frame(make_snapshot(4))) == ""
    assert KvQueue().title_for(build_frame(make_snapshot(4))) == "KV pool and queue over time"


def test_xray_bar_splits_communication_by_collective_and_shows_a_bubble() -> None:
    from engine.physics.xray import XRay
    from tui.render import xray

    x = XRay(weights=0.010, kv=0.0, compute=0.0, communication=0.003, overhead=0.001, hidden_memory=0.0,
             hidden_compute=0.0, time_s=0.020, bubble=0.006, collectives=(("AR two-shot", 0.002), ("A2A", 0.001)))
    names = [(seg, word) for seg, word, _ in xray.pieces(x, "en")]
    assert ("communication", "AR two-shot") in names and ("communication", "A2A") in names
    assert ("bubble", "PP bubble") in names and ("communication", "comm") not in names
    legend = xray.legend(x, "en", 200).plain
    assert "AR two-shot 2.00 ms" in legend and "A2A 1.00 ms" in legend and "PP bubble 6.00 ms" in legend
    narrow = xray.bar(dataclasses.replace(x, collectives=(("AR two-shot", 0.003),), bubble=0.0, time_s=0.014), 28)
    assert " AR " in narrow.plain  # too narrow for "AR two-shot": the collective's kind, not nothing
