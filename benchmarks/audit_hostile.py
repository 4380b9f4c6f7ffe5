"""Rerun issue 30's audit: hostile inputs against every command, each in a subprocess with a time bound.

    python benchmarks/audit_hostile.py [--only CLASS] [--timeout S] [--jobs N] [--list]

Every case is one `tokensim` command line (with, for some, a signal sent mid-run or stdout closed early) over a
folder of hostile files written here: weird encodings, deep nesting, huge numbers, escape sequences in names,
outputs aimed at inputs. Each outcome is classified:

    ok        exit 0 with a sane answer (JSON that parses and conserves requests; no raw escape code printed)
    refused   exit 2 with exactly one line on stderr (notes aside)
    signal    the promised exit of a signal case (130 / 143, at most one line) or a closed pipe (0, silent)
    BAD-*     traceback, hang (past the time bound), exit 2 with several lines, another exit code, an insane
              exit 0, a changed input file, or workers left running after a signal

and a table of counts per issue class is printed, then every BAD case. Exit 1 if any case is BAD. The classes are
issue 30's: 1 data loss, 2 lost requests, 3 hangs, 4 the clock, 5 readers, 6 names printed raw, 7 options that do
nothing, 8 signals and pipes, 9 the allowed maximum, 10 Ray, 11 answers that mislead (and 12: option combinations).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HW = ROOT / "engine/presets/hardware/h100-sxm.toml"
CLASSES = {1: "data loss", 2: "lost requests", 3: "hangs", 4: "the clock", 5: "readers", 6: "names printed raw",
           7: "options that do nothing", 8: "signals and pipes", 9: "the allowed maximum", 10: "Ray",
           11: "answers that mislead", 12: "option combinations"}
MEM_LIMIT = 6 << 30  # address space per case: running out of it is a MemoryError traceback, not a swapped host


@dataclass
class Case:
    """One hostile command line and what it may do."""

    cls: int
    line: str
    expect: str = "any"  # any (ok or refused), ok, refused, sigint, sigterm, pipe
    after: float = 2.0  # seconds before the signal of a sigint/sigterm case
    timeout: float = 0.0  # 0: the audit's default
    outputs: tuple[str, ...] = ()  # files the case may write (everything else in the folder must not change)
    note: str = ""
    outcome: str = field(default="", init=False)
    detail: str = field(default="", init=False)


MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
         "max_position_embeddings": 131072}
TRACE = "arrival_s,prompt_tokens,output_tokens\n"
ESC = "\x1b[2J\x1b]0;pwned\x07\x1b[31m"


def _cfg(**kw: object) -> str:
    return json.dumps({**MODEL, **kw})


def write_files(d: Path) -> None:
    """The hostile inputs (and a few good ones to aim outputs at)."""
    hw = HW.read_text(encoding="utf-8")
    wl = "[[stage]]\nrate = 4\nduration = 5\n[prompt]\ntokens = 500\n[output]\ntokens = 50\n"
    raw: dict[str, bytes] = {
        "bin.toml": bytes(range(256)) * 8, "bin.csv": bytes(range(256)) * 8, "bin.json": bytes(range(256)) * 8,
        "utf16.csv": (TRACE + "0,100,5\n").encode("utf-16"),
        "bom.csv": b"\xef\xbb\xbf" + (TRACE + "0,100,5\n").encode(),
        "crlf.csv": (TRACE + "0,100,5\n1,100,5\n").replace("\n", "\r\n").encode(),
        "nul.csv": (TRACE + "0,10\x000,5\n").encode(), "empty.csv": b"", "empty.toml": b"", "empty.json": b"",
        "deep_wl.toml": b"x = " + b"[" * 50_000, "deep.jsonl": b'{"arrival_s": ' + b"[" * 50_000 + b"\n",
        "deep_result.json": b'{"a": ' * 20_000, "deep_cfg.json": b"[" * 200_000,
        "digits.jsonl": b'{"arrival_s": 0, "prompt_tokens": ' + b"9" * 400 + b', "output_tokens": 5}\n',
        "digits5k.json": b'{"num_hidden_layers": ' + b"7" * 5000 + b"}",
        "latin1.toml": "[[stage]]\nrate = 1\nduration = 5\n# caf\xe9\n".encode("latin-1"),
        "ws.toml": b"[" + b" " * 20_000 + b"x\n", "quotes.toml": b'a = "' + b"\\" * 30_000 + b'\n',
    }
    text: dict[str, str] = {
        "good.toml": wl, "good.csv": TRACE + "0,100,5\n0.5,200,10\n1,300,20\n", "good.json": _cfg(),
        "hw.toml": hw, "trace_out_old.json": '{"traceEvents": []}', "bench_old.json": "{}",
        "header_only.csv": TRACE, "neg.csv": TRACE + "-5,100,5\n", "unsorted.csv": TRACE + "10,100,5\n0,100,5\n",
        "nan.csv": TRACE + "nan,100,5\n", "inf.csv": TRACE + "inf,100,5\n", "e19.csv": TRACE + "0,1e19,5\n",
        "zero_out.csv": TRACE + "0,100,0\n", "float_tok.csv": TRACE + "0,100.5,5\n",
        "neg_tok.csv": TRACE + "0,-100,5\n",
        "dup.csv": "arrival_s,prompt_tokens,output_tokens,output_tokens\n0,100,5,6\n",
        "missing_col.csv": "arrival_s,prompt_tokens\n0,100\n", "extra_col.csv": TRACE.strip() + ",junk\n0,100,5,x\n",
        "ragged.csv": TRACE + "0,100\n1,100,5,7,8\n", "quoted.csv": TRACE + '"0","100","5"\n',
        "date_mix.csv": TRACE + "2024-01-01T00:00:00,100,5\n3,100,5\n", "year1.csv": TRACE + "0001-01-01T00:00:00,1,1\n"
        "9999-12-31T23:59:59,1,1\n", "gap.csv": TRACE + "0,100,5\n1e12,100,5\n",
        "arr.jsonl": "[1, 2, 3]\n", "str.jsonl": '"hello"\n', "true.jsonl": '{"arrival_s": true, "prompt_tokens": 5,'
        ' "output_tokens": 5}\n', "blank.jsonl": '\n\n{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5}\n\n',
        "dupkey.jsonl": '{"arrival_s": 0, "prompt_tokens": 5, "prompt_tokens": 9, "output_tokens": 5}\n',
        "session.jsonl": "".join(f'{{"arrival_s": {i}, "prompt_tokens": 100, "output_tokens": 10, "session_id": "s"}}\n'
                                 for i in range(50)),
        "wl_nostage.toml": "[prompt]\ntokens = 5\n", "wl_stage_empty.toml": "[[stage]]\n",
        "wl_both.toml": "[[stage]]\nrate = 1\nusers = 4\nduration = 5\n", "wl_unknown.toml": "[[stage]]\nrate = 1\n"
        "duration = 5\nratee = 3\n", "wl_neg.toml": "[[stage]]\nrate = -1\nduration = 5\n",
        "wl_zero.toml": "[[stage]]\nrate = 0\nduration = 5\n", "wl_inf.toml": "[[stage]]\nrate = inf\nduration = 5\n",
        "wl_tiny.toml": "[[stage]]\nrate = 1e-300\nduration = 5\n", "wl_durtiny.toml": "[[stage]]\nrate = 5\n"
        "duration = 1e-300\n", "wl_many.toml": "[[stage]]\nrate = 5\nduration = 0.01\n" * 9_000,
        "wl_rate_big.toml": "[[stage]]\nrate = 1e7\nduration = 100\n", "wl_str.toml": '[[stage]]\nrate = "5"\n'
        "duration = 5\n", "wl_groups0.toml": wl + "[stage.prompt]\ngroups = 0\n",
        "wl_prefix_big.toml": "[[stage]]\nrate = 1\nduration = 5\n[prompt]\ntokens = 100\nshared_prefix = 1e12\n",
        "wl_users_big.toml": "[[stage]]\nusers = 100000000\nduration = 5\n",
        "wl_think_huge.toml": "[[stage]]\nusers = 4\nthink_time = 1e300\nduration = 5\n",
        "wl_toml_date.toml": "[[stage]]\nrate = 1979-05-27\nduration = 5\n",
        "m_name_esc.toml": "", "hw_name_esc.toml": hw.replace('name = "h100-sxm"', f'name = "h100{ESC}"'),
        "hw_display_esc.toml": hw.replace('display = "H100-SXM5-80GB"', 'display = "\\u001b[2J\\u0007x"'),
        "cfg_arch_esc.json": _cfg(architectures=[f"Evil{ESC}ForCausalLM"]),
        "cfg_name_esc.json": _cfg(_name_or_path=f"org/{ESC}model"), "cfg_bidi.json": _cfg(name="abc\u202eexe.txt"),
        "cfg_nl.json": _cfg(name="line1\nline2"), "cfg_key_esc.json": json.dumps({**MODEL, f"num_{ESC}_size": 5}),
        "cfg_quant_esc.json": _cfg(quantization_config={"quant_method": f"x{ESC}"}),
        "cfg_dtype_esc.json": _cfg(torch_dtype=f"f{ESC}"),
        "cfg_quant_bits.json": _cfg(quantization_config={"quant_method": "gptq", "bits": [4]}),
        "cfg_quant_group.json": _cfg(quantization_config={"quant_method": "awq", "bits": 4, "group_size": 1e300}),
        "cfg_quant_ignore.json": _cfg(quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 128,
                                                           "modules_to_not_convert": [5, None, {"a": 1}, "x" * 5000]}),
        "cfg_quant_ct.json": _cfg(quantization_config={"quant_method": "compressed-tensors", "config_groups": [1]}),
        "cfg_quant_ct2.json": _cfg(quantization_config={"quant_method": "compressed-tensors",
                                                        "config_groups": {"g": {"weights": {"num_bits": "8"}}}}),
        "cfg_keep16.json": _cfg(keep16="attn"), "cfg_head_dtype.json": _cfg(head_dtype="int3"),
        "cfg_rope.json": _cfg(rope_scaling={"type": "yarn", "factor": 1e300}),
        "cfg_textcfg_loop.json": json.dumps({"text_config": {"text_config": {"text_config": {}}}}),
        "cfg_float_layers.json": _cfg(num_hidden_layers=32.5), "cfg_neg_vocab.json": _cfg(vocab_size=-1),
        "cfg_zero_heads.json": _cfg(num_attention_heads=0), "cfg_huge_ctx.json": _cfg(max_position_embeddings=2**62),
        "cfg_list.json": "[1, 2, 3]", "cfg_null.json": "null", "cfg_bool_tie.json": _cfg(tie_word_embeddings="yes"),
        "result_empty.json": "{}", "result_list.json": "[]", "result_neg.json": json.dumps(
            {"input_lens": [-5], "output_lens": [5], "ttfts": [0.1], "itls": [[0.01]], "start_times": [0]}),
        "result_nan.json": '{"input_lens": [100], "output_lens": [5], "ttfts": [NaN], "itls": [[0.01]],'
                           ' "start_times": [0]}',
        "result_mismatch.json": json.dumps({"input_lens": [100, 200], "output_lens": [5], "ttfts": [0.1],
                                            "itls": [[0.01]], "start_times": [0]}),
    }
    text["m_name_esc.toml"] = "\n".join(f"{k} = {json.dumps(v)}" for k, v in {**MODEL, "name": f"evil{ESC}"}.items()
                                        if k != "architectures")
    for name, data in raw.items():
        (d / name).write_bytes(data)
    for name, t in text.items():
        (d / name).write_text(t, encoding="utf-8")
    rows = "".join(f"{i * 0.001:.3f},100,5\n" for i in range(1_000_000))
    (d / "million.csv").write_text(TRACE + rows, encoding="utf-8")
    os.symlink(d / "good.toml", d / "link_to_workload.json")
    os.symlink("/dev/full", d / "full")  # a full disk; were it replaced (a rename over it), only the link goes


def cases() -> list[Case]:
    """The audit's cases; {f} is the folder of hostile files."""
    C = Case
    small = "--requests 20"
    out: list[Case] = [
        # 1. data loss: outputs never clobber inputs, and are written whole or not at all
        C(1, "run --workload {f}/good.toml --trace-out {f}/good.toml", "refused"),
        C(1, "run --trace {f}/good.csv --trace-out {f}/good.csv", "refused"),
        C(1, "run --model {f}/good.json --trace-out {f}/good.json " + small, "refused"),
        C(1, "run --hardware {f}/hw.toml --trace-out {f}/hw.toml " + small, "refused"),
        C(1, "run --workload {f}/good.toml --trace-out {f}/link_to_workload.json", "refused"),
        C(1, "run --workload {f}/good.toml --bench-json {f}/good.toml", "refused"),
        C(1, "run --trace {f}/good.csv --bench-json {f}/good.csv", "refused"),
        C(1, "run --trace-out {f}/trace_out_old.json --bench-json {f}/trace_out_old.json " + small, "refused"),
        C(1, "run --trace-out {f}/full " + small, "refused"),
        C(1, "run --bench-json {f}/full " + small, "refused"),
        C(1, "run --trace-out {f}/no/such/dir/t.json " + small, "refused"),
        C(1, "run --trace-out {f} " + small, "refused"),
        C(1, "run --trace-out '' " + small, "refused"),
        C(1, "run --users 64 --requests 2000000 --force --trace-out {f}/trace_out_old.json", "sigterm", after=4,
          timeout=40, note="the old trace is kept"),
        C(1, "run --users 64 --requests 2000000 --force --trace-out {f}/trace_out_old.json", "sigint", after=4,
          timeout=40, note="the old trace is kept"),
        C(1, "calibrate tests/data/results/guidellm_benchmarks.json -o tests/data/results/guidellm_benchmarks.json",
          "refused"),
        C(1, "calibrate tests/data/results/burstgpt.csv -o {f}/full --model llama-3.1-8b", "refused"),
        C(1, "replay tests/data/results/guidellm_benchmarks.json --bench-json "
             "tests/data/results/guidellm_benchmarks.json", "refused"),
        C(1, "run --runtime-file {f}/hw.toml --trace-out {f}/hw.toml " + small, "refused"),
        C(1, "run --trace-out {f}/out_ok.json --requests 5", "ok", outputs=("out_ok.json",)),
        # 2. lost requests: every arrival accounted for (the JSON's counts are checked)
        C(2, "run --model llama-3.1-8b --rate 2 --duration 10 --prompt 120000 --output 5 --json", "ok"),
        C(2, "run --rate 50 --duration 3 --prompt 8000 --output 300 --json", "ok"),
        C(2, "run --users 300 --duration 5 --prompt 4000 --json", "ok"),
        C(2, "run --rate 20 --duration 5 --replicas 3 --router least-loaded --json", "ok"),
        C(2, "run --rate 10 --duration 5 --pd 1:1 --json", "ok"),
        C(2, "run --trace {f}/good.csv --json", "ok"),
        C(2, "run --trace {f}/session.jsonl --json", "ok"),
        C(2, "run --workload {f}/good.toml --json", "ok"),
        C(2, "run --rate 30 --duration 4 --kv-blocks 300 --prompt 2000 --json", "ok"),
        C(2, "run --rate 10 --duration 4 --spec-tokens 4 --json", "ok"),
        C(2, "run --rate 10 --duration 4 --kv-offload-gb 50 --json", "ok"),
        C(2, "run --rate 8 --duration 4 --fast-share 0.3 --json", "ok"),
        C(2, "run --rate 40 --duration 3 --replicas 2 --pd 1:1 --json", "ok"),
        C(2, "run --rate 10 --duration 6 --replicas 2 --autoscale --json", "any"),
        C(2, "plan --rate 5 --duration 5 --tp 1,2 --replicas 1-2 --workers 1 --json", "ok", timeout=120),
        # 3. hangs: one estimate for every way work enters
        C(3, "run --workload {f}/wl_rate_big.toml", "refused"),
        C(3, "run --workload {f}/wl_many.toml --json", "any", timeout=60),
        C(3, "run --trace {f}/million.csv --json", "any", timeout=120),
        C(3, "run --trace {f}/gap.csv --json", "any"),
        C(3, "plan --replicas 1-4096 --tp 1,2,4,8 --rate 10 --duration 10", "refused"),
        C(3, "plan --replicas 4000 --rate 10 --duration 30 --workers 1", "refused"),
        C(3, "run --spec-tokens 1000000000 " + small, "refused"),
        C(3, "run --workload {f}/ws.toml", "refused"),
        C(3, "run --workload {f}/quotes.toml", "refused"),
        C(3, "validate --table ''", "refused"),
        C(3, "run --users 100000 --requests 100000000", "refused"),
        C(3, "run --rate 1e6 --duration 100", "refused"),
        C(3, "run --output 1000000000 " + small, "any"),
        C(3, "run --prompt 1000000000 " + small, "any"),
        C(3, "run --max-batch 1000000 --users 5000 --requests 5000", "any", timeout=90),
        C(3, "step --batch 100000000 --context 100000000", "any"),
        C(3, "run --think 1000000000 " + small, "any"),
        C(3, "run --users 1 --think-time 0 --output 1 --prompt 1 --requests 100000", "any", timeout=120),
        # 4. the clock: no time input may push a step below float64's resolution
        C(4, "run --trace {f}/good.csv --trace-speed 1e-300", "refused"),
        C(4, "run --trace {f}/good.csv --trace-speed 1e300", "any"),
        C(4, "run --trace {f}/good.csv --trace-speed 0", "refused"),
        C(4, "run --trace {f}/good.csv --trace-speed -1", "refused"),
        C(4, "run --trace {f}/good.csv --trace-speed nan", "refused"),
        C(4, "run --rate 1e-300 --requests 5", "refused"),
        C(4, "run --rate inf --requests 5", "refused"),
        C(4, "run --rate nan --requests 5", "refused"),
        C(4, "run --rate -- -1 --requests 5", "refused"),
        C(4, "run --duration 1e-300 --rate 5", "any"),
        C(4, "run --duration 0 --rate 5", "refused"),
        C(4, "run --duration inf --rate 5", "refused"),
        C(4, "run --duration -0.0 --rate 5", "refused"),
        C(4, "run --users 4 --think-time 1e300 --requests 8", "refused"),
        C(4, "run --users 4 --think-time exp:0 --requests 50", "any"),
        C(4, "run --pd 1:1 --kv-link-gbps 1e-300 --requests 5", "refused"),
        C(4, "run --pd 1:1 --kv-link-gbps 1e300 --requests 5 --json", "ok"),
        C(4, "run --trace {f}/year1.csv", "refused"),
        C(4, "run --workload {f}/wl_tiny.toml", "any"),
        C(4, "run --workload {f}/wl_durtiny.toml", "any"),
        C(4, "run --workload {f}/wl_think_huge.toml", "any"),
        C(4, "run --compute-mult 1e-300 --requests 5", "refused"),
        C(4, "run --bandwidth-mult 1e-300 --requests 5", "refused"),
        C(4, "run --price-per-hour 1e308 --requests 5 --json", "any"),
        C(4, "run --cold-start-s 1e300 --replicas 2 --autoscale --rate 5 --duration 5", "any"),
        # 5. readers: every file through the validation layer
        *[C(5, f"run --trace {{f}}/{n}", "any") for n in (
            "bin.csv", "utf16.csv", "bom.csv", "crlf.csv", "nul.csv", "empty.csv", "header_only.csv", "neg.csv",
            "unsorted.csv", "nan.csv", "inf.csv", "e19.csv", "zero_out.csv", "float_tok.csv", "neg_tok.csv",
            "dup.csv", "missing_col.csv", "extra_col.csv", "ragged.csv", "quoted.csv", "date_mix.csv", "deep.jsonl",
            "digits.jsonl", "arr.jsonl", "str.jsonl", "true.jsonl", "blank.jsonl", "dupkey.jsonl")],
        *[C(5, f"run --workload {{f}}/{n}", "any") for n in (
            "bin.toml", "empty.toml", "deep_wl.toml", "latin1.toml", "wl_nostage.toml", "wl_stage_empty.toml",
            "wl_both.toml", "wl_unknown.toml", "wl_neg.toml", "wl_zero.toml", "wl_inf.toml", "wl_str.toml",
            "wl_groups0.toml", "wl_prefix_big.toml", "wl_users_big.toml", "wl_toml_date.toml")],
        *[C(5, f"step --model {{f}}/{n}", "any") for n in (
            "bin.json", "empty.json", "deep_cfg.json", "digits5k.json", "cfg_float_layers.json", "cfg_neg_vocab.json",
            "cfg_zero_heads.json", "cfg_huge_ctx.json", "cfg_list.json", "cfg_null.json", "cfg_bool_tie.json",
            "cfg_textcfg_loop.json", "cfg_quant_bits.json", "cfg_quant_group.json", "cfg_quant_ignore.json",
            "cfg_quant_ct.json", "cfg_quant_ct2.json", "cfg_keep16.json", "cfg_head_dtype.json", "cfg_rope.json")],
        *[C(5, f"replay {{f}}/{n} --model llama-3.1-8b", "any") for n in (
            "result_empty.json", "result_list.json", "result_neg.json", "result_nan.json", "result_mismatch.json",
            "deep_result.json", "bin.json", "empty.json")],
        C(5, "step --hardware {f}/bin.toml", "refused"),
        C(5, "step --hardware {f}/empty.toml", "refused"),
        # 6. names printed raw: anything read from a file or an option is printed escaped
        C(6, "step --model {f}/m_name_esc.toml", "any"),
        C(6, "step --model {f}/m_name_esc.toml --json", "any"),
        C(6, "step --hardware {f}/hw_name_esc.toml", "any"),
        C(6, "run --hardware {f}/hw_name_esc.toml " + small, "any"),
        C(6, "step --hardware {f}/hw_display_esc.toml", "any"),
        C(6, "step --model {f}/cfg_arch_esc.json", "any"),
        C(6, "step --model {f}/cfg_name_esc.json", "any"),
        C(6, "run --model {f}/cfg_name_esc.json " + small, "any"),
        C(6, "step --model {f}/cfg_bidi.json", "any"),
        C(6, "step --model {f}/cfg_nl.json", "any"),
        C(6, "step --model {f}/cfg_key_esc.json", "any"),
        C(6, "step --model {f}/cfg_quant_esc.json", "any"),
        C(6, "step --model {f}/cfg_dtype_esc.json", "any"),
        C(6, f"step --model {shlex.quote('evil' + ESC)}", "refused"),
        C(6, f"step --hardware {shlex.quote('gpu' + ESC)}", "refused"),
        C(6, f"run --trace {shlex.quote('/nope/' + ESC + '.csv')}", "refused"),
        C(6, f"run --workload {shlex.quote('/nope/' + ESC + '.toml')}", "refused"),
        C(6, f"run --router {shlex.quote('x' + ESC)} --replicas 2", "refused"),
        C(6, f"scene {shlex.quote('s' + ESC)} --headless", "refused"),
        C(6, f"run --prompt {shlex.quote('uniform:' + ESC)}", "refused"),
        C(6, f"{shlex.quote('ru' + ESC + 'n')}", "refused"),
        C(6, f"run --vllm-args {shlex.quote('vllm serve m --' + ESC + ' 3')} " + small, "any"),
        # 7. options that do nothing say so, once
        C(7, "run --kv-link-gbps 10 " + small, "refused"),
        C(7, "run --router least-loaded " + small, "refused"),
        C(7, "run --spec-accept 0.5 " + small, "refused"),
        C(7, "run --spec-draft ngram " + small, "refused"),
        C(7, "run --trace-speed 2 " + small, "refused"),
        C(7, "run --gpu-memory-utilization 0.5 --kv-blocks 2000 " + small, "refused"),
        C(7, "serve --public-url not-a-url --port 1", "refused"),
        C(7, "run --fast-max-batch 8 " + small, "refused"),
        C(7, "run --scale-policy kv " + small, "refused"),
        C(7, "run --scale-interval 5 " + small, "refused"),
        C(7, "run --cold-start-s 5 " + small, "refused"),
        C(7, "run --price-per-kwh 0.2 " + small, "any"),
        C(7, "run --ep-comm all-gather " + small, "any"),
        C(7, "run --slo-tpot 0.05 --users 2 --requests 5", "ok"),
        C(7, "step --model {f}/cfg_rope.json", "any"),
        C(7, "run --think-time 5 --rate 3 " + small, "any"),
        # 8. signals and pipes
        C(8, "run --users 64 --requests 2000000 --force", "sigint", after=3, timeout=40),
        C(8, "run --users 64 --requests 2000000 --force", "sigterm", after=3, timeout=40),
        C(8, "plan --rate 20 --duration 200 --tp 1,2,4 --replicas 1-6 --workers 2", "sigint", after=6, timeout=60),
        C(8, "plan --rate 20 --duration 200 --tp 1,2,4 --replicas 1-6 --workers 2", "sigterm", after=6, timeout=60),
        C(8, "step", "pipe"), C(8, "list models", "pipe"), C(8, "run --requests 20", "pipe"),
        C(8, "run --requests 20 --json", "pipe"), C(8, "claims", "pipe"), C(8, "validate", "pipe", timeout=120),
        C(8, "scene --help", "pipe"),
        # 9. the allowed maximum runs, or the estimate refuses it
        C(9, "run --replicas 4096 --rate 100 --duration 5", "any", timeout=120),
        C(9, "run --replicas 4096 --users 4096 --requests 5000", "any", timeout=120),
        C(9, "run --tp 64 --model llama-3.1-405b --requests 20", "any"),
        C(9, "run --kv-blocks 10000000 --requests 20", "any"),
        C(9, "run --max-batch 100000 --users 20000 --requests 20000", "any", timeout=120),
        C(9, "run --max-batched-tokens 10000000 --requests 20", "any"),
        C(9, "run --spec-tokens 64 --requests 20", "any"),
        C(9, "run --max-model-len 10000000 --requests 20", "any"),
        C(9, "plan --replicas 1-64 --tp 1,2,4,8 --rate 5 --duration 5 --workers 2", "any", timeout=150),
        C(9, "run --fast-share 1 --requests 20", "any"),
        C(9, "run --kv-offload-gb 1000000 --requests 20", "any"),
        # 10. Ray: answers or fails within seconds, in one line
        C(10, "plan --ray 127.0.0.1:1 --rate 5 --duration 5", "refused", timeout=60),
        C(10, "plan --ray 'ray://10.255.255.1:10001' --rate 5 --duration 5", "refused", timeout=90),
        C(10, "plan --ray not-an-address --rate 5 --duration 5", "refused", timeout=60),
        # 11. answers that mislead
        C(11, "plan --rate 500 --duration 5 --slo-ttft 0.0001 --replicas 1 --tp 1 --json", "any"),
        C(11, "plan --workload {f}/good.toml --replicas 1-2 --json", "any", timeout=120),
        C(11, "run --workload {f}/wl_rate_big.toml --force --json", "any", timeout=60),
        C(11, "run --rate 1000 --duration 2 --json", "any"),
        C(11, "validate --table nosuch", "refused"),
        C(11, "run --requests 0", "refused"),
        C(11, "step --context -1", "refused"),
        C(11, "run --prompt 0 " + small, "refused"),
        C(11, "run --output 0 " + small, "refused"),
        # 12. option combinations
        C(12, "run --ep 8 --model llama-3.1-8b " + small, "refused"),
        C(12, "run --tp 3 " + small, "refused"),
        C(12, "run --tp 2 --ep 2 --model qwen3-30b-a3b " + small, "any"),
        C(12, "run --pd 1:1 --spec-tokens 4 " + small, "any"),
        C(12, "run --pd 0:1 " + small, "refused"),
        C(12, "run --pd 1:1 --router kv-aware " + small, "any"),
        C(12, "run --users 4 --rate 4 " + small, "refused"),
        C(12, "run --trace {f}/good.csv --workload {f}/good.toml", "refused"),
        C(12, "run --trace {f}/good.csv --rate 5", "refused"),
        C(12, "run --trace {f}/good.csv --requests 2 --json", "any"),
        C(12, "run --scheduler static --fast-share 0.5 " + small, "any"),
        C(12, "run --kv-offload-gb 10 --prefix-caching off " + small, "any"),
        C(12, "run --ideal --runtime-file {f}/hw.toml " + small, "refused"),
        C(12, "run --dtype int4 --kv-dtype fp8 --model {f}/cfg_quant_ignore.json " + small, "any"),
        C(12, "run --autoscale --replicas 1 " + small, "any"),
        C(12, "run --block-size 0 " + small, "any"),  # vLLM's flag: a note says 16 is simulated
        C(12, "run --max-model-len 10 --prompt 100 " + small, "any"),
        C(12, "run --vllm-args 'vllm serve x --tensor-parallel-size 1000' " + small, "refused"),
    ]
    return out


