"""The step model against the articles' arithmetic and hand-checked breakdowns."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import InputError
from engine.physics.batch import Batch
from engine.physics.calibration import runtimes
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions, crossover_batch


def sm(model: str = "generic-14b", hw: str = "h100-sxm", **opts: object) -> StepModel:
    return StepModel(load_hardware(hw), load_model(model), StepOptions(**{"ideal": True, **opts}))


def test_c02_decode_floor_is_28gb_over_3350gbs() -> None:
    c = sm().decode(1, 0)
    assert c.time_s * 1e3 == pytest.approx(28 / 3350 * 1e3, rel=1e-3)  # 8.358 ms
    assert round(c.time_s * 1e3, 2) == 8.36
    assert round(1 / c.time_s, 0) == 120  # 119.6 tok/s
    assert c.bound == "memory"


def test_c03_hundred_tokens_read_2_8_tb() -> None:
    m = sm()
    total = sum(m.decode(1, ctx).bytes_total for ctx in range(100))
    assert total / 1e12 == pytest.approx(2.8, rel=0.005)


def test_c04_l2_refills_560() -> None:
    assert sm().decode(1, 0).l2_refills == pytest.approx(560, rel=0.002)


@pytest.mark.parametrize(("hw", "ridge"), [("h100-sxm", 295.3), ("b200", 292.2), ("a100-80g", 153.0)])
def test_c12_ridge_points(hw: str, ridge: float) -> None:
    assert load_hardware(hw).ridge("bf16") == pytest.approx(ridge, abs=0.1)
    assert sm(hw=hw, model="qwen2.5-7b").decode(1, 0).ridge == pytest.approx(ridge, abs=0.1)


def test_c16_kv_is_2kb_per_layer_at_fp8() -> None:
    m = load_model("generic-14b")
    assert m.kv_bytes_per_token_layer("fp8") == 128 * 8 * 2 * 1 == 2048
    assert m.kv_bytes_per_token("fp8") == 2048 * 48


def test_dense_breakdown_by_hand() -> None:
    """generic-14b, batch 4 at context 1000: every byte and FLOP accounted for."""
    m = sm()
    c = m.decode(4, 1000)
    mod = load_model("generic-14b")
    kv_tok = 2 * 48 * 8 * 128 * 2  # K and V, 48 layers, 8 KV heads, 128 dims, bf16
    assert c.bytes["kv_read"] == 4 * 1000 * kv_tok
    assert c.bytes["kv_write"] == 4 * kv_tok
    # Tied embeddings: the whole table is the LM head, read once; plus one embedding row per token.
    assert c.bytes["weights"] == pytest.approx(28e9 + 4 * 5120 * 2)
    matmul_params = 14e9 - 153798 * 5120
    assert c.flops["matmul"] == pytest.approx(2 * 4 * matmul_params)
    assert c.flops["attention"] == pytest.approx(4 * 48 * 40 * 128 * 4 * (1000 + 0.5))
    assert c.flops["lm_head"] == pytest.approx(2 * 4 * 153798 * 5120)
    assert mod.params_total == 14e9


def test_gqa_kv_uses_kv_heads_not_query_heads() -> None:
    m = load_model("qwen2.5-14b")  # 40 query heads share 8 KV heads
    assert m.kv_bytes_per_token("bf16") == 2 * 48 * 8 * 128 * 2 == 196608
    c = sm("qwen2.5-14b").decode(2, 500)
    assert c.bytes["kv_read"] == 2 * 500 * 196608
    # Attention FLOPs still scale with the 40 query heads.
    assert c.flops["attention"] == pytest.approx(4 * 48 * 40 * 128 * 2 * 500.5)


def test_moe_expert_coverage() -> None:
    """Mixtral: one token touches 2 of 8 experts per layer; a big batch touches all 8."""
    m = sm("mixtral-8x7b", hw="h200")
    mod = load_model("mixtral-8x7b")
    one = m.decode(1, 0)
    assert one.experts_touched == pytest.approx(2.0)
    big = m.decode(256, 0)
    assert big.experts_touched == pytest.approx(8.0, rel=1e-6)
    expert_bytes = 3 * 4096 * 14336 * 2
    assert big.bytes["weights"] - one.bytes["weights"] == pytest.approx(
        32 * 6 * expert_bytes + 255 * 4096 * 2, rel=1e-9)
    # Compute follows active parameters: 2 of 8 experts per token, whatever the batch.
    assert one.flops["matmul"] == pytest.approx(2 * (mod.params_active - 2 * 32000 * 4096))
    t = 17
    assert m.decode(t, 0).experts_touched == pytest.approx(8 * (1 - (1 - 2 / 8) ** t))


def test_mla_caches_latent_plus_rope() -> None:
    m = load_model("deepseek-v3")
    assert m.kv_bytes_per_token_layer("bf16") == (512 + 64) * 2
    assert m.kv_bytes_per_token("bf16") == 70272  # models.json kv_bytes_per_token_bf16
    c = sm("deepseek-v3", hw="b200", tp=8).decode(1, 1000)
    # The latent is shared by all heads, so tensor parallelism replicates it instead of splitting it.
    assert c.bytes["kv_read"] == 1000 * 70272
    assert m.weight_dtype == "fp8-block"  # DeepSeek's FP8 checkpoint: 128x128 weight blocks, one byte a weight


def test_mla_decode_attends_over_the_absorbed_latent() -> None:
    """A decode query scores the 576-wide latent + rope key and sums the 512-wide latent in every head; a prefill
    query works at the decompressed widths (192-wide query-key, 128-wide values)."""
    s = sm("deepseek-v3", hw="b200", tp=8)
    layers, heads, tp = 61, 128, 8
    dec = s.decode(4, 1000)
    assert dec.flops["attention"] == pytest.approx(2 * layers * heads * (512 + 64 + 512) * 4 * 1000.5 / tp)
    pre = s.prefill(1000)
    assert pre.flops["attention"] == pytest.approx(2 * layers * heads * (192 + 128) * 1000 * 500 / tp)
    # A mixed step prices each row by its phase.
    mixed = s.cost(Batch.of_rows(s.model, np.array([1, 1000]), np.array([1000, 0])))
    assert mixed.flops["attention"] == pytest.approx(dec.flops["attention"] / 4 + pre.flops["attention"])


def test_calibrated_attention_kernels_run_at_their_own_efficiencies() -> None:
    """KV traffic moves at attn_bw_eff of peak and attention FLOPs run at attn_flops_eff of the KV precision's
    peak; the weights and activations move at the GEMMs' bw_eff."""
    hw, rt = load_hardware("b200"), runtimes()["trtllm"]
    assert rt.attn_bw_eff is not None and rt.attn_flops_eff is not None
    c = StepModel(hw, load_model("qwen3-30b-a3b"), StepOptions(runtime="trtllm", kv_dtype="fp8")).decode(64, 4000)
    kv = c.bytes["kv_read"] + c.bytes["kv_write"]
    assert c.t_attn_memory_s == pytest.approx(kv / (hw.bandwidth * rt.attn_bw_eff))
    assert c.t_attn_compute_s == pytest.approx(c.flops["attention"] / (hw.peak_flops("fp8") * rt.attn_flops_eff))
    other = c.bytes["weights"] + c.bytes["activations"]
    assert c.t_memory_s - c.t_attn_memory_s == pytest.approx(other / (hw.bandwidth * rt.bw_eff))


