"""MoE configs load right (engine.physics.hf_config, specs): the family layouts tokensim rewrites into its own keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.physics.specs import load_model, model_from_mapping

DATA = Path(__file__).resolve().parents[1] / "data" / "moe_configs"


def test_kimi_k2_loads_as_a_trillion_parameters_with_32b_active(capsys: pytest.CaptureFixture[str]) -> None:
    # Moonshot's model card: 1T total, 32B activated (MLA, 384 experts, 8 a token, one shared, first layer dense).
    m = load_model(str(DATA / "kimi-k2-instruct.json"))
    assert m.is_mla and m.experts == 384 and m.shared_experts == 1 and m.moe_layers == 60
    assert m.params_total == pytest.approx(1.03e12, rel=0.02)
    assert m.params_active == pytest.approx(32.6e9, rel=0.03)
    assert "looks size-bearing" not in capsys.readouterr().err  # every size key read or known harmless


_QWEN3 = {"model_type": "qwen3_moe", "num_hidden_layers": 8, "hidden_size": 256, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000, "intermediate_size": 1024,
          "moe_intermediate_size": 128, "num_experts": 16, "num_experts_per_tok": 4}


def test_qwen3_moe_dense_layers_come_from_sparse_step_and_mlp_only_layers() -> None:
    every = model_from_mapping(dict(_QWEN3, decoder_sparse_step=1, mlp_only_layers=[]), "t")
    half = model_from_mapping(dict(_QWEN3, decoder_sparse_step=2, mlp_only_layers=[]), "t")
    listed = model_from_mapping(dict(_QWEN3, decoder_sparse_step=1, mlp_only_layers=[0, 1, 2]), "t")
    assert (every.moe_layers, half.moe_layers, listed.moe_layers) == (8, 4, 5)
    assert every.qk_norm and not every.qkv_bias and every.shared_experts == 0  # Qwen3: q/k norm, no biases


def test_mxfp4_quantisation_prices_only_the_experts_at_mxfp4() -> None:
    q = {"quantization_config": {"quant_method": "mxfp4"}}
    m = model_from_mapping(dict(_QWEN3, model_type="gpt_oss", **q), "t")
    assert m.weight_dtype == "bf16" and m.expert_dtype == "mxfp4"
    plain = model_from_mapping(dict(_QWEN3, model_type="gpt_oss"), "t")
    assert m.weight_bytes() < plain.weight_bytes()


def test_glm_spells_the_qk_norm_its_own_way_and_mtp_layers_are_not_a_warning(
        capsys: pytest.CaptureFixture[str]) -> None:
    m = model_from_mapping(dict(_QWEN3, model_type="glm4_moe", use_qk_norm=True, num_nextn_predict_layers=1), "glm")
    assert m.qk_norm
    assert "num_nextn_predict_layers" not in capsys.readouterr().err


def test_minimax_layouts_load_or_say_why_not(capsys: pytest.CaptureFixture[str]) -> None:
    from engine.errors import InputError

    # MiniMax-M2 (every layer softmax attention, experts as wide as intermediate_size, MTP modules): loads quietly
    cfg = {k: v for k, v in _QWEN3.items() if k not in ("moe_intermediate_size", "num_experts")}
    m2 = model_from_mapping(dict(cfg, model_type="minimax_m2", num_local_experts=16, num_mtp_modules=3,
                                 use_qk_norm=True), "m2")
    assert m2.experts == 16 and m2.expert_intermediate == 1024 and m2.qk_norm
    assert "num_mtp_modules" not in capsys.readouterr().err
    # MiniMax-Text-01's lightning-attention layers keep no growing KV cache: refused in one line
    with pytest.raises(InputError, match="7 of its 8 layers use linear attention"):
        model_from_mapping(dict(_QWEN3, model_type="minimax_text_01", attn_type_list=[0] * 7 + [1]), "t01")


def test_deepseek_v2_lite_shape_with_no_q_lora_loads_at_its_published_size() -> None:
    # DeepSeek-V2-Lite's layout (MLA without a query low-rank: q_lora_rank null; 64 experts, 6 a token, 2 shared,
    # first layer dense); its model card gives 15.7B parameters, 2.4B activated (the embedding lookup aside).
    d = {"model_type": "deepseek_v2", "num_hidden_layers": 27, "hidden_size": 2048, "num_attention_heads": 16,
         "num_key_value_heads": 16, "vocab_size": 102400, "intermediate_size": 10944, "moe_intermediate_size": 1408,
         "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
         "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
         "v_head_dim": 128, "n_group": 1, "topk_group": 1}
    m = model_from_mapping(d, "v2-lite")
    assert m.is_mla and m.q_lora_rank == 0 and m.moe_layers == 26
    assert m.params_total == pytest.approx(15.7e9, rel=0.01)
    assert m.params_active - m.counts["embed"] == pytest.approx(2.4e9, rel=0.05)
