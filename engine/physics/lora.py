"""Multi-LoRA serving: what one low-rank adapter weighs and what batched LoRA kernels add to a step.

A LoRA adapter adds, beside a base projection W (in -> out), two small matrices A (in x r) and B (r x out):
y = W x + B (A x). vLLM applies adapters to every linear layer of attention and the MLP by default (its
`LoRAModelManager` wraps q/k/v/o and gate/up/down; the packed qkv and gate_up layers hold one A/B pair per
slice), and runs them batched: after each base GEMM a "shrink" kernel multiplies each token by the A of its
request's adapter (in -> r) and an "expand" kernel by its B (r -> out), adding into the output (punica's
SGMV/BGMV kernels, vllm/lora/ops). Each kernel reads the A or B of every distinct adapter in the batch once,
so a step reads

    bytes = adapters_in_batch x layers x sum over LoRA'd projections of r x (in + out) x lora_dtype_bytes

and does 2 x tokens x r x (in + out) FLOPs per projection per layer. We price the kernels from these bytes and
FLOPs on the GPU's sustained rates (no measured punica timings here), as a roofline of their own added after
the base GEMMs: vLLM's LoRA layers run the base layer first, then add the LoRA output, so the two do not
overlap. The activations the kernels pass (x read, a token x r buffer written and read in fp32, the output
read and written back) are counted too.

What is LoRA'd: the attention projections of every layer and the MLP of dense layers. Routed experts are not
(vLLM's fused-MoE LoRA is recent and optional), nor the embedding or LM head (vLLM's default leaves them out).
MLA attention is not modelled (its projections are low-rank already); a MoE or MLA model is refused in
`check`. LoRA weights are 16-bit: vLLM's default lora_dtype "auto" takes the activations' dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.config import LORA_RANKS as RANKS
from engine.errors import InputError
from engine.physics.specs import Model

LORA_DTYPE_BYTES = 2  # bf16/fp16: vLLM's lora_dtype "auto" is the model's activation dtype
_BUF_BYTES = 4  # the shrink kernel's token x rank buffer is fp32 (vLLM allocates it so, then expands from it)
ZIPF_S = 1.1  # default skew of which adapter a request uses: a few popular adapters, a long tail


def projections(m: Model) -> list[tuple[int, int, int, bool]]:
    """(in, out, layers, row_parallel) of each LoRA'd projection: q, k, v, o in every layer; gate, up, down in dense
    layers. Under tensor parallel o and down split their input (row parallel), the others their output."""
    q = m.heads * m.head_dim
    kv = m.kv_heads * m.head_dim
    h, f, L = m.hidden, m.intermediate, m.layers
    dense = m.dense_layers
    return [(h, q, L, False), (h, kv, L, False), (h, kv, L, False), (q, h, L, True), (h, f, dense, False),
            (h, f, dense, False), (f, h, dense, True)]


def width(m: Model) -> int:
    """sum over LoRA'd projections and layers of (in + out): one adapter's elements per unit of rank."""
    return sum((i + o) * n for i, o, n, _ in projections(m))


def width_per_gpu(m: Model, tp: int) -> float:
    """width() on one GPU of a tensor-parallel group as vLLM shards adapters by default (fully_sharded_loras off,
    vllm/config/lora.py): a column-parallel layer keeps all of A (in x r) and its 1/tp of B; a row-parallel one its
    1/tp of A and all of B. The shrink and expand kernels do the FLOPs of what each GPU holds."""
    return sum(((i / tp + o) if row else (i + o / tp)) * n for i, o, n, row in projections(m))


def adapter_bytes(m: Model, rank: int) -> float:
    """Bytes of one adapter's A and B matrices at `rank` (its whole size on one GPU before tensor parallel)."""
    return float(rank * width(m) * LORA_DTYPE_BYTES)


def act_width(m: Model) -> int:
    """Activation elements per token the shrink and expand kernels move: x read (in), output read and written
    (2 out), over every LoRA'd projection and layer."""
    return sum((i + 2 * o) * n for i, o, n, _ in projections(m))


def check(m: Model, adapters: int, slots: int, rank: int) -> None:
    """vLLM's rules for the three options, as one-line InputErrors (adapters 0: LoRA off, the others must be 0)."""
    if adapters < 0:
        raise InputError(f"--lora-adapters must be >= 0, got {adapters}")
    if adapters == 0:
        if slots or rank:
            raise InputError("--max-loras and --max-lora-rank do nothing without --lora-adapters N: give it")
        return
    if slots < 1 or slots > adapters:
        raise InputError(f"--max-loras must be between 1 and --lora-adapters ({adapters}), got {slots}")
    if rank not in RANKS:
        raise InputError(f"--max-lora-rank must be one of vLLM's {', '.join(map(str, RANKS))}; got {rank}")
    if m.is_mla or m.is_moe:
        raise InputError(f"LoRA on {m.name} is not modelled: only dense models with standard attention")


def zipf_cdf(adapters: int, s: float = ZIPF_S) -> np.ndarray:
    """Cumulative share of requests using adapters 1..N when adapter k is used in proportion to k^-s."""
    w = np.arange(1, adapters + 1, dtype=np.float64) ** -s
    c = np.cumsum(w)
    return c / c[-1]


def draw_adapters(cdf: np.ndarray, rng: np.random.Generator, k: int) -> np.ndarray:
    """k adapter ids (1..N) drawn by inverse transform from a zipf_cdf."""
    return np.minimum(np.searchsorted(cdf, rng.random(k), side="right"), len(cdf) - 1) + 1


class LoraCost:
    """The per-GPU coefficients of the LoRA kernels for one model, rank and tensor-parallel degree."""

    __slots__ = ("bytes_per_adapter", "flops_per_token", "act_per_token")

    def __init__(self, m: Model, rank: int, tp: int) -> None:
        w = width_per_gpu(m, tp)
        self.bytes_per_adapter = rank * w * LORA_DTYPE_BYTES
        self.flops_per_token = 2.0 * rank * w
        kernels = sum(n for _, _, n, _ in projections(m))  # shrink/expand pairs a token passes through
        self.act_per_token = (act_width(m) * LORA_DTYPE_BYTES + 2 * rank * _BUF_BYTES * kernels) / tp

    def parts(self, tokens: Any, adapters: Any) -> tuple[Any, Any]:
        """(bytes, FLOPs) the shrink and expand kernels of a step add: the A/B of `adapters` distinct adapters
        read once each, the activations of `tokens` tokens, 2 x tokens x rank x (in + out) FLOPs."""
        return adapters * self.bytes_per_adapter + tokens * self.act_per_token, tokens * self.flops_per_token
