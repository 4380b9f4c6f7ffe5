"""`tokensim run` and `tokensim bench`: JSON keys and figures, the Rich report, and one-line bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tui.cli import main

RUN_KEYS = ("requests_completed", "input_tokens", "output_tokens", "sim_time_s", "throughput_out_tok_s", "ttft_s",
            "tpot_s", "e2e_s", "queue_delay_s", "kv_capacity_bytes", "kv_peak_bytes", "preemptions", "mfu", "bw_util",
            "cost_per_mtok_in", "cost_per_mtok_out")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a fresh process, so a traceback anywhere would show."""
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True, text=True, timeout=120)


def test_run_json_has_every_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--users", "64", "--prompt", "1000", "--output", "200", "--requests", "200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for k in RUN_KEYS:
        assert k in out, k
    for k in ("ttft_s", "tpot_s", "e2e_s"):
        assert set(out[k]) >= {"p50", "p90", "p99"}
        assert 0 < out[k]["p50"] <= out[k]["p90"] <= out[k]["p99"]
    assert set(out["queue_delay_s"]) >= {"p50", "p99"}
    assert out["requests_completed"] == 200 and out["output_tokens"] == 200 * 200
    assert out["input_tokens"] == 200 * 1000 and out["users"] == 64
    assert out["cost_per_mtok_out"] > out["cost_per_mtok_in"] > 0
    assert out["kv_peak_bytes"] <= out["kv_capacity_bytes"]


