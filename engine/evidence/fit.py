"""Fit the runtime profiles' physical constants to the measured tables, on the train rows only.

    python -m engine.evidence.fit            # fit and print train / held-out errors
    python -m engine.evidence.fit --write    # ... and rewrite presets/runtimes.toml with the constants and their record

Method: for each profile, a deterministic pattern search (coordinate steps up and down, halved whenever no
step improves) from four fixed starts, keeping the best, over its physical constants inside plausible bounds,
minimising the root-mean-square log error, sqrt(mean ln(predicted / measured)^2), over that profile's train rows
(the rows whose key hashes to 'train', see engine.evidence.validate.Case.split). The targets bound the worst row as well
as the median, and a squared loss weighs one large miss more than several small ones, where a mean absolute
loss would trade a worse worst row for a better median. The test rows never enter the fit; their error
is the held-out figure. The same StepModel the rest of the engine uses prices every row.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import sys
from collections.abc import Callable
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from engine.evidence import bands
from engine.evidence.validate import Case, cases, predict
from engine.files import write_text_atomic
from engine.numbers import err_pct
from engine.physics.calibration import Runtime, runtimes

PARAMS = ("bw_eff", "flops_eff", "attn_bw_eff", "attn_flops_eff", "step_overhead_s", "layer_overhead_s")
# The attention kernels' own sustained fractions of peak bandwidth and FLOP/s (see step.py).
ATTN = ("attn_bw_eff", "attn_flops_eff")
# Four more constants only TensorRT-LLM's table (FP4, MoE and DeepSeek FP8 rows) can measure: the fraction of FP4
# peak FP4 GEMMs sustain, the rate of routed-expert grouped GEMMs relative to dense GEMMs and the tokens per
# expert at which they run at half rate, and the rate of block-scaled FP8 GEMMs on Hopper.
EXTRA = ("fp4_flops_eff", "expert_flops_factor", "expert_half_tokens", "block_fp8_eff")
# hf-eager runs some of the Qwen table's quantised checkpoints with kernels that lack a decode path (see
# SLOW_QUANT); their fixed cost per layer is one more constant, fitted on that profile's train rows.
QUANT = ("quant_layer_overhead_s",)
# Which quantised formats a runtime runs with a batched-GEMM kernel at a decode step's few tokens: documented
# kernel selection, not fitted. transformers with auto_gptq 0.6 runs 4-bit GPTQ on the exllama kernel (a fused
# dequantise-GEMV) but has none for 8 bits (exllama is 4-bit only), so GPTQ-Int8 falls back to auto_gptq's
# generic CUDA kernel; AWQ checkpoints (version "gemm") run AutoAWQ's WQLinear_GEMM kernel, built for many
# tokens. vLLM 0.6 runs GPTQ (4 and 8 bit) and AWQ on its Marlin kernels, which have a decode path.
SLOW_QUANT = {"hf-eager": ("gptq-int8", "awq-int4")}
PROFILES = ("vllm", "vllm-0.6", "hf-eager", "trtllm", "sglang")  # runtimes.toml's order
# Each constant's physically plausible range, the fit's fixed start, its first and its last step. A framework
# sustains 40-95 % of peak HBM bandwidth in its GEMMs (attention's scattered KV pages: 20-95 %) and 10-90 % of
# the dense tensor peak (5-90 % of FP4 peak); expert GEMMs run at 5-100 % of the dense rate; fixed costs are
# >= 0 and below 50 ms a step and 2 ms a layer.
_SEARCH: dict[str, tuple[tuple[float, float], float, float, float]] = {
    #                         (low, high)      start   first   last
    "bw_eff":                 ((0.40, 0.95),   0.80,   0.10,   1e-3),
    "flops_eff":              ((0.10, 0.90),   0.50,   0.10,   1e-3),
    "attn_bw_eff":            ((0.20, 0.95),   0.70,   0.10,   1e-3),
    "attn_flops_eff":         ((0.10, 0.90),   0.50,   0.10,   1e-3),
    "step_overhead_s":        ((0.0, 0.050),   1e-3,   2e-3,   1e-6),
    "layer_overhead_s":       ((0.0, 0.002),   2e-5,   1e-4,   1e-8),
    "fp4_flops_eff":          ((0.05, 0.90),   0.25,   0.05,   1e-3),
    "expert_flops_factor":    ((0.05, 1.0),    0.5,    0.1,    1e-3),
    "expert_half_tokens":     ((0.0, 1024.0),  64.0,   32.0,   0.5),
    "quant_layer_overhead_s": ((0.0, 0.002),   1e-4,   1e-4,   1e-8),
    "block_fp8_eff":          ((0.30, 1.0),    1.0,    0.1,    1e-3),
    "expert_bw_eff":          ((0.20, 0.95),   0.70,   0.10,   1e-3),
    "expert_fp8_bw_eff":      ((0.20, 0.95),   0.70,   0.10,   1e-3),
}
# Besides START, the search also starts a quarter, half and three quarters of the way up every range.
STARTS_ACROSS = (0.25, 0.5, 0.75)
BOUNDS = {k: v[0] for k, v in _SEARCH.items()}
START = {k: v[1] for k, v in _SEARCH.items()}
FIRST_STEP = {k: v[2] for k, v in _SEARCH.items()}
LAST_STEP = {k: v[3] for k, v in _SEARCH.items()}

# Which rows fit which profile: the runtime each row of a table is mapped to (see engine.evidence.validate).
FITTED = {"vllm-0.6": "qwen25", "hf-eager": "qwen25", "trtllm": "trtllm", "vllm": "vllm015"}
DESCRIPTIONS = {
    "vllm": "vLLM v0.15 (v1 engine: CUDA graphs FULL_AND_PIECEWISE, chunked prefill, prefix caching)",
    "vllm-0.6": "vLLM 0.6.2 with CUDA graphs (Qwen2.5 speed benchmark)",
    "hf-eager": "Hugging Face transformers generate(), eager PyTorch (Qwen2.5 speed benchmark)",
    "trtllm": "TensorRT-LLM PyTorch backend, trtllm-bench offline throughput (NVIDIA perf overview)",
    "sglang": "SGLang (no measured table ships: vLLM's fitted constants, see the note)",
}


def fitted_params(profile: str) -> tuple[str, ...]:
    """The constants fitted for a profile: the base set, plus EXTRA where the table measures them (trtllm) and
    the slow quantised kernels' cost where the runtime has such kernels.

    An eager runtime (attention = "eager") computes attention with plain matmuls and a softmax on growing
    tensors, not a fused paged-attention kernel, so its attention shares the GEMMs' efficiencies.
    """
    base = tuple(p for p in PARAMS if p not in ATTN) if runtimes()[profile].attention == "eager" else PARAMS
    if profile == "trtllm":
        return base + EXTRA
    return base + QUANT if SLOW_QUANT.get(profile) else base


def rows_for(profile: str) -> list[Case]:
    """Every represented row priced with this profile."""
    return [c for c in cases(FITTED[profile])[0] if c.runtime == profile]


def _loss(rt: Runtime, rows: list[Case]) -> float:
    """Root-mean-square ln(predicted / measured) over the rows: squared, so one large miss outweighs several small
    ones (the targets bound the worst row, not only the median)."""
    r = np.log([predict(c, rt) / c.measured for c in rows])
    return float(np.sqrt(np.mean(r * r)))


def fit_profile(profile: str) -> Runtime:
    """The fitted constants of one profile (its other fields, e.g. attention, kept from runtimes.toml).

    The loss surface has several basins (the expert, FP4 and attention rates trade off against each other), so
    the pattern search runs from each of a few fixed starts and keeps the lowest train loss.
    """
    base = replace(runtimes()[profile], slow_quant_kernels=SLOW_QUANT.get(profile, ()))
    names = fitted_params(profile)
    train = [c for c in rows_for(profile) if c.split == "train"]
    lo = np.array([BOUNDS[p][0] for p in names])
    hi = np.array([BOUNDS[p][1] for p in names])

    def make(v: np.ndarray) -> Runtime:
        """The profile with the searched constants set to v."""
        return replace(base, **dict(zip(names, (float(t) for t in v), strict=True)))

    starts = [np.array([START[p] for p in names], dtype=float)] + [lo + f * (hi - lo) for f in STARTS_ACROSS]
    found = [_search(make, train, x, names) for x in starts]
    best = min(found, key=lambda t: t[1])[0]
    return make(_round(best, np.array([LAST_STEP[p] for p in names])))


def _search(make: Callable[[np.ndarray], Runtime], train: list[Case], x: np.ndarray,
            names: tuple[str, ...]) -> tuple[np.ndarray, float]:
    """Deterministic pattern search from x over the rows' loss."""
    return _pattern(lambda v: _loss(make(v), train), x, names)


