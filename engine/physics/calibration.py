"""Runtime profiles: the few calibrated constants that separate a real framework from the roofline."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from engine.errors import InputError, suggest


@dataclass(frozen=True, slots=True)
class Runtime:
    """Efficiencies and overheads of one serving framework (see presets/runtimes.toml for the fit)."""

    name: str
    description: str
    bw_eff: float
    flops_eff: float
    step_overhead_s: float
    layer_overhead_s: float
    # "paged": kernels read the KV cache once per step. "eager": transformers-style growing tensors (see step.py).
    attention: str = "paged"
    # Fraction of FP4 peak that FP4 GEMMs sustain (None: flops_eff), and the rate of routed-expert (grouped)
    # GEMMs relative to dense GEMMs. Only a table with FP4 and MoE rows can measure them (trtllm).
    fp4_flops_eff: float | None = None
    # Fraction of the KV precision's tensor peak, and of peak bandwidth, that attention kernels sustain
    # (None: flops_eff and bw_eff, as the GEMMs).
    attn_flops_eff: float | None = None
    attn_bw_eff: float | None = None
    expert_flops_factor: float = 1.0
    # Fraction of peak HBM bandwidth the routed experts' grouped GEMMs sustain while streaming their weights, on
    # the 16-bit-activation path (vLLM's fused-MoE Triton kernel for BF16 experts; None: bw_eff, as dense GEMMs).
    expert_bw_eff: float | None = None
    # The same for experts whose kernels take quantised activations (FP8 W8A8: CUTLASS grouped GEMMs; see
    # engine.physics.moe for which path a dtype takes). None: expert_bw_eff.
    expert_fp8_bw_eff: float | None = None
    # Rate of block-scaled FP8 GEMMs (weight dtype fp8-block) relative to per-tensor FP8, in both their memory
    # and compute time, on parts whose tensor cores cannot apply block scales (no FP4 tensor cores: pre-Blackwell).
    block_fp8_eff: float = 1.0
    # Tokens per expert at which routed-expert GEMMs run at half their full rate (tile rows left empty); 0: none.
    expert_half_tokens: float = 0.0
    # Whether its attention runs in FP8 whenever the output projection after it takes FP8 or FP4 input, whatever
    # the KV cache's precision (TensorRT-LLM: the attention op writes quantised output, and then selects FP8
    # context FMHA; see step.py peak_attn).
    fp8_attn_if_quantised: bool = False
    # Whether its MXFP4 GEMMs quantise the activations to FP8 on parts with FP4 tensor cores, so they run at the
    # FP8 rate, not the FP4 one (TensorRT-LLM on SM100 picks W4A8_MXFP4_MXFP8; on Hopper W4A16_MXFP4, BF16).
    mxfp4_fp8_act: bool = False
    # Quantised formats ("<format>-<int8|int4>") this runtime runs with a kernel built for batched GEMMs, not for
    # the one or few tokens of a decode step, and the fixed time such kernels add per layer (seven linears).
    slow_quant_kernels: tuple[str, ...] = ()
    quant_layer_overhead_s: float = 0.0
    # vLLM v1's CUDA graphs (cudagraph_mode FULL_AND_PIECEWISE, its default): a step that only decodes replays a
    # full graph padded up to the next captured size; a mixed step replays piecewise graphs (attention outside
    # them) padded in tokens; past the largest captured size the step runs eagerly. See step.py graph_sizes.
    cuda_graphs: bool = False
    # Time a request spends outside the GPU steps (HTTP, tokenisation, detokenising and streaming the answer):
    # added to its TTFT and end-to-end latency as the client measures them.
    request_overhead_s: float = 0.0
    # vLLM's async scheduling (the default since vllm/config/vllm.py turns it on when nothing forbids it): the
    # scheduler picks step k+1's batch while step k runs, so a request arriving during step k joins step k+2.
    async_scheduling: bool = False


@cache
def _tables() -> dict[str, dict[str, Any]]:
    """Each profile's whole section as read (its record's band and scope included), shipped and registered."""
    text = resources.files("engine").joinpath("presets", "runtimes.toml").read_text(encoding="utf-8")
    return dict(tomllib.loads(text))


@cache
def runtimes() -> dict[str, Runtime]:
    """The shipped profiles (presets/runtimes.toml) by name, and any a --runtime-file registered."""
    return {name: runtime_from_table(name, d) for name, d in _tables().items()}


def runtime_table(name: str) -> dict[str, Any] | None:
    """A profile's section as read (None for an unknown name): engine.evidence.bands reads its error band there."""
    runtimes()
    return _tables().get(name)


