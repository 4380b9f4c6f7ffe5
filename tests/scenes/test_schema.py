"""Scene files: every shipped one validates; a broken one is rejected with the file and the field named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.errors import InputError
from scenes.schema import CLAIM_IDS, FLOOR_PARTS, find_scene, load_file, load_shipped, parse_text, shipped_files

GOOD = '''
id = "tiny"
title = { en = "Tiny", zh = "小" }
summary = { en = "A tiny scene.", zh = "一个小场景。" }

[setup]
hardware = "h100-sxm"
model = "generic-14b"
users = 1
prompt = "1"
output = "100"
ideal = true

[[steps]]
highlight = "warehouse"
actions = [{ run_ticks = 2 }, { mark = "start" }]
narration.en = "Step {step_ms_ideal:.2f} ms."
narration.zh = "一步 {step_ms_ideal:.2f} 毫秒。"

[[steps.checkpoints]]
claim = "C02"
metric = "step_ms_ideal"
expected = 8.36
tolerance = { rel = 0.01 }

[[steps]]
actions = [{ compute_mult = 2.0 }]
narration.en = "Now {step_ms/start:.2f}x."
narration.zh = "现在 {step_ms/start:.2f} 倍。"

[[steps.checkpoints]]
claim = "C08"
metric = "step_ms"
vs_mark = "start"
expected = 1.0
tolerance = { abs = 0.01 }
'''


def test_at_least_fourteen_scenes_with_unique_ids_in_order() -> None:
    scenes = load_shipped()
    assert len(scenes) >= 14
    assert len({s.id for s in scenes}) == len(scenes)
    assert [s.number for s in scenes] == list(range(1, len(scenes) + 1))


@pytest.mark.parametrize("name", shipped_files())
def test_every_shipped_scene_file_validates(name: str) -> None:
    path = Path(__file__).resolve().parents[2] / "scenes" / "data" / name
    scene = load_file(path)
    assert re.fullmatch(rf"\d\d-{re.escape(scene.id)}\.toml", name), "file name must be NN-<id>.toml"
    assert scene.title.en and scene.title.zh and scene.summary.en and scene.summary.zh
    assert scene.steps and scene.claims, "a scene must check at least one claim"
    assert set(scene.claims) <= set(CLAIM_IDS)
    assert 0 <= scene.key_step < len(scene.steps)
    for step in scene.steps:
        assert step.highlight is None or step.highlight in FLOOR_PARTS
        assert step.narration.en.strip() and step.narration.zh.strip()
        # Chinese narration is Chinese, English narration is not.
        assert re.search(r"[\u4e00-\u9fff]", step.narration.zh)
        assert not re.search(r"[\u4e00-\u9fff]", step.narration.en)


def test_a_good_file_parses() -> None:
    s = parse_text(GOOD, "x/01-tiny.toml")
    assert s.id == "tiny" and s.number == 1 and s.claims == ("C02", "C08")
    assert s.steps[0].actions[0].name == "run_ticks" and s.steps[1].checkpoints[0].vs_mark == "start"
    assert s.steps[0].checkpoints[0].rel == 0.01 and s.steps[1].checkpoints[0].abs == 0.01


# (what to change in GOOD, the field the error must name, a phrase it must contain)
BROKEN = [
    (('{ compute_mult = 2.0 }', '{ compute_mul = 2.0 }'), "steps[1].actions[0]", "unknown action 'compute_mul'"),
    (('{ compute_mult = 2.0 }', '{ compute_mult = -1 }'), "steps[1].actions[0].compute_mult", "> 0"),
    (('{ run_ticks = 2 }', '{ run_ticks = 2, mark = "x" }'), "steps[0].actions[0]", "one-key table"),
    (('narration.zh = "一步 {step_ms_ideal:.2f} 毫秒。"\n', ''), "steps[0].narration.zh", "missing"),
    (('"Step {step_ms_ideal:.2f} ms."', '"Step {step_mss:.2f} ms."'), "steps[0].narration.en",
     "unknown metric 'step_mss'"),
    (('"Step {step_ms_ideal:.2f} ms."', '"Step {step_ms_ideal:.2q} ms."'), "steps[0].narration.en", "format spec"),
    (('"Step {step_ms_ideal:.2f} ms."', '"Step {step_ms@later} ms."'), "steps[0].narration.en", "mark 'later'"),
    (('claim = "C02"', 'claim = "C27"'), "steps[0].checkpoints[0].claim", "unknown claim id 'C27'"),
    (('metric = "step_ms_ideal"', 'metric = "step_time"'), "steps[0].checkpoints[0].metric", "unknown metric"),
    (('tolerance = { rel = 0.01 }', 'tolerance = 0.01'), "steps[0].checkpoints[0].tolerance", "rel"),
    (('tolerance = { rel = 0.01 }', 'tolerance = { rel = -1 }'), "steps[0].checkpoints[0].tolerance.rel", ">= 0"),
    (('expected = 8.36', 'expected = "fast"'), "steps[0].checkpoints[0].expected", "expected a number"),
    (('vs_mark = "start"', 'vs_mark = "finish"'), "steps[1].checkpoints[0].vs_mark", "not set"),
    (('highlight = "warehouse"', 'highlight = "wherehouse"'), "steps[0].highlight", "did you mean warehouse"),
    (('users = 1', 'usres = 1'), "setup.usres", "did you mean users"),
    (('hardware = "h100-sxm"', 'hardware = "h100-sxn"'), "setup.hardware", "unknown hardware preset"),
    (('prompt = "1"', 'prompt = "uniform:5"'), "setup.prompt", "uniform"),
    (('id = "tiny"', 'id = "Tiny Scene"'), "id", "slug"),
    (('title = { en = "Tiny", zh = "小" }', 'title = "Tiny"'), "title", "both languages"),
    (('id = "tiny"', 'id = "tiny"\nauthor = "me"'), "author", "unknown field 'author'"),
    (('claim = "C08"', 'claim = "C08"\nexpect = 1'), "steps[1].checkpoints[0].expect", "did you mean expected"),
]


@pytest.mark.parametrize(("change", "field", "phrase"), BROKEN, ids=[b[1] + ":" + b[2][:20] for b in BROKEN])
def test_a_broken_file_names_the_file_and_the_field(tmp_path: Path, change: tuple[str, str], field: str,
                                                    phrase: str) -> None:
    old, new = change
    assert old in GOOD
    path = tmp_path / "07-broken.toml"
    path.write_text(GOOD.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_file(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: {field}"), msg
    assert phrase in msg, msg
    assert "\n" not in msg


def test_malformed_toml_and_missing_file_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("id = \n", encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(f"{bad}: malformed TOML")):
        load_file(bad)
    with pytest.raises(InputError, match="cannot read scene file"):
        load_file(tmp_path / "nope.toml")


def test_find_scene_by_id_number_and_path(tmp_path: Path) -> None:
    assert find_scene("compute-x2").id == "compute-x2"
    first = load_shipped()[0]
    assert find_scene("1").id == first.id and find_scene("01").id == first.id
    p = tmp_path / "mine.toml"
    p.write_text(GOOD, encoding="utf-8")
    assert find_scene(str(p)).id == "tiny"


def test_unknown_scene_suggests_close_ids() -> None:
    with pytest.raises(InputError, match=r"unknown scene 'compute-x3' \(did you mean compute-x2"):
        find_scene("compute-x3")
