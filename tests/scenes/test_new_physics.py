"""The scenes for the second wave's physics (prefix caching, speculative decoding, P/D, routers, a real trace).

Each plays headless with its checkpoints holding (test_director plays every shipped scene); here: each asks at least
one question, each checkpoint discriminates (a scene changed so the physics it shows is absent fails the very
checkpoint that shows it), the fleet action's file checks, and scene 5 names the SM grid's own figure.
"""

from __future__ import annotations

from importlib import resources

import pytest

from engine.errors import InputError
from scenes.director import Director
from scenes.schema import find_scene, load_shipped, parse_text

NEW = ("prefix-cache", "speculative", "prefill-decode-split", "router", "trace-bursts")


def _text(sid: str) -> tuple[str, str]:
    """A shipped scene's file name and its TOML text."""
    s = find_scene(sid)
    name = s.path.rsplit("/", 1)[-1]
    return name, resources.files("scenes").joinpath("data", name).read_text(encoding="utf-8")


def _variant(sid: str, old: str, new: str) -> Director:
    """The shipped scene with one piece of its file changed (the change must apply), ready to play."""
    name, text = _text(sid)
    assert text.count(old) == 1, old
    return Director(parse_text(text.replace(old, new), f"scenes/data/{name}"), "en")


def _failed(d: Director) -> set[tuple[str, str | None]]:
    """(metric, vs_mark) of every checkpoint that does not hold in a headless play."""
    return {(c["metric"], c.get("vs_mark")) for c in d.play_headless()["checkpoints"] if not c["ok"]}


def test_the_new_scenes_are_shipped_in_order_after_the_articles_and_each_asks() -> None:
    # (test_director plays every shipped scene, in both languages, with every checkpoint holding; test_quiz has
    # the engine answer every question.)
    by_id = {s.id: s for s in load_shipped()}
    scenes = [by_id[sid] for sid in NEW]
    assert [s.number for s in scenes] == list(range(18, 18 + len(NEW)))
    for s in scenes:
        assert any(st.question for st in s.steps) and s.claims, s.id


def test_prefix_cache_checkpoints_need_the_cache() -> None:
    # With the cache already on from the start, turning it "on" changes nothing: the TTFT and cost drops vanish.
    d = _variant("prefix-cache", "prefix_caching = false", "prefix_caching = true")
    assert {("ttft_p50_ms", "off"), ("cost_in_all_per_mtok", "off")} <= _failed(d)
    # The cache never turned on: no hits, no cached-token price.
    d = _variant("prefix-cache", "{ set_prefix_caching = true }", "{ set_prefix_caching = false }")
    assert {("prefix_hit_pct", None), ("cached_vs_fresh_in_x", None), ("ttft_p50_ms", "off")} <= _failed(d)


def test_speculation_checkpoints_see_acceptance_and_the_compute_bound_loss() -> None:
    # Drafts that are never accepted buy nothing at batch 1.
    assert ("tok_s_per_user", "plain") in _failed(_variant("speculative", "spec_accept = 0.7", "spec_accept = 0.0"))
    # Drafts always accepted: four tokens per step pay for the longer compute-bound step, no loss at 256 users.
    assert ("tok_s_out", "crowd") in _failed(_variant("speculative", "spec_accept = 0.7", "spec_accept = 1.0"))


def test_pd_checkpoints_fail_without_the_split() -> None:
    # Step 2 runs the same four replicas colocated again: TPOT keeps its stalls, and there is no KV copy.
    failed = _failed(_variant("prefill-decode-split", ', pd = "1:3" }', " }"))
    assert {("fleet_tpot_p99_ms", "together"), ("fleet_tpot_spread_x", None), ("fleet_kv_copy_ms", None)} <= failed


def test_router_checkpoints_fail_when_the_router_stays_blind() -> None:
    d = _variant("router", 'actions = [{ run_fleet = { replicas = 4, router = "least-loaded" } }]',
                 'actions = [{ run_fleet = { replicas = 4, router = "round-robin" } }]')
    assert {("fleet_ttft_p90_s", "blind"), ("fleet_queue_delay_p90_s", "blind")} <= _failed(d)


def test_trace_checkpoints_fail_at_the_recorded_pace() -> None:
    d = _variant("trace-bursts", "{ set_trace_speed = 8.0 }", "{ set_trace_speed = 1.0 }")
    assert {("kv_peak_pct", None), ("queue_delay_p99_s", "recorded")} <= _failed(d)


