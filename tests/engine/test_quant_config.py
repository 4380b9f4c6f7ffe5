"""Quantised HF configs are priced at their stored size (engine.physics.quant_config; issue 30, class 7).

The configs are hand-written in the shape of real checkpoints' config.json (a Llama-3.1-8B-sized decoder with the
quantization_config each tool writes); the expected bytes are worked out from the counts by hand below.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.physics.batch import Batch
from engine.physics.specs import load_hardware, model_from_mapping
from engine.physics.step import StepModel, StepOptions
from tests.fuzz.harness import call

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
         "max_position_embeddings": 131072, "torch_dtype": "float16"}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm",
       "modules_to_not_convert": None}
FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}
CT_W8A8 = {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
           "config_groups": {"group_0": {"targets": ["Linear"],
                                         "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                                         "input_activations": {"num_bits": 8, "type": "float", "dynamic": True}}}}
CT_W4A16 = {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None,
                                          "weights": {"num_bits": 4, "type": "int", "strategy": "group",
                                                      "group_size": 32}}}}
BNB = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
       "bnb_4bit_use_double_quant": False, "llm_int8_skip_modules": None}


def _model(q: dict | None) -> object:
    return model_from_mapping({**LLAMA, **({"quantization_config": q} if q else {})}, "t")


def _split(m: object) -> tuple[float, float]:
    """(decoder linear + norm parameters, embedding + LM head parameters) of the model."""
    c = m.counts  # type: ignore[attr-defined]
    head = c["embed"] + c["lm_head_separate"]
    return c["total"] - head, head


@pytest.mark.parametrize(("q", "dtype", "bits"), [
    (GPTQ, "int4-g128", 4 + 16 / 128),  # one fp16 scale per 128 weights: 2 bytes per 128
    (AWQ, "int4-g128", 4 + 16 / 128),
    ({**GPTQ, "bits": 8, "group_size": -1}, "int8", 8.0),  # per-channel scales: a few bytes a row
    (CT_W4A16, "int4-g32", 4 + 16 / 32),
    (FP8, "fp8", 8.0),
    ({**FP8, "weight_block_size": [128, 128]}, "fp8-block", 8.0),
    (CT_W8A8, "fp8", 8.0),
    (BNB, "nf4", 4 + 32 / 64),  # one fp32 absmax per 64 weights
    ({**BNB, "bnb_4bit_use_double_quant": True}, "nf4-dq", 4 + 8 / 64 + 32 / (64 * 256)),
])
def test_weights_are_priced_at_the_quantised_size_with_a_16_bit_head(q: dict, dtype: str, bits: float) -> None:
    m = _model(q)
    body, head = _split(m)
    assert m.weight_dtype == dtype and m.head_dtype == "bf16"
    assert m.weight_bytes() == pytest.approx(body * bits / 8 + head * 2, rel=1e-12)
    assert m.weight_bytes() < 0.6 * _model(None).weight_bytes()


def test_modules_to_not_convert_stay_16_bit() -> None:
    plain, kept = _model(AWQ), _model({**AWQ, "modules_to_not_convert": ["self_attn"]})
    one = _model({**AWQ, "modules_to_not_convert": ["model.layers.0.self_attn"]})
    attn = 32 * plain.counts["attn_per_layer"]
    per_byte = 2 - (4 + 16 / 128) / 8
    assert kept.keep16 == (("attn", 1.0),)
    assert kept.weight_bytes() - plain.weight_bytes() == pytest.approx(attn * per_byte, rel=1e-9)
    assert one.weight_bytes() - plain.weight_bytes() == pytest.approx(attn / 32 * per_byte, rel=1e-9)
    vision = _model({**AWQ, "modules_to_not_convert": ["vision_tower.blocks.0.attn", "lm_head"]})
    assert vision.weight_bytes() == plain.weight_bytes()  # not the text decoder's: costs nothing here


def test_the_step_reads_the_quantised_weights_and_computes_at_the_right_rate() -> None:
    hw = load_hardware("h100-sxm")
    ideal = StepOptions(ideal=True)
    bf16, int4, fp8 = (StepModel(hw, _model(q), ideal) for q in (None, GPTQ, FP8))
    # One decode token: memory-bound, the time is the weights read, so it falls with their bytes.
    d16, d4 = bf16.decode(1, 0), int4.decode(1, 0)
    assert d4.time_s / d16.time_s == pytest.approx(d4.bytes_total / d16.bytes_total, rel=1e-3)
    assert d4.time_s < 0.4 * d16.time_s
    # A long prefill: compute-bound. W4A16 dequantises to the 16-bit MMA (the same time as bf16); FP8 W8A8 runs
    # at the FP8 peak, twice the BF16 one on an H100.
    p16, p4, p8 = (s.cost(Batch.of_rows(s.model, [8192], [0])) for s in (bf16, int4, fp8))
    assert p4.t_compute_s == pytest.approx(p16.t_compute_s, rel=1e-9)
    assert p8.t_compute_s < 0.75 * p16.t_compute_s
    # --dtype overrides the checkpoint's layout: bf16 everywhere again.
    assert StepModel(hw, _model(GPTQ), StepOptions(weight_dtype="bf16")).weight_bytes_per_gpu \
        == pytest.approx(_model(None).weight_bytes(), rel=1e-12)


@pytest.mark.parametrize(("q", "words"), [
    ({"quant_method": "hqq", "nbits": 4}, "quant_method 'hqq' is not read"),
    ({**GPTQ, "bits": "four"}, "its bits 'four' are not a number"),
    ({**GPTQ, "bits": 5}, "its bits 5 are not one of"),
    ({**GPTQ, "group_size": 100}, "its group_size 100 is not one of"),
    ({**GPTQ, "group_size": 1e300}, "its group_size 1e+300 is out of range"),  # was read as per-channel int4
    ({**GPTQ, "bits": 10 ** 30}, "its bits 10000000000000000000 is out of range"),
    ({"quant_method": "bitsandbytes"}, "it loads neither 4-bit nor 8-bit"),
])
def test_a_quantisation_it_cannot_price_says_so_and_stays_16_bit(tmp_path: Path, q: dict, words: str) -> None:
    f, plain = tmp_path / "config.json", tmp_path / "plain.json"
    f.write_text(json.dumps({**LLAMA, "quantization_config": q}))
    plain.write_text(json.dumps(LLAMA))
    o, p = (call(["step", "--model", str(x), "--json"]) for x in (f, plain))
    assert o.code == 0 and words in o.err and o.err.count("\n") == 1
    assert json.loads(o.out)["bytes"]["weights"] == json.loads(p.out)["bytes"]["weights"]
