"""Fidelity: replay the shipped measured speed tables through the step model, predicted beside measured.

Two public tables ship in presets/measured (every source column kept):

- ``qwen25``: Qwen's own speed benchmark of Qwen2.5 on one A100 80GB (or a few). Batch 1, 2,048 tokens
  generated after a prompt of ``input_len`` tokens; speed = 2048 / wall time of the whole request, prefill
  included. Two frameworks: vLLM 0.6.2 (profile ``vllm-0.6``) and Hugging Face transformers (profile ``hf-eager``).
- ``trtllm``: NVIDIA's TensorRT-LLM perf overview. Offline max-throughput runs of isl/osl-token requests;
  speed = output tokens per second per GPU (profile ``trtllm``).

Each row becomes a condition of the step model (hardware, model, tp or ep, dtypes, lengths) and is priced
with the table's own speed definition. A row the step model cannot represent is listed with the reason,
never dropped. Rows are split train/test by a stable hash of their key: the runtime constants in
presets/runtimes.toml were fitted on the train rows only (engine/evidence/fit.py); the test rows measure how well
the fit generalises.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from engine.errors import InputError, suggest
from engine.evidence import bands, replay
from engine.evidence.claim_rows import row
from engine.numbers import err_pct
from engine.physics.batch import Batch
from engine.physics.calibration import Runtime
from engine.physics.specs import Model, load_hardware, load_model
from engine.physics.step import StepModel, StepOptions

TABLE_FILES: dict[str, str] = {
    "qwen25": "measured_qwen25_speed_a100.csv",
    "trtllm": "measured_trtllm_perf_overview_pergpu.csv",
}
TABLE_TITLES: dict[str, str] = {
    "qwen25": "Qwen2.5 speed benchmark, A100 80GB, batch 1 (tok/s = 2048 / request time)",
    "trtllm": "TensorRT-LLM perf overview, offline max throughput (output tok/s per GPU)",
}

# ---- Qwen2.5 table: how its columns map onto the step model ---------------------------------------------
_QWEN_MODELS = {f"Qwen2.5-{s}-Instruct": f"qwen2.5-{s.lower()}" for s in ("0.5B", "1.5B", "3B", "7B", "14B", "32B",
                                                                             "72B")}
_QWEN_RUNTIME = {"vllm": "vllm-0.6", "transformers": "hf-eager"}  # the table ran vllm==0.6.2
# GPTQ and AWQ checkpoints are group-quantised (group 128, one fp16 scale each) and keep the embedding and the
# LM head in 16 bits; only the transformer blocks' linear layers are quantised.
_QWEN_QUANT: dict[str, tuple[str | None, str | None]] = {
    "BF16": (None, None), "GPTQ-Int8": ("int8-g128", "bf16"), "GPTQ-Int4": ("int4-g128", "bf16"),
    "AWQ": ("int4-g128", "bf16"),
}

# ---- TensorRT-LLM table ----------------------------------------------------------------------------------
_TRT_MODELS = {
    "DeepSeek-R1-0528": "deepseek-v3",  # R1-0528 is a post-trained DeepSeek-V3: the same architecture
    "gpt-oss-120b": "gpt-oss-120b", "gpt-oss-20b": "gpt-oss-20b", "Llama 3.3 70B": "llama-3.3-70b",
    "Llama 4 Maverick": "llama-4-maverick", "Qwen3-235B-A22B": "qwen3-235b-a22b", "Qwen3-30B-A3B": "qwen3-30b-a3b",
}
_TRT_GPUS = {"B200": "b200", "GB200": "gb200", "H200": "h200", "H100": "h100-sxm"}  # perf-overview: H100 SXM 80GB
# Offline max throughput (trtllm-bench throughput): every request is queued at once. The scheduler's default
# policy (guaranteed no evict) admits a request only when the KV pool can hold its whole isl+osl tokens, and
# no more than max_batch_size requests run on a rank at a time, with at most max_num_tokens tokens per step.
# The perf overview leaves both limits to trtllm-bench, which sets them as below (see trt_bench_limits).
# trtllm-bench's tuning heuristic (tensorrt_llm/bench/build/tuning.py, calc_engine_setting and finetune_setting)
# runs for these checkpoint quantisations, in bytes per stored element; any other (gpt-oss's MXFP4) keeps
# TensorRT-LLM's BuildConfig defaults (tensorrt_llm/builder.py).
BENCH_TUNED_BYTES = {"nvfp4": 0.5, "fp8": 1.0}  # QuantAlgo NVFP4; FP8 and FP8_BLOCK_SCALES
BENCH_DEFAULT_BATCH, BENCH_DEFAULT_TOKENS = 2048, 8192
BENCH_MAX_BATCH, BENCH_MAX_TOKENS = 4096, 32768  # the heuristic's caps before rounding
# The perf overview: "In many cases, we also use a higher KV cache percentage by setting
# --kv_cache_free_gpu_mem_fraction 0.95"; trtllm-bench passes the same fraction to the heuristic.
BENCH_KV_FRACTION = 0.95
# trtllm-bench reports output throughput as all output tokens over the whole run's wall time, for a dataset of
# identical requests whose size the perf overview gives per isl/osl ("Number of Requests"). 1000/1000 is not in
# that table: it is taken as 1024/1024's 3,000, the nearest listed.
BENCH_REQUESTS = {(1024, 1024): 3000, (8192, 1024): 1500, (1024, 8192): 1500, (32768, 1024): 1000,
                  (1024, 32768): 1000}
BENCH_REQUESTS_DEFAULT = 3000
# Every row's llm_options (perf overview, "Running the Benchmark") capture CUDA graphs for these decode batch
# sizes with enable_padding: a step that only decodes runs the smallest captured graph that holds its batch,
# the rest filled with dummy requests. TensorRT-LLM keeps the sizes up to min(max_batch_size, max_num_tokens)
# and, with padding on, adds that bound itself as the last one (_filter_cuda_graph_batch_sizes).
BENCH_CUDA_GRAPH_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192)
# A replay merges up to this many consecutive steps that admit and finish nothing into one priced record.
BENCH_MERGE_STEPS = 64


@dataclass(frozen=True, slots=True)
class Case:
    """One measured row mapped onto step-model conditions, with the table's own speed definition."""

    table: str
    key: str
    row: dict[str, str]
    measured: float
    hardware: str
    model: str
    runtime: str
    opts: StepOptions
    isl: int
    osl: int
    gpus: int
    expert_dtype: str | None = None  # per-row override of the model's expert dtype (e.g. NVFP4 experts only)
    quant_algo: str | None = None  # the checkpoint's quantisation as trtllm-bench reads it ("nvfp4", "fp8")
    pipeline: bool = False  # layers split over GPUs that run one after another (HF device_map="auto")
    notes: tuple[str, ...] = field(default=())

    @property
    def split(self) -> str:
        """'train' or 'test', from a stable hash of the row key (about half each)."""
        return "train" if hashlib.sha256(self.key.encode()).digest()[0] % 2 == 0 else "test"