def test_block_scaled_fp8_gemms_slow_down_only_without_hardware_block_scaling() -> None:
    """fp8-block GEMMs run at block_fp8_eff of per-tensor FP8 on Hopper; Blackwell applies the scales in the MMA."""
    rt = runtimes()["trtllm"]
    assert 0.3 <= rt.block_fp8_eff < 1
    m = load_model("deepseek-v3")

    def step(hw: str, wd: str | None) -> object:
        """One decode step of 256 sequences at 1,000 tokens of context under trtllm."""
        return StepModel(load_hardware(hw), m, StepOptions(runtime="trtllm", weight_dtype=wd, kv_dtype="fp8"))\
            .decode(256, 1000)

    block, plain = step("h200", None), step("h200", "fp8")
    gemm_mem = (block.t_memory_s - block.t_attn_memory_s, plain.t_memory_s - plain.t_attn_memory_s)
    gemm_cmp = (block.t_compute_s - block.t_attn_compute_s, plain.t_compute_s - plain.t_attn_compute_s)
    assert gemm_mem[0] == pytest.approx(gemm_mem[1] / rt.block_fp8_eff)
    assert gemm_cmp[0] == pytest.approx(gemm_cmp[1] / rt.block_fp8_eff)
    assert block.t_attn_memory_s == pytest.approx(plain.t_attn_memory_s)
    assert step("b200", None).time_s == pytest.approx(step("b200", "fp8").time_s)
    # Under --ideal the articles' roofline holds whatever the checkpoint's scaling.
    ideal = StepModel(load_hardware("h200"), m, StepOptions(ideal=True))
    assert ideal.decode(1, 0).time_s == pytest.approx(ideal.with_options(weight_dtype="fp8").decode(1, 0).time_s)


def test_sliding_window_caps_kv_reads() -> None:
    m = load_model("gpt-oss-120b")
    assert m.sliding_layers == 18 and m.sliding_window == 128
    c = sm("gpt-oss-120b", hw="h200").decode(1, 10_000)
    per_layer = 2 * 8 * 64 * 2
    assert c.bytes["kv_read"] == per_layer * (18 * 10_000 + 18 * 128)


