"""Every hostile input of issue 13, table-driven: each gets one line and exit 2, or a right answer with exit 0.

Before the fix these were 24 tracebacks, 7 hangs, 6 wrong answers and 15 silent accepts (out of 179
inputs tried); each row here is one of them (or its family), run in-process with a time bound.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import InputError
from engine.physics.specs import _preset_dir
from tests.fuzz.harness import assert_contract, call

MODEL = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
         "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072}


_TRACE = "arrival_s,prompt_tokens,output_tokens\n"


def _model(**kw: object) -> str:
    d = {**MODEL, **kw}
    return json.dumps({k: v for k, v in d.items() if v is not None})


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bad files of the audit, written once."""
    d = tmp_path_factory.mktemp("bad")
    hw = _preset_dir("hardware").joinpath("h100-sxm.toml").read_text(encoding="utf-8")
    scene = Path(__file__).resolve().parents[2].joinpath("scenes/data/01-eight-ms-floor.toml").read_text("utf-8")
    raw = {
        "binary.toml": bytes(range(256)) * 4, "binary.json": bytes(range(256)) * 4,
        "utf16.toml": hw.encode("utf-16"), "utf16.json": _model().encode("utf-16"),
        "deep.json": b"[" * 100_000, "deepobj.json": b'{"a":' * 100_000, "deep.toml": b"a = " + b"[" * 100_000,
        "bigint.json": b'{"num_hidden_layers": ' + b"9" * 5000 + b"}",
        "scene_bin.toml": bytes(range(256)) * 4,
        # issue 30: a header line of spaces made the line finder's pattern backtrack cubically (3,000: 13 s)
        "ws_header.toml": b"[" + b" " * 6000 + b"x\n",
        # result files (engine.evidence.measured): deep nesting, a 5,000-digit integer, a 21-digit token count
        "deep_result.json": b"[" * 5000 + b"]" * 5000,
        "bigint_result.json": b"[" + b"9" * 5000 + b"]",
        "big_count_result.json": b'{"input_lens": [' + b"9" * 21 + b'], "output_lens": [5], "ttfts": [0.1],'
                                 b' "itls": [[0.01]], "start_times": [0]}',
        "tr_bin.csv": bytes(range(256)) * 4, "wl_bin.toml": bytes(range(256)) * 4,
        "wl_deep.toml": b"a = " + b"[" * 100_000, "wl_utf16.toml": "[[stage]]\nrate = 1\nduration = 5\n".encode("utf-16"), "tr_deep.jsonl": b'{"arrival_s": ' + b"[" * 100_000 + b"\n",
    }
    for name, data in raw.items():
        (d / name).write_bytes(data)
    text = {
        "mpe_str.json": _model(max_position_embeddings="long"), "sw_str.json": _model(sliding_window="big"),
        "experts_str.json": _model(num_local_experts="many", num_experts_per_tok=2),
        "textcfg_str.json": _model(text_config="x"), "quant_str.json": _model(quantization_config="fp8"),
        "fkdr.json": _model(num_local_experts=8, num_experts_per_tok=2, first_k_dense_replace=100),
        "heads7.json": _model(num_attention_heads=40, num_key_value_heads=7, hidden_size=5120),
        "heads80.json": _model(num_attention_heads=40, num_key_value_heads=80, hidden_size=5120),
        "hidden4000.json": _model(hidden_size=4000, num_attention_heads=33, num_key_value_heads=33),
        "bert.json": json.dumps({"architectures": ["BertModel"], "model_type": "bert", "num_hidden_layers": 12,
                                 "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072,
                                 "vocab_size": 30522, "max_position_embeddings": 512}),
        "mamba.json": json.dumps({"architectures": ["MambaForCausalLM"], "model_type": "mamba",
                                  "num_hidden_layers": 64, "hidden_size": 2560, "vocab_size": 50280}),
        "kvlora_neg.json": _model(kv_lora_rank=-512), "layertypes.json": _model(sliding_window=4096, layer_types="x"),
        "layertypes40.json": _model(sliding_window=4096, layer_types=["sliding_attention"] * 40),
        "mpe_neg.json": _model(max_position_embeddings=-5), "name42.json": _model(name=42),
        "bigfield.json": _model(num_hidden_layers=10**30), "bigvocab.json": _model(vocab_size=10**20),
        "mem1e300.toml": hw.replace("memory_gb = 80", "memory_gb = 1e300"),
        "name42.toml": hw.replace('name = "h100-sxm"', "name = 42"),
        "nonascii.toml": hw.replace('display = "H100-SXM5-80GB"', 'display = "H100-显卡-é"'),
        "scene_ticks.toml": scene.replace("actions = [{ run_ticks = 2 }]", "actions = [{ run_ticks = 1000000000000 }]"),
        "scene_users.toml": scene.replace("users = 1\n", "users = 10000000000\n", 1),
        # issue 30, class 5: workload files' numbers bounded by the validation layer's limits
        "wl_users.toml": "[[stage]]\nusers = 10000000000000000000\nduration = 5\n",
        "wl_upg.toml": "[[stage]]\nrate = 5\nduration = 10\n[stage.prompt]\nusers_per_group = 1e19\n",
        "wl_bigint.toml": "[[stage]]\nrate = 5\nduration = 10\n[stage.prompt]\ngroups = " + "9" * 4000 + "\n",
        "wl_dur.toml": "[[stage]]\nrate = 5\nduration = 1e308\n",
        "wl_durs.toml": "[[stage]]\nrate = 5\nduration = 9e8\n[[stage]]\nrate = 5\nduration = 9e8\n",
        "wl_rate.toml": "[[stage]]\nrate = 1e12\nduration = 1\n",
        "wl_nan.toml": "[[stage]]\nrate = nan\nduration = 1\n",
        "wl_stages.toml": "[[stage]]\nrate = 5\nduration = 1\n" * 10_001,
        # issue 30, classes 4 and 5: traces through the validation layer's limits
        "tr_1e19.csv": _TRACE + "0,10000000000000000000,5\n",
        "tr_true.jsonl": '{"arrival_s": 0, "prompt_tokens": true, "output_tokens": 5}\n',
        "tr_bigint.jsonl": '{"arrival_s": 0, "prompt_tokens": ' + "9" * 5000 + ', "output_tokens": 5}\n',
        "tr_field.csv": _TRACE + '0,"' + "7" * 200_000 + '",5\n',
        "tr_dup.csv": "arrival_s,prompt_tokens,output_tokens,prompt_tokens\n0,100,5,200\n",
        "tr_alias.csv": "arrival_s,prompt_tokens,input_tokens,output_tokens\n0,100,200,5\n",
        "tr_date.csv": _TRACE + "2024-01-01T00:00:00,100,5\n5,100,5\n",
        "tr_far.csv": _TRACE + "0,100,5\n1e300,100,5\n", "tr_ok.csv": _TRACE + "0,100,5\n10,100,5\n",
    }
    for name, t in text.items():
        (d / name).write_text(t, encoding="utf-8")
    return d


