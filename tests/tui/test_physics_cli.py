"""`tokensim list`, `step` and `claims` as a user runs them: output, JSON keys, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tui.cli import main


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_step_json_has_the_issue_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["step", "--batch", "1", "--context", "0", "--ideal", "--json"], capsys)
    assert code == 0
    d = json.loads(out)
    for k in ("time_s", "bytes_total", "bytes", "flops_total", "bound", "arithmetic_intensity", "ridge", "l2_refills"):
        assert k in d
    assert round(d["time_s"] * 1e3, 2) == 8.36
    assert set(d["bytes"]) == {"weights", "kv_read", "kv_write", "activations"}
    assert d["bound"] == "memory" and round(d["l2_refills"]) == 560


def test_step_prefill_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["step", "--prompt", "4096", "--json", "--ideal"], capsys)
    d = json.loads(out)
    assert code == 0 and d["kind"] == "prefill" and d["bound"] == "compute" and d["arithmetic_intensity"] > d["ridge"]


def test_step_rich_breakdown_names_both_columns(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["step", "--model", "mixtral-8x7b", "--hardware", "h200", "--batch", "8"], capsys)
    assert code == 0
    assert "ideal (peak, no overhead)" in out and "calibrated (vllm)" in out
    assert "experts touched per MoE layer" in out


def test_list_tables(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["list", "hardware", "--json"], capsys)
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and round(rows["h100-sxm"]["ridge_bf16"]) == 295
    code, out, _ = run_cli(["list", "models"], capsys)
    assert code == 0 and "generic-14b" in out and "deepseek-v3" in out
    code, out, _ = run_cli(["list", "models", "--json"], capsys)
    kinds = {r["name"]: r["kind"] for r in json.loads(out)}
    assert kinds["llama-4-maverick"] == "MoE+chunked" and kinds["gpt-oss-20b"] == "MoE+SWA"


def test_claims_json_rows(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["claims", "--json"], capsys)
    rows = json.loads(out)
    assert code == 0 and [r["id"] for r in rows] == [f"C{i:02d}" for i in range(1, 27)]
    for r in rows:
        assert {"id", "article", "simulated", "unit", "agrees"} <= set(r)
    by = {r["id"]: r for r in rows}
    assert by["C02"]["agrees"] and round(by["C02"]["simulated"], 2) == 8.36
    assert by["C04"]["agrees"] and round(by["C04"]["simulated"]) == 560
    assert by["C16"]["simulated"] == 2048 and "per layer" in by["C16"]["note"]
    assert by["C12"]["exact"] == pytest.approx(153.0, abs=0.1)  # A100, the exception, shown beside


@pytest.mark.parametrize(("args", "needle"), [
    (["step", "--hardware", "h100"], "unknown hardware 'h100' (did you mean"),
    (["step", "--model", "qwen-14b"], "unknown model 'qwen-14b'"),
    (["step", "--model", "qwen2.5-72b"], "does not fit on h100-sxm"),
    (["step", "--batch", "512", "--context", "32000", "--model", "qwen2.5-14b"], "KV cache of 512 sequences"),
    (["step", "--batch", "0"], "must be a whole number between 1 and"),
    (["step", "--batch", "-3"], "must be a whole number between 1 and"),
    (["step", "--context", "x"], "must be a whole number between 0 and"),
    (["step", "--prompt", "40000", "--model", "qwen2.5-14b"], "exceeds qwen2.5-14b's context window"),
    (["step", "--model", "missing.toml"], "no such model file"),
    (["step", "--model", "qwen2.5-72b", "--tp", "3"], "--tp 3 does not split qwen2.5-72b's 64 attention heads"),
    (["claims", "C99"], "unknown claim 'C99'"),
    (["list", "gpus"], "invalid choice"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    """Run as a user would (a real process), so a traceback anywhere would show up on stderr."""
    p = subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert needle in lines[0]
    assert "Traceback" not in p.stderr


def test_malformed_model_file_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "config.json"
    f.write_text('{"num_hidden_layers": 4,,}')
    code, _, err = run_cli(["step", "--model", str(f)], capsys)
    assert code == 2 and "malformed JSON at line 1" in err and err.count("\n") == 1