def _named(case: Case, d: Path) -> list[Path]:
    """The files a case's command line names (its inputs, and outputs aimed at them), but its declared outputs."""
    words = shlex.split(case.line.format(f=d))
    paths = [Path(w) if Path(w).is_absolute() else ROOT / w for w in words if "/" in w and not w.startswith("-")]
    return [p for p in paths if p.name not in case.outputs and not str(p).startswith("/dev/")]


def _fingerprint(paths: list[Path]) -> dict[str, str]:
    """What each path holds: a link's target, a file's hash, or that it is absent or something else."""
    out = {}
    for p in paths:
        if p.is_symlink():
            out[str(p)] = "link:" + os.readlink(p)
        elif p.is_file():
            out[str(p)] = hashlib.sha1(p.read_bytes()).hexdigest()
        else:
            out[str(p)] = "dir" if p.is_dir() else "absent" if not p.exists() else "other"
    return out


def _limit() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEM_LIMIT, MEM_LIMIT))
    os.setsid()


def _sane(case: Case, out: str, err: str) -> str:
    """'' when an exit-0 answer is sane, else why not."""
    if "\x1b" in out or "\x1b" in err or "\x07" in out or "\x07" in err:
        return "a raw escape code reached the terminal"
    if "--json" in case.line and case.expect != "pipe":
        try:
            j = json.loads(out)
        except ValueError:
            return "--json printed no JSON"
        if "requests_accepted" in j:
            acc, done, left = j["requests_accepted"], j["requests_completed"], j["requests_unfinished"]
            if acc != done + left or left != j["queue_end"] + j["running_end"]:
                return f"requests not conserved: accepted {acc}, completed {done}, unfinished {left}"
    return ""


