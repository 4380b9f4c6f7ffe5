"""Pipeline parallel (engine.physics.pipeline, StepOptions.pp): stages, micro-batches, the bubble, memory per stage."""

from __future__ import annotations

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.errors import InputError
from engine.physics import collectives as C
from engine.physics import pipeline
from engine.physics.batch import Batch
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions
from engine.serving.engine import Engine


def _sm(model: str = "llama-3.1-70b", hw: str = "h100-sxm", **opts: object) -> StepModel:
    return StepModel(load_hardware(hw), load_model(model), StepOptions(**opts))  # type: ignore[arg-type]


def test_layers_split_as_vllm_get_pp_indices_does() -> None:
    # layers // pp each; the remainder one layer each to the stages just before the last
    assert pipeline.stage_layers(80, 4) == [20, 20, 20, 20]
    assert pipeline.stage_layers(80, 3) == [27, 27, 26]
    assert pipeline.stage_layers(61, 4) == [15, 15, 16, 15]
    assert pipeline.stage_layers(7, 4) == [2, 2, 2, 1]
    assert sum(pipeline.stage_layers(126, 5)) == 126


def test_boundaries_cross_nodes_only_where_the_pipeline_leaves_a_fabric() -> None:
    assert pipeline.boundaries_across_nodes(4, 2, 8) == 0
    assert pipeline.boundaries_across_nodes(2, 8, 8) == 1
    assert pipeline.boundaries_across_nodes(4, 4, 8) == 1  # stages 0-1 on node 0, 2-3 on node 1
    assert pipeline.boundaries_across_nodes(4, 8, 8) == 3


def test_a_full_pipeline_reads_each_stage_once_per_micro_batch_and_holds_half_the_weights() -> None:
    one, two = _sm(tp=4), _sm(tp=4, pp=2)
    a, b = one.decode(64, 2000), two.decode(64, 2000)
    # two micro-batches of 32: each GPU reads its half of the weights twice a round, as much as tp 4 alone reads
    assert b.bytes["weights"] == pytest.approx(a.bytes["weights"], rel=0.02)
    assert b.bytes["kv_read"] == pytest.approx(a.bytes["kv_read"] / 2, rel=1e-9)
    assert b.t_bubble_s == 0.0
    # the same 8 GPUs as one tp 8 group read half the weights per GPU per step: a pipeline decodes slower
    assert _sm(tp=8).decode(64, 2000).time_s < b.time_s
    assert two.weight_bytes_per_gpu < 0.55 * one.weight_bytes_per_gpu
    # more room for KV per GPU, and each token's KV is half as big there: well over twice the tokens
    assert two.kv_capacity_bytes / two.kv_bytes_per_token > 2 * one.kv_capacity_bytes / one.kv_bytes_per_token


def test_fewer_sequences_than_stages_leave_a_bubble() -> None:
    sm = _sm(tp=2, pp=4)
    st = sm.decode(1, 1000)
    # one micro-batch: it crosses 4 stages in turn; three of every four slots of the slowest stage are idle
    assert st.t_bubble_s == pytest.approx(3 / 4 * (st.time_s - _sends(sm, 1.0)), rel=1e-9)
    two = sm.decode(2, 1000)
    assert two.t_bubble_s == pytest.approx(2 / 4 * (two.time_s - _sends(sm, 1.0)), rel=1e-9)


def _sends(sm: StepModel, tokens: float) -> float:
    """The round's activation sends at one token per micro-batch."""
    return float(sm._p2p(tokens))


def test_many_steps_priced_at_once_match_one_by_one() -> None:
    sm = _sm(tp=2, pp=4)
    model = sm.model
    rows = [(np.ones(n), np.full(n, 500.0)) for n in (1, 3, 8, 40)]
    one = [sm.price(Batch.of_rows(model, new, ctx)).time for new, ctx in rows]
    recs = [Batch.of_rows(model, new, ctx) for new, ctx in rows]
    many = Batch(*(np.array([getattr(r, f) for r in recs], dtype=np.float64) for f in Batch._fields))
    assert np.allclose(sm.price(many).time, one, rtol=1e-12)


