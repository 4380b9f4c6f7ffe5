"""`tokensim replay RESULT`: measured vs predicted from each kind of file, stages, and one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tui.cli import main

DATA = Path(__file__).resolve().parent.parent / "data" / "results"


def _replay(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["replay", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_vllm_result_measured_against_predicted(capsys: pytest.CaptureFixture[str]) -> None:
    r = _replay(capsys, str(DATA / "vllm_bench_serve.json"))
    src = json.loads((DATA / "vllm_bench_serve.json").read_text())
    ttfts = [t for t, e in zip(src["ttfts"], src["errors"], strict=True) if not e]
    assert r["schema_version"] == 1 and r["format"] == "vllm-bench" and r["dropped"] == 1
    assert r["deployment"]["model"] == "qwen2.5-7b"  # from the file's model_id
    assert r["requests"] == {"measured": 12, "predicted": 12}
    assert r["ttft"]["measured_s"]["mean"] == pytest.approx(np.mean(ttfts))
    for k in ("ttft", "itl", "e2e"):
        m, p, e = r[k]["measured_s"], r[k]["predicted_s"], r[k]["err_pct"]
        assert 0 < p["p50"] <= p["p90"] <= p["p99"]
        assert e["p90"] == pytest.approx(100 * (p["p90"] - m["p90"]) / m["p90"])
    # a faster GPU predicts a shorter end-to-end latency for the same measured requests
    fast = _replay(capsys, str(DATA / "vllm_bench_serve.json"), "--bandwidth-mult", "2", "--compute-mult", "2")
    assert fast["e2e"]["predicted_s"]["mean"] < r["e2e"]["predicted_s"]["mean"]


def test_stages_and_traces(capsys: pytest.CaptureFixture[str]) -> None:
    g = _replay(capsys, str(DATA / "guidellm_benchmarks.json"))
    assert [s["requests"] for s in g["stages"]] == [6, 6]
    assert g["stages"][1]["ttft"]["measured_s"]["mean"] > g["stages"][0]["ttft"]["measured_s"]["mean"]
    t = _replay(capsys, str(DATA / "mooncake_trace.jsonl"), "--model", "qwen2.5-7b")
    assert t["measured"] is False and t["ttft"]["measured_s"]["mean"] is None
    assert t["requests"]["predicted"] == 6 and t["ttft"]["predicted_s"]["mean"] > 0


@pytest.mark.parametrize(("args", "says"), [
    (["vllm_bench_serve.json", "--model", "llama-3.1-8b"], "contradicts RESULT, which ran Qwen/Qwen2.5-7B-Instruct"),
    (["vllm_bench_serve.json", "--rate", "3"], "--rate contradicts RESULT"),
    (["vllm_bench_serve.json", "--output", "100"], "contradict RESULT"),
    (["aiperf_profile_export.jsonl"], "names no model; give --model"),
    (["README.md"], "not a result or trace format"),
    (["burstgpt.csv", "--format", "aiperf", "-m", "qwen2.5-7b"], "does not have the shape of AIPerf"),
])
def test_bad_input_is_one_line_and_nothing_written(capsys: pytest.CaptureFixture[str], args: list[str],
                                                   says: str) -> None:
    assert main(["replay", str(DATA / args[0]), *args[1:], "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and says in err and err.count("\n") == 1


def test_bench_json_round_trips_through_the_reader(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.evidence.measured.formats import read_result

    path = tmp_path / "bench.json"
    assert main(["run", "--rate", "6", "--requests", "60", "--bench-json", str(path), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    raw = json.loads(path.read_text())
    m = read_result(path)
    assert m.format == "vllm-bench" and len(m) == run["requests_completed"] == 60
    assert m.prompt.tolist() == raw["input_lens"] and m.output.tolist() == raw["output_lens"]
    assert int(m.prompt.sum()) == run["input_tokens"]  # the prompts served
    assert int(m.output.sum()) == run["output_tokens"]
    assert np.allclose(m.ttft, raw["ttfts"]) and np.allclose(m.e2e, raw["e2els"])
    assert np.allclose(m.arrival, np.array(raw["start_times"]) - raw["start_times"][0])
    assert np.allclose(m.itl, [np.mean(g) for g in raw["itls"]])
    assert raw["mean_ttft_ms"] == pytest.approx(1e3 * m.ttft.mean())
    # replaying tokensim's own prediction on the same deployment predicts what it measured
    r = _replay(capsys, str(path), "--scheduler", "continuous")
    assert r["e2e"]["err_pct"]["mean"] == pytest.approx(0, abs=1e-6)