def _lines(err: str) -> list[str]:
    notes = ("note:", "warning:", "tokensim: note:", "tokensim: warning:")
    return [x for x in err.splitlines() if x.strip() and not x.startswith(notes)]


def run_case(case: Case, d: Path, timeout: float) -> None:
    """Run one case and classify it (sets case.outcome and case.detail)."""
    argv = [sys.executable, "-m", "tui.cli", *shlex.split(case.line.format(f=d))]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "TOKENSIM_PROGRESS_EVERY": "1000"}
    named = _named(case, d)
    before = _fingerprint(named)
    limit = case.timeout or timeout
    t0 = time.monotonic()
    p = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, errors="replace", preexec_fn=_limit)
    try:
        if case.expect in ("sigint", "sigterm"):
            try:
                out, err = p.communicate(timeout=case.after)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGINT if case.expect == "sigint" else signal.SIGTERM)
                out, err = p.communicate(timeout=limit)
        elif case.expect == "pipe":
            first = p.stdout.readline() if p.stdout else ""
            p.stdout.close() if p.stdout else None
            err = p.stderr.read() if p.stderr else ""
            p.wait(timeout=limit)
            out = first
        else:
            out, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        case.outcome, case.detail = "BAD-hang", f"no answer in {limit:.0f} s"
        return
    case.detail = f"{time.monotonic() - t0:.1f} s"
    left: list[str] = []
    for _ in range(30):  # workers get a few seconds to leave after their parent
        left = subprocess.run(["pgrep", "-s", str(p.pid)], capture_output=True, text=True).stdout.split()
        if not left:
            break
        time.sleep(0.1)
    if left:
        os.killpg(p.pid, signal.SIGKILL)
    changed = [Path(k).name for k, v in _fingerprint(named).items() if before.get(k) != v]
    case.outcome, why = _classify(case, p.returncode, out, err, changed, left)
    if why:
        case.detail += ": " + why