def _pattern(loss_of: Callable[[np.ndarray], float], x: np.ndarray, names: tuple[str, ...],
             first: np.ndarray | None = None, last: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """Deterministic pattern search from x: coordinate steps up and down, halved whenever none improves."""
    step = np.array([FIRST_STEP[p] for p in names], dtype=float) if first is None else first.copy()
    end = np.array([LAST_STEP[p] for p in names], dtype=float) if last is None else last
    best = loss_of(x)
    while (step > end).any():
        improved = False
        for i, name in enumerate(names):
            for d in (-1.0, 1.0):
                y = x.copy()
                y[i] = np.clip(y[i] + d * step[i], *BOUNDS[name])
                loss = loss_of(y)
                if loss < best - 1e-12:
                    best, x, improved = loss, y, True
        if not improved:
            step /= 2
    return x, best


# ---- the vLLM v0.15 serving campaign (table vllm015, engine.evidence.replay) ----------------------------------
# Its experiments fit the vllm profile's decode-side constants: the sustained bandwidth of the GEMMs, of the
# paged-attention kernels and of the routed experts on each kernel path (engine.physics.moe: BF16 Mixtral-8x7B's
# fused-MoE Triton kernels fit expert_bw_eff, FP8 Llama-4-Scout's CUTLASS grouped GEMMs expert_fp8_bw_eff), and the
# fixed cost of a step; the request
# path's cost outside the GPU is solved for at each candidate. The table barely measures prefill compute (prompts hit
# the prefix cache) or the steps run outside a full CUDA graph, so flops_eff and attn_flops_eff stay vllm-0.6's and
# layer_overhead_s stays as written; step_overhead_s moves every experiment's ITL as bw_eff does (the record says so).
# Each candidate replays every experiment as `tokensim validate` does (replay.STAGE_REQUESTS a stage): a shorter
# replay is dominated by each stage's ramp and fitted Llama-4-Scout's expert bandwidth 6 % off validate's optimum.
SERVING_PARAMS = ("bw_eff", "attn_bw_eff", "expert_bw_eff", "expert_fp8_bw_eff")
# The vllm profile's constants as runtimes.toml lists them: the base set, the two expert kernel paths' bandwidths
# (engine.physics.moe) and the request path's cost.
VLLM_WRITTEN = PARAMS + ("expert_bw_eff", "expert_fp8_bw_eff", "request_overhead_s")
SERVING_CARRIED = ("flops_eff", "attn_flops_eff", "step_overhead_s", "layer_overhead_s")
SERVING_FIT_REQUESTS: int | None = None  # None: validate's own replay length
_SERVING_FIRST = np.array([0.03, 0.06, 0.03, 0.03])
_SERVING_LAST = np.array([0.01, 0.01, 0.01, 0.01])
# The targets on the median |err| of each mean (TTFT, ITL, E2E): the loss counts each in units of its own.
SERVING_TARGETS = np.array([0.20, 0.08, 0.08])
# A share of the mean |ln err| beside the medians: a median alone is flat between experiments and stalls the search.
_SERVING_MEAN_WEIGHT = 0.1
# A constant "fits" an experiment when moving it 5 % moves one of that experiment's means by at least this much.
_SENSITIVE = 0.005


def _serving_errors(rt: Runtime, requests: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Per experiment, predicted (TTFT without the request path, ITL, E2E without it) and measured (TTFT, ITL, E2E)
    in seconds: the request path's cost is then solved for, not replayed."""
    from engine.evidence import replay as rp
    from engine.evidence.replay import experiments, replay

    pred, meas = [], []
    for e in experiments()[0]:
        key = _replay_key(e, rt, requests)
        if key not in _REPLAYS:
            p = replay(e, replace(rt, request_overhead_s=0.0),
                       stage_requests=rp.STAGE_REQUESTS if requests is None else requests)
            _REPLAYS[key] = (p["ttft_ms"], p["itl_ms"], p["e2e_ms"])
        pred.append(_REPLAYS[key])
        meas.append((e.ttft_ms, e.itl_ms, e.e2e_ms))
    return np.array(pred) / 1e3, np.array(meas) / 1e3


# Replays already run in this process, by what decides them (see _replay_key): a candidate that moves one kernel
# path's constant replays only the experiments that run that path.
_REPLAYS: dict[tuple[Any, ...], tuple[float, float, float]] = {}


def _replay_key(e: Any, rt: Runtime, requests: int | None) -> tuple[Any, ...]:
    """What an experiment's replay depends on: the profile with the routed experts' constants taken out, and the
    one the experiment's experts actually stream at (engine.physics.moe; None for a dense model)."""
    from engine.physics import moe
    from engine.physics.specs import load_hardware, load_model

    m, hw = load_model(e.model), load_hardware(e.hardware)
    edtype = e.weight_dtype or m.expert_dtype or m.weight_dtype
    eff = moe.expert_bw_eff(rt, edtype, bool(hw.tflops.get("fp4"))) if m.is_moe else None
    base = replace(rt, request_overhead_s=0.0, expert_bw_eff=None, expert_fp8_bw_eff=None)
    return (e.exp_id, requests, base, eff)


def _serving_loss(pred: np.ndarray, meas: np.ndarray, overhead: float | None = None) -> tuple[float, float]:
    """(loss, request overhead s) at the request-path cost (added to TTFT and E2E, 0-50 ms) that minimises it, or at
    `overhead` when that is carried.

    Robust, not RMS: per mean (TTFT, ITL, E2E), the median over experiments of |ln(predicted / measured)| in units of
    that mean's target, plus a tenth of the mean |ln err| (see _SERVING_MEAN_WEIGHT). One experiment the physics
    misses for a reason of its own (Llama-4-Scout's reasoning-lite TTFT) then cannot drag every other one off.
    """
    best = (math.inf, 0.0)
    for o in np.arange(0.0, 0.050, 0.0005) if overhead is None else (overhead,):
        r = np.abs(np.log((pred + np.array([o, 0.0, o])) / meas))
        loss = float(np.sum((np.median(r, axis=0) + _SERVING_MEAN_WEIGHT * r.mean(axis=0)) / SERVING_TARGETS))
        if loss < best[0]:
            best = (loss, float(o))
    return best


def fit_serving(profile: str = "vllm", requests: int | None = SERVING_FIT_REQUESTS,
                names: tuple[str, ...] = SERVING_PARAMS) -> tuple[Runtime, float]:
    """The vllm profile's serving constants (`names`, the others carried) fitted on the campaign's experiments;
    (runtime, train loss). A fit of some of them only (a new kernel path's constant) carries the request path's
    cost too: that is HTTP, tokenising and streaming, which no kernel constant changes, and solving it again would
    let the new rows' other misses (Mixtral's prefill) move every experiment's TTFT."""
    base = runtimes()[profile]
    at = [SERVING_PARAMS.index(n) for n in names]
    carried = None if set(names) == set(SERVING_PARAMS) else base.request_overhead_s

    def make(v: np.ndarray) -> Runtime:
        """The profile with the searched constants set to v."""
        return replace(base, **dict(zip(names, (float(t) for t in v), strict=True)))

    def loss_of(v: np.ndarray) -> float:
        """The loss of candidate constants v, the request path solved for (or carried)."""
        return _serving_loss(*_serving_errors(make(v), requests), carried)[0]

    x0 = np.array([getattr(base, p) or START[p] for p in names], dtype=float)
    x, loss = _pattern(loss_of, x0, names, _SERVING_FIRST[at], _SERVING_LAST[at])
    x = _round(x, _SERVING_LAST[at] / 10)
    over = _serving_loss(*_serving_errors(make(x), requests), carried)[1]
    return replace(make(x), request_overhead_s=over), loss


def serving_sensitivity(rt: Runtime, requests: int | None = SERVING_FIT_REQUESTS) -> dict[str, list[str]]:
    """Which experiments fit which constant: those whose mean TTFT, ITL or E2E moves by _SENSITIVE or more when the
    constant moves 5 % (request_overhead_s: every experiment's TTFT and E2E)."""
    from engine.evidence.replay import experiments

    ids = [e.exp_id for e in experiments()[0]]
    ref = _serving_errors(rt, requests)[0]
    out: dict[str, list[str]] = {}
    for p in SERVING_PARAMS:
        moved = _serving_errors(replace(rt, **{p: getattr(rt, p) * 1.05}), requests)[0]
        hit = np.abs(moved / ref - 1).max(axis=1) >= _SENSITIVE
        out[p] = [i for i, h in zip(ids, hit, strict=True) if h]
    out["request_overhead_s"] = ids
    return out


def _round(x: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Constants to the precision they were searched at: 3 significant figures, and 0 below the search's last
    step (a bound of 0 approached by halving steps never lands on it exactly)."""
    return np.array([0.0 if abs(v) < s else float(f"{v:.3g}") for v, s in zip(x, last, strict=True)])


def errors(profile: str, rt: Runtime) -> dict[str, Any]:
    """Median and max |err %| on the train rows, the held-out (test) rows and all rows."""
    out: dict[str, Any] = {}
    rows = rows_for(profile)
    for split in ("train", "test", "all"):
        sel = [c for c in rows if split == "all" or c.split == split]
        e = np.abs([err_pct(predict(c, rt), c.measured) for c in sel])
        out[split] = {"n": len(sel), "median": float(np.median(e)), "max": float(e.max())}
    return out


def _fmt(v: float) -> str:
    """A constant as written to runtimes.toml (3 significant figures)."""
    return f"{v:.3g}"


# runtimes.toml's opening comment: what the constants mean and how they are fitted.
_TOML_HEADER = (
    "# Runtime profiles: how close a serving framework gets to the roofline. The base constants: the fraction of",
    "# peak HBM bandwidth (bw_eff) and of peak dense tensor FLOP/s (flops_eff) its GEMMs sustain, the same two",
    "# for its attention kernels (attn_bw_eff: scattered KV pages; attn_flops_eff: softmax and rescaling between",
    "# two matmuls), a fixed cost per step (step_overhead_s: scheduling, sampling, Python) and per layer",
    "# (layer_overhead_s: kernel launches, small kernels' latency). trtllm has four more, which only its table",
    "# (FP4, MoE and DeepSeek FP8 rows) can measure: fp4_flops_eff, the fraction of FP4 peak its FP4 GEMMs",
    "# sustain; expert_flops_factor, the rate of routed-expert grouped GEMMs relative to dense GEMMs;",
    "# expert_half_tokens, the tokens per expert at which those run at half rate (tile rows left empty: rate",
    "# n / (n + it)); block_fp8_eff, the rate of block-scaled FP8 GEMMs on tensor cores without block scaling",
    "# (Hopper). vllm has two: expert_bw_eff and expert_fp8_bw_eff, the fraction of peak HBM bandwidth its",
    "# routed-expert kernels sustain on the 16-bit-activation path and on the FP8 one (engine/physics/moe.py).",
    "# attention = \"eager\" marks transformers' growing-tensor KV cache (derived physics, not fitted:",
    "# step.py); hf-eager's attention shares its GEMMs' efficiencies. quant_layer_overhead_s (hf-eager): fixed",
    "# time per layer of the quantised kernels listed in slow_quant_kernels (kernel choice, not fitted: fit.py",
    "# SLOW_QUANT). Calibrated steps price the attention kernels and the matmuls as two rooflines in sequence",
    "# (step.py roofline_time).",
    "#",
    "# Fitted by engine/evidence/fit.py (python -m engine.evidence.fit --write): "
    "a deterministic pattern search inside physically",
    "# plausible bounds (fit.py _SEARCH) from four fixed starts, keeping the lowest loss: the root-mean-square",
    "# ln(predicted/measured) over the profile's TRAIN rows only (stable hash of the row key, about half); the",
    "# held-out (test) rows never enter the fit. Errors below are |predicted - measured| / measured of the",
    "# table's own speed definition; `tokensim validate` reprints them row by row.",
)


def toml_text(fits: dict[str, tuple[Runtime, dict[str, Any]]], date: str) -> str:
    """runtimes.toml, each profile with its record: rows, method, train and held-out errors, date."""
    lines = [*_TOML_HEADER, ""]
    for name in PROFILES:
        rt, err = fits[name]
        lines.append(f"[{name}]" if "." not in name else f'["{name}"]')
        if name == "sglang":
            lines.append("# No measured SGLang table ships. SGLang, like vLLM, runs paged attention with CUDA graphs")
            lines.append("# and a Python scheduler, so it takes vLLM 0.6's fitted constants unchanged: an assumption,")
            lines.append(f"# not a fit. ({date})")
        elif name == "vllm":
            lines += serving_record(err, date)
        else:
            table = FITTED[name]
            which = {"vllm-0.6": "the Qwen2.5 speed benchmark rows with framework = vllm (vllm==0.6.2)",
                     "hf-eager": "the Qwen2.5 speed benchmark rows with framework = transformers",
                     "trtllm": "every represented TensorRT-LLM perf-overview row"}[name]
            lines.append(f"# Fitted on the train half of {which} (table {table}).")
            lines.append(f"# Error |err %|: train n={err['train']['n']} median {err['train']['median']:.1f} max "
                         f"{err['train']['max']:.1f}; held-out n={err['test']['n']} median "
                         f"{err['test']['median']:.1f} max {err['test']['max']:.1f}. ({date})")
        lines.append(f'description = "{DESCRIPTIONS[name]}"')
        for p in (VLLM_WRITTEN if name == "vllm" else fitted_params(name)):
            lines.append(f"{p} = {_fmt(getattr(rt, p))}")
        for flag, note in _FLAG_NOTES:
            if getattr(rt, flag):
                lines += [note, f"{flag} = true"] if note else [f"{flag} = true"]
        if rt.attention != "paged":
            lines.append(f'attention = "{rt.attention}"')
        if rt.slow_quant_kernels:
            lines.append("# Kernel choice (fit.py SLOW_QUANT): auto_gptq has no exllama kernel for 8 bits, AutoAWQ's")
            lines.append("# GEMM kernel is built for many tokens; quant_layer_overhead_s: their extra time per layer.")
            kernels = ", ".join(f'"{k}"' for k in rt.slow_quant_kernels)
            lines.append(f"slow_quant_kernels = [{kernels}]")
        # The error band is carried as written: python -m engine.evidence.band_fit recomputes it after a refit.
        lines += bands.toml_lines(bands.own_band(name))  # a borrowed band (bands.BORROWED) is lent at use
        lines.append("")
    return "\n".join(lines)


# Boolean profile fields written as `flag = true`, each with the comment saying why (mechanism or kernel choice).
_FLAG_NOTES = (
    ("cuda_graphs", "# Mechanism, not fitted: CUDA graphs FULL_AND_PIECEWISE at vLLM's default capture sizes "
                    "(step.py graph_sizes)."),
    ("async_scheduling", "# Mechanism, not fitted: async scheduling (a request arriving during step k joins step "
                         "k+2: serving/lane.py _admit)."),
    ("fp8_attn_if_quantised", "# Kernel choice, not fitted: FP8 context attention whenever o_proj is FP8/NVFP4 "
                              "quantised (step.py peak_attn)."),
    ("mxfp4_fp8_act", "# Kernel choice, not fitted: MXFP4 experts take FP8 activations on Blackwell "
                      "(W4A8_MXFP4_MXFP8), BF16 on Hopper."),
)


def serving_record(err: dict[str, Any], date: str) -> list[str]:
    """The vllm profile's record in runtimes.toml: which experiments fitted which constant, how, and the errors
    validate's replay gives, experiment by experiment (tests check validate still reproduces them)."""
    e = err.get("errors", {})
    lines = [
        "# Fitted on the vLLM v0.15.1 online-serving campaign's experiments (table vllm015, all of them: the",
        "# campaign's held-out part is not shipped), each replayed through the serving engine "
        "(engine/evidence/replay.py),",
        "# by `python -m engine.evidence.fit --profile vllm --write` (fit.py fit_serving): a pattern search of",
        "# " + ", ".join(err.get("searched", SERVING_PARAMS))
        + ("; the request path's cost solved for at each candidate." if set(err.get("searched", SERVING_PARAMS))
           == set(SERVING_PARAMS) else " (the others of " + ", ".join(SERVING_PARAMS)
           + " and the request path's cost carried: fit.py fit_serving)."),
        "# Objective (robust, not RMS): per mean, the median over experiments of |ln(predicted/measured)| in units",
        "# of its target (TTFT 20 %, ITL 8 %, E2E 8 %), plus a tenth of the mean |ln err|. Carried, not fitted",
        "# (the table barely measures prefill or steps outside a full CUDA graph): " + ", ".join(SERVING_CARRIED) + ".",
        "# Which experiments fitted which constant (moving it 5 % moves their mean TTFT, ITL or E2E by 0.5 % or more):",
    ]
    n = len(err.get("rows", []))
    for p, ids in err.get("fitted_by", {}).items():
        lines.append(f"#   {p}: " + ("all" if len(ids) == n else ", ".join(i[:8] for i in ids) or "none"))
    if err.get("kept"):
        lines.append(f"# The search's constants did not keep every median ({err['kept']}): these are the")
        lines.append("# previous ones.")
    lines.append("# Median |err| over the experiments (tokensim validate --table vllm015): "
                 + ", ".join(f"{k.upper()} {e.get(k, float('nan')):.1f} %" for k in ("ttft", "itl", "e2e"))
                 + f", {err.get('saturated', 0)} saturated. ({date})")
    lines.append("# Per experiment, signed err % of mean TTFT / ITL / E2E:")
    rows = err.get("rows", [])
    for a, b in zip(rows[::2], [*rows[1::2], None], strict=False):
        lines.append("#   " + "   ".join(f"{r['exp_id'][:8]:>8s} {r['ttft']:+6.1f} {r['itl']:+6.1f} {r['e2e']:+6.1f}"
                                         for r in (a, b) if r))
    return lines


def serving_errors(rt: Runtime) -> dict[str, Any]:
    """Median |err %| of mean TTFT, ITL and E2E over the campaign's experiments (validate's full replay), each
    experiment's signed errors and how many saturated."""
    from engine.evidence.replay import table_report

    t = table_report(rt)
    return {"errors": {k: t[f"{k}_median_abs_err_pct"] for k in ("ttft", "itl", "e2e")}, "saturated": t["saturated"],
            "rows": [{"exp_id": r["exp_id"], **{k: r[k]["err_pct"] for k in ("ttft", "itl", "e2e")}}
                     for r in t["rows"]]}


def keeps_medians(new: dict[str, Any], old: dict[str, Any], slack: float = 0.05) -> bool:
    """Whether new constants' validate medians are each no worse than the old ones' (within slack points) and
    saturate no more experiments: only then are they written."""
    return (all(new["errors"][k] <= old["errors"][k] + slack for k in old["errors"])
            and new.get("saturated", 0) <= old.get("saturated", 0))


def fit_all(only: str | None = None,
            params: tuple[str, ...] = SERVING_PARAMS) -> dict[str, tuple[Runtime, dict[str, Any]]]:
    """Fit vllm (serving campaign), vllm-0.6, hf-eager and trtllm (or only one, the others kept as they are);
    sglang borrows vllm-0.6's constants (no table)."""
    fits: dict[str, tuple[Runtime, dict[str, Any]]] = {}
    for name in ("vllm-0.6", "hf-eager", "trtllm"):
        rt = fit_profile(name) if only in (None, name) else runtimes()[name]
        fits[name] = (rt, errors(name, rt))
    cur = runtimes()["vllm"]
    err = serving_errors(cur)
    v = cur
    if only in (None, "vllm"):
        found = fit_serving(names=params)[0]
        new = serving_errors(found)
        if keeps_medians(new, err):
            v, err = found, new
        else:
            err["kept"] = " ".join(f"{p}={_fmt(getattr(found, p))}" for p in (*SERVING_PARAMS, "request_overhead_s"))
    err["fitted_by"] = serving_sensitivity(v)
    err["searched"] = params
    fits["vllm"] = (v, err)
    old = fits["vllm-0.6"][0]
    fits["sglang"] = (replace(runtimes()["sglang"], **{p: getattr(old, p) for p in PARAMS}), {})
    return fits


def summary(err: dict[str, Any]) -> str:
    """One line of a profile's errors: per split for a speed table, per mean (TTFT, ITL, E2E) for the campaign."""
    if "errors" in err:
        return ", ".join(f"{k.upper()} median {v:.1f}%" for k, v in err["errors"].items())
    return "; ".join(f"{k} n={v['n']} median {v['median']:.1f}% max {v['max']:.1f}%" for k, v in err.items())


def main(argv: list[str] | None = None) -> int:
    """Fit, print, and with --write rewrite presets/runtimes.toml."""
    ap = argparse.ArgumentParser(prog="python -m engine.evidence.fit", description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite engine/presets/runtimes.toml")
    ap.add_argument("--profile", default=None, choices=("vllm", "vllm-0.6", "hf-eager", "trtllm"),
                    help="fit this profile only; the others keep their constants (their errors are recomputed)")
    ap.add_argument("--params", default=",".join(SERVING_PARAMS),
                    help="the vllm profile's constants to search (the others carried), comma-separated (default all: "
                         + ", ".join(SERVING_PARAMS) + ")")
    args = ap.parse_args(argv)
    params = tuple(p for p in args.params.split(",") if p)
    bad = [p for p in params if p not in SERVING_PARAMS]
    if bad or not params:
        print(f"error: --params takes some of {', '.join(SERVING_PARAMS)}; got {args.params!r}", file=sys.stderr)
        return 2
    fits = fit_all(args.profile, params)
    for name, (rt, err) in fits.items():
        names = VLLM_WRITTEN if name == "vllm" else fitted_params(name)
        consts = " ".join(f"{p}={_fmt(getattr(rt, p))}" for p in names)
        print(f"{name:9s} {consts}  {summary(err) or '(vllm constants, no table)'}")
    if args.write:
        path = Path(str(resources.files("engine").joinpath("presets", "runtimes.toml")))
        write_text_atomic(path, toml_text(fits, _dt.date.today().isoformat()), "--write")
        runtimes.cache_clear()
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
