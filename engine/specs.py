"""Hardware and model specifications: presets shipped as data files, user TOML files, HF config.json.

Every figure here comes from a public spec sheet or a model's config.json; the preset files keep the
source beside the numbers. Parameter counts are derived from the architecture, not typed in, so a
new model is just its config.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from engine import hf_config
from engine.errors import InputError, suggest

# Bytes per stored weight or KV element. mxfp4 carries one 8-bit scale per 32 values: 4.25 bits.
# Group-quantised checkpoints count their scales too: GPTQ/AWQ int8/int4 with one fp16 scale per 128 weights
# (8.125 / 4.125 bits; symmetric kernels never read the packed zero points), NVFP4 one fp8 scale per 16 (4.5 bits).
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "fp4": 0.5, "mxfp4": 4.25 / 8,
    "int8-g128": 8.125 / 8, "int4-g128": 4.125 / 8, "nvfp4": 4.5 / 8, "fp8-block": 1.0,
}
# fp8-block: DeepSeek's FP8 checkpoints, one fp32 scale per 128x128 weight block (0.02 % more bytes, left out).
# Blackwell's tensor cores apply block scales inside the MMA; Hopper's FP8 MMA has none, so kernels rescale
# the partial sums on the CUDA cores (DeepSeek-V3 technical report, sec. 3.3.2): see Runtime.block_fp8_eff.
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4", "fp4", "mxfp4", "int8-g128", "int4-g128", "nvfp4",
                 "fp8-block")
KV_DTYPES = ("bf16", "fp16", "fp8")
# Which tensor-core rate a weight dtype computes at, given the part supports it (else bf16:
# int8/int4 weight-only quantisation dequantises to 16-bit before the matmul).
_COMPUTE_DTYPE = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "int8": "bf16", "int4": "bf16",
                  "fp4": "fp4", "mxfp4": "fp4", "fp32": "bf16", "int8-g128": "bf16", "int4-g128": "bf16",
                  "nvfp4": "fp4", "fp8-block": "fp8"}

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

    def weight_bytes(self, dtype: str | None = None) -> float:
        """Bytes of all weights at rest, with experts at their own dtype where the model says so."""
        c = self.counts
        wd = dtype or self.weight_dtype
        ed = dtype or self.expert_dtype or self.weight_dtype
        experts = c["expert_all"]
        return (c["total"] - experts) * DTYPE_BYTES[wd] + experts * DTYPE_BYTES[ed]


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

_HW_REQUIRED = ("name", "memory_gb", "memory_bandwidth_gbps", "l2_mb", "sm_count", "smem_per_sm_kb",
                "interconnect_gbps", "price_per_hour")


def _positive(where: str, key: str, value: Any, integer: bool = False) -> float:
    """Check a numeric field is present, a number, and > 0; say which file and field otherwise."""
    if value is None:
        raise InputError(f"{where}: missing field '{key}'")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float)
                                                                         and not math.isfinite(value)):
        raise InputError(f"{where}: field '{key}' must be a number, got {value!r}")
    if value <= 0:
        raise InputError(f"{where}: field '{key}' must be > 0, got {value}")
    if integer and int(value) != value:
        raise InputError(f"{where}: field '{key}' must be a whole number, got {value}")
    return value


def hardware_from_mapping(d: dict[str, Any], where: str) -> Hardware:
    """Build a Hardware from a TOML table, validating every field the step model needs."""
    for k in _HW_REQUIRED:
        if k == "name":
            if not isinstance(d.get("name"), str) or not d["name"]:
                raise InputError(f"{where}: missing field 'name'")
            continue
        _positive(where, k, d.get(k), integer=(k == "sm_count"))
    tf = d.get("tflops")
    if not isinstance(tf, dict):
        raise InputError(f"{where}: missing table [tflops] (with bf16, and optionally fp8, fp4)")
    _positive(where, "tflops.bf16", tf.get("bf16"))
    tflops = {"bf16": float(tf["bf16"])}
    for k in ("fp8", "fp4"):
        if tf.get(k) is not None:
            tflops[k] = float(_positive(where, f"tflops.{k}", tf[k]))
    return Hardware(
        name=d["name"], display=str(d.get("display", d["name"])), memory_gb=float(d["memory_gb"]),
        memory_bandwidth_gbps=float(d["memory_bandwidth_gbps"]), l2_mb=float(d["l2_mb"]),
        sm_count=int(d["sm_count"]), smem_per_sm_kb=float(d["smem_per_sm_kb"]), tflops=tflops,
        interconnect_gbps=float(d["interconnect_gbps"]), price_per_hour=float(d["price_per_hour"]),
        vendor=str(d.get("vendor", "")), source=str(d.get("source", "")), notes=str(d.get("notes", "")),
        host_link_gbps=float(_positive(where, "host_link_gbps", d["host_link_gbps"])) if "host_link_gbps" in d
        else 64.0,
    )


def _first(d: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if d.get(k) is not None:
            return d[k]
    return default


def model_from_mapping(d: dict[str, Any], where: str, name: str | None = None) -> Model:
    """Build a Model from HF config.json keys (plus tokensim's name/display/source/weight_dtype)."""
    # Multimodal wrappers nest the language model; family layouts are rewritten; unread size keys warned about.
    d = hf_config.normalise(d, where)
    layers = int(_positive(where, "num_hidden_layers", d.get("num_hidden_layers"), integer=True))
    hidden = int(_positive(where, "hidden_size", d.get("hidden_size"), integer=True))
    heads = int(_positive(where, "num_attention_heads", d.get("num_attention_heads"), integer=True))
    kv_heads = int(_positive(where, "num_key_value_heads", d.get("num_key_value_heads", heads), integer=True))
    head_dim = int(_positive(where, "head_dim", d.get("head_dim") or hidden // heads, integer=True))
    vocab = int(_positive(where, "vocab_size", d.get("vocab_size"), integer=True))
    experts = int(_first(d, "num_local_experts", "n_routed_experts", "num_experts", default=0) or 0)
    k = int(_first(d, "num_experts_per_tok", "num_experts_per_token", default=0) or 0)
    if experts:
        _positive(where, "num_experts_per_tok", k or None, integer=True)
        if k > experts:
            raise InputError(f"{where}: num_experts_per_tok ({k}) exceeds the number of experts ({experts})")
    inter_raw = d.get("intermediate_size")
    expert_inter = int(_first(d, "moe_intermediate_size", default=0) or 0)
    if experts and not expert_inter:
        expert_inter = int(_positive(where, "intermediate_size", inter_raw, integer=True))
    inter = int(inter_raw or 0) if experts else int(_positive(where, "intermediate_size", inter_raw, integer=True))
    first_dense = int(d.get("first_k_dense_replace", 0) or 0) if experts else 0
    if first_dense and not inter:
        raise InputError(f"{where}: first_k_dense_replace needs intermediate_size for the dense layers")
    kv_lora = int(d.get("kv_lora_rank") or 0)
    window = int(d.get("sliding_window") or 0)
    sliding = 0
    layer_types = d.get("layer_types")
    if window and isinstance(layer_types, list):
        sliding = sum(1 for t in layer_types if "sliding" in str(t))
    elif window and d.get("use_sliding_window", True) is not False:
        sliding = int(d.get("sliding_layers", layers if d.get("use_sliding_window") else 0) or 0)
    chunk = int(d.get("attention_chunk_size") or 0)
    if chunk:
        # Llama 4: RoPE layers attend within chunks, every nope_layer_interval-th layer (NoPE) globally;
        # no_rope_layers lists 1 for a RoPE layer when the config spells it out.
        window = chunk
        nrl = d.get("no_rope_layers")
        interval = int(d.get("nope_layer_interval") or 4)
        sliding = int(d.get("sliding_layers") or (sum(1 for v in nrl if v) if isinstance(nrl, list) and nrl
                                                 else layers - layers // interval))
    if sliding and window >= int(d.get("max_position_embeddings", 0) or 0) > 0:
        sliding = 0  # a window as long as the context is no window at all
    wd = str(d.get("weight_dtype", _torch_dtype(d)))
    ed = str(d.get("expert_dtype", ""))
    for key, val in (("weight_dtype", wd), ("expert_dtype", ed)):
        if val and val not in DTYPE_BYTES:
            raise InputError(f"{where}: field '{key}' must be one of {', '.join(WEIGHT_DTYPES)}, got {val!r}")
    nm = str(name or d.get("name") or d.get("_name_or_path") or Path(where).stem).lower()
    m = Model(
        name=nm, display=str(d.get("display", d.get("_name_or_path", nm))), layers=layers, hidden=hidden,
        heads=heads, kv_heads=kv_heads, head_dim=head_dim, intermediate=inter, vocab=vocab,
        tie_embeddings=bool(d.get("tie_word_embeddings", False)),
        qkv_bias=bool(_first(d, "qkv_bias", "attention_bias", default=False)),
        o_bias=bool(d.get("o_bias", bool(d.get("attention_bias")) and bool(layer_types))),
        qk_norm=bool(d.get("qk_norm", "qwen3" in str(d.get("model_type", "")))),
        max_context=int(d.get("max_position_embeddings", 32768) or 32768), weight_dtype=wd, expert_dtype=ed,
        experts=experts, experts_per_token=k, expert_intermediate=expert_inter,
        shared_experts=int(d.get("n_shared_experts") or 0) if experts else 0, first_dense_layers=first_dense,
        shared_expert_intermediate=int(d.get("shared_expert_intermediate_size") or 0) if experts else 0,
        expert_bias=bool(d.get("expert_bias", False)),
        kv_lora_rank=kv_lora, q_lora_rank=int(d.get("q_lora_rank") or 0),
        qk_rope_head_dim=int(d.get("qk_rope_head_dim") or 0), qk_nope_head_dim=int(d.get("qk_nope_head_dim") or 0),
        v_head_dim=int(d.get("v_head_dim") or 0), sliding_window=window if sliding else 0, sliding_layers=sliding,
        chunked=bool(chunk and sliding),
        source=str(d.get("source", "")), notes=str(d.get("notes", "")),
        published_params=float(d.get("published_params", 0) or 0),
    )
    object.__setattr__(m, "counts", count_params(m))
    return m


def _torch_dtype(d: dict[str, Any]) -> str:
    """Stored weight dtype of an HF config: fp8 (fp8-block with block scales) if it declares fp8, else bf16."""
    q = d.get("quantization_config") or {}
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8":
        return "fp8-block" if q.get("weight_block_size") else "fp8"
    if method == "mxfp4":
        return "bf16"  # only the experts are mxfp4; see expert_dtype
    return "bf16"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read file ({e.strerror or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: malformed TOML: {e}") from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{path}: cannot read file ({e.strerror or e})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object")
    return data


def _preset_dir(kind: str) -> Any:
    return resources.files("engine").joinpath(PRESET_ROOT, kind)


@cache
def _preset_tables(kind: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for entry in sorted(_preset_dir(kind).iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".toml"):
            out[entry.name[:-5]] = tomllib.loads(entry.read_text(encoding="utf-8"))
    return out


def hardware_names() -> list[str]:
    return list(_preset_tables("hardware"))


def model_names() -> list[str]:
    return list(_preset_tables("models"))


def _looks_like_path(spec: str) -> bool:
    return spec.endswith((".toml", ".json")) or "/" in spec or "\\" in spec


@cache
def load_hardware(spec: str) -> Hardware:
    """A preset name (e.g. 'h100-sxm') or the path of a TOML file."""
    tables = _preset_tables("hardware")
    if spec.lower() in tables:
        return hardware_from_mapping(tables[spec.lower()], f"preset {spec}")
    if _looks_like_path(spec):
        p = Path(spec)
        if not p.exists():
            raise InputError(f"{spec}: no such hardware file")
        return hardware_from_mapping(_read_toml(p), str(p))
    raise InputError(f"unknown hardware '{spec}'{suggest(spec, list(tables))}")


@cache
def load_model(spec: str) -> Model:
    """A preset name (e.g. 'generic-14b'), a TOML file, or a Hugging Face config.json."""
    tables = _preset_tables("models")
    if spec.lower() in tables:
        return model_from_mapping(tables[spec.lower()], f"preset {spec}", name=spec.lower())
    if _looks_like_path(spec):
        p = Path(spec)
        if not p.exists():
            raise InputError(f"{spec}: no such model file")
        data = _read_json(p) if p.suffix == ".json" else _read_toml(p)
        name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
        return model_from_mapping(data, str(p), name=data.get("name") or name)
    raise InputError(f"unknown model '{spec}'{suggest(spec, list(tables))}")