# (argv with {f} for the files' folder, a phrase the one stderr line must contain)
REFUSED = [
    # 1. tracebacks
    ("step --hardware {f}/binary.toml", "not UTF-8 text"),
    ("step --model {f}/binary.toml", "not UTF-8 text"),
    ("step --model {f}/binary.json", "not UTF-8 text"),
    ("step --hardware {f}/utf16.toml", "UTF-16"),
    ("step --model {f}/utf16.json", "UTF-16"),
    ("scene {f}/scene_bin.toml --headless", "not UTF-8 text"),
    ("step --model {f}/deep.json", "nested deeper than"),
    ("step --model {f}/deepobj.json", "nested deeper than"),
    ("step --model {f}/deep.toml", "TOML"),
    ("step --model {f}/bigint.json", "4300 digits"),
    ("step --model {f}/mpe_str.json", "'max_position_embeddings' must be a whole number"),
    ("step --model {f}/sw_str.json", "'sliding_window' must be a whole number"),
    ("step --model {f}/experts_str.json", "'num_local_experts' must be a whole number"),
    ("step --model {f}/textcfg_str.json", "'text_config' must be a table"),
    ("step --model {f}/quant_str.json", "'quantization_config' must be a table"),
    ("step --batch 1000000000000", "--batch"),
    ("run --users 10000000000 --requests 10", "--users"),
    ("run --users 100000000 --requests 10", "would hold about"),
    ("run --max-batch 100000000000 --requests 10", "--max-batch"),
    ("bench --users 10000000000 --ticks 10", "--users"),
    ("scene {f}/scene_users.toml --headless", "setup.users"),
    ("step --hardware {f}/mem1e300.toml", "'memory_gb' must be a finite number"),
    ("run --seed -1 --requests 10", "--seed"),
    # 2. hangs
    ("run --users 4 --think-time 1e308 --requests 100", "--think-time"),
    ("run --users 4 --think-time exp:1e308 --requests 100", "--think-time"),
    ("run --users 4 --think-time uniform:0,1e308 --requests 100", "--think-time"),
    ("run --ideal --compute-mult 1e308 --bandwidth-mult 1e308 --duration 1", "--compute-mult"),
    ("run --users 4 --duration 1e9", "simulated steps, over the limit"),
    ("run --users 4 --duration 1e308", "--duration"),
    ("scene {f}/scene_ticks.toml --headless", "run_ticks"),
    ("run --rate 1e9 --duration 1", "would hold about"),
    ("run --workload {f}/ws_header.toml --requests 5", "not valid TOML"),
    ("replay {f}/deep_result.json --model llama-3.1-8b", "JSON nested deeper than 64 levels"),
    ("calibrate {f}/deep_result.json -o {f}/never.toml", "JSON nested deeper than 64 levels"),
    ("replay {f}/bigint_result.json --model llama-3.1-8b", "unreadable JSON"),
    ("replay {f}/big_count_result.json --model llama-3.1-8b", "must be a whole number >= 1 and <= 1,000,000,000"),
    ("run --workload {f}/wl_users.toml --requests 5", "stage[1].users: must be a whole number"),
    ("run --workload {f}/wl_upg.toml --requests 5", "users_per_group: must be a whole number"),
    ("run --workload {f}/wl_bigint.toml --requests 5", "groups: must be a whole number"),
    ("run --workload {f}/wl_dur.toml --requests 5", "stage[1].duration: must be a finite number > 0 and <= 1e+09"),
    ("run --workload {f}/wl_durs.toml --requests 5", "stages run past 1e+09 s"),
    ("run --workload {f}/wl_rate.toml --requests 5", "stage[1].rate: must be a finite number"),
    ("run --workload {f}/wl_nan.toml --requests 5", "stage[1].rate: must be a finite number"),
    ("run --workload {f}/wl_stages.toml --requests 5", "more than 10,000 stages"),
    ("run --trace {f}/tr_bin.csv", "not UTF-8 text"),
    ("run --workload {f}/wl_bin.toml", "not UTF-8 text"),
    ("run --workload {f}/wl_deep.toml", "unreadable TOML"),
    ("run --workload {f}/wl_utf16.toml", "UTF-16"),
    ("run --trace {f}/tr_deep.jsonl", "nested deeper than"),
    ("run --trace {f}/tr_1e19.csv", "prompt_tokens: must be a whole number >= 1 and <= 1e+09"),
    ("run --trace {f}/tr_true.jsonl", "prompt_tokens: must be a whole number"),
    ("run --trace {f}/tr_bigint.jsonl", "4300 digits"),
    ("run --trace {f}/tr_field.csv", "field larger than field limit"),
    ("run --trace {f}/tr_dup.csv", "the column prompt_tokens appears 2 times"),
    ("run --trace {f}/tr_alias.csv", "columns prompt_tokens and input_tokens both give the prompt"),
    ("run --trace {f}/tr_date.csv", "'5' is a number among date-times"),
    ("run --trace {f}/tr_far.csv", "the trace spans 1e+300 s"),
    ("run --trace {f}/tr_ok.csv --trace-speed 1e-9", "s at --trace-speed 1e-09, over the 1e+09 s"),
    ("run --spec-tokens 1000000000 --requests 5", "--spec-tokens: must be a whole number between 0 and 64"),
    ("""run --speculative-config '{{"num_speculative_tokens": 1000000000}}' --requests 5""", "between 0 and 64"),
    ("validate --table ''", "--table needs a name"),
    ("plan --replicas 4000 --rate 10 --duration 30 --workers 1", "would hold about"),
    # issue 30, class 4: a run whose clock would pass 1e9 s (TPOT and prefill read 0 at 1e300 s) is refused
    ("run --rate 1e-300 --requests 5", "would span about 5e+300 simulated seconds"),
    ("run --rate 1e-300 --requests 5 --force", "past the 1e+09 s"),
    ("run --users 2 --think-time 1e8 --requests 50", "would span about 2.5e+09"),
    ("run --pd 1:1 --kv-link-gbps 1e-300 --requests 5", "--kv-link-gbps: must be a finite number >= 0.001"),
    # issue 30, class 7: options that would change nothing are refused, naming what they need
    ("run --kv-link-gbps 10 --requests 5", "--kv-link-gbps sets the link P/D copies KV over"),
    ("run --router least-loaded --requests 5", "with one there is nothing to pick"),
    ("run --spec-accept 0.5 --requests 5", "--spec-accept does nothing without --spec-tokens"),
    ("run --spec-draft ngram --requests 5", "--spec-draft does nothing without --spec-tokens"),
    ("run --trace-speed 2 --requests 5", "--trace-speed does nothing without --trace"),
    ("run --gpu-memory-utilization 0.5 --kv-blocks 2000 --requests 5", "does nothing beside --kv-blocks"),
    # 3. wrong answers
    ("run --output uniform:1,1e30 --requests 20", "--output"),
    ("run --output normal:100,1e300 --requests 20", "--output"),
    ("run --output lognormal:100,1000 --requests 20", "lognormal sigma"),
    ("run --think exp:1e300 --requests 20", "--think"),
    ("step --model {f}/fkdr.json", "'first_k_dense_replace' must be a whole number between 0 and 32"),
    # 4. silent accepts
    ("run --user 4 --requests 10", "unrecognized arguments: --user"),
    ("step --model {f}/heads7.json", "must be a multiple of num_key_value_heads"),
    ("step --model {f}/heads80.json", "must be a multiple of num_key_value_heads"),
    ("step --model {f}/hidden4000.json", "does not divide by num_attention_heads"),
    ("step --model {f}/bert.json", "unsupported architecture: BertModel"),
    ("step --model {f}/mamba.json", "unsupported architecture: MambaForCausalLM"),
    ("step --model {f}/kvlora_neg.json", "'kv_lora_rank' must be a whole number"),
    ("step --model {f}/layertypes.json", "'layer_types' must be a list"),
    ("step --model {f}/layertypes40.json", "'layer_types' must be a list of 32 entries"),
    ("run --kv-blocks 1000000000000000 --requests 10", "--kv-blocks"),
    ("run --kv-blocks 1000000 --requests 10", "memory leaves"),
    ("run --kv-blocks 100000000 --requests 10", "would hold about"),
    ("run --runtime sglang --ideal --requests 10", "does nothing with --ideal"),
    ("run --max-batched-tokens 100 --scheduler static --requests 10", "does nothing with --scheduler static"),
    ("run --fast-max-batch 8 --requests 10", "without --fast-share"),
    ("scene 1 --step 0", "has steps 1 to"),
    ("scene 1 --step 999", "has steps 1 to"),
    ("step --model {f}/mpe_neg.json", "'max_position_embeddings' must be a whole number"),
    ("step --model {f}/name42.json", "'name' must be a non-empty string, got 42"),
    ("step --hardware {f}/name42.toml", "'name' must be a non-empty string, got 42"),
    ("step --model {f}/bigfield.json", "'num_hidden_layers' must be a whole number"),
    ("step --model {f}/bigvocab.json", "'vocab_size' must be a whole number"),
    ("runn", "unknown command 'runn' (did you mean run?)"),
    # issue 30, the audit's rerun (benchmarks/audit_hostile.py)
    ("run --trace-out '' --requests 5", "--trace-out needs a file name"),
    ("run --trace-out {f}/t.json --bench-json {f}/t.json --requests 5", "--trace-out and --bench-json both name"),
    ("serve --public-url not-a-url", "expected an http:// or https:// URL with a host"),
    ("run --scale-policy kv --requests 5", "--scale-policy does nothing without --autoscale"),
    ("run --scale-interval 5 --requests 5", "--scale-interval does nothing without --autoscale"),
    # checked an engine per point for minutes, then ran for an hour: refused at once now
    ("plan --replicas 1-4096 --tp 1,2,4,8 --rate 10 --duration 10", "this plan would simulate about 8.4e+08 steps"),
]


