"""C15 served for real: DeepSeek-V3 over expert parallel on 2 x 8 H200 (attention data parallel, experts split 16
ways, dispatch and combine as all-to-alls), priced step by step with the vllm profile's constants."""

from __future__ import annotations

import pytest

from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions, crossover_batch


def _rank(ep: int, ideal: bool = False) -> StepModel:
    return StepModel(load_hardware("h200"), load_model("deepseek-v3"), StepOptions(ep=ep, ideal=ideal, kv_dtype="fp8"))


def test_a_rank_saturates_at_its_weight_bytes_over_its_flops_per_token_times_the_ridge() -> None:
    # Per rank the weights are the shared part plus 1/16 of the experts (58 GB in FP8), while each of its tokens
    # still costs 2 x 37B FLOPs: B* per rank ~ ridge x weight bytes / FLOPs per token, total/active in the
    # per-rank form; the deployment's 16 ranks together hold the article's ~5,000 sequences.
    sm = _rank(16, ideal=True)
    m = sm.model
    guess = sm.roof.ridge * sm.weight_bytes_per_gpu / (2 * m.params_active)
    b = crossover_batch(sm)
    assert b == pytest.approx(guess, rel=0.2)
    assert 5000 <= 16 * b <= 8000


def test_expert_parallel_cuts_the_cost_per_token_by_filling_each_rank() -> None:
    # Calibrated: at its saturating batch a rank spends >40x fewer GPU-seconds per output token than at batch 1
    # (>100x while the all-to-alls were priced on NVLink alone), and the all-to-alls are a visible share of the
    # step (not free; half of each crosses to the other node over its 50 GB/s NIC, so they are most of it when
    # nothing overlaps them with compute).
    sm = _rank(16)
    b = crossover_batch(sm)
    one, full = sm.decode(1, 1000), sm.decode(b, 1000)
    assert one.time_s / (full.time_s / b) > 40
    assert 0.05 < full.t_comm_s / full.time_s < 0.8
    # every rank's 16 experts are all busy long before B*: the expert-coverage model's point
    assert full.experts_touched == pytest.approx(256 / 16, rel=1e-3)
    # fewer ranks hold more experts each, so a rank fills later (in batch per rank) as total/active predicts
    assert crossover_batch(_rank(8)) > b


def test_the_exchange_shape_is_an_option_and_a_wrong_one_is_one_line() -> None:
    from engine.errors import InputError

    a2a = _rank(16).decode(64, 1000)
    gather = StepModel(load_hardware("h200"), load_model("deepseek-v3"),
                       StepOptions(ep=16, kv_dtype="fp8", ep_comm="all-gather")).decode(64, 1000)
    assert gather.t_comm_s > a2a.t_comm_s and gather.bytes_total == a2a.bytes_total
    with pytest.raises(InputError, match="all-to-all, all-gather"):
        StepModel(load_hardware("h200"), load_model("deepseek-v3"), StepOptions(ep=16, ep_comm="ring"))


def test_an_all_to_all_across_two_nodes_waits_on_the_node_link() -> None:
    """16 ranks over two 8-GPU H200 nodes: 7 of 16 shares go over NVLink and 8 over the GPU's 50 GB/s NIC at the
    same time, so the NIC's share sets the pace; within one node (ep 8) NVLink carries it all."""
    from engine.physics import collectives as C

    msg = 4e6
    nic = C.ep_exchange_time("all-to-all", msg, 8, 16, 450e9, ideal=True, node_gpus=8, node_bps=50e9)
    assert nic == pytest.approx(msg * 8 / 16 / 50e9)
    assert C.ep_exchange_time("all-to-all", msg, 8, 8, 450e9, ideal=True, node_gpus=8, node_bps=50e9) == \
        pytest.approx(msg * 7 / 8 / 450e9)
    ring = C.ep_exchange_time("all-gather", msg, 8, 16, 450e9, ideal=True, node_gpus=8, node_bps=50e9)
    assert ring == pytest.approx(15 * msg / 8 / 50e9)
    assert _rank(16).decode(256, 1000).t_comm_s > 2 * StepModel(
        load_hardware("h200"), load_model("deepseek-v3"), StepOptions(ep=8, kv_dtype="fp8")).decode(256, 1000).t_comm_s
