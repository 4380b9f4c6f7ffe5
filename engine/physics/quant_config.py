"""A Hugging Face config's `quantization_config`, read into the step model's words (issue 30, class 7).

A quantised checkpoint is priced at its stored size: bytes per weight from the method, its bit width and its
scales, and the layers it leaves in 16 bits. What it returns are model keys (engine.physics.specs reads them):

- `weight_dtype`: a name in specs.DTYPE_BYTES whose bytes include the scales. Group quantisation stores one 16-bit
  scale per group, so int4 with group_size 128 is 4 + 16/128 = 4.125 bits a weight (GPTQ and AWQ store fp16
  scales; symmetric kernels never read the packed zero points, as specs says for int4-g128).
- `head_dtype` "bf16": every method here leaves the embedding and the LM head unquantised (GPTQ, AWQ and
  compressed-tensors quantise the decoder's Linear layers; FP8 checkpoints such as DeepSeek-V3's keep both in BF16).
- `keep16`: the parts of the decoder named in `modules_to_not_convert` / `ignore` / `exclude_modules` /
  `llm_int8_skip_modules`, each with the share of its layers left 16-bit ((part, share) pairs).
- `expert_dtype` "bf16" when the routed experts are excluded.

How the matmuls run follows from the dtype's name (specs._COMPUTE_DTYPE): weight-only int4/int8 and NF4 dequantise
to 16 bits and use the 16-bit MMA; FP8 W8A8 runs at the FP8 peak; FP8 weights with 16-bit activations (W8A16,
vLLM's Marlin path) at the 16-bit peak. A method not listed, or bits that are not a number, give one note and
the checkpoint is priced at 16 bits as before.
"""

from __future__ import annotations

import math
import re
from typing import Any

# bitsandbytes NF4/FP4 stores one fp32 absmax per 64-weight block: 4 + 32/64 = 4.5 bits. With double quantisation
# the absmax is itself 8-bit with one fp32 per 256 blocks: 4 + 8/64 + 32/(64*256) = 4.127 bits (Dettmers et al.,
# "QLoRA", 2023, sec. 3 "Double Quantization").
BNB4 = "nf4"
BNB4_DQ = "nf4-dq"
# Group sizes (and bit widths) whose names are in specs.DTYPE_BYTES; group_size -1 is per output channel (one scale
# per row: a few bytes in millions, left out), named as the bare width.
GROUPS = (32, 64, 128, 256)
INT_BITS = (2, 3, 4, 8)


def int_name(bits: int, group: int) -> str:
    """The dtype name of a weight-only int checkpoint: int{bits}-g{group}, or int{bits} per channel."""
    return f"int{bits}" if group <= 0 else f"int{bits}-g{group}"


def int_dtypes() -> dict[str, float]:
    """Bytes per weight of every int{bits}-g{group} name: the packed weight plus one 16-bit scale per group."""
    return {int_name(b, g): (b + 16 / g) / 8 for b in INT_BITS for g in GROUPS}


class Unread(ValueError):
    """A quantization_config this module cannot price (the message says why); the caller notes it."""


def _number(q: dict[str, Any], *keys: str) -> int | None:
    """The first of keys present as a whole number; Unread if it is present but not one."""
    for k in keys:
        if k in q and q[k] is not None:
            v = q[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) \
                    or isinstance(v, float) and not (math.isfinite(v) and v.is_integer()):
                raise Unread(f"its {k} {str(v)[:20]!r} are not a number")
            if abs(v) > 1 << 20:  # no bit width or group is that large (and int() of 1e300 would be 301 digits)
                raise Unread(f"its {k} {str(v)[:20]} is out of range")
            return int(v)
    return None


def _int_weights(bits: int | None, group: int | None) -> str:
    """A weight-only int checkpoint's dtype name, or Unread for a width or group tokensim has no name for."""
    if bits not in INT_BITS:
        raise Unread(f"its bits {bits!r} are not one of {', '.join(map(str, INT_BITS))}")
    g = 128 if group is None else group
    if g not in GROUPS and g != -1:  # -1: one scale per output channel
        raise Unread(f"its group_size {g} is not one of {', '.join(map(str, GROUPS))} or -1")
    return int_name(bits, g)


def _compressed(q: dict[str, Any]) -> str:
    """compressed-tensors (llm-compressor): the first config group's weights and input activations."""
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups or not isinstance(next(iter(groups.values())), dict):
        raise Unread("its config_groups are missing")
    g = next(iter(groups.values()))
    w, a = g.get("weights"), g.get("input_activations")
    if not isinstance(w, dict):
        raise Unread("its weights scheme is missing")
    bits, kind = _number(w, "num_bits"), str(w.get("type", "int")).lower()
    acts = isinstance(a, dict) and _number(a, "num_bits") is not None
    if kind == "float" and bits == 8:
        block = str(w.get("strategy", "")).lower() == "block"
        return ("fp8-block" if block else "fp8") if acts else "fp8-w8a16"
    if kind == "float" and bits == 4:
        return "nvfp4"  # NVFP4: FP4 values, one FP8 scale per 16
    if kind == "int" and bits == 8 and acts:
        return "int8-w8a8"
    strategy = str(w.get("strategy", "group")).lower()
    return _int_weights(bits, _number(w, "group_size") if strategy == "group" else -1)