@pytest.mark.parametrize(("line", "phrase"), REFUSED, ids=[r[0][:60] for r in REFUSED])
def test_refused_with_one_line(files: Path, line: str, phrase: str) -> None:
    argv = shlex.split(line.format(f=files))  # quoted words stay one argument ('' is an empty one)
    o = call(argv, seconds=20)
    assert_contract(o, argv)
    assert o.code == 2, f"{line}: exit {o.code}"
    assert phrase in o.err, o.err


def test_rate_1e9_is_vectorised_and_right(files: Path) -> None:
    """--rate 1e9 builds its arrivals in blocks: 1,000 requests arrive within a microsecond, all are served."""
    o = call(["run", "--rate", "1e9", "--requests", "1000", "--json"], seconds=60)
    assert_contract(o, ["--json"])
    r = json.loads(o.out)
    assert r["requests_completed"] == r["requests_accepted"] == 1000 and r["requests_unfinished"] == 0


def test_clipped_counts_requests_once() -> None:
    """A request whose prompt and answer are both clipped counts once: never more clipped than requests."""
    argv = ["run", "--requests", "10", "--kv-blocks", "200", "--prompt", "uniform:2000,6000", "--output",
            "uniform:1000,3000", "--json"]  # a pool of 3,200 tokens: most requests lose prompt and answer
    r = json.loads(call(argv, seconds=60).out)
    assert 0 < r["clipped_requests"] <= r["requests_accepted"] == 10


