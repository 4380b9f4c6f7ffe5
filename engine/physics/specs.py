"""Hardware and model specifications: presets shipped as data files, user TOML files, HF config.json.

Every figure here comes from a public spec sheet or a model's config.json; the preset files keep the
source beside the numbers. Parameter counts are derived from the architecture, not typed in, so a
new model is just its config.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from engine import validation as V
from engine.errors import InputError, suggest
from engine.physics import hf_config, quant_config

# Bytes per stored weight or KV element. mxfp4 carries one 8-bit scale per 32 values: 4.25 bits.
# Group-quantised checkpoints count their scales too: GPTQ/AWQ int8/int4 with one fp16 scale per 128 weights
# (8.125 / 4.125 bits; symmetric kernels never read the packed zero points), NVFP4 one fp8 scale per 16 (4.5 bits).
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "fp4": 0.5, "mxfp4": 4.25 / 8,
    "int8-g128": 8.125 / 8, "int4-g128": 4.125 / 8, "nvfp4": 4.5 / 8, "fp8-block": 1.0,
}
# Checkpoint dtypes a model file or a config's quantization_config names (engine.physics.quant_config), beyond the
# --dtype choices: every GPTQ/AWQ width and group size (one 16-bit scale per group), bitsandbytes NF4 (one fp32
# absmax per 64: 4.5 bits; double-quantised 4.127 bits, QLoRA sec. 3), FP8 weights with 16-bit activations and
# int8 W8A8 (per-channel scales, a few bytes per row, left out).
_STORED_ONLY = {**{k: v for k, v in quant_config.int_dtypes().items() if k not in DTYPE_BYTES},
                quant_config.BNB4: 4.5 / 8, quant_config.BNB4_DQ: (4 + 8 / 64 + 32 / (64 * 256)) / 8,
                "fp8-w8a16": 1.0, "int8-w8a8": 1.0}
DTYPE_BYTES.update(_STORED_ONLY)
# fp8-block: DeepSeek's FP8 checkpoints, one fp32 scale per 128x128 weight block (0.02 % more bytes, left out).
# Blackwell's tensor cores apply block scales inside the MMA; Hopper's FP8 MMA has none, so kernels rescale
# the partial sums on the CUDA cores (DeepSeek-V3 technical report, sec. 3.3.2): see Runtime.block_fp8_eff.
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4", "fp4", "mxfp4", "int8-g128", "int4-g128", "nvfp4",
                 "fp8-block")
STORED_DTYPES = WEIGHT_DTYPES + tuple(_STORED_ONLY)
KV_DTYPES = ("bf16", "fp16", "fp8")
# Which tensor-core rate a weight dtype computes at, given the part supports it (else bf16:
# int8/int4 weight-only quantisation dequantises to 16-bit before the matmul).
_COMPUTE_DTYPE = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "int8": "bf16", "int4": "bf16",
                  "fp4": "fp4", "mxfp4": "fp4", "fp32": "bf16", "int8-g128": "bf16", "int4-g128": "bf16",
                  "nvfp4": "fp4", "fp8-block": "fp8",
                  # int8 W8A8 runs int8 MMAs: on Hopper and Ada the same dense rate as FP8 (H100 SXM: 1,979 TOPS
                  # int8 and 1,979 TFLOPS FP8 dense, half the datasheet's with-sparsity 3,958); parts without FP8
                  # fall back to the 16-bit rate.
                  "int8-w8a8": "fp8"}

PRESET_ROOT = "presets"


@dataclass(frozen=True, slots=True)
class Hardware:
    """One GPU as its spec sheet describes it. Units: GB and GB/s are 1e9, MB is 1e6, KB is 1e3."""

    name: str
    display: str
    memory_gb: float
    memory_bandwidth_gbps: float
    l2_mb: float
    sm_count: int
    smem_per_sm_kb: float
    tflops: dict[str, float]
    interconnect_gbps: float
    price_per_hour: float
    vendor: str = ""
    source: str = ""
    notes: str = ""
    # The GPU's link to host memory, GB/s each way (KV offload): PCIe 5.0 x16 carries 64 GB/s raw
    # (32 GT/s x 16 lanes, 128b/130b coding: 63 GB/s) by PCI-SIG's specification.
    host_link_gbps: float = 64.0
    # How many GPUs one GPU-to-GPU fabric joins all to all (NVLink through NVSwitch, Infinity Fabric): 8 in an HGX
    # board, 72 in an NVL72 rack, 2 for bridged PCIe cards, 0 for PCIe-only parts. A tensor-parallel group larger
    # than it all-reduces over PCIe (step.py _HOP_LATENCY_S).
    fabric_gpus: int = 8
    # The link from one GPU to the other nodes, GB/s each way (a pipeline stage boundary between nodes crosses it):
    # one NIC per GPU in HGX/DGX systems. None: the file does not say, and nothing may span nodes.
    node_link_gbps: float | None = None
    # Board power, watts (engine.physics.energy): at idle (clocks parked, memory refreshed) and the board's power
    # limit (TDP). None: the file does not say, and energy cannot be reported for the part.
    idle_power_w: float | None = None
    max_power_w: float | None = None
    # KV tiers below host memory (engine.serving.kv_tiers), as a server around the GPU typically has them.
    # A local NVMe drive on PCIe 4.0 x4: 16 GT/s x 4 lanes, 128b/130b coding = 7.9 GB/s raw (PCI-SIG), about 7 GB/s
    # read as drives rate it (Samsung 990 PRO: 7.45 GB/s sequential read, its data sheet).
    kv_disk_gbps: float = 7.0
    # Assumption (tokensim's): ~0.1 ms to the first byte of a flash read, the order NVMe drives quote for 4 KiB reads.
    kv_disk_latency_ms: float = 0.1
    # A remote KV store over a 400 Gb/s RDMA NIC (ConnectX-7 class): 400 / 8 = 50 GB/s.
    kv_remote_gbps: float = 50.0
    # Assumption (tokensim's): 1 ms per fetch, a store's lookup plus the network round trip (RDMA's own is a few us).
    kv_remote_latency_ms: float = 1.0

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * 1e9

    @property
    def bandwidth(self) -> float:
        """HBM bandwidth in bytes/s."""
        return self.memory_bandwidth_gbps * 1e9

    @property
    def l2_bytes(self) -> float:
        return self.l2_mb * 1e6

    def rate_dtype(self, dtype: str) -> str:
        """The tensor-core rate a weight dtype computes at on this part: bf16, fp8 or fp4 (bf16 if it lacks it)."""
        d = _COMPUTE_DTYPE.get(dtype, "bf16")
        return d if self.tflops.get(d) else "bf16"

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor-core FLOP/s for a compute dtype, falling back to bf16 where the part lacks it."""
        return 1e12 * self.tflops[self.rate_dtype(dtype)]

    def ridge(self, dtype: str = "bf16") -> float:
        """FLOPs the part can do per byte it reads: above this intensity a kernel is compute-bound."""
        return self.peak_flops(dtype) / self.bandwidth

    def drain_time_s(self) -> float:
        """Time to read the whole memory once at peak bandwidth ('a train every N ms')."""
        return self.memory_bytes / self.bandwidth


