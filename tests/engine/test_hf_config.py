"""Every size-bearing key of a Hugging Face config: Qwen2-MoE's shared expert, Llama 4's, unknown keys warned."""

from __future__ import annotations

import numpy as np
import pytest

from engine.physics import hf_config
from engine.physics.specs import load_hardware, load_model, model_from_mapping
from engine.physics.step import StepModel, StepOptions

# Qwen/Qwen2-57B-A14B's config.json (as TensorRT-LLM's tests/unittest/_torch/modeling/test_modeling_qwen_moe.py
# copies it; the figures the model card's name promises: 57B total, 14B active).
QWEN2_57B = {
    "architectures": ["Qwen2MoeForCausalLM"], "decoder_sparse_step": 1, "hidden_size": 3584,
    "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28, "model_type": "qwen2_moe",
    "moe_intermediate_size": 2560, "norm_topk_prob": False, "num_attention_heads": 28, "num_experts": 64,
    "num_experts_per_tok": 8, "num_hidden_layers": 28, "num_key_value_heads": 4,
    "shared_expert_intermediate_size": 20480, "sliding_window": 131072, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 151936,
}


def test_qwen2_moe_counts_its_wide_shared_expert_and_biases(capsys: pytest.CaptureFixture[str]) -> None:
    m = model_from_mapping(dict(QWEN2_57B), "qwen2-57b")
    assert m.shared_experts == 1 and m.shared_width == 20480 and m.qkv_bias
    assert m.counts["total"] / 1e9 == pytest.approx(57.4, abs=0.3)
    assert m.counts["active"] / 1e9 == pytest.approx(14.2, abs=0.3)
    assert capsys.readouterr().err == ""  # every size key is read or known harmless
    # A decode step reads the shared expert's 3 x 3584 x 20480 weights every layer: at batch 1 on an H100 the
    # step is several times the one the routed experts alone would give (what the held-out rows measured).
    sm = StepModel(load_hardware("h100-sxm"), m, StepOptions(tp=2))
    alone = model_from_mapping({k: v for k, v in QWEN2_57B.items() if k != "shared_expert_intermediate_size"}, "x")
    assert sm.decode(1, 500).bytes["weights"] > StepModel(load_hardware("h100-sxm"), alone, StepOptions(tp=2)).decode(
        1, 500).bytes["weights"] + 28 * 3 * 3584 * 20480 * 2 / 2 * 0.99


def test_llama4_runs_an_always_on_shared_expert_and_interleaves_dense_layers() -> None:
    hf = {"model_type": "llama4_text", "num_hidden_layers": 48, "hidden_size": 5120, "num_attention_heads": 40,
          "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
          "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": 202048,
          "attention_chunk_size": 8192, "max_position_embeddings": 1048576}
    m = model_from_mapping(hf, "maverick")
    preset = load_model("llama-4-maverick")
    assert (m.shared_experts, m.moe_layers, m.intermediate, m.expert_intermediate) == (1, 24, 16384, 8192)
    assert m.counts["total"] == preset.counts["total"] and m.counts["active"] == preset.counts["active"]
    scout = model_from_mapping({**hf, "num_local_experts": 16, "interleave_moe_layer_step": 1}, "scout")
    assert scout.counts["total"] == load_model("llama-4-scout").counts["total"]


def test_an_unread_size_key_is_warned_about_once_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    d = {**QWEN2_57B, "num_mtp_layers": 1, "vision_patch_size": 14, "router_expert_count_bias": 3}
    assert hf_config.size_keys_unread(d) == ["num_mtp_layers", "router_expert_count_bias", "vision_patch_size"]
    model_from_mapping(dict(d), "odd.json")
    model_from_mapping(dict(d), "odd.json")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("warning: odd.json: config key '") for line in err)
    assert "num_mtp_layers" in err[0] and "vision_patch_size" in err[2]


def test_every_shipped_preset_reads_without_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    from engine.physics.specs import model_names

    for n in model_names():
        assert np.isfinite(load_model(n).counts["total"])
    assert capsys.readouterr().err == ""
