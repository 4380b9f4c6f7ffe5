"""vLLM's own knob names on `tokensim run`, and their one-line errors."""

from __future__ import annotations

import json

import pytest

from tui.cli import main


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["run", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_vllm_names_are_aliases(capsys: pytest.CaptureFixture[str]) -> None:
    a = run_json(capsys, "--users", "8", "-n", "20", "--max-num-seqs", "4", "--max-num-batched-tokens", "2048")
    b = run_json(capsys, "--users", "8", "-n", "20", "--max-batch", "4", "--max-batched-tokens", "2048")
    assert a["max_batch"] == b["max_batch"] == 4 and a["max_batched_tokens"] == 2048
    assert a["sim_time_s"] == b["sim_time_s"] and a["batch_p50"] <= 4


def test_gpu_memory_utilization_sizes_the_pool(capsys: pytest.CaptureFixture[str]) -> None:
    hi = run_json(capsys, "-n", "8", "--gpu-memory-utilization", "0.9")
    lo = run_json(capsys, "-n", "8", "--gpu-memory-utilization", "0.6")
    assert hi["gpu_memory_utilization"] == 0.9
    assert hi["kv_capacity_bytes"] - lo["kv_capacity_bytes"] == pytest.approx(0.3 * 80e9)


def test_max_model_len_is_reported_and_enforced(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_json(capsys, "-n", "4", "--max-model-len", "4096", "--prompt", "3000")["max_model_len"] == 4096
    assert main(["run", "-n", "4", "--max-model-len", "4096", "--prompt", "5000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "context of 4,096 tokens" in err
    with pytest.raises(SystemExit) as e:
        main(["run", "--gpu-memory-utilization", "1.2"])
    assert e.value.code == 2


def test_workload_trace_and_speculation_flags(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    p = tmp_path / "w.toml"
    p.write_text("[[stage]]\nrate = 2\nduration = 20\n[[stage]]\nusers = 3\nduration = 10\n"
                 "[prompt]\ntokens = 300\nshared_prefix = 64\ngroups = 2\nusers_per_group = 2\n[output]\ntokens = 40\n")
    r = run_json(capsys, "--workload", str(p), "--spec-tokens", "2", "--spec-accept", "0.5")
    assert r["workload"] == str(p) and r["users"] == 0 and r["spec_tokens"] == 2
    assert len(r["stages"]) == 2 and r["stages"][1]["users"] == 3 and r["prefix_cache_hit_rate"] > 0.5
    for k in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        assert set(r[k]) == {"mean", "p50", "p90", "p99"}
    assert 1 < r["spec_tokens_per_step"] < 3 and r["requests_unfinished"] >= 0
    t = run_json(capsys, "--trace", "azure-conv-sample", "--trace-speed", "8", "--prefix-caching", "off")
    assert t["requests_completed"] == 300 and t["prefix_cache_hit_rate"] is None and t["trace_speed"] == 8
    for bad, words in ((["--workload", str(p), "--users", "3"], "--users contradicts --workload"),
                       (["--trace", "nope.csv"], "no such file or bundled trace"),
                       (["--spec-tokens", "2", "--spec-accept", "2"], "acceptance probability in [0, 1]")):
        assert main(["run", *bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err


def test_the_app_takes_the_same_workload_file(tmp_path) -> None:
    """`tokensim --workload FILE` builds the floor's engine from the file: its stages set the users on screen."""
    import argparse

    from engine.serving.engine import Engine
    from tui.commands.app_cmd import add_arguments, config_from_args

    p = tmp_path / "w.toml"
    p.write_text("[[stage]]\nusers = 7\nduration = 5\n[[stage]]\nusers = 2\nduration = 5\n[prompt]\ntokens = 200\n")
    ap = argparse.ArgumentParser()
    add_arguments(ap)
    cfg = config_from_args(ap.parse_args(["--workload", str(p)]))
    assert cfg.workload == str(p) and cfg.requests is None
    eng = Engine(cfg)
    eng.advance(1.0)
    assert eng.snapshot().users == 7 and eng.snapshot().running + eng.snapshot().queued == 7
    eng.advance(5.0)
    assert eng.snapshot().users == 2