def _classify(case: Case, code: int, out: str, err: str, changed: list[str], left: list[str]) -> tuple[str, str]:
    """(outcome, why) of a finished case."""
    lines = _lines(err)
    if "Traceback (most recent call last)" in err:
        return "BAD-traceback", err.strip().splitlines()[-1][:160]
    if changed:
        return "BAD-changed-input", ", ".join(changed)
    if left:
        return "BAD-workers-left", f"{len(left)} processes of its session still running"
    if case.expect in ("sigint", "sigterm"):
        want = 130 if case.expect == "sigint" else 143
        if code == 0:  # it finished before the signal: fine, if sane
            return ("ok", "") if not _sane(case, out, err) else ("BAD-insane-0", _sane(case, out, err))
        return ("signal", "") if code == want and len(lines) <= 1 else ("BAD-exit", f"exit {code}, {len(lines)} lines")
    if case.expect == "pipe":
        return ("signal", "") if code == 0 and not lines else ("BAD-exit", f"exit {code}: {err.strip()[:160]}")
    if code == 0:
        why = _sane(case, out, err)
        return ("BAD-insane-0", why) if why else ("ok", "")
    if code == 2:
        if "\x1b" in err or "\x07" in err:
            return "BAD-escape", "a raw escape code in the refusal"
        return ("refused", lines[0][:160] if lines else "") if len(lines) == 1 else \
            ("BAD-2-lines", f"{len(lines)} lines: {' | '.join(lines)[:160]}")
    return "BAD-exit", f"exit {code}: {err.strip()[-160:]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", type=int, action="append", help="run only this class (repeatable)")
    ap.add_argument("--timeout", type=float, default=40.0, help="seconds per case (default 40)")
    ap.add_argument("--jobs", type=int, default=2, help="cases at once (default 2)")
    ap.add_argument("--list", action="store_true", help="print the cases and stop")
    a = ap.parse_args()
    todo = [c for c in cases() if not a.only or c.cls in a.only]
    if a.list:
        for c in todo:
            print(c.cls, c.expect, c.line)
        return 0
    with tempfile.TemporaryDirectory(prefix="tokensim-audit-") as tmp:
        d = Path(tmp)
        write_files(d)
        t0 = time.monotonic()
        with ThreadPoolExecutor(a.jobs) as pool:
            list(pool.map(lambda c: run_case(c, d, a.timeout), todo))
        wall = time.monotonic() - t0
        leftovers = sorted(p.name for p in [*d.iterdir(), *(ROOT / "tests/data/results").iterdir()]
                           if p.name.endswith(".part"))
    code = report(todo, wall)
    if leftovers:  # a temporary output file some case left behind
        print(f"\nBAD: temporary files left behind: {', '.join(leftovers)}")
    return code or int(bool(leftovers))


