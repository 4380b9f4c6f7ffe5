"""The director: every scene plays headless with all checkpoints holding; back and forth lands on the same state."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from scenes.actions import FleetRun
from scenes.director import Director, check
from scenes.schema import CLAIM_IDS, Checkpoint, load_shipped

SCENES = load_shipped()
IDS = [s.id for s in SCENES]


def _by_id(sid: str) -> Any:
    return next(s for s in SCENES if s.id == sid)


@pytest.mark.parametrize("sid", IDS)
def test_every_scene_plays_headless_with_all_checkpoints_holding(sid: str) -> None:
    result = Director(_by_id(sid), "en").play_headless()
    bad = [c for c in result["checkpoints"] if not c["ok"]]
    assert not bad, json.dumps(bad, indent=1, ensure_ascii=False)
    assert result["id"] == sid and result["ok"] is True
    assert len(result["steps"]) == len(_by_id(sid).steps)
    for c in result["checkpoints"]:
        assert {"claim", "metric", "expected", "actual", "ok"} <= set(c)
    json.dumps(result)  # JSON-ready (no NaN objects, no numpy scalars that json rejects)
    for st in result["steps"]:
        text = st["narration"]
        assert "{" not in text and "}" not in text, text
        assert "nan" not in text.lower().split() and " inf" not in text, text


@pytest.mark.parametrize("sid", IDS)
def test_chinese_narration_formats_with_live_figures(sid: str) -> None:
    d = Director(_by_id(sid), "zh")
    while True:
        text = d.current_narration()
        assert "{" not in text and "nan" not in text, text
        assert "memory" not in text and "compute" not in text, "text metrics read in Chinese"
        if not d.next():
            break


def test_the_scenes_cover_every_claim() -> None:
    covered = {c for s in SCENES for c in s.claims}
    assert covered == set(CLAIM_IDS), sorted(set(CLAIM_IDS) - covered)


def _state(d: Director) -> tuple[Any, ...]:
    """What a step shows: the engine's clock and tick, the config, the narration and the checkpoint values."""
    snap = d.engine.snapshot()
    return (d.index, snap.tick, round(snap.time_s, 12), d.config, d.probe, d.current_narration(),
            [(r.claim, r.metric, r.actual, r.ok) for r in d.evaluate()])


@pytest.mark.parametrize("sid", ["compute-x2", "kv-luggage", "context-wall", "moe-hospital"])
def test_prev_replays_to_exactly_the_state_a_straight_run_reaches(sid: str) -> None:
    scene = _by_id(sid)
    straight = Director(scene, "en")
    expected = [_state(straight)]
    while straight.next():
        expected.append(_state(straight))
    assert straight.index == len(scene.steps) - 1
    assert straight.next() is False
    for i in range(len(scene.steps) - 2, -1, -1):
        assert straight.prev() is True
        assert _state(straight) == expected[i]
    assert straight.prev() is False and straight.index == 0
    assert straight.next() is True and _state(straight) == expected[1]


def test_prev_reuses_the_same_engine_object() -> None:
    d = Director(_by_id("compute-x2"), "en")
    engine = d.engine
    d.next()
    d.prev()
    assert d.engine is engine, "the app holds the engine: going back must reset it in place"


def test_highlight_and_step_label_follow_the_step() -> None:
    scene = _by_id("l2-shelf")
    d = Director(scene, "en")
    assert d.current_highlight() == scene.steps[0].highlight and d.step_label() == f"1/{len(scene.steps)}"
    d.next()
    assert d.current_highlight() == scene.steps[1].highlight and d.step_label() == f"2/{len(scene.steps)}"


def test_an_engine_that_disagrees_fails_the_checkpoint() -> None:
    """The checkpoints really look at the engine: halve the bandwidth and the 8 ms floor no longer holds."""
    d = Director(_by_id("eight-ms-floor"), "en")
    d.next()
    d.engine.set_bandwidth_mult(0.5)
    d.config = d.engine.config
    res = {r.metric: r for r in d.evaluate()}
    assert not res["step_ms_ideal"].ok and res["step_ms_ideal"].actual == pytest.approx(16.72, rel=0.01)