@cache
def load_table(name: str) -> tuple[dict[str, str], ...]:
    """The rows of a shipped measured table, every source column kept, as strings."""
    if name not in TABLE_FILES:
        raise InputError(f"unknown table '{name}'{suggest(name, list(TABLE_FILES))}")
    text = resources.files("engine").joinpath("presets", "measured", TABLE_FILES[name]).read_text(encoding="utf-8")
    return tuple(csv.DictReader(io.StringIO(text)))


def _qwen_case(r: dict[str, str]) -> Case | str:
    """Map one Qwen2.5 row to a Case, or return why it cannot be represented."""
    model = _QWEN_MODELS.get(r["model"])
    runtime = _QWEN_RUNTIME.get(r["framework"])
    quant = _QWEN_QUANT.get(r["quant"])
    if model is None or runtime is None or quant is None:
        return f"no preset for model/framework/quantisation {r['model']} / {r['framework']} / {r['quant']}"
    if r["hardware"] != "NVIDIA A100 80GB" or r["batch"] != "1":
        return "only the A100 80GB batch-1 rows are in the published table"
    gpus = int(r["gpus"])
    wd, hd = quant
    notes = []
    pipeline = runtime == "hf-eager" and gpus > 1
    if pipeline:
        # transformers spreads the layers over the GPUs (device_map="auto"); they run one after another, so a
        # batch-1 step costs what one GPU reading every layer costs.
        tp = 1
        notes.append(f"layers split over {gpus} GPUs that run in turn (device_map=auto): priced as one GPU")
    else:
        tp = gpus
        m = load_model(model)
        if m.heads % tp or m.kv_heads % tp and tp % m.kv_heads:
            return f"{gpus} GPUs do not divide {m.heads} attention heads for tensor parallel"
    if int(r["input_len"]) + int(r["output_len"]) > load_model(model).max_context:
        notes.append("context beyond 32K: the table ran YaRN rope scaling (same arithmetic)")
    key = "|".join(r[k] for k in ("model", "framework", "input_len", "quant", "gpus", "note"))
    fmt = {"GPTQ-Int8": "gptq", "GPTQ-Int4": "gptq", "AWQ": "awq"}.get(r["quant"])
    opts = StepOptions(tp=tp, weight_dtype=wd, head_dtype=hd, kv_dtype="bf16", runtime=runtime, quant_format=fmt)
    return Case("qwen25", key, dict(r), float(r["speed_tok_s"]), "a100-80g", model, runtime, opts,
                int(r["input_len"]), int(r["output_len"]), gpus, pipeline=pipeline, notes=tuple(notes))


