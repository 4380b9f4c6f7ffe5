"""vLLM's KV pool rule: activation peaks against vLLM's own start-up logs, and the pool the rule leaves."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.errors import InputError
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import RESERVE_FRACTION, StepModel, StepOptions
from engine.physics.vllm_memory import activation_peak_bytes, forward_peak_bytes

GIB = 2**30


@pytest.mark.parametrize("model,tp,logged_gib", [
    # "PyTorch activation peak memory" on an H100, 1024 sequences, 8192 tokens (llm-d-benchmark,
    # config_explorer/empirical-vllm-memory-results.md).
    ("llama-3.1-8b", 1, 4.76), ("gpt-oss-20b", 1, 7.38), ("llama-3.3-70b", 2, 4.84),
])
def test_activation_peak_matches_vllm_logs(model: str, tp: int, logged_gib: float) -> None:
    assert activation_peak_bytes(load_model(model), tp, 8192, 1024) / GIB == pytest.approx(logged_gib, rel=0.05)


def test_the_kv_pool_follows_vllms_rule() -> None:
    # vLLM's log for Llama-3.1-8B on an H100 reporting 79.18 GiB: weights 14.99 GiB, activations 4.76,
    # non-torch 0.13 -> KV cache 51.38 GiB at gpu_memory_utilization 0.9.
    hw = replace(load_hardware("h100-sxm"), memory_gb=79.18 * GIB / 1e9)
    sm = StepModel(hw, load_model("llama-3.1-8b"), StepOptions(gpu_memory_utilization=0.9, max_batch=1024))
    assert sm.kv_capacity_bytes / GIB == pytest.approx(51.38, abs=0.3)
    # Less utilisation, less pool, one for one; without the knob the old 10 % reserve stands.
    low = StepModel(hw, load_model("llama-3.1-8b"), StepOptions(gpu_memory_utilization=0.5, max_batch=1024))
    assert sm.kv_capacity_bytes - low.kv_capacity_bytes == pytest.approx(0.4 * hw.memory_bytes)
    plain = StepModel(hw, load_model("llama-3.1-8b"))
    assert plain.reserve_bytes == pytest.approx(RESERVE_FRACTION * hw.memory_bytes)


def test_a_bigger_step_budget_takes_pool_once_the_forward_dominates() -> None:
    m = load_model("llama-3.1-8b")
    hw = load_hardware("h100-sxm")
    pools = [StepModel(hw, m, StepOptions(gpu_memory_utilization=0.9, max_batched_tokens=t, max_batch=16))
             .kv_capacity_bytes for t in (2048, 8192, 65536)]
    assert pools[0] > pools[1] > pools[2]
    assert pools[1] - pools[2] == pytest.approx(forward_peak_bytes(m, 1, 65536) - forward_peak_bytes(m, 1, 8192))


def test_max_model_len_caps_the_served_context() -> None:
    hw, m = load_hardware("h100-sxm"), load_model("llama-3.1-8b")
    assert StepModel(hw, m, StepOptions(max_model_len=4096)).model.max_context == 4096
    with pytest.raises(InputError, match="longer than llama-3.1-8b's context"):
        StepModel(hw, m, StepOptions(max_model_len=10**7))
    with pytest.raises(InputError, match="--gpu-memory-utilization must be a fraction"):
        StepModel(hw, m, StepOptions(gpu_memory_utilization=1.5))