def test_a_pipeline_across_nodes_pays_the_node_link_and_needs_one() -> None:
    inside, across = _sm(tp=4, pp=2), _sm(tp=8, pp=2)
    # hidden states and residual, 1,024 tokens x 8,192 x 2 bytes each, a 1/tp share per GPU: over 450 GB/s of
    # NVLink inside a node, over the 50 GB/s NIC between two
    msg = 2 * 1024 * 8192 * 2
    assert inside._p2p(1024.0) == pytest.approx(msg / 4 / 450e9 + 3.4e-6)
    assert across._p2p(1024.0) == pytest.approx(msg / 8 / 50e9 + pipeline.NODE_HOP_S)
    with pytest.raises(InputError, match="node_link_gbps"):
        _sm(hw="a100-80g", tp=8, pp=2)
    with pytest.raises(InputError, match="more stages"):
        _sm(model="qwen2.5-0.5b", pp=64)


def test_a_run_bills_every_gpu_of_the_pipeline() -> None:
    base = dict(model="llama-3.1-70b", tp=2, users=8, requests=40, prompt="500", output="50", seed=1)
    e = Engine(EngineConfig(**base, pp=2))  # type: ignore[arg-type]
    e.run()
    m = e.metrics()
    assert e.rates().dollars_per_s == pytest.approx(4 * load_hardware("h100-sxm").price_per_hour / 3600)
    assert m["price_per_hour"] == pytest.approx(load_hardware("h100-sxm").price_per_hour)
    assert m["requests_completed"] == 40


def test_dp_attention_with_tp_inside_each_rank_spreads_experts_over_dp_x_tp() -> None:
    """vLLM --data-parallel-size 2 --tensor-parallel-size 4 --enable-expert-parallel: attention tp 4 in each of 2
    ranks, the routed experts over all 8 GPUs; tokens reach them all-to-all over 8 ranks, 1/4 of a rank's each."""
    m = load_model("qwen3-235b-a22b")
    sm = _sm(model="qwen3-235b-a22b", tp=4, ep=2)
    c = m.counts
    dense = (c["total"] - c["expert_all"]) * 2 / 4  # bf16, tp 4
    assert sm.weight_bytes_per_gpu == pytest.approx(dense + c["expert_all"] * 2 / 8)
    tp_only = _sm(model="qwen3-235b-a22b", tp=4)
    T = 256.0
    routed = T * m.experts_per_token * m.hidden * 2 / 4
    a2a = 2 * m.moe_layers * C.all_to_all_time(routed, 8, 450e9)
    assert sm._comm(T, 0.0) == pytest.approx(tp_only._comm(T, 0.0) + a2a)
    # all-gather gathers over the 2 ranks only: the 4 GPUs of a rank hold the same tokens
    ag = _sm(model="qwen3-235b-a22b", tp=4, ep=2, ep_comm="all-gather")
    gathered = 2 * m.moe_layers * C.all_gather_time(T * m.hidden * 2, 2, 450e9, True)
    assert ag._comm(T, 0.0) == pytest.approx(tp_only._comm(T, 0.0) + gathered)
    with pytest.raises(InputError, match="dense"):
        _sm(tp=2, ep=2)


def test_the_xray_names_each_collective_with_its_algorithm_and_the_bubble() -> None:
    from engine.physics.xray import step_xray

    tp8 = _sm(tp=8)
    # one token: 16 KB, one-shot below 256 KB at 8 GPUs; 64 tokens: 1 MB, two-shot (custom kernel, below 8 MiB)
    assert [n for n, _ in tp8.decode(1, 100).collectives] == ["AR one-shot"]
    st = tp8.decode(64, 100)
    assert [n for n, _ in st.collectives] == ["AR two-shot"]
    assert sum(v for _, v in st.collectives) == pytest.approx(st.t_comm_s, rel=1e-12)
    dep = _sm(model="qwen3-235b-a22b", tp=4, ep=2).decode(64, 100)
    assert [n for n, _ in dep.collectives] == ["AR two-shot", "A2A"]
    assert sum(v for _, v in dep.collectives) == pytest.approx(dep.t_comm_s, rel=1e-12)
    pp = _sm(tp=2, pp=4).decode(1, 100)
    x = step_xray(pp, False)
    assert [n for n, _ in x.collectives] == ["AR one-shot", "PP send"]
    assert x.bubble == pp.t_bubble_s > 0
    assert sum(v for _, v in x.segments()) == pytest.approx(pp.time_s, rel=1e-12)
    assert x.as_dict()["collectives"][1]["name"] == "PP send"
    assert "bubble" not in step_xray(tp8.decode(1, 100), False).as_dict()
    assert _sm().decode(8, 100).collectives == ()