def test_chunked_attention_reads_only_the_current_chunk_but_caches_every_token() -> None:
    """Llama 4's 36 RoPE layers attend within 8,192-token chunks: just past a chunk edge they read almost
    nothing, while the cache (and so the KV pool) keeps every token of every layer."""
    m = load_model("llama-4-maverick")
    assert m.chunked and m.sliding_layers == 36 and m.sliding_window == 8192
    s = sm("llama-4-maverick", hw="h200")
    per_layer = 2 * 8 * 128 * 2
    assert s.decode(1, 8192 + 100).bytes["kv_read"] == per_layer * (12 * 8292 + 36 * 100)
    assert s.decode(1, 8000).bytes["kv_read"] == per_layer * 48 * 8000
    assert s.kv_bytes_for(np.array([20_000])) == per_layer * 48 * 20_000
    # Closed forms against brute force: visible tokens, and a 9,000-token prefill's query-key pairs.
    assert m.local_seen_sum(np.array(8000), np.array(17_000)) == sum(p % 8192 for p in range(8000, 17_000))
    pairs = sum(p % 8192 + 0.5 for p in range(9000))
    assert float(m.local_pairs(np.array(0), np.array(9000))) == pytest.approx(pairs)
    g = load_model("gpt-oss-20b")  # a sliding window caps what it sees and what it caches
    assert not g.chunked and list(g.local_seen(np.array([5, 500]))) == [5, 128]
    assert list(g.local_cached(np.array([5, 500]))) == [5, 128]


def test_trtllm_runs_attention_in_fp8_behind_a_quantised_output_projection() -> None:
    """With FP8 weights and a 16-bit KV cache, TensorRT-LLM's context attention runs at the FP8 rate (its
    attention op emits FP8 for o_proj); vLLM's stays at BF16."""
    def attn_time(runtime: str, wd: str) -> float:
        s = StepModel(load_hardware("h200"), load_model("llama-3.3-70b"),
                      StepOptions(weight_dtype=wd, kv_dtype="bf16", runtime=runtime))
        return s.prefill(16_384).t_attn_compute_s
    trt, vllm = runtimes()["trtllm"], runtimes()["vllm-0.6"]
    assert trt.fp8_attn_if_quantised and not vllm.fp8_attn_if_quantised
    ratio_trt = attn_time("trtllm", "bf16") / attn_time("trtllm", "fp8")
    assert ratio_trt == pytest.approx(1978.9 / 989.4, rel=1e-6)
    assert attn_time("vllm-0.6", "bf16") == pytest.approx(attn_time("vllm-0.6", "fp8"))


def test_trtllm_mxfp4_experts_run_at_the_fp8_rate_on_blackwell_and_bf16_on_hopper() -> None:
    """gpt-oss's MXFP4 experts: W4A8 (FP8 activations) on Blackwell, W4A16 (BF16) on Hopper."""
    def expert_rate(hw: str) -> float:
        s = StepModel(load_hardware(hw), load_model("gpt-oss-20b"), StepOptions(runtime="trtllm"))
        return s._c["peak_expert"]
    rt = runtimes()["trtllm"]
    assert rt.mxfp4_fp8_act
    assert expert_rate("b200") == pytest.approx(4500e12 * rt.flops_eff * rt.expert_flops_factor)
    assert expert_rate("h200") == pytest.approx(989.4e12 * rt.flops_eff * rt.expert_flops_factor)


def test_compute_x2_leaves_decode_and_halves_long_prefill() -> None:
    base, fast = sm(), sm(compute_mult=2.0)
    assert fast.decode(1, 0).time_s == pytest.approx(base.decode(1, 0).time_s, rel=0.01)
    assert base.prefill(4096).time_s / fast.prefill(4096).time_s == pytest.approx(2.0, rel=0.05)


def test_prefill_compute_bound_decode_memory_bound() -> None:
    m = sm()
    assert m.prefill(4096).bound == "compute"
    assert m.decode(1, 0).bound == "memory"
    assert m.prefill(4096).arithmetic_intensity > m.decode(1, 0).ridge > m.decode(1, 0).arithmetic_intensity


def test_crossover_batch_near_ridge() -> None:
    b = crossover_batch(sm())
    assert 280 <= b <= 360
    c = sm().decode(b, 0)
    assert c.bound == "compute" and sm().decode(b - 1, 0).bound == "memory"


def test_tensor_parallel_splits_weights_and_adds_allreduce() -> None:
    one = sm("qwen2.5-72b", hw="h200")
    four = sm("qwen2.5-72b", hw="h200", tp=4)
    assert four.decode(1, 0).bytes["weights"] == pytest.approx(one.decode(1, 0).bytes["weights"] / 4, rel=1e-6)
    assert four.decode(1, 0).t_comm_s > 0 and one.decode(1, 0).t_comm_s == 0


