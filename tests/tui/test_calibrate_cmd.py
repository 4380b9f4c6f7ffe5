"""`tokensim calibrate RESULT... -o FILE` and `--runtime-file FILE`: the profile written, then used by run; bad
input one line, exit 2 and no file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tui.cli import main

DATA = Path(__file__).resolve().parent.parent / "data" / "results"
FILES = [str(DATA / "vllm_bench_serve.json"), str(DATA / "guidellm_benchmarks.json")]


def test_calibrate_writes_a_profile_run_uses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lab.toml"
    assert main(["calibrate", *FILES, "-o", str(out), "--name", "lab", "--fit", "bw_eff", "--no-cross-validate",
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["schema_version"] == 1 and r["fitted"] == ["bw_eff"] and 0.4 <= r["constants"]["bw_eff"] <= 0.95
    assert sorted(r["rows"]) == sorted([FILES[0], FILES[1] + "#stage1", FILES[1] + "#stage2"])
    text = out.read_text()
    assert "[lab]" in text and f"bw_eff = {r['constants']['bw_eff']!r}" in text and "# Rows that fixed" in text
    assert main(["run", "--runtime-file", str(out), "-m", "qwen2.5-7b", "--rate", "2", "--requests", "20",
                 "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["runtime"] == "lab"
    assert main(["run", "--runtime-file", str(out), "--runtime", "sglang", "--rate", "2", "--requests", "20"]) == 2
    assert "both name the profile" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "says"), [
    ([str(DATA / "mooncake_trace.jsonl"), "-m", "qwen2.5-7b"], "a trace has no measured latencies"),
    ([FILES[0], "--fit", "bw_eff,nonsense"], "--fit nonsense: can fit bw_eff, flops_eff, step_overhead_s"),
    ([FILES[0], "--fit", "step_overhead_s"], "step_overhead_s: the files hold one load"),
    ([FILES[0], "--model", "llama-3.1-8b"], "contradicts RESULT"),
    ([FILES[0], "--folds", "1"], "--folds '1': a whole number from 2 to 10"),
])
def test_bad_input_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                  says: str) -> None:
    out = tmp_path / "p.toml"
    assert main(["calibrate", *args, "-o", str(out)]) == 2
    o, err = capsys.readouterr()
    assert says in err and err.count("\n") == 1 and o == "" and not out.exists()
