"""Structure-aware fuzz of every input surface: command options, hardware, model, HF config and scene files.

Each example is held to the contract (tests.fuzz.harness): exit 0 with a sane result, or exit 2 with
exactly one stderr line; never a traceback, never past the time bound. Files start valid (a shipped
preset or scene) and are mutated key by key: dropped, wrong type, extreme, unknown key, non-UTF-8.
CI runs a small fixed budget; TOKENSIM_FUZZ_EXAMPLES=N runs N examples per test.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.physics.specs import _preset_dir, load_model
from tests.fuzz.harness import assert_contract, call, examples, to_toml

pytestmark = pytest.mark.usefixtures("small_budget")
FUZZ = settings(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
ROOT = Path(__file__).resolve().parents[2]

# Values a hostile or careless user types: numbers at every edge, words, distributions gone wrong.
NUMBERS = ["0", "-1", "1", "2", "3", "7", "64", "0.5", "1e3", "1e9", "1e15", "1e308", "-1e308", "nan", "inf", "-inf",
           "", "abc", "4x", "１２", "0x10", "1_000"]
LENGTHS = [*NUMBERS, "uniform:1,1e30", "uniform:5,1", "uniform:1", "normal:100,1e300", "normal:-5,1",
           "lognormal:200,20", "lognormal:100,1000", "lognormal:0,1", "exp:1e300", "exp:0", "exp:-2", "weird:1",
           "uniform:10,200", "lognormal:200,0.8", "exp:100", "uniform:nan,5", "200"]
RUN_OPTIONS: dict[str, list[str]] = {
    "--users": NUMBERS, "--rate": NUMBERS, "--prompt": LENGTHS, "--output": LENGTHS, "--think": LENGTHS,
    "--think-time": LENGTHS, "--requests": NUMBERS, "--duration": NUMBERS, "--seed": NUMBERS,
    "--max-batch": NUMBERS, "--max-batched-tokens": NUMBERS, "--fast-share": NUMBERS, "--fast-max-batch": NUMBERS,
    "--kv-blocks": NUMBERS, "--compute-mult": NUMBERS, "--bandwidth-mult": NUMBERS, "--price-per-hour": NUMBERS,
    "--slo-ttft": NUMBERS, "--slo-tpot": NUMBERS, "--tp": NUMBERS,
    "--scheduler": ["static", "continuous", "chunked", "fifo", ""], "--dtype": ["fp8", "int4", "fp7", ""],
    "--kv-dtype": ["fp8", "bf16", "int2"], "--runtime": ["vllm", "sglang", "tensorrt", ""],
    "--model": ["qwen2.5-0.5b", "llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-20b", "nope", "x.json", "/"],
    "--hardware": ["h100-sxm", "a100-80g", "rtx4090", "h1OO", "no/such.toml"],
}
FLAGS = ["--ideal", "--force", "--debug", "--json", "--user", "--req", "--help-me"]
STEP_OPTIONS: dict[str, list[str]] = {
    "--batch": NUMBERS, "--context": NUMBERS, "--prompt": NUMBERS, "--tp": NUMBERS,
    "--model": RUN_OPTIONS["--model"], "--hardware": RUN_OPTIONS["--hardware"], "--dtype": RUN_OPTIONS["--dtype"],
    "--kv-dtype": RUN_OPTIONS["--kv-dtype"], "--runtime": RUN_OPTIONS["--runtime"],
}


@st.composite
def command_line(draw: st.DrawFn, command: str, options: dict[str, list[str]]) -> list[str]:
    """`command` with a few options, each set to a value from its hostile list, plus maybe a flag."""
    keys = draw(st.lists(st.sampled_from(sorted(options)), min_size=0, max_size=5, unique=True))
    argv = [command]
    for k in keys:
        argv += [k, draw(st.sampled_from(options[k]))]
    argv += draw(st.lists(st.sampled_from(FLAGS), max_size=2, unique=True))
    if command == "run" and "--json" not in argv:
        argv.append("--json")
    return argv


@settings(FUZZ, max_examples=examples(60))
@given(argv=command_line("run", RUN_OPTIONS))
def test_run_options(argv: list[str]) -> None:
    if "--requests" not in argv and "--duration" not in argv:
        argv += ["--requests", "40"]  # keep the default 1,000 requests off the CI clock
    assert_contract(call(argv, seconds=60), argv)


@settings(FUZZ, max_examples=examples(60))
@given(argv=command_line("step", STEP_OPTIONS))
def test_step_options(argv: list[str]) -> None:
    argv = [a for a in argv if a != "--force"]
    assert_contract(call(argv, seconds=30), argv)


@settings(FUZZ, max_examples=examples(25))
@given(argv=st.one_of(
    st.lists(st.sampled_from(["list", "models", "gpus", "hardware", "--json", "x"]), min_size=1, max_size=3),
    st.lists(st.sampled_from(["scene", "1", "99", "warehouse", "nope", "--json", "--lang", "fr", "--step", "0",
                              "--headless", "--step", "x"]), min_size=1, max_size=4),
    st.lists(st.sampled_from(["claims", "C01", "C99", "--json", "rn", "runn", "stpe", "--usrs", "-u", "4"]),
             min_size=1, max_size=3),
))
def test_other_commands(argv: list[str]) -> None:
    """list, scene, claims and typos of commands: scene --headless and claims may exit 1 (a claim failing)."""
    if argv[0] == "scene" and "--headless" not in argv and "--json" not in argv and any(
            a.isdigit() or a == "warehouse" for a in argv[1:2]):
        argv.append("--json")  # never open the app from a test
    if argv[0] not in ("list", "scene", "claims"):
        argv = ["--users", "4", *argv]  # a typo of a command goes to the app's parser, which must refuse it
        o = call(argv)
        assert o.code == 2 and len(o.err.strip().splitlines()) == 1, o.err
        return
    assert_contract(call(argv, seconds=60), argv, allow=(0, 1, 2))


# ---- files ---------------------------------------------------------------------------------------------

def _extremes() -> st.SearchStrategy[Any]:
    """What a key may be mutated to: wrong types and numbers at every edge."""
    return st.sampled_from([0, -1, 1, 2, 3, 0.5, -0.0, 1e308, -1e308, float("nan"), float("inf"), 10**30, 2**63,
                            10**400, 1e-300, "", "long", "12", True, False, [], [1, 2], {}, {"a": 1}, "bf16"])


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    """`base` with 1-3 keys dropped, retyped or pushed to an extreme, or an unknown key added."""
    d = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["drop", "set", "set", "set", "add", "nested"]))
        keys = sorted(d)
        if how == "drop" and keys:
            d.pop(draw(st.sampled_from(keys)))
        elif how == "set" and keys:
            d[draw(st.sampled_from(keys))] = draw(_extremes())
        elif how == "nested":
            k = draw(st.sampled_from(["text_config", "quantization_config", "tflops", "layer_types", "architectures",
                                      "model_type", "num_local_experts", "kv_lora_rank", "sliding_window",
                                      "first_k_dense_replace", "attention_chunk_size", "no_rope_layers"]))
            d[k] = draw(st.one_of(_extremes(), st.just({"bf16": 1e308}), st.just(["sliding_attention"] * 3),
                                  st.just(["BertModel"]), st.just("mamba"), st.just({"quant_method": "fp8"})))
        else:
            d[draw(st.sampled_from(["extra", "name", "display", "source", "head_dim"]))] = draw(_extremes())
    return d


def _write(tmp: Path, name: str, data: dict[str, Any], fmt: str, corrupt: str) -> Path:
    """The table as TOML or JSON text, then maybe made not-UTF-8, UTF-16 or truncated."""
    text = to_toml(data) if fmt == "toml" else json.dumps(data)
    raw = text.encode("utf-8")
    if corrupt == "utf16":
        raw = text.encode("utf-16")
    elif corrupt == "latin1":
        raw = raw[: len(raw) // 2] + b"\xe9\xff" + raw[len(raw) // 2:]
    elif corrupt == "truncate":
        raw = raw[: len(raw) * 2 // 3]
    p = tmp / f"{name}.{fmt}"
    p.write_bytes(raw)
    return p


HW = tomllib.loads(_preset_dir("hardware").joinpath("h100-sxm.toml").read_text(encoding="utf-8"))
MODELS = {n: tomllib.loads(_preset_dir("models").joinpath(f"{n}.toml").read_text(encoding="utf-8"))
          for n in ("llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b", "llama-4-maverick")}
CORRUPT = st.sampled_from(["", "", "", "", "utf16", "latin1", "truncate"])


@settings(FUZZ, max_examples=examples(40))
@given(data=mutated(HW), corrupt=CORRUPT)
def test_hardware_files(tmp_path: Path, data: dict[str, Any], corrupt: str) -> None:
    f = _write(tmp_path, "hw", data, "toml", corrupt)
    argv = ["step", "--hardware", str(f), "--model", "qwen2.5-0.5b", "--json"]
    assert_contract(call(argv), argv)


@settings(FUZZ, max_examples=examples(60))
@given(name=st.sampled_from(sorted(MODELS)), fmt=st.sampled_from(["toml", "json"]), corrupt=CORRUPT,
       data=st.data())
def test_model_files(tmp_path: Path, name: str, fmt: str, corrupt: str, data: st.DataObject) -> None:
    """Presets (TOML) and the same keys as an HF config.json; an accepted model has sane counts."""
    d = data.draw(mutated(MODELS[name]))
    f = _write(tmp_path, "m", d, fmt, corrupt)
    argv = ["step", "--model", str(f), "--hardware", "b200", "--json"]
    o = call(argv)
    assert_contract(o, argv)
    if o.code == 0:
        load_model.cache_clear()
        m = load_model(str(f))
        assert m.layers > 0 and m.moe_layers >= 0 and m.dense_layers >= 0 and m.full_attn_layers >= 0
        assert all(v >= 0 for v in m.counts.values()), m.counts
        assert m.params_active <= m.params_total


SCENE = tomllib.loads((ROOT / "scenes/data/06-carpooling.toml").read_text(encoding="utf-8"))


@settings(FUZZ, max_examples=examples(12))
@given(part=st.sampled_from(["setup", "action", "top", "checkpoint"]), corrupt=CORRUPT, data=st.data())
def test_scene_files(tmp_path: Path, part: str, corrupt: str, data: st.DataObject) -> None:
    """A shipped scene with its setup, an action, a checkpoint or a top-level key mutated, played headless."""
    d = json.loads(json.dumps(SCENE))
    if part == "setup":
        d["setup"] = data.draw(mutated(d["setup"]))
    elif part == "action":
        steps = [s for s in d["steps"] if s.get("actions")]
        s = data.draw(st.sampled_from(steps))
        a = s["actions"][0]
        key = data.draw(st.sampled_from([next(iter(a)), "run_ticks", "run_seconds", "set_users", "add_users",
                                         "compute_mult", "set_prompt", "probe_batch", "mark"]))
        s["actions"][0] = {key: data.draw(_extremes())}
    elif part == "checkpoint":
        steps = [s for s in d["steps"] if s.get("checkpoints")]
        c = data.draw(st.sampled_from(steps))["checkpoints"][0]
        c[data.draw(st.sampled_from(["expected", "tolerance", "op", "metric", "claim", "vs_mark"]))] = data.draw(
            _extremes())
    else:
        d = data.draw(mutated({k: v for k, v in d.items() if k != "steps"})) | {"steps": d["steps"]}
    f = _write(tmp_path, "07-fuzz", d, "toml", corrupt)
    argv = ["scene", str(f), "--headless", "--json"]
    assert_contract(call(argv, seconds=60), argv, allow=(0, 1, 2))
