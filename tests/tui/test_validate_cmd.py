"""`tokensim validate` as a user runs it: JSON shape, one-table filter, Rich summary, bad input."""

from __future__ import annotations

import json

import pytest

from tui.cli import main


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit code, stdout, stderr)."""
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_the_issue_shape(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["validate", "--table", "qwen25", "--json"], capsys)
    assert code == 0
    d = json.loads(out)
    code, out, _ = run_cli(["validate", "--table", "trtllm", "--json"], capsys)
    d["tables"] += json.loads(out)["tables"]
    assert set(d) == {"tables"} and [t["name"] for t in d["tables"]] == ["qwen25", "trtllm"]
    for t in d["tables"]:
        assert set(t) == {"name", "rows", "median_abs_err_pct", "max_abs_err_pct", "heldout", "unrepresented",
                          "coverage"}
        assert set(t["heldout"]) == {"median_abs_err_pct", "max_abs_err_pct"}
        r = t["rows"][0]
        assert {"measured", "predicted", "err_pct", "split", "source"} <= set(r)


def test_one_table_and_a_runtime_override(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["validate", "--table", "qwen25", "--json"], capsys)
    own = json.loads(out)["tables"]
    assert code == 0 and [t["name"] for t in own] == ["qwen25"]
    code, out, _ = run_cli(["validate", "--table", "qwen25", "--runtime-override", "trtllm", "--json"], capsys)
    other = json.loads(out)["tables"][0]
    assert code == 0 and {r["sim"]["runtime"] for r in other["rows"]} == {"trtllm"}
    assert other["rows"][0]["predicted"] != own[0]["rows"][0]["predicted"]


def test_rich_output_shows_errors_and_held_out(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["validate", "--table", "trtllm"], capsys)
    assert code == 0 and "held-out" in out and "median |err|" in out and "DeepSeek-R1-0528" in out


@pytest.mark.parametrize("args", [["validate", "--table", "nope"], ["validate", "--runtime-override", "nope"]])
def test_bad_input_is_one_line_and_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(args, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "nope" in err


def test_the_vllm_campaign_prints_each_experiment_and_the_median_errors(capsys: pytest.CaptureFixture[str],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.evidence.replay as replay

    monkeypatch.setattr(replay, "STAGE_REQUESTS", 12)  # a short replay: the shape, not the figures
    code, out, _ = run_cli(["validate", "--table", "vllm015", "--json"], capsys)
    t = json.loads(out)["tables"][0]
    assert code == 0 and t["name"] == "vllm015" and len(t["rows"]) == 18 and t["unrepresented"] == []
    for k in ("ttft", "itl", "e2e"):
        errs = sorted(abs(r[k]["err_pct"]) for r in t["rows"])
        assert t[f"{k}_median_abs_err_pct"] == pytest.approx((errs[8] + errs[9]) / 2)  # 18: the middle two
        r = t["rows"][0][k]
        assert r["err_pct"] == pytest.approx(100 * (r["predicted_ms"] - r["measured_ms"]) / r["measured_ms"])
    code, out, _ = run_cli(["validate", "--table", "vllm015"], capsys)
    assert code == 0 and "median |err| over 18 experiments" in out and "mixtral-8x7b" in out
    assert max(len(line) for line in out.splitlines()) <= 120
