"""The vLLM v0.15 campaign's replay (engine.evidence.replay) and the CUDA-graph padding of the vllm profile."""

from __future__ import annotations

import numpy as np
import pytest

from engine.evidence.replay import experiments, replay
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions, graph_sizes


def test_the_table_reads_as_18_experiments_with_their_stages_and_prefix_groups() -> None:
    done, skipped = experiments()
    assert len(done) == 18 and not skipped
    mix = [x for x in done if x.model == "mixtral-8x7b"]  # BF16 Mixtral-8x7B at tp 2: five runs
    assert sorted(x.exp_id for x in mix) == ["28", "29", "30", "56", "9"] and {x.weight_dtype for x in mix} == {None}
    e = next(x for x in done if x.exp_id == "17")
    assert e.stages == ((2.5, 600.0), (6.0, 600.0)) and (e.groups, e.users_per_group) == (9, 5)
    assert (e.model, e.tp, e.weight_dtype, e.prompt, e.shared_prefix, e.output) == (
        "llama-4-scout", 2, "fp8", 547, 100, 248)
    # Llama 2's client count of output tokens, measured on one experiment, stands in for the other's.
    ll = {x.exp_id: x for x in done if x.model == "llama-2-7b"}
    assert ll["20260217-155451"].output_counted == pytest.approx(195.1)
    assert ll["67"].output_counted == pytest.approx(1448 * 195.1 / 247)


def test_capture_sizes_are_vllms_defaults() -> None:
    g = graph_sizes(128, 8192)
    assert list(g[:4]) == [1, 2, 4, 8] and g[-1] == 256 and list(np.diff(g[3:])) == [8] * 31
    assert graph_sizes(256, 8192)[-1] == 512 and graph_sizes(1024, 8192)[-1] == 512
    assert graph_sizes(256, 300)[-1] == 288  # none above max_num_batched_tokens


def test_decode_pads_to_a_full_graph_mixed_steps_to_piecewise_ones_and_big_steps_run_eagerly() -> None:
    sm = StepModel(load_hardware("h100-sxm"), load_model("llama-3.1-8b"), StepOptions(runtime="vllm", max_batch=128))
    assert sm._graph_padding(3.0, 3.5, 3.5) == (1.0, 1.0)  # decode only: full graph of 4
    assert sm._graph_padding(100.0, 5000.0, 10.0) == (4.0, 0.0)  # mixed: piecewise graph of 104 tokens
    assert sm._graph_padding(300.0, 5000.0, 10.0) == (0.0, 0.0)  # above 256: eager
    # A padded decode step pays the dummy rows' GEMMs but no per-layer launches; vllm-0.6 pays them.
    full = sm.decode(3, 500)
    assert full.t_overhead_s == pytest.approx(sm.runtime.step_overhead_s)
    old = sm.with_options(runtime="vllm-0.6").decode(3, 500)
    assert old.t_overhead_s > full.t_overhead_s
    # Batch 1 on an H100: people measure 6-7 ms a decode step for Llama-3.1-8B.
    assert 5.5e-3 < sm.decode(1, 500).time_s < 7.5e-3


def test_routed_experts_stream_at_their_kernel_paths_bandwidth() -> None:
    """Scout's FP8 W8A8 experts (CUTLASS grouped GEMMs) cost expert_fp8_bw_eff of the peak, Mixtral's BF16 experts
    (fused-MoE Triton) expert_bw_eff; everything else bw_eff (vllm profile)."""
    from dataclasses import replace

    sm = StepModel(load_hardware("h100-sxm"), load_model("llama-4-scout"),
                   StepOptions(tp=2, weight_dtype="fp8", head_dtype="bf16", runtime="vllm"))
    rt = sm.runtime
    assert rt.expert_fp8_bw_eff is not None and rt.expert_fp8_bw_eff < rt.expert_bw_eff
    same = StepModel(sm.hw, sm.model, replace(sm.opts, runtime=replace(rt, expert_fp8_bw_eff=None, expert_bw_eff=None)))
    c, d = sm.decode(32, 800), same.decode(32, 800)
    w_exp = sm.model.moe_layers * c.experts_touched * sm.model.counts["expert"] * 1.0 / 2  # fp8, tp 2
    bw = sm.hw.bandwidth
    assert c.t_memory_s - d.t_memory_s == pytest.approx(w_exp / bw * (1 / rt.expert_fp8_bw_eff - 1 / rt.bw_eff))
    mix = StepModel(sm.hw, load_model("mixtral-8x7b"), StepOptions(tp=2, runtime="vllm"))
    bf = StepModel(sm.hw, mix.model, replace(mix.opts, runtime=replace(rt, expert_bw_eff=rt.expert_fp8_bw_eff)))
    c, d = mix.decode(32, 800), bf.decode(32, 800)
    w_exp = mix.model.moe_layers * c.experts_touched * mix.model.counts["expert"] * 2.0 / 2  # bf16, tp 2
    assert d.t_memory_s - c.t_memory_s == pytest.approx(w_exp / bw * (1 / rt.expert_fp8_bw_eff - 1 / rt.expert_bw_eff))


@pytest.mark.parametrize("exp_id", ["64", "63", "65", "21", "9"])
def test_replay_keeps_itl_and_e2e_close_to_the_measured_means(exp_id: str) -> None:
    """A short replay (60 requests a stage) of three dense experiments and two MoE (Llama-4-Scout FP8, Mixtral-8x7B BF16, tp 2):
    ITL and E2E within 12 % of the measured means, nothing saturated, every accepted request served (fails if
    the physics regresses)."""
    e = next(x for x in experiments()[0] if x.exp_id == exp_id)
    p = replay(e, stage_requests=60)
    assert not p["saturated"] and p["served"] == p["accepted"] > 0
    assert p["itl_ms"] == pytest.approx(e.itl_ms, rel=0.12)
    assert p["e2e_ms"] == pytest.approx(e.e2e_ms, rel=0.12)
    assert p["ttft_ms"] > 0
