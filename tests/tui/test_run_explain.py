"""`tokensim run --explain` and `--trace-out` from the command line: the JSON key and its sums, the Rich tables,
the trace file, and bad paths as one line with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tui.cli import main

ARGS = ["run", "--users", "48", "--requests", "150", "--prompt", "uniform:200,1500", "--output", "uniform:20,200",
        "--kv-blocks", "700"]


def test_json_without_explain_has_no_explain_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "explain" not in plain
    assert main([*ARGS, "--json", "--explain"]) == 0
    out = json.loads(capsys.readouterr().out)
    x = out.pop("explain")
    assert out == plain  # --explain adds its key and changes nothing else
    for key in ("ttft_s", "e2e_s"):
        mean = x[key]["mean"]
        assert sum(mean[p] for p in x["parts"]) == pytest.approx(out[key]["mean"], rel=1e-9)
        assert x[key]["p99"]["request"] >= 0


def test_per_request_records_add_up_to_each_requests_e2e(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #31.8: every finished request's own split, its parts summing to its E2E, so the slow ones show."""
    assert main([*ARGS, "--json", "--explain"]) == 0
    out = json.loads(capsys.readouterr().out)
    x = out["explain"]
    pr = x["per_request"]
    assert pr["columns"] == ["request", *x["parts"], "e2e"]
    assert len(pr["rows"]) == x["requests"] == out["requests_completed"]
    assert len({r[0] for r in pr["rows"]}) == len(pr["rows"])  # one row per request
    for r in pr["rows"]:
        assert sum(r[1:-1]) == pytest.approx(r[-1], rel=1e-9, abs=1e-12)
    e2e = sorted(r[-1] for r in pr["rows"])
    assert e2e[len(e2e) // 2] == pytest.approx(out["e2e_s"]["p50"], rel=0.05)
    slowest = max(pr["rows"], key=lambda r: r[-1])
    assert slowest[-1] == pytest.approx(max(e2e))
    pre = pr["columns"].index("preempted")
    assert any(r[pre] > 0 for r in pr["rows"])  # 700 KV blocks for 48 users: some were evicted, and it shows


def test_rich_report_prints_where_latency_went(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--explain"]) == 0
    text = capsys.readouterr().out
    assert "where TTFT went" in text and "where end to end went" in text
    for part in ("queue", "prefill", "decode", "preempted", "recompute", "path"):
        assert part in text
    assert "slowest requests" in text


def test_trace_out_writes_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.json"
    assert main([*ARGS, "--json", "--trace-out", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    ev = json.loads(path.read_text())["traceEvents"]
    assert sum(1 for e in ev if e["ph"] == "e") == out["requests_completed"]
    assert sum(1 for e in ev if e["ph"] == "X") <= out["ticks"]


@pytest.mark.parametrize("where", ["missing-dir/run.json", "."])
def test_bad_trace_path_is_one_line_exit_2(tmp_path: Path, where: str) -> None:
    p = subprocess.run([sys.executable, "-m", "tui.cli", *ARGS, "--trace-out", str(tmp_path / where)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "--trace-out" in p.stderr
    assert "Traceback" not in p.stderr
