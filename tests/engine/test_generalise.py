"""What the held-out part of the vLLM campaign varies must come out of the physics: other GPUs from their spec sheets
(A100's and L40S's bandwidth, L40S's PCIe all-reduce), tensor parallel over the link, and the replay's knobs
(max_num_batched_tokens, gpu_memory_utilization, CPU offload, tp), each in the direction and rough size physics gives.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from engine.config import EngineConfig
from engine.evidence import replay as R
from engine.physics.collectives import HOP_LATENCY_S as _HOP_LATENCY_S
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions
from engine.serving.engine import Engine


def _sm(hw: str, model: str, tp: int = 1, **kw: Any) -> StepModel:
    return StepModel(load_hardware(hw), load_model(model), StepOptions(tp=tp, runtime="vllm", **kw))


def test_a100_and_l40s_decode_at_their_spec_sheet_bandwidth() -> None:
    # A memory-bound decode step's kernel time scales with 1 / HBM bandwidth: no per-GPU constant in between.
    h100, a100, l40s = (_sm(h, "llama-3.1-8b").decode(8, 1000) for h in ("h100-sxm", "a100-80g", "l40s"))
    kernel = {k: c.time_s - c.t_overhead_s for k, c in (("h100", h100), ("a100", a100), ("l40s", l40s))}
    assert kernel["a100"] / kernel["h100"] == pytest.approx(3350 / 2039, rel=0.05)
    assert kernel["l40s"] / kernel["h100"] == pytest.approx(3350 / 864, rel=0.05)
    assert h100.t_overhead_s == a100.t_overhead_s == l40s.t_overhead_s  # the runtime's CPU-side cost, not the GPU's


def test_decode_of_llama_3_1_8b_at_batch_1_takes_what_people_measure_on_an_h100() -> None:
    # People measure 6-7 ms a token for vLLM on one H100 decoding Llama-3.1-8B at batch 1; the old profile said 9.5.
    # The fitted profile gives 7.1 ms (15 GB of weights at its 80 % of 3.35 TB/s, plus 1.5 ms a step): the campaign
    # it is fitted on never runs below batch ~10, so the bound allows the fitted constants' 2 % past 7 ms.
    assert 6e-3 <= _sm("h100-sxm", "llama-3.1-8b").decode(1, 0).time_s <= 7.25e-3


def test_an_all_reduce_pays_two_hops_per_gpu_beyond_the_first_of_its_link() -> None:
    # Batch 1: the message is tiny, so a decode step's communication is its 2 x layers all-reduces' hop latency.
    m = load_model("llama-3.1-70b")
    per_step = {tp: _sm("h100-sxm", "llama-3.1-70b", tp).decode(1, 0).t_comm_s for tp in (2, 4, 8)}
    for tp, t in per_step.items():
        assert t == pytest.approx(2 * m.layers * 2 * (tp - 1) * _HOP_LATENCY_S["fabric"], rel=0.02)
    assert per_step[4] / per_step[2] == pytest.approx(3.0, rel=0.02)  # 6 hops against 2
    # L40S has no NVLink: the same all-reduces cross PCIe hops, slower, and their bytes cross its 32 GB/s a way.
    pcie = _sm("l40s", "llama-3.1-8b", 2).decode(1, 0).t_comm_s
    nvl = _sm("h100-sxm", "llama-3.1-8b", 2).decode(1, 0).t_comm_s
    assert pcie / nvl == pytest.approx(5.7 / 3.4, rel=0.05)


def test_a_prefill_all_reduce_over_pcie_costs_its_bytes_over_the_link() -> None:
    # A 2,048-token prefill at tp 2 all-reduces 2048 x 4096 x 2 bytes twice a layer: over L40S's PCIe Gen4 (32 GB/s a
    # way) that is ~34 ms a step, over H100's NVLink (450 GB/s a way) ~2.4 ms: fourteen times less.
    l40s = _sm("l40s", "llama-3.1-8b", 2).prefill(2048).t_comm_s
    h100 = _sm("h100-sxm", "llama-3.1-8b", 2).prefill(2048).t_comm_s
    assert l40s == pytest.approx(2 * 32 * 2048 * 4096 * 2 / 32e9, rel=0.05)
    assert l40s / h100 > 10


def test_a_group_larger_than_its_nvlink_bridge_all_reduces_over_pcie() -> None:
    # H100 PCIe cards are bridged in pairs: tp 2 stays on the bridge, tp 4 goes over PCIe hops.
    two = _sm("h100-pcie", "llama-3.1-8b", 2).decode(1, 0).t_comm_s
    four = _sm("h100-pcie", "llama-3.1-8b", 4).decode(1, 0).t_comm_s
    assert two == pytest.approx(2 * 32 * 2 * _HOP_LATENCY_S["fabric"], rel=0.05)
    assert four == pytest.approx(2 * 32 * 6 * _HOP_LATENCY_S["pcie"], rel=0.05)


def test_one_shot_all_reduce_moves_every_peers_message_below_vllms_threshold() -> None:
    # At tp 4 vLLM's custom all-reduce reads each of 3 peers' whole buffers below 512 KB (one-shot) and 2(tp-1)/tp
    # = 1.5 messages above (two-shot): past the threshold a bigger message can take less link time.
    sm = _sm("h100-sxm", "llama-3.1-70b", 4, ideal=False)
    lat = 2 * 80 * 6 * _HOP_LATENCY_S["fabric"]
    below = sm.decode(24, 0)  # 24 tokens x 8192 x 2 B = 384 KB
    above = sm.decode(40, 0)  # 640 KB
    bw = 900e9 / 2
    assert below.t_comm_s - lat == pytest.approx(2 * 80 * 3 * 24 * 8192 * 2 / bw, rel=0.02)
    assert above.t_comm_s - lat == pytest.approx(2 * 80 * 1.5 * 40 * 8192 * 2 / bw, rel=0.02)


def test_qwen2_57b_a14b_decodes_no_faster_than_its_weights_stream() -> None:
    # The held-out MoE rows came out 4-7x too fast when the shared expert was dropped: at batch 1 a step reads at
    # least the 14.2B active parameters, at batch 64 nearly all 57.4B (64 experts, 8 per token: E(1-(1-k/E)^T)).
    bw = 3350e9
    one = _sm("h100-sxm", "qwen2-57b-a14b", 2).decode(1, 500)
    many = _sm("h100-sxm", "qwen2-57b-a14b", 2).decode(64, 500)
    assert one.time_s >= 14.2e9 * 2 / 2 / bw
    assert many.time_s >= 0.97 * 57.4e9 * 2 / 2 / bw


# ---- the replay's knobs -------------------------------------------------------------------------------------------

def _exp(exp_id: str, **changes: Any) -> R.Experiment:
    e = next(x for x in R.experiments()[0] if x.exp_id == exp_id)
    return dataclasses.replace(e, **changes)


def test_replay_maps_checkpoint_names_to_presets() -> None:
    assert R.model_preset("meta-llama/Llama-3.1-8B-Instruct") == "llama-3.1-8b"
    assert R.model_preset("mistralai/Mixtral-8x7B-Instruct-v0.1") == "mixtral-8x7b"
    assert R.model_preset("Qwen/Qwen2-57B-A14B-Instruct") == "qwen2-57b-a14b"
    assert R.model_preset("someone/unknown-model") is None


def test_a_smaller_token_budget_splits_long_prompts_over_more_steps() -> None:
    # 3,000-token prompts nobody repeats, at 2 requests/s: with max_num_batched_tokens 512 each prefills over six
    # steps, with 4,096 in one. The FLOPs are the same and compute-bound either way (the weights' read hides under
    # them), so the first token comes later only by the five extra steps' fixed costs (1.5 ms each and more), not 6x.
    base = _exp("63", prompt=3000, users_per_group=1_000_000, stages=((2.0, 15.0),))
    small = R.replay(dataclasses.replace(base, max_num_batched_tokens=512))
    big = R.replay(dataclasses.replace(base, max_num_batched_tokens=4096))
    assert big["ttft_ms"] + 5 * 1.5 < small["ttft_ms"] < 1.5 * big["ttft_ms"]
    assert small["itl_ms"] == pytest.approx(big["itl_ms"], rel=0.2)


def test_gpu_memory_utilization_sets_the_kv_pool_by_vllms_rule() -> None:
    # Each 0.1 of utilisation is 8 GB of an H100's 80 GB for KV blocks: 16 tokens x 160 KB (Mistral-Nemo, bf16).
    def blocks(util: float) -> int:
        return Engine(EngineConfig(hardware="h100-sxm", model="mistral-nemo", users=0, runtime="vllm",
                                   gpu_memory_utilization=util)).kv_blocks_total

    per_block = 16 * load_model("mistral-nemo").kv_bytes_per_token("bf16")
    assert blocks(0.9) - blocks(0.8) == pytest.approx(0.1 * 80e9 / per_block, rel=0.02)


def test_a_kv_pool_too_small_for_the_load_queues_requests() -> None:
    # Llama-2-7B keeps 512 KB per token: at 0.3 of the GPU its pool holds ~17K tokens, fewer than the ~17 long
    # requests in flight need (2,482 tokens each), so requests wait for blocks and TTFT grows by seconds.
    short = dict(stages=((1.0, 60.0),))
    roomy = R.replay(_exp("67", **short), stage_requests=60)
    tight = R.replay(_exp("67", gpu_memory_utilization=0.3, **short), stage_requests=60)
    assert tight["ttft_ms"] > roomy["ttft_ms"] + 1000


def test_cpu_offload_brings_evicted_prefixes_back_instead_of_recomputing_them() -> None:
    # 60 distinct 2,000-token prompts cycled through Mistral-Nemo's pool at 0.36 of an H100 (about seven prompts'
    # worth of blocks): every repeat finds its prefix reclaimed from the GPU. Without offload it is recomputed (a
    # 2,000-token prefill, ~60 ms); with it, the blocks wait in host memory and come back over PCIe (320 MB at 64 GB/s,
    # ~5 ms), so the first token comes tens of milliseconds sooner.
    base = _exp("63", prompt=2000, groups=60, users_per_group=1, shared_prefix=0, output=20,
                gpu_memory_utilization=0.36, stages=((4.0, 60.0),))
    off = R.replay(base, stage_requests=240)
    on = R.replay(dataclasses.replace(base, cpu_offload=True), stage_requests=240)
    assert on["ttft_ms"] < off["ttft_ms"] - 20


def test_tensor_parallel_speeds_decode_up_less_than_linearly() -> None:
    # Splitting Mistral-Nemo over 2 and 4 NVLinked H100s divides its weight bytes, not its fixed costs, and adds
    # all-reduces: ITL falls, by less than the GPU count.
    itl = {tp: R.replay(_exp("63", tp=tp, stages=((5.0, 20.0),)), stage_requests=100)["itl_ms"] for tp in (1, 2, 4)}
    assert 0.5 < itl[2] / itl[1] < 0.8
    assert 0.6 < itl[4] / itl[2] < 0.95