def _trt_case(r: dict[str, str]) -> Case | str:
    """Map one TensorRT-LLM row to a Case, or return why it cannot be represented."""
    model = _TRT_MODELS.get(r["model"])
    hw = _TRT_GPUS.get(r["gpu"])
    if model is None or hw is None:
        return f"no preset for {r['model']} on {r['gpu']}"
    par, n = r["parallel"], int(r["num_gpus"])
    if par.startswith("TP"):
        tp, ep = int(par[2:]), 1
    elif par.startswith("DEP"):
        tp, ep = 1, int(par[3:])
    else:
        return f"parallel layout {par} is not modelled"
    if tp * ep != n:
        return f"parallel layout {par} does not match {n} GPUs"
    m = load_model(model)
    blackwell = r["gpu"] in ("B200", "GB200")
    prec = r["precision"]
    notes: list[str] = []
    expert_dtype = None
    if model.startswith("gpt-oss"):
        # The original openai/gpt-oss checkpoint (MXFP4 experts, bf16 elsewhere) on both; the perf overview
        # runs fp8 KV on Blackwell and 'auto' (bf16) KV on Hopper.
        wd, hd, kv = None, None, "fp8" if blackwell else "bf16"
        notes.append("openai checkpoint: MXFP4 experts, bf16 attention")
    elif prec == "FP4":
        # ModelOpt NVFP4 checkpoints; FP8 KV for FP4 Blackwell runs (table note). DeepSeek-R1-0528-NVFP4
        # quantises only the routed experts; attention and dense layers keep the original fp8.
        if model == "deepseek-v3":
            wd, expert_dtype = None, "nvfp4"
        else:
            wd = "nvfp4"
        hd, kv = "bf16", "fp8"
    elif prec == "FP8":
        # deepseek-ai's own FP8 (block-scaled) checkpoint, or ModelOpt FP8. The KV cache is the checkpoint's
        # (trtllm-bench passes kv_cache_config dtype "auto"): DeepSeek's llm_options set fp8; NVIDIA's FP8 cards
        # quantise "only the weights and activations of the linear operators", so 16-bit. Llama 3.3 70B must
        # carry an fp8 cache: at 1024/8192 on H200 TP2 a 16-bit pool (0.95 of all memory beside the weights)
        # holds at most 65 sequences of 9,216 tokens, whose step reads 91 GB a GPU, capping it at 1,717
        # tok/s/GPU at peak bandwidth; the table measured 2,009.
        wd, hd = "fp8-block" if model == "deepseek-v3" else "fp8", "bf16"
        kv = "fp8" if model in ("deepseek-v3", "llama-3.3-70b") else "bf16"
        if model == "llama-3.3-70b":
            notes.append("fp8 KV cache: the 1024/8192 H200 row is faster than any 16-bit pool allows")
    else:
        return f"precision {prec} is not modelled"
    if not blackwell and prec == "FP4":
        return "FP4 on a GPU without FP4 tensor cores"
    if ep > 1 and not m.is_moe:
        return f"{par} needs a mixture-of-experts model"
    if tp > 1 and m.heads % tp:
        return f"TP{tp} does not divide {m.heads} attention heads"
    key = "|".join(r[k] for k in ("model", "gpu", "parallel", "precision", "isl", "osl"))
    opts = StepOptions(tp=tp, ep=ep, weight_dtype=wd, head_dtype=hd, kv_dtype=kv, runtime="trtllm")
    quant = None if model.startswith("gpt-oss") else "nvfp4" if prec == "FP4" else "fp8"
    return Case("trtllm", key, dict(r), float(r["output_tok_s_per_gpu"]), hw, model, "trtllm", opts,
                int(r["isl"]), int(r["osl"]), n, expert_dtype=expert_dtype, quant_algo=quant, notes=tuple(notes))