def runtime_from_table(name: str, d: dict[str, Any]) -> Runtime:
    """One runtimes.toml section as a Runtime."""
    return Runtime(name=name, description=str(d.get("description", "")), bw_eff=float(d["bw_eff"]),
                   flops_eff=float(d["flops_eff"]), step_overhead_s=float(d["step_overhead_s"]),
                   layer_overhead_s=float(d["layer_overhead_s"]),
                   attention=str(d.get("attention", "paged")),
                   fp4_flops_eff=float(d["fp4_flops_eff"]) if "fp4_flops_eff" in d else None,
                   attn_flops_eff=float(d["attn_flops_eff"]) if "attn_flops_eff" in d else None,
                   attn_bw_eff=float(d["attn_bw_eff"]) if "attn_bw_eff" in d else None,
                   expert_flops_factor=float(d.get("expert_flops_factor", 1.0)),
                   expert_bw_eff=float(d["expert_bw_eff"]) if "expert_bw_eff" in d else None,
                   expert_fp8_bw_eff=float(d["expert_fp8_bw_eff"]) if "expert_fp8_bw_eff" in d else None,
                   block_fp8_eff=float(d.get("block_fp8_eff", 1.0)),
                   expert_half_tokens=float(d.get("expert_half_tokens", 0.0)),
                   slow_quant_kernels=tuple(str(k) for k in d.get("slow_quant_kernels", ())),
                   quant_layer_overhead_s=float(d.get("quant_layer_overhead_s", 0.0)),
                   fp8_attn_if_quantised=bool(d.get("fp8_attn_if_quantised", False)),
                   mxfp4_fp8_act=bool(d.get("mxfp4_fp8_act", False)),
                   cuda_graphs=bool(d.get("cuda_graphs", False)),
                   request_overhead_s=float(d.get("request_overhead_s", 0.0)),
                   async_scheduling=bool(d.get("async_scheduling", False)))


def load_runtime_file(path: str | Path) -> Runtime:
    """A profile file written by `tokensim calibrate` (one runtimes.toml section), registered under its name so
    every command that names runtimes finds it; a bad file is one InputError."""
    from engine import validation as V

    p = Path(path)
    try:
        data = tomllib.loads(V.read_text(p, "runtime file"))
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{p}: not valid TOML ({e})") from None
    if len(data) != 1 or not isinstance(next(iter(data.values())), dict):
        raise InputError(f"{p}: a runtime file holds one [name] section, got {len(data)} entries")
    name, d = next(iter(data.items()))
    known = runtimes().get(name)
    if known is not None and not known.description.endswith("(calibrated)"):
        raise InputError(f"{p}: [{name}] is a shipped profile's name; give the calibrated profile its own name")
    for key in ("bw_eff", "flops_eff"):  # sustained fractions of peak
        V.required(d, key, V.number, f"{p} [{name}]", lo=0.0, hi=1.0, lo_open=True)
    for key in ("step_overhead_s", "layer_overhead_s"):  # fixed costs: seconds, under one
        V.required(d, key, V.number, f"{p} [{name}]", lo=0.0, hi=1.0)
    try:
        return register(name, d)
    except (TypeError, ValueError, IndexError, KeyError) as e:
        raise InputError(f"{p}: [{name}]: {e}") from None


# The profiles registered in this process (by a --runtime-file, or by register() in a worker), by name: their
# sections as read, which a task sent to another process carries so that process prices with the same profile.
_REGISTERED: dict[str, dict[str, Any]] = {}


def register(name: str, d: dict[str, Any]) -> Runtime:
    """Make one profile section (a calibrate file's, already checked) known by its name to every command."""
    rt = runtime_from_table(name, d)
    runtimes()[name] = rt
    _tables()[name] = d
    _REGISTERED[name] = d
    return rt


def registered() -> dict[str, dict[str, Any]]:
    """The profiles this process registered (name: section), for a task sent to a process that has not."""
    return dict(_REGISTERED)


def load_runtime(name: str) -> Runtime:
    table = runtimes()
    if name not in table:
        raise InputError(f"unknown runtime '{name}'{suggest(name, list(table))}")
    return table[name]