def _bitsandbytes(q: dict[str, Any]) -> str:
    """bitsandbytes: NF4/FP4 in 64-weight blocks (double-quantised or not), or LLM.int8()."""
    if q.get("load_in_4bit") is True or q.get("_load_in_4bit") is True:
        return BNB4_DQ if q.get("bnb_4bit_use_double_quant") is True else BNB4
    if q.get("load_in_8bit") is True or q.get("_load_in_8bit") is True:
        return "int8"
    raise Unread("it loads neither 4-bit nor 8-bit")


def _modelopt(q: dict[str, Any]) -> str:
    """NVIDIA ModelOpt: quant_algo FP8 (W8A8) or NVFP4 (its own file names the same keys under `quantization`)."""
    algo = str(q.get("quant_algo", "")).upper()
    if algo in ("FP8", "NVFP4"):
        return algo.lower()
    raise Unread(f"its quant_algo {algo[:20]!r} is not FP8 or NVFP4")


def weight_dtype(q: dict[str, Any]) -> str:
    """The stored dtype of the quantised layers, or Unread."""
    method = str(q.get("quant_method", "")).lower()
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8-block" if q.get("weight_block_size") else "fp8"  # W8A8: FP8 activations, per token or block
    if method in ("gptq", "awq", "gptq_marlin", "awq_marlin"):
        return _int_weights(_number(q, "bits", "w_bit"), _number(q, "group_size", "q_group_size"))
    if method == "compressed-tensors":
        return _compressed(q)
    if method == "bitsandbytes":
        return _bitsandbytes(q)
    if method == "modelopt":
        return _modelopt(q)
    raise Unread("")


# A module name's part of the decoder: the last name that says which. "re:" patterns are matched the same way.
_PARTS = (
    ("head", re.compile(r"(^|[.:*])(lm_head|embed_tokens|wte|embed_in|embed_out)\b")),
    ("shared", re.compile(r"shared_expert")),
    ("experts", re.compile(r"experts")),
    ("router", re.compile(r"(^|[.:*])(gate|router)\$?$")),
    ("attn", re.compile(r"(self_attn|attention|attn|[qkvo]_proj|qkv_proj)")),
    ("dense_mlp", re.compile(r"(^|[.:*])(mlp|gate_proj|up_proj|down_proj|gate_up_proj)\$?$")),
)
PARTS = ("attn", "router", "shared", "dense_mlp")
_LAYER = re.compile(r"layers\.(\d+)\.")


def _excluded(q: dict[str, Any]) -> list[str]:
    """The module names a method leaves unquantised, whatever its key spells them."""
    out: list[str] = []
    for key in ("modules_to_not_convert", "ignore", "exclude_modules", "llm_int8_skip_modules"):
        v = q.get(key)
        if isinstance(v, list):
            out += [s for s in v if isinstance(s, str)]
    return out


_NOT_TEXT = re.compile(r"(vision|visual|vit\b|mm_projector|multi_modal|audio|speech)", re.IGNORECASE)


def keep16(q: dict[str, Any], layers: int) -> tuple[tuple[str, float], ...]:
    """(part, share of its layers) of the decoder left 16-bit; a name with a layer index counts for one layer.
    Names that match no part of a text decoder (a vision tower, a projector) cost nothing here and are skipped."""
    shares: dict[str, float] = {}
    for name in _excluded(q):
        if _NOT_TEXT.search(name):
            continue
        part = next((p for p, rx in _PARTS if rx.search(name)), None)
        if part is None or part == "head":
            continue
        one = _LAYER.search(name)
        share = 1.0 / max(1, layers) if one and layers else 1.0
        shares[part] = min(1.0, shares.get(part, 0.0) + share)
    return tuple(sorted(shares.items()))


def read(q: dict[str, Any], layers: int) -> dict[str, Any]:
    """The model keys a quantization_config sets (see the module docstring), or Unread."""
    wd = weight_dtype(q)
    parts = dict(keep16(q, layers))
    out: dict[str, Any] = {"weight_dtype": wd, "head_dtype": "bf16"}
    if parts.pop("experts", 0.0) >= 1.0:
        out["expert_dtype"] = "bf16"
    if parts:
        out["keep16"] = tuple(parts.items())
    return out