def test_the_trace_scene_names_its_source() -> None:
    _, text = _text("trace-bursts")
    for lang in ("en", "zh"):
        narration = Director(find_scene("trace-bursts"), lang).current_narration()
        assert "CC-BY 4.0" in narration and "Splitwise" in narration and "Azure" in narration
    assert all(n in text for n in ("Patel", "Choukse", "Bianchini", "ISCA 2024"))  # the full attribution


@pytest.mark.parametrize(("value", "msg"), [
    ({"router": "least-loaded"}, r"replicas: missing"),
    ({"replicas": 4, "router": "random"}, r"router: unknown router 'random'"),
    ({"replicas": 4, "pd": "1:2"}, r"pd: 1:2 is 3 replicas, but replicas is 4"),
    ({"replicas": 4, "pd": "0:4"}, r"pd: --pd 0:4 leaves no prefill replica"),
    ({"replicas": 4, "pd": 3}, r'pd: expected "P:D"'),
    ({"replicas": 0}, r"replicas"),
    ({"replicas": 4, "speed": 2}, r"speed: unknown field 'speed'"),
    ("4", r"expected a table"),
])
def test_run_fleet_values_are_checked_with_one_line_naming_the_field(value: object, msg: str) -> None:
    from scenes.actions import ACTIONS
    from scenes.checks import Ctx

    with pytest.raises(InputError, match=msg) as e:
        ACTIONS["run_fleet"].check(Ctx("s.toml"), "steps[0].actions[0].run_fleet", value)
    assert str(e.value).startswith("s.toml: steps[0].actions[0].run_fleet") and "\n" not in str(e.value)


def test_fleet_figures_before_any_fleet_ran_fail_the_checkpoint_not_the_play() -> None:
    d = _variant("router", '[{ run_fleet = { replicas = 4, router = "round-robin" } }, { mark = "blind" }]',
                 '[{ run_ticks = 1 }, { mark = "blind" }]')
    res = d.evaluate()
    assert res and not res[0].ok and "no fleet has run yet" in res[0].error


def test_scene_five_names_the_sm_grids_mfu() -> None:
    from tui.frame import Frame
    from tui.render.figures import mfu
    from tui.render.sm_grid import title

    d = Director(find_scene("compute-x2"), "en")
    snap = d.engine.snapshot()
    frame = Frame(snapshot=snap, step=snap.last_step, step_tick=snap.tick, progress=1.0, clock_s=snap.time_s,
                  speed=1.0, playing=False, lang="en", animate=False, steps_in_frame=1)
    assert d.value("live_mfu_pct") == pytest.approx(100 * mfu(frame), rel=1e-12)
    shown = f"{d.value('live_mfu_pct'):.1f} %"
    assert shown in d.current_narration() and shown in title(frame), (d.current_narration(), title(frame))
    assert "busy" not in d.current_narration()


def test_a_fleet_the_engine_refuses_is_one_line_naming_the_scene_and_the_action() -> None:
    # A fleet needs a bounded workload (it serves the traffic to its end): without `requests` it refuses.
    with pytest.raises(InputError) as e:
        _variant("router", "requests = 300\n", "")
    msg = str(e.value)
    assert msg.startswith("scenes/data/21-router.toml: run_fleet: ") and "requests" in msg and "\n" not in msg


@pytest.mark.parametrize(("line", "msg"), [
    ('workload = "system-prompt"', r"setup.workload: unknown scene workload .*'system-prompt'.*did you mean"),
    ('trace = "azure-conv"', r"setup.trace: unknown bundled trace 'azure-conv'"),
    ("spec_tokens = 40", r"setup.spec_tokens"),
    ("spec_accept = 1.5", r"setup.spec_accept: expected a fraction between 0 and 1"),
    ('spec_draft = "eagle"', r"setup.spec_draft: unknown drafter 'eagle'"),
    ("prefix_caching = 1", r"setup.prefix_caching: expected true or false"),
])
def test_the_new_setup_keys_are_checked_with_one_line_naming_the_key(line: str, msg: str) -> None:
    name, text = _text("router")
    with pytest.raises(InputError, match=msg):
        parse_text(text.replace('model = "qwen2.5-32b"\n', f'model = "qwen2.5-32b"\n{line}\n', 1), name)