def test_wide_lognormal_is_clipped_and_counted_not_wrapped() -> None:
    """lognormal:200,20 draws lengths past int64: they become the context cap and are counted, never 1 token."""
    argv = ["run", "--model", "qwen2.5-0.5b", "--output", "lognormal:200,20", "--requests", "12", "--users", "12",
            "--json"]
    r = json.loads(call(argv, seconds=120).out)
    assert r["clipped_requests"] > 0
    assert r["output_tokens"] >= r["requests_completed"] * 1  # never negative or wrapped
    assert r["output_tokens"] > 12 * 200  # the huge draws are long answers, not one token each


def test_non_ascii_name_with_ascii_terminal(files: Path) -> None:
    """PYTHONIOENCODING=ascii with a Chinese GPU name: the report is written (escaped), exit 0."""
    p = subprocess.run([sys.executable, "-m", "tui.cli", "step", "--hardware", str(files / "nonascii.toml")],
                       capture_output=True, env={**__import__("os").environ, "PYTHONIOENCODING": "ascii"},
                       cwd=Path(__file__).resolve().parents[2], timeout=60)
    assert p.returncode == 0, p.stderr
    assert b"Traceback" not in p.stderr and b"\\u663e" in p.stdout


def test_overload_is_reported() -> None:
    """run --rate 50 --duration 30 on one H100: the report counts the unfinished and warns."""
    argv = ["run", "--rate", "50", "--duration", "30"]
    o = call(argv, seconds=60)
    assert o.code == 0
    assert "unfinished when the run stopped" in o.out and "arrivals outrun capacity" in o.out
    assert "percentiles cover the" in o.out
    r = json.loads(call([*argv, "--json"], seconds=60).out)
    assert r["overloaded"] and r["requests_unfinished"] > r["requests_completed"]
    assert r["requests_unfinished"] == r["queue_end"] + r["running_end"]
    assert r["requests_accepted"] == r["requests_completed"] + r["requests_unfinished"]