@pytest.mark.parametrize(("op", "expected", "actual", "ok"), [
    ("approx", 10.0, 10.4, True), ("approx", 10.0, 10.6, False), (">", 1.0, 1.01, True), (">", 1.0, 1.0, False),
    (">=", 90, 90, True), ("<", 60, 59.9, True), ("<=", 20, 20.1, False),
])
def test_check_ops(op: str, expected: float, actual: float, ok: bool) -> None:
    cp = Checkpoint(claim="C01", metric="weights_gb", expected=expected, op=op, rel=0.05 if op == "approx" else None)
    assert check(cp, actual) is ok


def test_check_never_passes_nan_and_compares_text_exactly() -> None:
    assert check(Checkpoint(claim="C01", metric="weights_gb", expected=1.0, abs=1e9), math.nan) is False
    assert check(Checkpoint(claim="C09", metric="decode_bound", expected="memory", op="=="), "memory") is True
    assert check(Checkpoint(claim="C09", metric="decode_bound", expected="memory", op="=="), "compute") is False


# (claim, scene, metric): where a scene shows the same figure as the `tokensim claims` row, the two agree exactly.
SAME_FIGURE = [
    ("C01", "eight-ms-floor", "weights_gb"), ("C02", "eight-ms-floor", "step_ms_ideal"),
    ("C03", "reading-fast-writing-slow", "hbm_tb_100_tokens"), ("C04", "l2-shelf", "l2_refills"),
    ("C05", "l2-shelf", "tray_kb"), ("C06", "warehouse", "free_after_weights_gb"), ("C07", "warehouse", "hbm_vs_ssd"),
    ("C10", "eight-ms-floor", "reading_pace_x"), ("C11", "rubin-train", "drain_ms"), ("C12", "magic-300", "ridge"),
    ("C16", "kv-luggage", "kv_bytes_token_layer"), ("C19", "compute-x2", "sm_idle_pct_ideal"),
]


@pytest.mark.parametrize(("cid", "sid", "metric"), SAME_FIGURE)
def test_scene_figures_match_the_claims_table(cid: str, sid: str, metric: str) -> None:
    from engine.evidence.claims import compute

    row = compute([cid])[0]
    result = Director(_by_id(sid), "en").play_headless()
    actual = next(c["actual"] for c in result["checkpoints"] if c["claim"] == cid and c["metric"] == metric)
    assert actual == pytest.approx(row["simulated"], rel=1e-9), "every number has one home"


# One value each scene file could give every action of the table: (value, what the director shows after it).
_ACTION_VALUES: dict[str, tuple[Any, Any]] = {
    "set_users": (3, ("config", "users", 3)), "add_users": (2, ("config", "users", 3)),
    "compute_mult": (2.0, ("config", "compute_mult", 2.0)), "bandwidth_mult": (1.5, ("config", "bandwidth_mult", 1.5)),
    "weight_dtype": ("fp8", ("config", "weight_dtype", "fp8")), "kv_dtype": ("fp8", ("config", "kv_dtype", "fp8")),
    "set_model": ("qwen2.5-7b", ("config", "model", "qwen2.5-7b")),
    "set_hardware": ("h200", ("config", "hardware", "h200")),
    "set_scheduler": ("chunked", ("config", "scheduler", "chunked")),
    "set_prompt": ("100", ("config", "prompt", "100")), "set_output": ("50", ("config", "output", "50")),
    "set_think": ("10", ("config", "think", "10")), "set_think_time": ("0", ("config", "think_time", "0")),
    "set_fast_share": (0.5, ("config", "fast_share", 0.5)), "set_ideal": (True, ("config", "ideal", True)),
    "set_tp": (2, ("config", "tp", 2)), "set_max_batch": (8, ("config", "max_batch", 8)),
    "probe_batch": (7, ("probe", "batch", 7)), "probe_context": (900, ("probe", "context", 900)),
    "probe_prompt": (64, ("probe", "prompt", 64)), "run_seconds": (0.05, None), "run_ticks": (2, None),
    "mark": ("here", None), "reset": (True, None),
    "set_prefix_caching": (True, ("config", "prefix_caching", True)),
    "set_spec_tokens": (2, ("config", "spec_tokens", 2)), "set_spec_accept": (0.5, ("config", "spec_accept", 0.5)),
    "set_trace_speed": (2.0, ("config", "trace_speed", 2.0)),
    "run_fleet": ({"replicas": 2, "router": "round-robin", "pd": "1:1"}, ("fleet", "replicas", 2)),
    "set_ep": (2, ("config", "ep", 2)), "set_max_loras": (8, ("config", "max_loras", 8)),
    "set_kv_disk_gb": (10.0, ("config", "kv_disk_gb", 10.0)),
}
# Actions that need a scene whose setup they fit (an MoE model; LoRA adapters to hold; a KV pool that spills);
# every other action plays on compute-x2 with one user.
_ACTION_SCENES = {"set_ep": "moe-hospital", "set_max_loras": "adapters", "set_kv_disk_gb": "deeper-kv"}