@dataclass(frozen=True, slots=True)
class Model:
    """A transformer's architecture, in the vocabulary of Hugging Face config.json."""

    name: str
    display: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tie_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    max_context: int = 32768
    weight_dtype: str = "bf16"
    expert_dtype: str = ""
    # A quantised checkpoint's embedding and LM head dtype ("": as the weights), and the decoder parts it leaves
    # 16-bit as (part, share of its layers) pairs, part one of attn, router, shared, dense_mlp (quant_config.keep16).
    head_dtype: str = ""
    keep16: tuple[tuple[str, float], ...] = ()
    # MoE
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_experts: int = 0
    shared_expert_intermediate: int = 0  # a shared expert's width when it differs from a routed one's (Qwen2-MoE)
    first_dense_layers: int = 0
    expert_bias: bool = False
    # MLA (DeepSeek): the cache holds a compressed latent plus a shared rope key.
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # Local attention: `sliding_layers` layers see only part of the context. A sliding window sees the last
    # `sliding_window` tokens and caches only those; chunked attention (Llama 4's attention_chunk_size) sees the
    # tokens of its own chunk of `sliding_window` (context mod chunk), while the cache keeps every token.
    sliding_window: int = 0
    sliding_layers: int = 0
    chunked: bool = False
    source: str = ""
    notes: str = ""
    published_params: float = 0.0
    counts: dict[str, float] = field(default_factory=dict, compare=False)

    # ---- derived architecture ------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def shared_width(self) -> int:
        """Intermediate width of each shared expert."""
        return self.shared_expert_intermediate or self.expert_intermediate

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense_layers if self.is_moe else 0

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    @property
    def full_attn_layers(self) -> int:
        return self.layers - self.sliding_layers

    def local_seen(self, ctx: np.ndarray) -> np.ndarray:
        """Cached tokens a local layer's next query attends to, for sequences holding `ctx` tokens each."""
        x = np.asarray(ctx, dtype=np.float64)
        if not self.sliding_layers:
            return np.zeros_like(x)
        w = float(self.sliding_window)
        return np.mod(x, w) if self.chunked else np.minimum(x, w)

    def local_seen_sum(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Sum of local_seen(p) over integer contexts a <= p < b: the query-key pairs of the tokens at
        positions a..b-1 in a local layer, less their half-pair on themselves (closed form, no loop)."""
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        if not self.sliding_layers:
            return np.zeros(np.broadcast(a, b).shape)
        w = float(self.sliding_window)

        def upto(p: np.ndarray) -> np.ndarray:
            """Sum of local_seen(q) for 0 <= q < p."""
            if self.chunked:  # whole chunks of 0..w-1, then a partial one of 0..r-1
                r = np.mod(p, w)
                return np.floor(p / w) * w * (w - 1) / 2 + r * (r - 1) / 2
            q = np.minimum(p, w)
            return q * (q - 1) / 2 + np.maximum(p - w, 0.0) * w
        return upto(b) - upto(a)

    def local_pairs(self, ctx: np.ndarray, new: np.ndarray) -> np.ndarray:
        """Query-key pairs of `new` tokens appended to `ctx` cached ones, in one local layer."""
        x = np.asarray(ctx, dtype=np.float64)
        n = np.asarray(new, dtype=np.float64)
        if not self.sliding_layers:
            return np.zeros(np.broadcast(x, n).shape)
        # Each new token sees local_seen of the tokens before it, plus half a pair on itself (the full layers'
        # n * (x + n/2) counts the same way).
        return self.local_seen_sum(x, x + n) + n / 2

    def local_cached(self, ctx: np.ndarray) -> np.ndarray:
        """Tokens a local layer keeps in the KV cache for sequences of `ctx` tokens: a sliding window's cache is
        cyclic (the last `sliding_window`); a chunked layer's keeps them all, as its global layers' does."""
        x = np.asarray(ctx, dtype=np.float64)
        if not self.sliding_layers:
            return np.zeros_like(x)
        return x if self.chunked else np.minimum(x, float(self.sliding_window))

    @property
    def qk_dim(self) -> int:
        """Per-head width of the query-key dot product."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def v_dim(self) -> int:
        return self.v_head_dim if self.is_mla else self.head_dim

    def kv_elems_per_token_layer(self) -> int:
        """Values cached per token per layer: K and V per KV head, or MLA's latent plus rope key."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_heads * self.head_dim

    def kv_bytes_per_token_layer(self, kv_dtype: str = "bf16") -> float:
        return self.kv_elems_per_token_layer() * DTYPE_BYTES[kv_dtype]

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> float:
        """Whole-model KV bytes one token adds to the cache (full-attention layers; see sliding)."""
        return self.kv_bytes_per_token_layer(kv_dtype) * self.layers

    @property
    def params_total(self) -> float:
        return self.counts["total"]

    @property
    def params_active(self) -> float:
        return self.counts["active"]

    def keep16_params(self) -> float:
        """Parameters of the decoder parts a quantised checkpoint leaves 16-bit (its modules_to_not_convert)."""
        c = self.counts
        per_part = {"attn": self.layers * c["attn_per_layer"], "router": self.moe_layers * c["router"],
                    "shared": self.moe_layers * c["shared"], "dense_mlp": self.dense_layers * c["dense_mlp_per_layer"]}
        return sum(per_part.get(part, 0.0) * share for part, share in self.keep16)

    def weight_bytes(self, dtype: str | None = None, head_dtype: str | None = None) -> float:
        """Bytes of all weights at rest, with experts at their own dtype where the model says so. At the model's
        own dtype (dtype None) a quantised checkpoint's 16-bit head and kept parts count at 16 bits; head_dtype
        (--head-dtype) prices the embedding and LM head at a dtype of its own."""
        c = self.counts
        wd = dtype or self.weight_dtype
        ed = dtype or self.expert_dtype or self.weight_dtype
        experts = c["expert_all"]
        total = (c["total"] - experts) * DTYPE_BYTES[wd] + experts * DTYPE_BYTES[ed]
        hd = head_dtype or (self.head_dtype if dtype is None else "") or wd
        if hd != wd:
            total += (c["embed"] + c["lm_head_separate"]) * (DTYPE_BYTES[hd] - DTYPE_BYTES[wd])
        if dtype is None and self.keep16:
            total += self.keep16_params() * (DTYPE_BYTES["bf16"] - DTYPE_BYTES[wd])
        return total


def count_params(m: Model) -> dict[str, float]:
    """Parameter counts by component, derived from the architecture (norms and biases included)."""
    h = m.hidden
    if m.is_mla:
        q = (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * m.heads * m.qk_dim) if m.q_lora_rank \
            else h * m.heads * m.qk_dim
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank \
            + m.kv_lora_rank * m.heads * (m.qk_nope_head_dim + m.v_head_dim)
        o = m.heads * m.v_head_dim * h
        attn = q + kv + o
    else:
        qd, kvd = m.heads * m.head_dim, m.kv_heads * m.head_dim
        attn = h * qd + 2 * h * kvd + qd * h
        if m.qkv_bias:
            attn += qd + 2 * kvd
        if m.o_bias:
            attn += h
        if m.sliding_layers and not m.chunked:  # gpt-oss keeps one learned attention-sink logit per head
            attn += m.heads
    norms = 2 * h + (2 * m.head_dim if m.qk_norm else 0)
    dense_mlp = 3 * h * m.intermediate
    expert = 3 * h * m.expert_intermediate + ((2 * m.expert_intermediate + h) if m.expert_bias else 0)
    router = h * m.experts + (m.experts if m.expert_bias else 0)
    # Shared experts run for every token; Qwen2-MoE's is wider than a routed one and has a one-unit sigmoid gate.
    shared = m.shared_experts * 3 * h * m.shared_width + (h if m.shared_expert_intermediate else 0)
    embed = m.vocab * h
    lm_head = 0 if m.tie_embeddings else m.vocab * h
    moe_l, dense_l = m.moe_layers, m.dense_layers
    per_layer_common = attn + norms
    expert_all = moe_l * m.experts * expert
    total = embed + lm_head + h + m.layers * per_layer_common + dense_l * dense_mlp \
        + moe_l * (router + shared) + expert_all
    active = total - expert_all + moe_l * m.experts_per_token * expert
    # What a forward pass multiplies per token: everything but the embedding lookup and the LM head.
    matmul_active = active - embed - lm_head
    return {
        "total": float(total), "active": float(active), "embed": float(embed), "lm_head_matrix": float(embed),
        "lm_head_separate": float(lm_head), "attn_per_layer": float(attn), "norms_per_layer": float(norms),
        "dense_mlp_per_layer": float(dense_mlp), "expert": float(expert), "router": float(router),
        "shared": float(shared), "expert_all": float(expert_all), "matmul_active": float(matmul_active),
    }


# ---- reading files ---------------------------------------------------------------------------

# Plausible ceilings for spec-sheet fields: ~1,000x today's largest parts, so a typo (memory_gb = 1e300)
# is refused instead of turning the pool size into inf and every figure after it into NaN.
_HW_FIELDS: dict[str, tuple[float, bool]] = {  # key -> (largest accepted, whole number)
    "memory_gb": (1e5, False), "memory_bandwidth_gbps": (1e7, False), "l2_mb": (1e5, False),
    "sm_count": (1e6, True), "smem_per_sm_kb": (1e5, False), "interconnect_gbps": (1e7, False),
    "price_per_hour": (1e6, False),
}
_MAX_TFLOPS = 1e7


def hardware_from_mapping(d: dict[str, Any], where: str) -> Hardware:
    """Build a Hardware from a TOML table, validating every field the step model needs."""
    name = V.required(d, "name", V.text, where)
    vals: dict[str, float] = {}
    for k, (hi, integer) in _HW_FIELDS.items():
        vals[k] = V.required(d, k, V.whole if integer else V.positive, where, **({"lo": 1, "hi": int(hi)} if integer
                                                                                  else {"hi": hi}))
    if d.get("tflops") is None:
        raise InputError(f"{where}: missing table [tflops] (with bf16, and optionally fp8, fp4)")
    tf = V.table(d["tflops"], "tflops", where)
    tflops = {"bf16": V.required(tf, "bf16", V.positive, where, hi=_MAX_TFLOPS)}
    for k in ("fp8", "fp4"):
        if tf.get(k) is not None:
            tflops[k] = V.positive(tf[k], f"tflops.{k}", where, hi=_MAX_TFLOPS)
    return Hardware(
        name=name, display=_label(d, "display", where, name), memory_gb=vals["memory_gb"],
        memory_bandwidth_gbps=vals["memory_bandwidth_gbps"], l2_mb=vals["l2_mb"], sm_count=int(vals["sm_count"]),
        smem_per_sm_kb=vals["smem_per_sm_kb"], tflops=tflops, interconnect_gbps=vals["interconnect_gbps"],
        price_per_hour=vals["price_per_hour"], vendor=_label(d, "vendor", where), source=_label(d, "source", where),
        notes=_label(d, "notes", where),
        # a host link (PCIe) over which KV offload copies blocks: 64 GB/s (PCIe 5 x16, one way) unless the file says
        host_link_gbps=V.optional(d, "host_link_gbps", V.positive, where, 64.0, hi=1e7),
        # absent: a fabric of 8 where the interconnect is faster than any PCIe x16 link (PCIe 6: 256 GB/s both ways)
        fabric_gpus=int(V.optional(d, "fabric_gpus", V.whole, where, 8 if vals["interconnect_gbps"] > 256 else 0,
                                   hi=1_000_000)),
        node_link_gbps=V.optional(d, "node_link_gbps", V.positive, where, None, hi=1e7),
        **_power(d, where), **_kv_tier_links(d, where),
    )


def _kv_tier_links(d: dict[str, Any], where: str) -> dict[str, float]:
    """The KV tiers' links a hardware file may set (kv_disk_gbps, kv_disk_latency_ms, kv_remote_gbps,
    kv_remote_latency_ms); absent: the Hardware defaults, with their sources."""
    return {f.name: V.optional(d, f.name, V.positive if f.name.endswith("gbps") else V.number, where, f.default,
                               hi=1e7)
            for f in fields(Hardware) if f.name.startswith("kv_")}


def _power(d: dict[str, Any], where: str) -> dict[str, float | None]:
    """The optional board-power pair: both or neither, idle below max (a typo would make idle draw more)."""
    idle = V.optional(d, "idle_power_w", V.positive, where, None, hi=1e5)
    top = V.optional(d, "max_power_w", V.positive, where, None, hi=1e5)
    if (idle is None) != (top is None) or (idle is not None and top is not None and idle >= top):
        raise InputError(f"{where}: idle_power_w and max_power_w go together, idle below max (got {idle}, {top})")
    return {"idle_power_w": idle, "max_power_w": top}


def _label(d: dict[str, Any], key: str, where: str, default: str = "") -> str:
    """A free-text field (display name, source, notes): a string when present."""
    v = d.get(key)
    if v is None:
        return default
    if not isinstance(v, str):
        raise V.fail(where, key, "a string", v)
    return v


def _first(d: dict[str, Any], *keys: str) -> str | None:
    """The first of `keys` present in d (HF configs spell one field several ways)."""
    return next((k for k in keys if d.get(k) is not None), None)


# model_type / architecture words of families tokensim cannot price: encoders and state-space or recurrent
# models have no per-token KV cache growing with context, which every figure here assumes.
_UNSUPPORTED = ("bert", "roberta", "electra", "deberta", "albert", "distilbert", "t5", "bart", "whisper", "clip",
                "vit", "mamba", "rwkv", "jamba", "xlstm", "retnet", "encoder")
# Model-file limits: ~1,000x the largest released models, so counts stay finite and exact in float64.
_MAX_LAYERS, _MAX_WIDTH, _MAX_HEADS, _MAX_VOCAB, _MAX_CONTEXT = 10_000, 10**7, 100_000, 10**8, 10**9


def _check_architecture(d: dict[str, Any], where: str) -> None:
    """Refuse model families the step model does not describe, naming what the file says it is."""
    archs = d.get("architectures")
    names = [str(a) for a in archs] if isinstance(archs, list) else []
    mtype = str(d.get("model_type") or "")
    for label in (*names, mtype):
        low = label.lower()
        if any(w in low for w in _UNSUPPORTED) or low.endswith(("formaskedlm", "forsequenceclassification")):
            shown = ", ".join(names) or mtype
            raise InputError(f"{where}: unsupported architecture: {shown} (model_type {mtype or '?'}); tokensim"
                             " prices decoder-only transformers with a KV cache")
    if d.get("is_encoder_decoder") is True:
        raise InputError(f"{where}: unsupported architecture: an encoder-decoder model; tokensim prices"
                         " decoder-only transformers with a KV cache")
    kinds = d.get("attn_type_list")
    if isinstance(kinds, list) and 0 in kinds:  # MiniMax-Text-01: 0 marks a linear (lightning) attention layer
        raise InputError(f"{where}: unsupported architecture: {kinds.count(0)} of its {len(kinds)} layers use linear"
                         " attention (attn_type_list 0), which keeps no KV cache growing with context; tokensim prices"
                         " softmax attention only")


def _layer_types(d: dict[str, Any], where: str, layers: int) -> list[str] | None:
    """HF layer_types: one string per layer (e.g. "sliding_attention", "full_attention"), or None."""
    lt = d.get("layer_types")
    if lt is None:
        return None
    if not isinstance(lt, list) or not all(isinstance(t, str) for t in lt):
        raise V.fail(where, "layer_types", "a list of strings, one per layer", lt)
    if len(lt) != layers:
        raise V.fail(where, "layer_types", f"a list of {layers} entries (num_hidden_layers), not {len(lt)}",
                     got=False)
    bad = [t for t in lt if "attention" not in t and t not in ("sliding", "full")]
    if bad:
        raise V.fail(where, "layer_types", "attention layer kinds like \"full_attention\" or"
                     " \"sliding_attention\"", bad[0])
    return lt


def model_from_mapping(d: dict[str, Any], where: str, name: str | None = None) -> Model:
    """Build a Model from HF config.json keys (plus tokensim's name/display/source/weight_dtype)."""
    # Multimodal wrappers nest the language model (its type checked first); family layouts are rewritten into
    # the keys read below, and size-looking keys nobody reads are warned about.
    V.optional(d, "text_config", V.table, where, None)
    d = hf_config.normalise(d, where)
    _check_architecture(d, where)
    W = V.whole
    layers = V.required(d, "num_hidden_layers", W, where, lo=1, hi=_MAX_LAYERS)
    hidden = V.required(d, "hidden_size", W, where, lo=1, hi=_MAX_WIDTH)
    heads, kv_heads, head_dim = _attention_shape(d, where, hidden)
    max_ctx = V.optional(d, "max_position_embeddings", W, where, 32768, lo=1, hi=_MAX_CONTEXT)
    layer_types = _layer_types(d, where, layers)
    mlp, local, dtypes = _moe_fields(d, where, layers), _local_attention(d, where, layers, max_ctx, layer_types), \
        _dtypes(d, where)
    nm = _model_name(d, where, name)
    for key in ("tie_word_embeddings", "qkv_bias", "attention_bias", "o_bias", "qk_norm", "expert_bias"):
        V.optional(d, key, V.flag, where, False)
    m = Model(
        name=nm, display=_label(d, "display", where, _label(d, "_name_or_path", where, nm)), layers=layers,
        hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        vocab=V.required(d, "vocab_size", W, where, lo=1, hi=_MAX_VOCAB),
        tie_embeddings=bool(d.get("tie_word_embeddings", False)),
        qkv_bias=bool(d[bk]) if (bk := _first(d, "qkv_bias", "attention_bias")) else False,
        o_bias=bool(d.get("o_bias", bool(d.get("attention_bias")) and bool(layer_types))),
        qk_norm=bool(d.get("qk_norm", "qwen3" in str(d.get("model_type", "")))),
        max_context=max_ctx, **dtypes, **mlp, **_mla_fields(d, where), **local,
        source=_label(d, "source", where), notes=_label(d, "notes", where),
        published_params=V.optional(d, "published_params", V.number, where, 0.0),
    )
    object.__setattr__(m, "counts", count_params(m))
    return m


def _attention_shape(d: dict[str, Any], where: str, hidden: int) -> tuple[int, int, int]:
    """(attention heads, KV heads, head width), each checked against the others."""
    W = V.whole
    heads = V.required(d, "num_attention_heads", W, where, lo=1, hi=_MAX_HEADS)
    kv_heads = V.optional(d, "num_key_value_heads", W, where, heads, lo=1, hi=_MAX_HEADS)
    if kv_heads > heads or heads % kv_heads:
        raise InputError(f"{where}: num_attention_heads ({heads}) must be a multiple of num_key_value_heads"
                         f" ({kv_heads}): each KV head serves a whole group of query heads")
    if d.get("head_dim") is None and hidden % heads:
        raise InputError(f"{where}: hidden_size ({hidden}) does not divide by num_attention_heads ({heads});"
                         " give head_dim if the heads are not hidden_size / heads wide")
    return heads, kv_heads, V.optional(d, "head_dim", W, where, hidden // heads, lo=1, hi=_MAX_WIDTH)


def _moe_fields(d: dict[str, Any], where: str, layers: int) -> dict[str, Any]:
    """The MLP's Model fields: dense width, and for a MoE its experts, their width, shared experts, dense layers."""
    W = V.whole
    ek = _first(d, "num_local_experts", "n_routed_experts", "num_experts")
    experts = W(d[ek], ek, where, lo=0, hi=_MAX_HEADS) if ek else 0
    kk = _first(d, "num_experts_per_tok", "num_experts_per_token") or "num_experts_per_tok"
    k = V.optional(d, kk, W, where, 0, lo=0, hi=_MAX_HEADS)
    if experts:
        if not k:
            raise InputError(f"{where}: missing field '{kk}' (experts each token uses)")
        if k > experts:
            raise InputError(f"{where}: {kk} ({k}) exceeds the number of experts ({experts})")
    inter_raw = V.optional(d, "intermediate_size", W, where, 0, lo=0, hi=_MAX_WIDTH)
    expert_inter = V.optional(d, "moe_intermediate_size", W, where, 0, lo=0, hi=_MAX_WIDTH)
    if experts and not expert_inter:
        expert_inter = V.required(d, "intermediate_size", W, where, lo=1, hi=_MAX_WIDTH)
    inter = inter_raw if experts else V.required(d, "intermediate_size", W, where, lo=1, hi=_MAX_WIDTH)
    first_dense = V.optional(d, "first_k_dense_replace", W, where, 0, lo=0, hi=layers) if experts else 0
    if first_dense and not inter:
        raise InputError(f"{where}: first_k_dense_replace needs intermediate_size for the dense layers")
    return {
        "intermediate": inter, "experts": experts, "experts_per_token": k, "expert_intermediate": expert_inter,
        "shared_experts": V.optional(d, "n_shared_experts", W, where, 0, lo=0, hi=_MAX_HEADS) if experts else 0,
        "shared_expert_intermediate": V.optional(d, "shared_expert_intermediate_size", W, where, 0, lo=0,
                                                 hi=_MAX_WIDTH) if experts else 0,
        "first_dense_layers": first_dense, "expert_bias": bool(d.get("expert_bias", False)),
    }


def _mla_fields(d: dict[str, Any], where: str) -> dict[str, int]:
    """MLA's Model fields (DeepSeek: a compressed KV latent plus a shared rope key); zeros for other attention."""
    W = V.whole
    kv_lora = V.optional(d, "kv_lora_rank", W, where, 0, lo=0, hi=_MAX_WIDTH)
    mla = {key: V.optional(d, key, W, where, 0, lo=0, hi=_MAX_WIDTH)
           for key in ("q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")}
    if kv_lora and not (mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]) or kv_lora and not mla["v_head_dim"]:
        raise InputError(f"{where}: an MLA model (kv_lora_rank > 0) needs qk_nope_head_dim or qk_rope_head_dim,"
                         " and v_head_dim")
    return {"kv_lora_rank": kv_lora, **mla}


def _local_attention(d: dict[str, Any], where: str, layers: int, max_ctx: int,
                     layer_types: list[str] | None) -> dict[str, Any]:
    """Local attention's Model fields: the window (or chunk), how many layers use it, and whether it is chunked."""
    W = V.whole
    window = V.optional(d, "sliding_window", W, where, 0, lo=0, hi=_MAX_CONTEXT)
    sliding = 0
    use_sw = V.optional(d, "use_sliding_window", V.flag, where, None)
    if window and layer_types is not None:
        sliding = sum(1 for t in layer_types if "sliding" in t)
    elif window and use_sw is not False:
        sliding = V.optional(d, "sliding_layers", W, where, layers if use_sw else 0, lo=0, hi=layers)
    chunk = V.optional(d, "attention_chunk_size", W, where, 0, lo=0, hi=_MAX_CONTEXT)
    if chunk:
        # Llama 4: RoPE layers attend within chunks, every nope_layer_interval-th layer (NoPE) globally;
        # no_rope_layers lists 1 for a RoPE layer when the config spells it out.
        window = chunk
        nrl = d.get("no_rope_layers")
        interval = V.optional(d, "nope_layer_interval", W, where, 4, lo=1, hi=layers) or 4
        sliding = V.optional(d, "sliding_layers", W, where, 0, lo=0, hi=layers) or (
            sum(1 for v in nrl if v) if isinstance(nrl, list) and nrl else layers - layers // interval)
        sliding = min(sliding, layers)
    if sliding and window >= max_ctx:
        sliding = 0  # a window as long as the context is no window at all
    return {"sliding_window": window if sliding else 0, "sliding_layers": sliding, "chunked": bool(chunk and sliding)}


def _dtypes(d: dict[str, Any], where: str) -> dict[str, Any]:
    """The stored weight dtype, the routed experts' and the head's where they differ (e.g. gpt-oss's MXFP4
    experts, a GPTQ checkpoint's 16-bit head), and the parts a quantised checkpoint keeps 16-bit."""
    V.optional(d, "quantization_config", V.table, where, {})
    wd = d.get("weight_dtype") or "bf16"
    ed = d.get("expert_dtype") or ""
    hd = d.get("head_dtype") or ""
    for key, val in (("weight_dtype", wd), ("expert_dtype", ed), ("head_dtype", hd)):
        if val:
            V.text(val, key, where, STORED_DTYPES, "weight dtype")
    return {"weight_dtype": wd, "expert_dtype": ed, "head_dtype": hd, "keep16": _keep16(d.get("keep16"), where)}


def _keep16(keep: Any, where: str) -> tuple[tuple[str, float], ...]:
    """A model's keep16 pairs checked: [part, share] with part one of quant_config.PARTS and a share in 0..1."""
    if not keep:
        return ()
    ok = isinstance(keep, (list, tuple)) and all(
        isinstance(x, (list, tuple)) and len(x) == 2 and x[0] in quant_config.PARTS
        and isinstance(x[1], (int, float)) and not isinstance(x[1], bool) and 0 <= x[1] <= 1 for x in keep)
    if not ok:
        raise V.fail(where, "keep16", f"a list of [part, share] pairs, part one of {', '.join(quant_config.PARTS)}"
                     " and share between 0 and 1", keep)
    return tuple((str(p), float(s)) for p, s in keep)


def _model_name(d: dict[str, Any], where: str, name: str | None) -> str:
    """The model's name: the one given, else the file's name or _name_or_path, else the file's stem; lower case."""
    nm = name or d.get("name") or d.get("_name_or_path") or Path(where).stem
    if not isinstance(nm, str) or not nm:
        raise V.fail(where, "name", "a non-empty string", nm)
    return nm.lower()


def read_toml(path: Path, what: str = "file") -> dict[str, Any]:
    """A UTF-8 TOML file as a table, or one line saying why not."""
    return parse_toml(V.read_text(path, what), str(path))


def parse_toml(text: str, where: str) -> dict[str, Any]:
    """TOML text as a table; malformed, too deep or too long a number is one line."""
    try:
        return V.printable(tomllib.loads(text))  # names and notes are printed: no terminal escapes in them
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{where}: malformed TOML: {e}") from None
    except (ValueError, RecursionError) as e:  # an integer over 4,300 digits, or arrays nested thousands deep
        raise InputError(f"{where}: unreadable TOML: {str(e).split(';')[0] or type(e).__name__}") from None


def _read_json(path: Path) -> dict[str, Any]:
    data = V.parse_json(V.read_text(path, "JSON file"), str(path))
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object")
    return data


def _preset_dir(kind: str) -> Any:
    return resources.files("engine").joinpath(PRESET_ROOT, kind)


@cache
def _preset_names(kind: str) -> tuple[str, ...]:
    """The presets of one kind, by file name: listed without parsing them (start-up reads only the one used)."""
    return tuple(sorted(e.name[:-5] for e in _preset_dir(kind).iterdir() if e.name.endswith(".toml")))


@cache
def _preset_table(kind: str, name: str) -> dict[str, Any]:
    """One preset's TOML table (name: one of _preset_names(kind))."""
    return tomllib.loads(_preset_dir(kind).joinpath(f"{name}.toml").read_text(encoding="utf-8"))


def hardware_names() -> list[str]:
    return list(_preset_names("hardware"))


def model_names() -> list[str]:
    return list(_preset_names("models"))


def _looks_like_path(spec: str) -> bool:
    return spec.endswith((".toml", ".json")) or "/" in spec or "\\" in spec


@cache
def load_hardware(spec: str) -> Hardware:
    """A preset name (e.g. 'h100-sxm') or the path of a TOML file."""
    names = _preset_names("hardware")
    if spec.lower() in names:
        return hardware_from_mapping(_preset_table("hardware", spec.lower()), f"preset {spec}")
    if _looks_like_path(spec):
        p = Path(spec)
        if not p.exists():
            raise InputError(f"{spec}: no such hardware file")
        return hardware_from_mapping(read_toml(p, "hardware file"), str(p))
    raise InputError(f"unknown hardware '{spec}'{suggest(spec, list(names))}")


@cache
def load_model(spec: str) -> Model:
    """A preset name (e.g. 'generic-14b'), a TOML file, or a Hugging Face config.json."""
    names = _preset_names("models")
    if spec.lower() in names:
        return model_from_mapping(_preset_table("models", spec.lower()), f"preset {spec}", name=spec.lower())
    if _looks_like_path(spec):
        p = Path(spec)
        if not p.exists():
            raise InputError(f"{spec}: no such model file")
        data = _read_json(p) if p.suffix == ".json" else read_toml(p, "model file")
        name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
        return model_from_mapping(data, str(p), name=None if "name" in data else name)
    raise InputError(f"unknown model '{spec}'{suggest(spec, list(names))}")