def report(todo: list[Case], wall: float) -> int:
    """The table of outcomes by class, then every BAD case; 1 if there is any."""
    kinds = sorted({c.outcome for c in todo}, key=lambda k: (k.startswith("BAD"), k))
    counts = Counter((c.cls, c.outcome) for c in todo)
    print(f"{'class':<28}" + "".join(f"{k:>18}" for k in kinds) + f"{'total':>8}")
    for n, name in CLASSES.items():
        row = [counts[(n, k)] for k in kinds]
        if sum(row):
            print(f"{n:>2} {name:<25}" + "".join(f"{v:>18}" for v in row) + f"{sum(row):>8}")
    print(f"{'all':<28}" + "".join(f"{sum(counts[(n, k)] for n in CLASSES):>18}" for k in kinds) + f"{len(todo):>8}")
    bad = [c for c in todo if c.outcome.startswith("BAD")]
    wrong = [c for c in todo if not c.outcome.startswith("BAD") and c.expect in ("ok", "refused")
             and c.outcome != c.expect]
    print(f"\n{len(todo)} cases in {wall:.0f} s: {len(bad)} BAD, {len(wrong)} answered otherwise than expected")
    for c in bad + wrong:
        tag = c.outcome if c in bad else f"expected {c.expect}, got {c.outcome}"
        print(f"  [{c.cls}] {tag}: tokensim {c.line.encode('unicode_escape').decode()[:150]}\n        {c.detail}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