# ---- issue 30, class 11: answers that mislead ---------------------------------------------------------------

@pytest.mark.parametrize("extra", [["--slo-ttft", "0.00001"], ["--budget-per-hour", "0.01"]])
def test_plan_json_answers_even_when_nothing_is_feasible(extra: list[str]) -> None:
    """Before, a JSON reader got an empty stdout (the reason went to stderr only)."""
    argv = ["plan", "--replicas", "1", "--rate", "5", "--requests", "20", "--workers", "1", "--json", *extra]
    o = call(argv, seconds=60)
    assert o.code == 2 and len(o.err.strip().splitlines()) == 1
    r = json.loads(o.out)
    assert r["best"] is None and r["feasible"] == 0 and r["reason"] in o.err


def test_plan_header_names_the_workload_file() -> None:
    """Before: 'plan · 0 req/s · ... · None requests'."""
    wl = Path(__file__).resolve().parents[2] / "scenes/workloads/shared-system-prompt.toml"
    o = call(["plan", "--replicas", "1", "--workload", str(wl), "--requests", "30", "--workers", "1"], seconds=60)
    head = o.out.splitlines()[0]
    assert o.code == 0 and "shared-system-prompt.toml" in head and "30 requests" in head
    assert "None" not in head and "0 req/s" not in head


