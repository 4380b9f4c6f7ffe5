"""`tokensim scene` and `tokensim tour` from the command line (headless paths; the app has its own tests)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from scenes.schema import load_shipped
from tui.cli import main


def test_scene_lists_every_scene(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scene", "--lang", "en"]) == 0
    out = capsys.readouterr().out
    for s in load_shipped():
        assert s.id in out


def test_scene_json_lists_id_title_and_claims(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scene", "--json", "--lang", "zh"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == [s.id for s in load_shipped()]
    assert rows[0]["title"] == load_shipped()[0].title.zh
    assert all(r["claims"] and all(c.startswith("C") for c in r["claims"]) for r in rows)


def test_scene_headless_json_has_the_documented_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scene", "compute-x2", "--headless", "--json", "--lang", "en"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["id"] == "compute-x2"
    assert res["checkpoints"] and all({"claim", "metric", "expected", "actual", "ok"} <= set(c)
                                      for c in res["checkpoints"])
    assert {c["claim"] for c in res["checkpoints"]} == {"C02", "C08", "C19"}


def test_scene_headless_prints_narration_and_results(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scene", "1", "--headless", "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "warehouse" in out and "C02" in out and "checkpoints hold" in out and "✗" not in out


def test_unknown_scene_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scene", "compute-x3", "--headless"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean compute-x2" in err


def test_a_broken_scene_file_is_one_line_and_exit_2(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    p = Path(str(tmp_path)) / "mine.toml"
    p.write_text('id = "mine"\n', encoding="utf-8")
    assert main(["scene", str(p), "--headless"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{p}: title" in err


def test_tour_headless_checks_every_scene(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tour", "--headless", "--lang", "en", "--start", "13"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    scenes = [line for line in lines if not line.startswith("    ")]
    assert [line.split()[1] for line in scenes] == [s.id for s in load_shipped()[12:]]
    # Each question, as asked, and the choice the engine's figure picked.
    asked = [line.strip() for line in lines if line.startswith("    ? ")]
    assert len(asked) == sum(st.question is not None for s in load_shipped()[12:] for st in s.steps) >= 2
    assert any("→ 2) about 13 ms (drain_ms = 13.09)" in q for q in asked), asked


def test_headless_scene_prints_the_question_then_the_engines_answer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scene", "compute-x2", "--headless", "--lang", "en"]) == 0
    out = capsys.readouterr().out
    ask = out.index("? One user is decoding; a step takes")
    answer = out.index("→ the engine's answer: 3) the same time (step_ms/before = 1)")
    assert ask < out.index("   1) half the time") < answer < out.index("The step now takes 1.000x") < out.index(
        "Press compute x2")


def test_headless_scene_never_imports_textual() -> None:
    code = ("import sys\nfrom tui.cli import main\nmain(['scene', 'warehouse', '--headless', '--json'])\n"
            "sys.stderr.write(str('textual' in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip().endswith("False")
