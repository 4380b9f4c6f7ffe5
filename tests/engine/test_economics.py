"""C26: equal spend on serving and training, priced by the step model; the formula's levers move the ratio."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.errors import InputError
from engine.evidence.claims import compute, reference
from engine.physics.economics import Assumptions, replica, sensitivity, stated, training_equivalence
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions


def _ideal_14b() -> StepModel:
    return StepModel(load_hardware("h100-sxm"), load_model("generic-14b"), StepOptions(ideal=True))


def test_ideal_dense_model_matches_hand_arithmetic() -> None:
    # Batch 1, nothing cached, peak figures: a served token costs one read of 28 GB at 3.35 TB/s (8.36 ms);
    # a training token 6 x 14e9 FLOPs at 40 % of 989.4 TFLOP/s (0.212 ms).
    t = training_equivalence(_ideal_14b(), 1, 0, Assumptions(served=1e14, train_mfu=0.4))
    serve = 28e9 / 3.35e12
    train = 6 * 14e9 / (989.4e12 * 0.4)
    assert t.serve_gpu_s_per_token == pytest.approx(serve, rel=0.003)
    assert t.train_gpu_s_per_token == pytest.approx(train, rel=1e-9)
    assert t.train_tokens == pytest.approx(1e14 * serve / train, rel=0.003)
    assert t.chinchilla_x == pytest.approx(1e14 * serve / train / 14e9 / 20, rel=0.003)
    # At batch 1 the SMs are busy ~1/ridge of the step: MFU ~ 1/295.
    assert t.serve_mfu == pytest.approx(1 / 295.4, rel=0.03)


def test_equal_spend_identity_and_levers() -> None:
    sm, batch, ctx, a = stated(reference()["training"])
    t = training_equivalence(sm, batch, ctx, a)
    # Equal spend: the GPU time of the training run equals that of the lifetime of serving.
    assert t.train_tokens * t.train_gpu_s_per_token == pytest.approx(t.served * t.serve_gpu_s_per_token)
    # The serving side really is the engine's decode step: time x GPUs / batch.
    assert t.serve_gpu_s_per_token == pytest.approx(sm.decode(batch, ctx).time_s * sm.opts.tp / batch)
    # Training MFU and lifetime volume move the ratio in proportion, Chinchilla's constant inversely.
    assert training_equivalence(sm, batch, ctx, replace(a, train_mfu=a.train_mfu / 2)).chinchilla_x == pytest.approx(
        t.chinchilla_x / 2)
    assert training_equivalence(sm, batch, ctx, replace(a, served=a.served * 3)).chinchilla_x == pytest.approx(
        t.chinchilla_x * 3)
    assert training_equivalence(sm, batch, ctx, replace(a, chinchilla=40)).chinchilla_x == pytest.approx(
        t.chinchilla_x / 2)
    # A bigger batch amortises the weight read: cheaper serving, less training for the same spend.
    assert training_equivalence(sm, batch * 2, ctx, a).chinchilla_x < t.chinchilla_x
    # Doubling serving compute barely changes a memory-bound decode, while it halves training's cost per token.
    fast = sm.with_options(compute_mult=2.0)
    assert training_equivalence(fast, batch, ctx, a).chinchilla_x > 1.7 * t.chinchilla_x


def test_stated_deployment_fits_and_is_far_past_chinchilla() -> None:
    sm, batch, ctx, a = stated(reference()["training"])
    t = training_equivalence(sm, batch, ctx, a)
    assert t.kv_fits and t.max_batch_fits >= batch
    assert t.max_batch_fits * ctx * sm.kv_bytes_per_token <= sm.kv_capacity_bytes
    assert 10 <= t.chinchilla_x <= 1000  # the article's ~100x, to its order of magnitude
    assert 0.01 < t.serve_mfu < 0.2  # a memory-bound MoE decode at batch 256


def test_claims_row_and_sensitivity_table() -> None:
    (r,) = compute(["C26"])
    assert r["id"] == "C26" and r["agrees"] and r["article"] == 100
    assert r["assumptions"]["train_mfu"] == 0.4 and r["assumptions"]["served"] == 1e14
    sens = r["sensitivity"]
    vol = {x["served"]: x["chinchilla_x"] for x in sens["volume"]}
    assert vol[1e15] == pytest.approx(10 * vol[1e14]) and vol[1e13] == pytest.approx(vol[1e14] / 10)
    calls = sens["volume"][-1]
    assert calls["reading"].startswith("calls") and calls["chinchilla_x"] == pytest.approx(1000 * vol[1e14])
    batches = [x["chinchilla_x"] for x in sens["batch"]]
    assert batches == sorted(batches, reverse=True)
    assert [x["kv_fits"] for x in sens["batch"]][-1] is False  # 512 x 2,000 tokens overflow the pool
    models = {x["model"]: x for x in sens["model"]}
    assert all(x["kv_fits"] for x in models.values())
    assert models["qwen3-30b-a3b"]["chinchilla_x"] > models["deepseek-v3"]["chinchilla_x"] > models[
        "llama-3.1-405b"]["chinchilla_x"]
    assert r["simulated"] == pytest.approx(models["deepseek-v3"]["chinchilla_x"])


def test_replica_is_the_smallest_group_that_holds_the_batch() -> None:
    hw = load_hardware("h200")
    sm = replica(hw, load_model("llama-3.1-70b"), 256, 2000)
    assert sm.kv_capacity_bytes >= 256 * 2000 * sm.kv_bytes_per_token
    smaller = StepModel(hw, load_model("llama-3.1-70b"), StepOptions(tp=sm.opts.tp // 2))
    assert smaller.kv_capacity_bytes < 256 * 2000 * smaller.kv_bytes_per_token


@pytest.mark.parametrize(("batch", "ctx", "mfu"), [(0, 0, 0.4), (1, -1, 0.4), (1, 0, 0.0), (1, 0, 1.5)])
def test_bad_input_is_one_clear_error(batch: int, ctx: int, mfu: float) -> None:
    with pytest.raises(InputError):
        training_equivalence(_ideal_14b(), batch, ctx, Assumptions(served=1e14, train_mfu=mfu))


def test_sensitivity_reads_the_stated_assumptions() -> None:
    ref = dict(reference()["training"], train_mfu=0.2)
    base = {x["batch"]: x["chinchilla_x"] for x in sensitivity(reference()["training"])["batch"]}
    half = {x["batch"]: x["chinchilla_x"] for x in sensitivity(ref)["batch"]}
    assert all(half[b] == pytest.approx(base[b] / 2) for b in base)


def test_the_floor_prices_one_user_alone_beside_the_batch() -> None:
    """The snapshot's cost_per_mtok_out_batch1 is the step model's decode step at batch 1, on the mean context of the
    rows decoding now, at the GPU's price; with 32 users sharing each weight read it is several times today's."""
    from engine.config import EngineConfig
    from engine.serving.engine import Engine
    from engine.serving.snapshot import Phase

    e = Engine(EngineConfig(users=32, prompt="200", output="400", seed=3))
    for _ in range(300):
        e.step()
    snap = e.snapshot()
    r = snap.requests
    # Every decoding row's KV: its prompt plus what it wrote (a thinking row decodes too).
    decoding = (r.phase == Phase.DECODING) | (r.phase == Phase.THINKING)
    ctx = float((r.prefilled + r.generated)[decoding].mean())
    want = e.step_model.decode(1, round(ctx)).time_s * e.rates().dollars_per_s * 1e6
    got = snap.metrics["cost_per_mtok_out_batch1"]
    assert got == pytest.approx(want, rel=0.02)
    assert got > 4 * snap.metrics["cost_per_mtok_out"]