def test_weight_dtype_halves_weight_bytes() -> None:
    bf16 = sm().decode(1, 0).bytes["weights"]
    fp8 = sm(weight_dtype="fp8").decode(1, 0).bytes["weights"]
    assert fp8 == pytest.approx(bf16 / 2, rel=1e-6)


def test_calibrated_is_slower_than_ideal() -> None:
    ideal = sm().decode(1, 0).time_s
    real = sm(ideal=False).decode(1, 0).time_s
    assert real > ideal


def test_kv_capacity_is_memory_minus_weights_minus_reserve() -> None:
    m = sm()
    assert m.kv_capacity_bytes == pytest.approx(80e9 - 28e9 - 8e9)


@pytest.mark.parametrize("opts", [{"tp": 0}, {"weight_dtype": "fp7"}, {"kv_dtype": "int4"}, {"compute_mult": 0.0}])
def test_bad_options_raise_input_error(opts: dict[str, object]) -> None:
    with pytest.raises(InputError):
        sm(**opts)


def test_model_too_big_says_by_how_much() -> None:
    with pytest.raises(InputError, match=r"exceed 80 GB by 73\.4 GB; try --tp 4"):
        sm("qwen2.5-72b").check_fits()


def test_fit_hint_offers_only_a_tp_that_splits_the_heads() -> None:
    # llama-4-maverick at tp 8: 40 heads split over neither 16 nor 32, so the hint is a narrower dtype, not --tp 16.
    with pytest.raises(InputError) as e:
        sm("llama-4-maverick", tp=8).check_fits()
    msg = str(e.value)
    assert "--tp 16" not in msg and "--tp 32" not in msg and "--dtype fp8" in msg


def test_cost_rejects_mismatched_arrays() -> None:
    with pytest.raises(InputError):
        Batch.of_rows(sm().model, np.ones(3), np.zeros(2))


def test_many_steps_priced_at_once_equal_each_step_priced_alone_under_tensor_parallel() -> None:
    # The all-reduce's bytes switch from one-shot to two-shot at 512 KB (tp 4): the vectorised pricing the serving
    # loop and validate use must switch at the same step as the per-step model.
    sm = StepModel(load_hardware("h100-sxm"), load_model("llama-3.1-70b"), StepOptions(tp=4, runtime="vllm"))
    tokens = np.array([1.0, 8.0, 24.0, 31.0, 33.0, 40.0, 300.0])
    ctx = 900.0 * tokens
    attn = tokens * (900.0 + 0.5)
    run = sm.price(Batch(tokens=tokens, seqs=tokens, sum_ctx=ctx, sum_win=0.0 * ctx, attn_full=attn,
                         attn_win=0.0 * attn, logits=tokens, attn_decode=attn))
    times, flops, byts = run.time, run.flops_total, run.bytes_total
    for i, t in enumerate(tokens):
        one = sm.cost(Batch(tokens=int(t), seqs=int(t), sum_ctx=ctx[i], sum_win=0.0, attn_full=attn[i], attn_win=0.0,
                            logits=int(t), attn_decode=attn[i]))
        assert times[i] == pytest.approx(one.time_s, rel=1e-12)
        assert flops[i] == pytest.approx(one.flops_total, rel=1e-12)
        assert byts[i] == pytest.approx(one.bytes_total, rel=1e-12)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "gpt-oss-20b", "deepseek-v3"])
def test_decode_only_shortcut_prices_the_same_bits(model: str) -> None:
    # Passing the decode attention sum as the full one (the same object) takes a shorter path through the step
    # model; an equal copy takes the general one. Every figure must agree to the bit, for one step and for runs.
    sm = StepModel(load_hardware("h100-sxm"), load_model(model), StepOptions(runtime="vllm"))
    n = 37.0
    ctx = np.array([900.0, 5000.0, 120_000.0]) * n
    attn = ctx + 0.5 * n
    win = 0.3 * ctx
    run = Batch(tokens=n, seqs=n, sum_ctx=ctx, sum_win=win, attn_full=attn, attn_win=win + 0.5 * n, logits=n,
                attn_decode=attn)
    same, copy = sm.price(run), sm.price(run._replace(attn_decode=attn.copy()))
    for a, b in zip(same, copy, strict=True):
        np.testing.assert_array_equal(a, b)
    for i in range(len(ctx)):
        a_i = float(attn[i])
        one = Batch(tokens=int(n), seqs=int(n), sum_ctx=float(ctx[i]), sum_win=float(win[i]), attn_full=a_i,
                    attn_win=float(win[i]) + 0.5 * n, logits=int(n), attn_decode=a_i)
        other = one._replace(attn_decode=float(np.float64(a_i)))
        assert sm.cost(one) == sm.cost(other) and sm.price(one).time == same.time[i]