def test_an_overloaded_workload_file_is_flagged(tmp_path: Path) -> None:
    """Before, `overloaded` was set only for --rate: a workload file offering 60 req/s of 3,000-token prompts to one
    H100 (about 140 finish in 30 s) was not flagged."""
    wl = tmp_path / "over.toml"
    wl.write_text("[[stage]]\nrate = 60\nduration = 30\n[prompt]\ntokens = 3000\n[output]\ntokens = 300\n")
    r = json.loads(call(["run", "--workload", str(wl), "--json"], seconds=60).out)
    assert r["overloaded"] and r["queue_end"] > r["max_batch"]
    calm = tmp_path / "calm.toml"
    calm.write_text("[[stage]]\nrate = 1\nduration = 30\n[prompt]\ntokens = 300\n[output]\ntokens = 30\n")
    assert not json.loads(call(["run", "--workload", str(calm), "--json"], seconds=60).out)["overloaded"]


# ---- issue 30, class 2: every arrival is accounted for ---------------------------------------------------------

def test_arrivals_during_the_last_long_step_are_reported_queued() -> None:
    """A 120,000-token prompt's prefill runs ~5 s past a 10 s run: before, the ~19 requests that arrived meanwhile
    vanished (1 accepted); now they are accepted and reported queued, on one engine and on a fleet alike."""
    base = ["run", "--model", "llama-3.1-8b", "--rate", "2", "--duration", "10", "--prompt", "120000", "--output",
            "5", "--json"]
    for extra in ([], ["--replicas", "2", "--router", "least-loaded"], ["--pd", "1:1"]):
        r = json.loads(call([*base, *extra], seconds=120).out)
        assert r["requests_accepted"] >= 15, extra
        assert r["requests_accepted"] == r["requests_completed"] + r["queue_end"] + r["running_end"]
        assert r["queue_end"] >= 13, extra


def test_the_conservation_invariant_catches_a_vanished_request() -> None:
    """check_conserved is what every run path ends with: a request taken out of a queue behind its back fails it."""
    from engine.config import EngineConfig
    from engine.serving.engine import Engine

    eng = Engine(EngineConfig(model="llama-3.1-8b", rate=20.0, duration=5.0, prompt="4000", output="50"))
    eng.run()
    lane = eng.lanes[0]
    lane.check_conserved()
    assert lane.Q.size > 0
    lane.stats.accepted += 1
    with pytest.raises(AssertionError, match="lane: accepted"):
        lane.check_conserved()


@pytest.mark.parametrize(("extra", "words"), [
    ({"quantization_config": {"quant_method": "hqq", "nbits": 4}}, "quant_method 'hqq' is not read"),
    ({"quantization_config": {"quant_method": "gptq", "bits": "four"}}, "its bits 'four' are not a number"),
    ({"torch_dtype": "float32"}, "torch_dtype 'float32' is not read"),
    ({"rope_scaling": {"type": "yarn", "factor": 4}}, "rope_scaling is not read"),
])
def test_config_keys_read_and_ignored_say_so(tmp_path: Path, extra: dict, words: str) -> None:
    """Issue 30, class 7: before, these keys were read and dropped without a word."""
    f = tmp_path / "config.json"
    f.write_text(json.dumps({**MODEL, "architectures": ["LlamaForCausalLM"], "model_type": "llama", **extra}))
    o = call(["step", "--model", str(f)])
    assert o.code == 0 and words in o.err and o.err.count("\n") == 1