def test_default_bound_and_open_loop_duration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--rate", "5", "--duration", "20", "--prompt", "uniform:100,300", "--output",
                 "lognormal:100,0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["users"] == 0 and out["rate"] == 5 and out["sim_time_s"] >= 20
    assert 50 < out["requests_accepted"] < 150
    assert main(["run", "--users", "2", "--output", "5", "--prompt", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["requests_completed"] == 1000


def test_slo_goodput_and_fast_lane_sections(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--users", "20", "--fast-share", "0.2", "--requests", "60", "--slo-ttft", "10",
                 "--slo-tpot", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["slo_attainment"] == 1.0 and out["goodput_req_s"] > 0
    assert out["fast_lane"]["batch_p50"] <= 4 and out["normal_lane"]["requests_completed"] > 0


def test_rich_report_names_the_figures() -> None:
    r = cli("run", "--users", "8", "--requests", "20", "--think", "30", "--scheduler", "chunked")
    assert r.returncode == 0, r.stderr
    for words in ("TTFT (first visible token)", "TPOT", "queue delay", "$/Mtok", "KV pool", "MFU"):
        assert words in r.stdout, words


def test_a_json_run_loads_only_what_it_uses() -> None:
    """Issue 26's start-up target: `run --json` never imports Rich (it prints no table), the workload-file and
    trace readers, a snapshot's classes, the snapshot's pricing or the fleet: each is imported where it is used."""
    code = ("import contextlib, io, sys\n"
            "from tui.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(['run', '--requests', '1', '--json']) == 0\n"
            "unused = ('rich', 'engine.traffic.trace', 'engine.traffic.workload_file', 'engine.serving.snapshot',\n"
            "          'engine.physics.economics', 'engine.fleet.fleet', 'difflib')\n"
            "print(','.join(sorted(k for k in sys.modules if k.startswith(unused))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", f"a --json run imported: {out.stdout.strip()}"


@pytest.mark.parametrize("args,words", [
    (["--users", "4", "--rate", "2"], "contradict"),
    (["--users", "0"], "no workload"),
    (["--users", "0", "--rate", "0"], "no workload"),
    (["--prompt", "300000"], "context"),
    (["--output", "gamma:3"], "--output"),
    (["--rate", "3", "--think-time", "1"], "--think-time"),
    (["--model", "nope-7b"], "unknown model"),
    (["--fast-share", "1"], "--fast-share"),
    (["--users", "-3"], "--users"),
    (["--scheduler", "fifo"], "--scheduler"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], words: str) -> None:
    r = cli("run", *args, "--requests", "5")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_bench_json_engine_section() -> None:
    r = cli("bench", "--json", "--ticks", "300", "--users", "300", "--frames", "3", "--open-requests", "200")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    e = res["engine"]
    for k in ("ticks_per_s", "sim_tokens_per_s", "users", "batch_p50"):
        assert k in e
    assert e["users"] == 300 and e["ticks_per_s"] > 0 and e["batch_p50"] > 1 and e["ticks"] == 300
    # The varied-length row: the same engine with prompt and output lengths spread around the same means.
    v = res["engine_varied"]
    assert v["ticks_per_s"] > 0 and v["sim_s_per_wall_s"] > 0 and v["ticks"] == 300
    # ... in CPU time too (the figure issue 26 sets its target in): simulated seconds over the run's CPU seconds.
    sim = v["sim_s_per_wall_s"] * v["wall_s"]
    assert v["cpu_s"] > 0 and v["sim_s_per_cpu_s"] == pytest.approx(sim / v["cpu_s"])
    assert v["prompt"].startswith("uniform:") and v["output"].startswith("uniform:")
    # The open-loop rows run the commands to their bound (a fifth of the requests at rate 1), in CPU time.
    for key, rate, n in (("run_rate_10", 10, 200), ("run_rate_1", 1, 40)):
        o = res[key]
        assert o["command"].endswith(f"--rate {rate} --requests {n}") and o["requests"] == n
        assert o["sim_time_s"] > 0.5 * n / rate and o["sim_s_per_cpu_s"] == pytest.approx(o["sim_time_s"] / o["cpu_s"])
    assert 0 < res["startup"]["cpu_s"] < 30
    # The trace row replays the bundled sample to its end.
    tr = res["trace"]
    assert tr["requests"] == 300 and tr["sim_time_s"] > 84 and tr["wall_s"] > 0
    # The frame rows: CPU time per frame with 1,000 and with 10,000 users, each naming what it measured.
    for key, users in (("render", 1000), ("render_10000", 10_000)):
        f = res[key]
        assert f["users"] == users and f["frames"] == 3 and f"{users:,} users" in f["config"]
        assert 0 < f["frame_ms_p50"] <= f["frame_ms_p99"] and f["streaming"] > 0


def test_run_takes_a_vllm_serve_line_and_names_what_it_cannot_model(capsys: pytest.CaptureFixture[str]) -> None:
    """--vllm-args: the engine flags of `vllm serve` become the run's options; an unmodelled one is a note."""
    line = "vllm serve generic-14b --tensor-parallel-size 2 --max-num-seqs 16 --no-enable-prefix-caching --enforce-eager"
    assert main(["run", "--vllm-args", line, "--users", "4", "--requests", "20", "--json"]) == 0
    out, err = capsys.readouterr()
    r = json.loads(out)
    assert (r["tp"], r["max_batch"], r["prefix_caching"]) == (2, 16, False)
    assert err == "tokensim: note: vLLM's --enforce-eager is not modelled by tokensim: ignored\n"
    assert main(["run", "--speculative-config", "{not json", "--requests", "5"]) == 2
    assert "--speculative-config must be a JSON object" in capsys.readouterr().err


def test_expert_parallel_is_asked_for_by_tokensim_and_vllm_names(capsys: pytest.CaptureFixture[str]) -> None:
    """--ep N (or vLLM's --data-parallel-size N with --enable-expert-parallel) splits a MoE model's routed experts
    over N GPUs: a rank's decode step reads fewer expert weights, so it is faster; a dense model is refused."""
    times = {}
    for ep in (1, 4):
        assert main(["step", "--model", "qwen3-30b-a3b", "--ep", str(ep), "--batch", "64", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["ep"] == ep
        times[ep] = out["time_s"]
    assert times[4] < 0.7 * times[1]
    tpot = {}
    for extra in ([], ["--data-parallel-size", "4", "--enable-expert-parallel"]):
        argv = ["run", "--model", "qwen3-30b-a3b", "--users", "32", "--requests", "64", "--json", *extra]
        assert main(argv) == 0
        tpot[bool(extra)] = json.loads(capsys.readouterr().out)["tpot_p50"]
    assert tpot[True] < tpot[False]
    assert main(["run", "--ep", "2", "--requests", "5"]) == 2
    assert "needs a mixture-of-experts model" in capsys.readouterr().err