@cache
def cases(name: str) -> tuple[tuple[Case, ...], tuple[dict[str, Any], ...]]:
    """(represented cases, unrepresented rows each with a 'reason') of one table; counts add up to the CSV."""
    mapper = _qwen_case if name == "qwen25" else _trt_case
    done: list[Case] = []
    skipped: list[dict[str, Any]] = []
    for r in load_table(name):
        c = mapper(r)
        if isinstance(c, str):
            skipped.append({**r, "reason": c})
        else:
            done.append(c)
    keys = [c.key for c in done]
    if len(set(keys)) != len(keys):
        raise InputError(f"table {name}: row keys are not unique")
    contradicted = _contradictions(done)
    skipped.extend({**c.row, "reason": contradicted[c.key]} for c in done if c.key in contradicted)
    return tuple(c for c in done if c.key not in contradicted), tuple(skipped)


def _dominates(a: str, b: str) -> bool:
    """Whether GPU preset `a` matches or beats `b` on every figure the step model uses (memory, bandwidth, every
    tensor-core rate, interconnect), and beats it on at least one."""
    ha, hb = load_hardware(a), load_hardware(b)
    pairs = [(ha.memory_gb, hb.memory_gb), (ha.memory_bandwidth_gbps, hb.memory_bandwidth_gbps),
             (ha.interconnect_gbps, hb.interconnect_gbps)]
    pairs += [(ha.tflops.get(d, 0.0), v) for d, v in hb.tflops.items()]
    return all(x >= y for x, y in pairs) and any(x > y for x, y in pairs)


def _contradictions(done: list[Case]) -> dict[str, str]:
    """Rows the table contradicts itself on, by key, with the checkable reason; no per-GPU physics fits them.

    qwen25: a run on n GPUs measured more than n2/n times slower than the same checkpoint, framework and prompt
    on n2 > n GPUs (a superlinear speed-up: splitting the bytes n2/n ways can give at most n2/n).
    trtllm: a run measured slower than the same model, layout, precision and lengths on a GPU it matches or
    beats on every spec (memory, bandwidth, every tensor-core rate, interconnect).
    """
    out: dict[str, str] = {}
    for c in done:
        for o in done:
            if c.table == "qwen25":
                same = all(c.row[k] == o.row[k] for k in ("model", "framework", "quant", "input_len", "output_len"))
                if same and o.gpus > c.gpus and o.measured / c.measured > o.gpus / c.gpus:
                    out[c.key] = (
                        f"the same checkpoint measured {o.measured / c.measured:.2f}x faster on {o.gpus} GPUs "
                        f"({o.measured:g} vs {c.measured:g} tok/s), more than the {o.gpus / c.gpus:g}x that "
                        f"splitting each step's bytes {o.gpus // c.gpus} ways can give: a runtime configuration "
                        f"difference the table does not record beyond its notes ({c.row.get('note') or '-'!r} vs "
                        f"{o.row.get('note') or '-'!r})")
            else:
                same = all(c.row[k] == o.row[k] for k in ("model", "parallel", "precision", "isl", "osl"))
                if same and c.hardware != o.hardware and _dominates(c.hardware, o.hardware) and c.measured < o.measured:
                    out[c.key] = (
                        f"measured {1 - c.measured / o.measured:.0%} slower than the same run on {o.row['gpu']} "
                        f"({c.measured:g} vs {o.measured:g} tok/s/GPU), although {c.row['gpu']} matches or beats "
                        f"{o.row['gpu']} on memory, bandwidth, every tensor-core rate and interconnect: a run "
                        f"difference the table does not record")
    return out


def step_model(case: Case, runtime: Runtime | str | None = None) -> StepModel:
    """The step model a case runs on; `runtime` overrides the case's own profile (a name or the constants)."""
    m = load_model(case.model)
    if case.expert_dtype:
        m = replace(m, expert_dtype=case.expert_dtype)
    opts = case.opts if runtime is None else replace(case.opts, runtime=runtime)
    return StepModel(load_hardware(case.hardware), m, opts)


# ---- predictions ------------------------------------------------------------------------------------------

