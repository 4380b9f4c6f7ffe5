"""Routed experts priced by the kernel path a runtime runs them on.

A mixture-of-experts layer's routed experts run as grouped GEMMs: each expert multiplies the few tokens routed to
it. In decode those kernels wait on their weights, so what sets the time is the fraction of peak HBM bandwidth the
kernel sustains while streaming expert weights, and that is a property of the kernel, not of the model: vLLM runs
16-bit experts through its fused-MoE Triton kernel (vllm/model_executor/layers/fused_moe/fused_moe.py) but
per-tensor/per-channel FP8 W8A8 experts on Hopper and Blackwell through CUTLASS grouped GEMMs
(compressed_tensors_moe.py CompressedTensorsW8A8Fp8MoEMethod: use_cutlass = not block_quant and
(_is_fp8_w8a8_sm90 or _is_fp8_w8a8_sm100), running cutlass_moe_fp8: a per-token quantisation of the activations,
a gather into expert order, two grouped GEMMs with scale epilogues). One fitted fraction cannot serve both.

The path is chosen by what the tensor cores are fed: 16-bit activations (BF16/FP16 experts, and weight-only
INT4/INT8/MXFP4/NVFP4 kernels that dequantise weights in registers: Marlin, triton_kernels' matmul_ogs on Hopper)
stream like the 16-bit kernel; quantised activations (FP8 W8A8, block FP8, and FP4 weights on parts with FP4
tensor cores, which quantise activations too) stream like the quantised grouped GEMMs. Each path's fraction is a
runtime constant (presets/runtimes.toml), fitted only where a measured table runs that path; a path without one
takes the next one down its chain (PATHS[...].falls_back), ending at the dense GEMMs' bw_eff.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.physics.calibration import Runtime


@dataclass(frozen=True, slots=True)
class ExpertPath:
    """One kernel family for routed-expert GEMMs: the runtime constant that holds its sustained fraction of peak
    HBM bandwidth, the field to try when that one is not set, and what runs."""

    name: str
    field: str
    falls_back: str
    kernels: str


# The registry of paths (a new kernel family is a new entry and a Runtime field).
PATHS: dict[str, ExpertPath] = {
    "a16": ExpertPath("a16", "expert_bw_eff", "bw_eff",
                      "16-bit activations: vLLM fused-MoE Triton (BF16/FP16), Marlin MoE (INT4/INT8/FP4 weight-only),"
                      " triton_kernels matmul_ogs (MXFP4 on Hopper)"),
    "quantised": ExpertPath("quantised", "expert_fp8_bw_eff", "expert_bw_eff",
                            "quantised activations: CUTLASS grouped GEMM (cutlass_moe_fp8, FP8 W8A8), Triton/DeepGEMM"
                            " block FP8, CUTLASS/FlashInfer FP4 grouped GEMMs on Blackwell"),
}
# Weight dtypes whose kernels quantise the activations too, on any part (FP8 tensor cores: Hopper and later).
_QUANTISED_ACT = frozenset({"fp8", "fp8-block", "int8-w8a8"})
# Weight dtypes run with quantised activations only where the part has FP4 tensor cores (else weight-only).
_FP4 = frozenset({"fp4", "mxfp4", "nvfp4"})


def expert_path(edtype: str, fp4_cores: bool) -> ExpertPath:
    """The kernel path of routed experts stored as `edtype`, on a part with (or without) FP4 tensor cores."""
    quantised = edtype in _QUANTISED_ACT or (edtype in _FP4 and fp4_cores)
    return PATHS["quantised" if quantised else "a16"]


def expert_bw_eff(rt: Runtime, edtype: str, fp4_cores: bool) -> float:
    """Fraction of peak HBM bandwidth the runtime's routed-expert GEMMs sustain for experts stored as `edtype`:
    the path's own constant, else the first constant set down its fallback chain (ending at bw_eff)."""
    path = expert_path(edtype, fp4_cores)
    name = path.field
    while True:
        v = getattr(rt, name)
        if v is not None:
            return float(v)
        nxt = next((p for p in PATHS.values() if p.field == name), None)
        name = nxt.falls_back if nxt is not None else "bw_eff"


def experts_touched(experts: int, k: int, tokens: Any, ep: int = 1) -> Any:
    """Expected distinct experts one GPU runs in a MoE layer when `tokens` tokens on each of ep GPUs pick k of
    `experts` each, routing uniform: E (1 - (1 - k/E)^(T ep)) / ep (each GPU holds E / ep of them, and under expert
    parallel every GPU's experts see the tokens of all ep GPUs). Floats or arrays."""
    return experts * (1.0 - (1.0 - k / experts) ** (tokens * ep)) / ep


def tokens_per_expert(experts: int, k: int, tokens: float, ep: int = 1) -> float:
    """Mean tokens each touched expert multiplies in a step of `tokens` tokens per GPU (the rows of its grouped
    GEMM tile: small groups leave tensor-core rows empty)."""
    # T ep k (token, expert) pairs over the touched ep x touched experts of the ep GPUs
    touched = experts_touched(experts, k, tokens, ep)
    return float(tokens * k / touched) if touched else 0.0
