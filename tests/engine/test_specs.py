"""Presets, user files and Hugging Face configs: parsing, derived counts, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import InputError
from engine.physics.specs import count_params, hardware_names, load_hardware, load_model, model_names

# Parameter counts published in shared/data/models.json (params_total_computed, checked against model cards).
PUBLISHED = {
    "qwen2.5-7b": 7615616512, "qwen2.5-14b": 14770033664, "qwen2.5-32b": 32763876352,
    "qwen2.5-72b": 72706203648, "qwen3-8b": 8190735360, "qwen3-32b": 32762123264,
    "qwen3-235b-a22b": 235093634560, "llama-3.1-8b": 8030261248, "llama-3.1-70b": 70553706496,
    "llama-3.1-405b": 405853388800, "mixtral-8x7b": 46702792704, "deepseek-v3": 671026419200,
    "gpt-oss-120b": 116829156672, "generic-14b": 14_000_000_000,
}
ACTIVE = {"qwen3-235b-a22b": 22190763520, "mixtral-8x7b": 12879925248, "deepseek-v3": 37552297472,
          "gpt-oss-120b": 5711982912}

REQUIRED_HW = {"a100-40g", "a100-80g", "h100-sxm", "h100-pcie", "h200", "h20", "b200", "gb200", "rubin", "rtx4090",
               "rtx5090", "l40s", "mi300x"}


def test_all_required_presets_exist() -> None:
    assert REQUIRED_HW <= set(hardware_names())
    assert set(PUBLISHED) <= set(model_names())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_param_counts_within_1_percent(name: str) -> None:
    m = load_model(name)
    assert m.params_total == pytest.approx(PUBLISHED[name], rel=0.01)
    if name in ACTIVE:
        assert m.params_active == pytest.approx(ACTIVE[name], rel=0.01)
    else:
        assert m.params_active == m.params_total


def test_every_preset_has_a_source() -> None:
    for n in hardware_names():
        assert load_hardware(n).source
    for n in model_names():
        assert load_model(n).source


def test_hardware_toml_file(tmp_path: Path) -> None:
    f = tmp_path / "gpu.toml"
    f.write_text('name = "mine"\nmemory_gb = 24\nmemory_bandwidth_gbps = 1000\nl2_mb = 72\nsm_count = 128\n'
                 'smem_per_sm_kb = 128\ninterconnect_gbps = 64\nprice_per_hour = 0.5\n[tflops]\nbf16 = 165\nfp8 = 330\n')
    h = load_hardware(str(f))
    assert h.name == "mine" and h.ridge("bf16") == pytest.approx(165.0) and h.ridge("fp8") == pytest.approx(330.0)
    assert h.peak_flops("fp4") == pytest.approx(165e12)  # falls back to bf16 where the part lacks fp4


def test_hf_config_json_dense_gqa(tmp_path: Path) -> None:
    cfg = {"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
           "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False,
           "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}
    d = tmp_path / "Qwen2.5-7B-Instruct"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**cfg, "qkv_bias": True}))
    m = load_model(str(d / "config.json"))
    assert m.name == "qwen2.5-7b-instruct"
    assert m.head_dim == 128 and m.params_total == PUBLISHED["qwen2.5-7b"]


def test_hf_config_json_moe_mla(tmp_path: Path) -> None:
    cfg = {"num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
           "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
           "v_head_dim": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
           "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "vocab_size": 129280,
           "quantization_config": {"quant_method": "fp8"}}
    f = tmp_path / "ds.json"
    f.write_text(json.dumps(cfg))
    m = load_model(str(f))
    assert m.is_moe and m.is_mla and m.weight_dtype == "fp8"
    # DeepSeek's real config declares 128x128 weight blocks: a block-scaled FP8 checkpoint.
    blocks = tmp_path / "ds-blocks.json"
    blocks.write_text(json.dumps({**cfg, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}))
    assert load_model(str(blocks)).weight_dtype == "fp8-block"
    assert m.params_total == pytest.approx(PUBLISHED["deepseek-v3"], rel=1e-6)  # less 58 x 256 router biases
    assert m.kv_bytes_per_token() == 70272


def test_hf_config_mixtral_num_local_experts(tmp_path: Path) -> None:
    cfg = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
           "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
           "sliding_window": None}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    m = load_model(str(f))
    assert m.experts == 8 and m.expert_intermediate == 14336 and m.sliding_layers == 0
    assert m.params_total == PUBLISHED["mixtral-8x7b"]


def test_hf_config_llama4_chunked_attention(tmp_path: Path) -> None:
    """attention_chunk_size makes the RoPE layers chunked: every 4th layer (nope_layer_interval) is global, or
    no_rope_layers says which when the config lists them."""
    cfg = {"num_hidden_layers": 8, "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2,
           "head_dim": 64, "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 65536,
           "attention_chunk_size": 1024}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    m = load_model(str(f))
    assert m.chunked and m.sliding_window == 1024 and m.sliding_layers == 6
    listed = tmp_path / "listed.json"  # load_model caches by path: one file per variant
    listed.write_text(json.dumps({**cfg, "no_rope_layers": [1, 1, 1, 0, 1, 0, 1, 0]}))
    assert load_model(str(listed)).sliding_layers == 5
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps({**cfg, "attention_chunk_size": 65536}))
    assert load_model(str(whole)).sliding_layers == 0  # a chunk as long as the context is no chunking at all


def test_count_params_components_add_up() -> None:
    m = load_model("qwen3-235b-a22b")
    c = count_params(m)
    assert c["active"] == c["total"] - c["expert_all"] + m.moe_layers * m.experts_per_token * c["expert"]


# ---- bad input -------------------------------------------------------------------------------

def test_unknown_preset_suggests_close_names() -> None:
    with pytest.raises(InputError, match=r"unknown hardware 'h100sxm' \(did you mean h100-sxm"):
        load_hardware("h100sxm")
    with pytest.raises(InputError, match=r"unknown model 'qwen2.5-14' \(did you mean qwen2.5-14b"):
        load_model("qwen2.5-14")


def test_missing_file() -> None:
    with pytest.raises(InputError, match="no such model file"):
        load_model("nowhere/config.json")


def test_malformed_toml_names_path_and_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text('name = "x"\nmemory_gb = = 3\n')
    with pytest.raises(InputError, match=r"bad\.toml: malformed TOML: .*line 2"):
        load_hardware(str(f))


def test_malformed_json_names_path_and_line(tmp_path: Path) -> None:
    f = tmp_path / "config.json"
    f.write_text('{\n  "num_hidden_layers": 2,\n  oops\n}')
    with pytest.raises(InputError, match=r"config\.json: malformed JSON at line 3"):
        load_model(str(f))


@pytest.mark.parametrize(("text", "msg"), [
    ("", "missing field 'name'"),
    ('name = "x"\nmemory_gb = 0\n', "'memory_gb' must be a finite number > 0"),
    ('name = "x"\nmemory_gb = -80\n', "'memory_gb' must be a finite number > 0"),
    ('name = "x"\nmemory_gb = "lots"\n', "'memory_gb' must be a finite number > 0.*got 'lots'"),
    ('name = "x"\nmemory_gb = 80\nmemory_bandwidth_gbps = 1\nl2_mb = 1\nsm_count = 1\nsmem_per_sm_kb = 1\n'
     'interconnect_gbps = 1\nprice_per_hour = 1\n', "missing table \\[tflops\\]"),
])
def test_bad_hardware_fields(tmp_path: Path, text: str, msg: str) -> None:
    f = tmp_path / "hw.toml"
    f.write_text(text)
    with pytest.raises(InputError, match=msg):
        load_hardware(str(f))


@pytest.mark.parametrize(("patch", "msg"), [
    ({"num_hidden_layers": 0}, "'num_hidden_layers' must be a whole number between 1"),
    ({"hidden_size": None}, "missing field 'hidden_size'"),
    ({"num_attention_heads": -4}, "'num_attention_heads' must be a whole number between 1"),
    ({"num_experts": 8, "num_experts_per_tok": 9}, "exceeds the number of experts"),
    ({"weight_dtype": "fp7"}, "'weight_dtype': unknown weight dtype 'fp7'"),
])
def test_bad_model_fields(tmp_path: Path, patch: dict[str, object], msg: str) -> None:
    cfg = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
           "vocab_size": 100}
    cfg.update(patch)
    f = tmp_path / "m.json"
    f.write_text(json.dumps(cfg))
    with pytest.raises(InputError, match=msg):
        load_model(str(f))