def decode_run_time(sm: StepModel, batch: int, ctx0: int, steps: int) -> float:
    """Total time of `steps` decode steps of `batch` sequences whose context grows from ctx0 by one a step,
    every step priced at once (StepModel.price), local layers' sawtooth or window edge included."""
    if steps <= 0:
        return 0.0
    ctx = np.arange(ctx0, ctx0 + steps, dtype=np.float64)
    cw = sm.model.local_seen(ctx)
    rows = np.full(steps, float(batch))
    return float(sm.price(Batch(tokens=rows, seqs=rows, sum_ctx=batch * ctx, sum_win=batch * cw,
                                attn_full=batch * (ctx + 0.5), attn_win=batch * (cw + 0.5), logits=rows,
                                attn_decode=batch * (ctx + 0.5))).time.sum())


def qwen_request_time(sm: StepModel, isl: int, osl: int) -> float:
    """Wall time of one batch-1 request: prefill of `isl` tokens (which yields the first token), then osl-1 decodes."""
    pre = sm.prefill(isl).time_s
    return pre + decode_run_time(sm, 1, isl + 1, osl - 1)


def _stored_elements(sm: StepModel) -> float:
    """Elements of the checkpoint's safetensors, the count trtllm-bench sizes the engine by: an FP4 tensor
    packs two weights into each stored byte, plus one scale per block (NVFP4: 16 weights, MXFP4: 32)."""
    c, o = sm.model.counts, sm.opts
    head = c["embed"] + c["lm_head_separate"]
    parts = ((c["total"] - head - c["expert_all"], sm.wdtype), (c["expert_all"], sm.edtype),
             (head, o.head_dtype or sm.wdtype))
    packed = {"nvfp4": 0.5 + 1 / 16, "fp4": 0.5 + 1 / 16, "mxfp4": 0.5 + 1 / 32}
    return sum(n * packed.get(d, 1.0) for n, d in parts)


