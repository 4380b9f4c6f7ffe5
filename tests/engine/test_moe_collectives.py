"""Routed experts priced by kernel path (engine.physics.moe) and collectives by algorithm (engine.physics.collectives)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from engine.physics import collectives as C
from engine.physics import moe
from engine.physics.calibration import load_runtime


def test_the_kernel_path_follows_what_the_tensor_cores_are_fed() -> None:
    # 16-bit experts and weight-only formats keep 16-bit activations; FP8 W8A8 quantises them; FP4 weights do only
    # where the part has FP4 tensor cores (Blackwell), else they run weight-only (Marlin / matmul_ogs on Hopper).
    assert moe.expert_path("bf16", False).name == "a16"
    assert moe.expert_path("int4-g128", True).name == "a16"
    assert moe.expert_path("fp8", False).name == moe.expert_path("fp8-block", False).name == "quantised"
    assert moe.expert_path("mxfp4", False).name == "a16"
    assert moe.expert_path("mxfp4", True).name == moe.expert_path("nvfp4", True).name == "quantised"


def test_each_path_takes_its_own_constant_and_falls_back_down_its_chain() -> None:
    rt = load_runtime("vllm")
    assert rt.expert_bw_eff is not None and rt.expert_fp8_bw_eff is not None
    assert moe.expert_bw_eff(rt, "bf16", False) == rt.expert_bw_eff
    assert moe.expert_bw_eff(rt, "fp8", False) == rt.expert_fp8_bw_eff
    # no FP8 constant: the 16-bit path's; neither: the dense GEMMs' bw_eff
    assert moe.expert_bw_eff(replace(rt, expert_fp8_bw_eff=None), "fp8", False) == rt.expert_bw_eff
    none = replace(rt, expert_fp8_bw_eff=None, expert_bw_eff=None)
    assert moe.expert_bw_eff(none, "fp8", False) == moe.expert_bw_eff(none, "bf16", False) == rt.bw_eff


def test_experts_touched_and_tokens_per_expert_under_uniform_routing() -> None:
    # Mixtral (8 experts, 2 a token): one token touches 2; 64 tokens touch all but 8 (3/4)^64 ~ 8e-8 of them.
    assert moe.experts_touched(8, 2, 1.0) == pytest.approx(2.0)
    assert moe.experts_touched(8, 2, 64.0) == pytest.approx(8.0, abs=1e-6)
    assert moe.tokens_per_expert(8, 2, 64.0) == pytest.approx(16.0, rel=1e-6)
    # DeepSeek-V3 (256, 8 a token) on 16 GPUs of expert parallel: each holds 16 experts and sees all 16 GPUs' tokens
    one, ep = moe.experts_touched(256, 8, 32.0), moe.experts_touched(256, 8, 32.0, ep=16)
    assert one == pytest.approx(256 * (1 - (1 - 8 / 256) ** 32))
    assert ep == pytest.approx(256 * (1 - (1 - 8 / 256) ** 512) / 16) and ep <= 16
    assert moe.tokens_per_expert(256, 8, 32.0, ep=16) > moe.tokens_per_expert(256, 8, 32.0)


def test_all_reduce_switches_from_one_shot_to_two_shot_to_nccl_by_message_size() -> None:
    bw, hop = 450e9, C.HOP_LATENCY_S["fabric"]
    lat = 2 * 3 * hop  # 2 (n - 1) hops at n = 4
    small, mid, big = 256 * 1024.0, 1024 * 1024.0, 16 * 1024 * 1024.0
    assert C.all_reduce_time(small, 4, bw, True) == pytest.approx(3 * small / bw + lat)  # one-shot: every peer's copy
    assert C.all_reduce_time(mid, 4, bw, True) == pytest.approx(1.5 * mid / bw + lat)  # two-shot: 2 (n-1)/n
    assert C.all_reduce_time(big, 2, bw, True) == pytest.approx(big / bw + 2 * hop)  # past 8 MiB: NCCL's ring
    # arrays give the same values as floats, and an empty step costs nothing
    arr = C.all_reduce_time(np.array([0.0, small, mid, big]), 4, bw, True)
    assert arr[0] == 0.0 and list(arr[1:]) == [C.all_reduce_time(x, 4, bw, True) for x in (small, mid, big)]
    # over PCIe no custom kernel beyond two GPUs: the ring's share and PCIe hops
    assert C.all_reduce_time(small, 4, 32e9, False) == pytest.approx(1.5 * small / 32e9 + 6 * C.HOP_LATENCY_S["pcie"])
    assert C.all_reduce_time(small, 1, bw, True) == 0.0


def test_all_to_all_and_all_gather_move_the_peers_shares() -> None:
    bw = 450e9
    assert C.all_to_all_time(8e6, 8, bw, ideal=True) == pytest.approx(8e6 * 7 / 8 / bw)
    assert C.all_to_all_time(8e6, 8, bw) == pytest.approx(8e6 * 7 / 8 / bw + C.A2A_LATENCY_S)
    assert C.all_gather_time(1e6, 4, bw, True, ideal=True) == pytest.approx(3e6 / bw)
    assert C.all_gather_time(0.0, 4, bw, True) == 0.0


def test_expert_parallel_exchange_by_all_gather_moves_every_ranks_tokens_whatever_k() -> None:
    # 64 tokens of DeepSeek-V3 (hidden 7168, bf16) per rank, k = 8, 16 ranks: an all-to-all sends the 8 copies,
    # 15/16 of them off the rank; an all-gather brings in the other 15 ranks' 64 tokens once.
    hidden, k, n, bw = 64 * 7168 * 2.0, 8, 16, 450e9
    a2a = C.ep_exchange_time("all-to-all", hidden * k, k, n, bw, ideal=True)
    ag = C.ep_exchange_time("all-gather", hidden * k, k, n, bw, ideal=True)
    assert a2a == pytest.approx(hidden * k * 15 / 16 / bw)
    assert ag == pytest.approx(15 * hidden / bw)
    assert ag / a2a == pytest.approx(15 / (8 * 15 / 16))  # = 2: at k = 8 over 16 ranks the gather moves twice as much