@pytest.mark.parametrize("name", sorted(_ACTION_VALUES))
def test_every_action_of_the_table_is_checked_and_played(name: str) -> None:
    from scenes.actions import ACTIONS
    from scenes.checks import Ctx
    from scenes.schema import Action

    assert set(_ACTION_VALUES) == set(ACTIONS)
    value, shows = _ACTION_VALUES[name]
    checked = ACTIONS[name].check(Ctx("t.toml"), f"a.{name}", value)
    if name == "run_fleet":  # the table's value becomes a FleetRun; its fleet serves the scene's open-loop traffic
        assert checked == FleetRun(2, "round-robin", (1, 1))
        d = Director(_by_id("router"), "en")
        d.reconfigure(requests=20)
        d.apply(Action(name, checked))
        assert d.value("fleet_replicas") == 2 and d.value("fleet_prefill_replicas") == 1
        assert d.value("fleet_requests") == 20 and d.value("fleet_kv_copy_ms") > 0
        assert d.engine.tick == 0, "the fleet runs beside the floor's engine, which stays where it was"
        return
    assert checked == value
    d = Director(_by_id(_ACTION_SCENES.get(name, "compute-x2")), "en")
    if name not in _ACTION_SCENES:
        d.apply(Action("set_users", 1))
    before = (d.engine.tick, d.engine.snapshot().time_s)
    d.apply(Action(name, value))
    d._sync()
    if shows is not None:
        where, field, want = shows
        assert getattr(d.config if where == "config" else d.probe, field) == want
        if where == "config":
            assert getattr(d.engine.config, field) == want  # the engine took it (live or by a reset)
    elif name == "run_ticks":
        assert d.engine.tick == before[0] + value
    elif name == "run_seconds":
        assert d.engine.snapshot().time_s >= before[1] + value
    elif name == "mark":
        assert "here" in d.marks
    else:  # reset: back at t = 0
        assert d.engine.tick == 0


def test_scene_1s_words_for_input_dearer_than_output_hold() -> None:
    """Scene 1 says why $/Mtok in reads dearer than out at first: the one-token prompt's step also wrote the answer's
    first token, charged to input. So after k steps, out = in x (k-1)/k exactly; as the window fills they agree."""
    from engine.serving.engine import Engine
    from scenes.schema import find_scene

    scene = find_scene("eight-ms-floor")
    assert "first token" in scene.steps[2].narration.en and "第一个 token" in scene.steps[2].narration.zh
    e = Engine(scene.setup.config)
    for _ in range(10):
        e.step()
    m = e.rolling_metrics()
    assert m["cost_per_mtok_out"] == pytest.approx(m["cost_per_mtok_in"] * 9 / 10, rel=1e-3)
    for _ in range(390):
        e.step()
    m = e.rolling_metrics()
    assert m["cost_per_mtok_out"] == pytest.approx(m["cost_per_mtok_in"], rel=0.01)