def trt_bench_limits(case: Case, sm: StepModel) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) per rank, as trtllm-bench sets them when the run does not.

    Its heuristic estimates the requests whose isl+osl tokens fit the KV pool of all the run's GPUs: memory
    in GiB as the device reports it (the preset's memory_gb, which spec sheets round to within a few percent
    of that figure) minus the engine (stored elements x bytes per element), times the KV
    fraction, over 2 x layers x max(tp, kv_heads) x head_size bytes a token. For MLA that per-token figure is
    the uncompressed K and V of every head, far above the latent actually cached, so the estimate is small.
    It rounds the estimate up (at least 64; to 32s, 128s or 256s) and applies it per rank: under attention
    data parallel every rank schedules up to that many requests. Chunked prefill is off, so a step must also
    hold the longest prompt beside the batch.
    """
    m, n = sm.model, case.gpus
    if case.quant_algo not in BENCH_TUNED_BYTES:
        return BENCH_DEFAULT_BATCH, max(BENCH_DEFAULT_TOKENS, case.isl + BENCH_DEFAULT_BATCH)
    kv_elem = 1.0 if case.opts.kv_dtype == "fp8" else 2.0
    per_token = 2 * m.layers * max(n, m.kv_heads) * m.head_dim * kv_elem / 2**30
    engine = _stored_elements(sm) * BENCH_TUNED_BYTES[case.quant_algo] / 2**30
    requests = BENCH_KV_FRACTION * (sm.hw.memory_gb * n - engine) / (per_token * (case.isl + case.osl))
    raw_bs = min(requests, BENCH_MAX_BATCH)
    max_bs, max_tokens = bench_round(raw_bs, min(raw_bs * (1 + case.isl / case.osl), BENCH_MAX_TOKENS))
    return max_bs, max(max_tokens, case.isl + max_bs)


def bench_round(raw_bs: float, raw_tokens: float) -> tuple[int, int]:
    """trtllm-bench's optimistic rounding of its estimates: the batch up to a multiple of 32 (at least 64) below
    256, of 128 below 1,024, else of 256; the token budget up to a multiple of 256 (at least 2,048) below 4,096,
    of 512 below 8,192, else of 1,024."""
    step = 32 if raw_bs < 256 else 128 if raw_bs < 1024 else 256
    max_bs = max(64, step * math.ceil(raw_bs / step))
    step = 256 if raw_tokens < 4096 else 512 if raw_tokens < 8192 else 1024
    return max_bs, max(2048, step * math.ceil(raw_tokens / step))


@dataclass(frozen=True, slots=True)
class BenchRun:
    """One rank's replay of a trtllm-bench run: every distinct step's aggregates (a Batch record's fields, as
    arrays) with how many steps ran like it and the tokens each yields, the requests it served and the most
    it ran at once."""

    tokens: np.ndarray
    sum_ctx: np.ndarray
    sum_win: np.ndarray
    attn_full: np.ndarray
    attn_win: np.ndarray
    logits: np.ndarray
    attn_decode: np.ndarray
    reps: np.ndarray
    emitted: np.ndarray  # output tokens a step yields: one per real request (the padding's are thrown away)
    requests: int
    peak_batch: int

    @property
    def steps(self) -> int:
        """Engine iterations the rank ran."""
        return int(self.reps.sum())


def graph_batch(batch: int, max_bs: int, max_tokens: int) -> int:
    """The CUDA graph a decode-only step of `batch` requests runs: its captured batch size, dummies included.
    The dummies add no context to attend over, but run every GEMM (and the LM head) as real rows do."""
    top = min(max_bs, max_tokens)
    sizes = [b for b in BENCH_CUDA_GRAPH_BATCHES if b < top] + [top]
    return next((b for b in sizes if b >= batch), batch)


def bench_requests(isl: int, osl: int) -> int:
    """The dataset size the perf overview used for this isl/osl (its 'Number of Requests' table)."""
    return BENCH_REQUESTS.get((isl, osl), BENCH_REQUESTS_DEFAULT)


_RUNS: dict[tuple[Any, ...], BenchRun] = {}


def bench_run(case: Case, sm: StepModel) -> BenchRun:
    """Replay trtllm-bench's offline run on one rank, step by step, as its scheduler admits the requests.

    Every request is queued at t = 0. A step first decodes the running requests (one token each), then admits
    queued ones FCFS while the rank runs fewer than max_batch_size, the KV pool can hold one more request's
    whole isl+osl tokens (guaranteed no evict) and the step's tokens (a decode's 1, a prompt's isl: chunked
    prefill is off) stay within max_num_tokens. An admitted prompt is prefilled whole and yields its first
    token in that step; it then decodes osl-1 more. So the run has a ramp, a steady middle and a tail, and
    its speed is total output over the whole run, as trtllm-bench reports it. A step that only decodes runs
    as a CUDA graph padded up to its captured batch size (graph_batch). Steps in which nothing is
    admitted and nothing finishes are merged into one record of their mean aggregates (contexts grow by one a
    step; local layers' sums are exact). The schedule depends on counts only, not on the runtime constants,
    so it is built once per case and reused by every pricing (the fit prices it thousands of times).
    """
    isl, osl = case.isl, case.osl
    ranks = case.gpus if case.opts.ep > 1 else 1  # attention DP: each rank schedules its share of the requests
    n_req = math.ceil(bench_requests(isl, osl) / ranks)
    max_bs, max_tokens = trt_bench_limits(case, sm)
    per_seq = float(sm.kv_bytes_for(np.array([isl + osl])))
    slots = max(1, int(sm.kv_capacity_bytes // per_seq)) if per_seq > 0 else max_bs
    key = (case.key, n_req, max_bs, max_tokens, slots, BENCH_MERGE_STEPS)
    if key in _RUNS:
        return _RUNS[key]
    rec, peak = _bench_steps(case, sm.model, n_req, min(max_bs, slots), max_bs, max_tokens)
    a = np.array(rec, dtype=np.float64)
    out = BenchRun(*(a[:, i] for i in range(9)), requests=n_req, peak_batch=peak)
    _RUNS[key] = out
    return out


def _bench_steps(case: Case, m: Model, n_req: int, cap: int, max_bs: int,
                 max_tokens: int) -> tuple[list[tuple[float, ...]], int]:
    """bench_run's schedule: one record of BenchRun's nine aggregates per (merged) step, and the peak batch.

    `cap` is the most requests a rank runs at once (max_batch_size or what the KV pool holds, the smaller).
    """
    isl, osl = case.isl, case.osl
    # A local layer's context is its full one capped (window) or wrapped (chunk); past a window it is constant.
    flat_win = not m.sliding_layers or (not m.chunked and isl >= m.sliding_window)
    win_const = float(m.local_seen(np.array(float(isl)))) if m.sliding_layers else 0.0
    pre_win = float(m.local_pairs(np.array(0.0), np.array(float(isl))))
    adm: list[int] = []  # cohorts, oldest first: the step each was admitted in, and its size
    cnt: list[int] = []
    front = 0
    run = 0  # requests decoding
    sum_adm = 0  # sum over running requests of their admission step
    queued, t, peak = n_req, 0, 0
    rec: list[tuple[float, ...]] = []
    while queued > 0 or run > 0:
        while front < len(adm) and adm[front] + osl - 1 < t:  # cohorts past their last token leave
            run -= cnt[front]
            sum_adm -= cnt[front] * adm[front]
            front += 1
        if queued == 0 and run == 0:
            break
        new = max(0, min(queued, cap - run, (max_tokens - run) // isl))
        if new == 0 and run == 0:
            raise InputError(f"{case.key}: no request fits a step ({isl} prompt tokens, {max_tokens} a step)")
        # Contexts of the decoding requests at this step: isl + (t - a - 1) cached tokens for admission step a.
        span = 1 if new or run == 0 else min(adm[front] + osl - t, BENCH_MERGE_STEPS)
        mid = (span - 1) / 2  # a merged record's mean context is its middle step's
        sum_ctx = run * (isl - 1 + t + mid) - sum_adm
        if flat_win:
            sum_win = run * win_const
        else:
            ctx = isl - 1 + t - np.array(adm[front:], dtype=np.float64)
            sum_win = float((np.array(cnt[front:]) * m.local_seen_sum(ctx, ctx + span)).sum()) / span
        # A decode-only step runs a padded CUDA graph: its dummies decode one token each on an empty context.
        dec = run if new else graph_batch(run, max_bs, max_tokens)
        rec.append((dec + new * isl, sum_ctx, sum_win, sum_ctx + 0.5 * dec + new * isl * isl / 2,
                    sum_win + 0.5 * dec + new * pre_win, dec + new, sum_ctx + 0.5 * dec, span, run + new))
        if new:
            adm.append(t)
            cnt.append(new)
            run += new
            sum_adm += new * t
            queued -= new
            peak = max(peak, run)
        t += span
    return rec, peak


def bench_run_time(sm: StepModel, run: BenchRun) -> float:
    """Wall time of a replayed run: every step priced by the step model at once."""
    t = sm.price(Batch(tokens=run.tokens, seqs=run.emitted, sum_ctx=run.sum_ctx, sum_win=run.sum_win,
                       attn_full=run.attn_full, attn_win=run.attn_win, logits=run.logits,
                       attn_decode=run.attn_decode)).time
    return float((t * run.reps).sum())


def predict(case: Case, runtime: Runtime | str | None = None) -> float:
    """The case's speed in the table's own definition, predicted by the step model."""
    sm = step_model(case, runtime)
    if case.table == "qwen25":
        return case.osl / qwen_request_time(sm, case.isl, case.osl)
    # Output tokens per GPU, over the run's wall time: a TP group's GPUs share each request; attention-DP ranks
    # each serve their share in lockstep (the one with the most requests sets the run's length).
    return bench_requests(case.isl, case.osl) * case.osl / bench_run_time(sm, bench_run(case, sm)) / case.gpus


# ---- the report ---------------------------------------------------------------------------------------------

def _stats(errs: list[float]) -> dict[str, float | None]:
    """Median and max of |err %| (None when there are no rows)."""
    if not errs:
        return {"median_abs_err_pct": None, "max_abs_err_pct": None}
    a = np.abs(np.array(errs))
    return {"median_abs_err_pct": float(np.median(a)), "max_abs_err_pct": float(a.max())}


def case_row(case: Case, runtime: str | None = None) -> dict[str, Any]:
    """One report row: the source columns, the step-model conditions, measured, predicted, err_pct, split."""
    sm = step_model(case, runtime)
    pred = predict(case, runtime)
    sim: dict[str, Any] = {
        "hardware": case.hardware, "model": case.model, "runtime": sm.runtime.name, "tp": case.opts.tp,
        "ep": case.opts.ep, "weight_dtype": sm.wdtype, "expert_dtype": sm.edtype if sm.model.is_moe else None,
        "head_dtype": case.opts.head_dtype or sm.wdtype, "kv_dtype": case.opts.kv_dtype,
        "isl": case.isl, "osl": case.osl,
    }
    if case.table == "trtllm":
        run = bench_run(case, sm)
        # The replay's most requests running at once on a GPU (on an attention-DP rank), of the requests it got.
        sim["batch_per_gpu"] = run.peak_batch
        sim["requests_per_gpu"] = run.requests
        sim["steps"] = run.steps
        sim["bench_limits"] = dict(zip(("max_batch_size", "max_num_tokens"), trt_bench_limits(case, sm), strict=True))
    else:
        sim["request_time_s"] = case.osl / pred
        sim["measured_request_time_s"] = case.osl / case.measured
    return {**case.row, "sim": sim, "sim_notes": list(case.notes), "measured": case.measured, "predicted": pred,
            "err_pct": err_pct(pred, case.measured), "split": case.split}


def table_report(name: str, runtime: str | None = None) -> dict[str, Any]:
    """Predicted against measured for every row of one table, its error statistics and the held-out split."""
    represented, skipped = cases(name)
    rows = [case_row(c, runtime) for c in represented]
    out: dict[str, Any] = {"name": name, "rows": rows}
    out.update(_stats([r["err_pct"] for r in rows]))
    out["heldout"] = _stats([r["err_pct"] for r in rows if r["split"] == "test"])
    out["unrepresented"] = [dict(r) for r in skipped]
    return out


def report(tables: list[str] | None = None, runtime: str | None = None) -> dict[str, Any]:
    """The whole validation: {"tables": [table_report, ...]} for the named tables (all by default); the vLLM
    v0.15 serving campaign (engine.evidence.replay) is replayed through the serving engine."""
    known = [*TABLE_FILES, replay.TABLE]
    names = tables or known
    for n in names:
        if n not in known:
            raise InputError(f"unknown table '{n}'{suggest(n, known)}")
    tables = [replay.table_report(runtime or "vllm") if n == replay.TABLE else table_report(n, runtime)
              for n in names]
    for t in tables:  # how often the rows fall inside their profile's 80 % error band
        t["coverage"] = bands.table_coverage(t, runtime)
    return {"tables": tables}


def subset_stats(rows: list[dict[str, Any]], **match: str) -> dict[str, float | None]:
    """Error statistics of the rows whose source columns equal `match` (e.g. framework='vllm', quant='BF16')."""
    return _stats([r["err_pct"] for r in rows if all(r.get(k) == v for k, v in match.items())])


# ---- claim C24 ------------------------------------------------------------------------------------------------

def qwen_case(model: str, gpus: int | None = None, runtime: str = "vllm-0.6") -> Case:
    """The Qwen2.5 A100 table's batch-1, BF16, 1-token-prompt case of a model preset run with `runtime`, on `gpus`
    GPUs (None: the fewest it was timed on). KeyError when the table has no such row."""
    found = [c for c in cases("qwen25")[0] if c.model == model and c.runtime == runtime and c.row["quant"] == "BF16"
             and c.isl == 1 and (gpus is None or c.gpus == gpus)]
    if not found:
        on = f" on {gpus} GPUs" if gpus is not None else ""
        raise KeyError(f"no Qwen2.5 table row for {model}{on} with {runtime}")
    return min(found, key=lambda c: c.gpus)


C24_SMALL = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b")


def claim_c24() -> dict[str, Any]:
    """C24: on A100, a small model writes 2,048 tokens in under a minute and the 72B in close to two minutes.

    The published figures are Qwen's own vLLM BF16 rows with a 1-token prompt (the 72B on the fewest GPUs, 2);
    the simulated figures are the step model's predicted request times for the same rows.
    """
    small = [qwen_case(m) for m in C24_SMALL]
    big = qwen_case("qwen2.5-72b")
    sim_small = max(c.osl / predict(c) for c in small)
    art_small = max(c.osl / c.measured for c in small)
    sim_big, art_big = big.osl / predict(big), big.osl / big.measured
    # "Close to two minutes": within 90-150 s, and the prediction within 35 % of the published time.
    agrees = sim_small < 60 and 90 <= sim_big <= 150 and abs(sim_big / art_big - 1) <= 0.35
    return row("C24", art_big, sim_big, "s", agrees,
               note=f"vLLM BF16, 1-token prompt, 2,048 tokens; 72B on {big.gpus} A100s (tp {big.gpus}); "
                    f"small = 0.5B-7B on one A100, slowest shown",
               article_text=f"small <= {art_small:.0f} s, 72B {art_big:.0f} s",
               simulated_text=f"small <= {sim_small:.0f} s, 72B {sim_big:.0f} s")
