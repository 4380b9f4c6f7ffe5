"""Hugging Face config.json: every size-bearing key read, the family-specific ones written in the step model's words.

The step model prices layers by kind (dense or MoE), so a few families' layouts are rewritten into the keys
engine.physics.specs reads:

- Qwen2-MoE (model_type qwen2_moe): one shared expert per MoE layer, `shared_expert_intermediate_size` wide
  (20,480 in Qwen2-57B-A14B, eight times a routed expert's 2,560), gated by a one-unit `shared_expert_gate`;
  q/k/v carry biases (Qwen2 attention); `decoder_sparse_step` and `mlp_only_layers` name dense layers.
- Qwen3-MoE (qwen3_moe): as Qwen2-MoE's layout keys, without the shared expert or the q/k/v biases.
- gpt-oss: `quantization_config.quant_method` "mxfp4" quantises the routed experts only (its
  modules_to_not_convert keep attention, router, embedding and head 16-bit): the experts' dtype is mxfp4.
- GLM-4.5 (glm4_moe) spells the q/k norm `use_qk_norm`.
- Llama 4 (llama4_text): every MoE layer runs one always-on shared expert as wide as a routed one
  (`intermediate_size`); `interleave_moe_layer_step` = n makes every n-th layer MoE, the others dense at
  `intermediate_size_mlp`.

A key that looks size-bearing (`*_size`, `num_*`, `*expert*`, a whole number) that tokensim neither reads nor
knows to be harmless gets one warning on stderr naming it, so a new architecture is never priced silently
without part of its weights.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from engine.physics import quant_config
from engine.validation import printable_line

# Keys engine.physics.specs reads (with this module's rewrites), and tokensim's own preset keys.
READ = frozenset({
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
    "intermediate_size", "moe_intermediate_size", "num_local_experts", "n_routed_experts", "num_experts",
    "num_experts_per_tok", "num_experts_per_token", "n_shared_experts", "shared_expert_intermediate_size",
    "first_k_dense_replace", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
    "sliding_window", "attention_chunk_size", "nope_layer_interval", "max_position_embeddings",
    "intermediate_size_mlp", "interleave_moe_layer_step", "decoder_sparse_step", "sliding_layers",
    "published_params", "expert_bias", "expert_dtype", "head_dtype",
})
# Size-looking keys that do not change the weights or the KV cache.
HARMLESS = frozenset({
    "max_window_layers",  # which layers would use a sliding window when use_sliding_window is on
    "ep_size",  # DeepSeek: an expert-parallel degree, not an architecture size
    "num_labels", "pad_token_id", "bos_token_id", "eos_token_id", "moe_layer_freq", "n_group", "topk_group",
    "num_experts_per_tok_eval", "router_aux_loss_coef", "output_router_logits", "norm_topk_prob",
    "max_sequence_length", "max_length", "original_max_position_embeddings",
    # DeepSeek-V3, GLM-4.5, MiniMax-M2: multi-token-prediction layers, loaded only when speculative decoding runs them
    "num_nextn_predict_layers", "num_mtp_modules",
})
_SIZE_KEY = re.compile(r"(_size$|^num_|expert)")
_WARNED: set[str] = set()


def size_keys_unread(d: dict[str, Any]) -> list[str]:
    """The whole-number keys of a config that look size-bearing but are neither read nor known harmless."""
    return sorted(k for k, v in d.items() if isinstance(v, int) and not isinstance(v, bool)
                  and _SIZE_KEY.search(k) and k not in READ and k not in HARMLESS)


def _note(where: str, key: str, text: str) -> None:
    """One note on stderr per file and key."""
    tag = f"{where}:{key}"
    if tag not in _WARNED:
        _WARNED.add(tag)
        print(f"note: {printable_line(where)}: {text}", file=sys.stderr)


def _quantised(d: dict[str, Any], where: str, layers: int) -> None:
    """A quantization_config read into the model's dtype keys (engine.physics.quant_config), which a model file's
    own keys override; one it cannot price gets a note and the weights stay at 16 bits (issue 30, class 7)."""
    q = d.get("quantization_config")
    if not isinstance(q, dict):
        return
    method = str(q.get("quant_method", "")).lower()
    if method == "mxfp4":
        d.setdefault("expert_dtype", "mxfp4")  # gpt-oss: MXFP4 routed experts, everything else 16-bit
        return
    try:
        keys = quant_config.read(q, layers)
    except quant_config.Unread as e:
        why = f" ({printable_line(str(e))})" if str(e) else ""
        _note(where, "quantization_config", f"quantization_config quant_method {printable_line(method)[:30]!r}"
              f" is not read{why}: the weights are priced at 16 bits; give --dtype fp8 or int4 to price them"
              " quantized")
        return
    for k, v in keys.items():
        d.setdefault(k, v)


def _note_unread(d: dict[str, Any], where: str) -> None:
    """Config keys that change what a deployment costs but that tokensim does not read say so (issue 30, class 7):
    a non-16-bit torch_dtype, a rope_scaling. The weights are priced at --dtype or the checkpoint's quantization
    (bf16 by default); the context is max_position_embeddings."""
    dt = d.get("torch_dtype", d.get("dtype"))
    if isinstance(dt, str) and dt.lower() not in ("bfloat16", "float16", "bf16", "fp16", "auto"):
        _note(where, "torch_dtype", f"torch_dtype {printable_line(dt)[:20]!r} is not read: the weights are priced at"
              " --dtype (bf16 unless given)")
    if d.get("rope_scaling"):
        _note(where, "rope_scaling", "rope_scaling is not read: the longest context is max_position_embeddings"
              f" ({printable_line(str(d.get('max_position_embeddings')))[:20]})")


def _whole(v: Any, default: int) -> int:
    """v if it is a whole number, else default: a key of the wrong type is reported later, by the
    validation of the key itself (engine.validation), not here as a traceback."""
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def normalise(d: dict[str, Any], where: str) -> dict[str, Any]:
    """The config with its family's layout rewritten into the keys engine.physics.specs reads; warns (once per key,
    on stderr) about size-looking keys nobody reads."""
    if "text_config" in d and "num_hidden_layers" not in d:
        d = {**d["text_config"], **{k: v for k, v in d.items() if k != "text_config"}}
    d = dict(d)
    kind = str(d.get("model_type", ""))
    layers = _whole(d.get("num_hidden_layers"), 0)
    if kind.startswith("qwen2"):
        d.setdefault("qkv_bias", True)  # Qwen2 attention: q, k and v projections carry biases
    if d.get("shared_expert_intermediate_size"):
        d.setdefault("n_shared_experts", 1)
    step = _whole(d.get("decoder_sparse_step"), 1) or 1
    dense_only = d.get("mlp_only_layers") if isinstance(d.get("mlp_only_layers"), list) else []
    if kind.startswith(("qwen2_moe", "qwen3_moe")) and layers and (step > 1 or dense_only):
        moe = sum(1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0)
        d.setdefault("first_k_dense_replace", layers - moe)  # the step model prices layers by kind, not order
    _quantised(d, where, layers)
    if "use_qk_norm" in d:
        d.setdefault("qk_norm", d["use_qk_norm"])
    if kind.startswith("llama4"):
        d.setdefault("n_shared_experts", 1)  # Llama4TextMoe: a shared expert beside the routed ones, always on
        every = _whole(d.get("interleave_moe_layer_step"), 1) or 1
        if d.get("intermediate_size") and "moe_intermediate_size" not in d:
            d["moe_intermediate_size"] = d["intermediate_size"]
            if d.get("intermediate_size_mlp"):
                d["intermediate_size"] = d["intermediate_size_mlp"]  # the dense layers' MLP
        if layers and every > 1:
            d.setdefault("first_k_dense_replace", layers - layers // every)
    _note_unread(d, where)
    for k in size_keys_unread(d):
        tag = f"{where}:{k}"
        if tag not in _WARNED:
            _WARNED.add(tag)
            print(f"warning: {where}: config key '{k}' = {d[k]} looks size-bearing but tokensim does not read it; "
                  "the weights may be priced without it", file=sys.stderr)
    return d