def test_serve_api_lone_surrogates_echoed_in_an_error_are_a_4xx_not_a_500() -> None:
    """Found by tests/fuzz/test_fuzz_server.py: JSON's \\ud800 escape is a lone surrogate that UTF-8 cannot encode,
    and a model name or an unknown key carrying one, echoed in the error message, made the response a 500."""
    from tests.tui.api_server import need

    need("httpx")
    from starlette.testclient import TestClient

    from tui.cli import build_parser
    from tui.commands import serve_api_cmd

    words = ["serve-api", "--log-level", "error"]
    app, _ = serve_api_cmd.build(build_parser(words).parse_args(words))
    with TestClient(app, raise_server_exceptions=False) as client:
        for body, status in ((b'{"prompt": "a", "model": "\\ud800"}', 404), (b'{"prompt": "a", "\\udfff": 1}', 400)):
            r = client.post("/v1/completions", content=body)
            assert r.status_code == status and "\\\\ud" in r.text and r.json()["error"]["code"] == status


@pytest.mark.parametrize("argv", [["ru\x1b]0;pwned\x07n"], ["run", "--vllm-args", "vllm serve m --\x1b[2Jx 3"]])
def test_words_as_typed_are_printed_escaped(argv: list[str]) -> None:
    """The audit's rerun: an unknown command or an unknown vLLM flag carrying escape codes reached the terminal raw
    (the argparse error and the vLLM note echoed them)."""
    o = call(argv)
    assert "\x1b" not in o.err and "\x07" not in o.err and "\\x1b" in o.err


def test_an_output_that_is_a_device_is_written_in_place_not_replaced(tmp_path: Path) -> None:
    """The audit's rerun: --bench-json /dev/full exited 0 having renamed its temporary file over the device (as root,
    /dev/full became a regular file). A link to it shows the difference safely: replaced before, ENOSPC now."""
    if not Path("/dev/full").is_char_device():
        pytest.skip("no /dev/full here")
    full = tmp_path / "full"
    full.symlink_to("/dev/full")
    for flag in ("--bench-json", "--trace-out"):
        o = call(["run", flag, str(full), "--requests", "5"])
        assert o.code == 2 and "No space left on device" in o.err, o.err
        assert full.is_symlink() and Path("/dev/full").is_char_device()


def test_a_plan_of_thousands_of_replicas_counts_building_them() -> None:
    """The audit's rerun: `plan --replicas 1-4096 --tp 1,2,4,8` passed the work estimate (few steps a point) and
    ran for an hour; each replica now counts budget.REPLICA_STEPS on top of its steps."""
    from engine import budget
    from engine.config import EngineConfig
    from engine.fleet import plan as pl

    base = EngineConfig(rate=10.0, duration=10.0)
    work: dict = {}
    one, many = (pl.Point("h100-sxm", "generic-14b", 1, r, None, 256, 8192, "round-robin") for r in (1, 2000))
    assert pl.prune(one, base, None, work) is None and pl.prune(many, base, None, work) is None
    assert work[many] - work[one] >= 1999 * budget.REPLICA_STEPS
    with pytest.raises(InputError, match="this plan would simulate about"):
        budget.check_plan(work[many] * 2500, 2500, False)  # 2,500 such points: an hour, refused at once


def test_a_ray_client_address_without_ray_client_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The audit's rerun: `plan --ray ray://HOST:PORT` with Ray installed without its client extra was a ValueError
    traceback from ray.init."""
    ray = pytest.importorskip("ray")
    from engine.fleet import plan_ray

    def no_client(*a: object, **k: object) -> None:
        raise ValueError("Ray Client requires pip package `ray[client]`.")

    monkeypatch.setattr(plan_ray, "check_address", lambda address: None)
    monkeypatch.setattr(ray, "init", no_client)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(InputError, match="could not connect"):
        list(plan_ray.ray_map([], "ray://10.0.0.1:10001"))
