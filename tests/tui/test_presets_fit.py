"""The pickers' fit explainer: why a preset does not fit (from the physics) and the nearest change the engine's own
validation accepts. Pure tests."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.physics.specs import model_names
from tui.defaults import default_config
from tui.presets import FIX_TPS, explain_fit, fit_words, hardware_choices, model_choices, refusal


def test_qwen_7b_at_tp_8_splits_no_heads_and_tp_4_fits() -> None:
    cfg = replace(default_config(), model="qwen2.5-7b", tp=8)
    fit = explain_fit(cfg)
    assert (fit.kind, fit.figures) == ("heads", {"heads": 28, "kv_heads": 4, "tp": 8})
    assert fit.fix == {"tp": 4} and fit.other_tps == (2, 1)
    assert fit_words(fit, "en") == ("28 attention heads (4 KV heads) do not split over tp 8 · needs tp 4 (68.2 GB"
                                    " KV per GPU, ~2,390 users) · tp 2 (~1,128 users) or 1 (~497 users) would fit too")
    assert fit_words(fit, "zh").startswith("28 个注意力头（4 个 KV 头）不能平均分到 tp 8 · 需要 tp 4")
    assert refusal(cfg) is not None and refusal(replace(cfg, tp=4)) is None


def test_a_model_too_big_for_memory_needs_the_nearest_tp_that_holds_it() -> None:
    cfg = replace(default_config(), model="qwen2.5-72b")  # 145 GB of bf16 weights on an 80 GB H100
    fit = explain_fit(cfg)
    assert fit.kind == "weights" and fit.fix == {"tp": 4}
    assert fit.figures["weights_gb"] == pytest.approx(145.4, abs=0.1) and fit.figures["memory_gb"] == 80
    assert refusal(replace(cfg, tp=2)) is not None  # 72.7 GB + 8 GB reserve: just over
    assert fit_words(fit, "en").startswith("weights 145 GB per GPU + 8 GB reserve exceed 80 GB at tp 1 · needs tp 4")


def test_when_no_tp_splits_the_heads_and_holds_the_weights_a_narrower_dtype_is_the_fix() -> None:
    cfg = replace(default_config(), model="llama-4-maverick", tp=8)  # 40 heads: tp 16 does not split them
    fit = explain_fit(cfg)
    assert fit.kind == "weights" and fit.fix == {"weight_dtype": "fp8"} and not fit.other_tps
    assert all(refusal(replace(cfg, tp=t)) is not None for t in FIX_TPS)
    assert "needs fp8 weights" in fit_words(fit, "en")


def test_a_refusal_the_physics_does_not_name_is_the_validations_own_line() -> None:
    # 70B at tp 2 leaves 1.4 GB a GPU for KV: no room for one 20,200-token request, whose cache needs 3.3 GB
    cfg = replace(default_config(), prompt="20000", output="200", model="llama-3.1-70b", tp=2)
    fit = explain_fit(cfg)
    assert fit.kind == "engine" and fit.message == refusal(cfg)
    assert "one request of 20,200 tokens needs 3.3 GB of KV cache" in fit.message
    assert fit.fix == {"tp": 4}  # tp 1 is as near, but its weights do not fit
    assert fit_words(fit, "en") == (f"{fit.message} · needs tp 4 (36.7 GB KV per GPU, ~22 users) · tp 8 (~65 users),"
                                    " 16 (~76 users) or 32 (~81 users) would fit too")


def test_every_fix_offered_is_one_the_engine_accepts() -> None:
    cfg = replace(default_config(), tp=8)
    for name in model_names():
        fit = explain_fit(replace(cfg, model=name))
        assert fit.fits == (refusal(replace(cfg, model=name)) is None)
        if fit.fix:
            assert refusal(replace(cfg, model=name, **fit.fix)) is None, name
        for t in fit.other_tps:
            assert refusal(replace(cfg, model=name, tp=t)) is None, (name, t)


def test_choices_carry_their_fit() -> None:
    cfg = replace(default_config(), model="llama-3.1-70b")
    gpus = {c.name: c.fit for c in hardware_choices(cfg)}
    # tp 2 holds the weights on H100s but leaves KV for ~4 conversations: the default 6 users get tp 4
    assert gpus["b200"].fits and gpus["h100-sxm"].fix == {"tp": 4} and gpus["rtx4090"].fix == {"tp": 8}
    models = {c.name: c for c in model_choices(replace(cfg, tp=8))}
    assert models["qwen2.5-7b"].fit.fix == {"tp": 4} and models["llama-3.1-8b"].fit.fits
    assert models["qwen2.5-7b"].desc == "7.6B · 28 layers · 15 GB"


def test_an_unknown_preset_is_explained_by_its_refusal_alone() -> None:
    """(Found by the app-keys fuzz: typing into --hardware in the settings form.)"""
    fit = explain_fit(replace(default_config(), hardware="x-[m"))
    assert fit.kind == "engine" and fit.message.startswith("unknown hardware 'x-[m'") and not fit.fix


def test_the_fix_serves_the_current_load_and_says_how_much_kv_room_it_leaves() -> None:
    """Issue #31.4: on an H100, 70B at tp 2 fits but leaves 1.4 GB of KV per GPU (~4 conversations of 1,200
    tokens); for 6 users the fix is tp 4, and tp 2 is named with its room so the choice is the reader's."""
    cfg = replace(default_config(), model="llama-3.1-70b", hardware="h100-sxm", tp=1, users=6)
    fit = explain_fit(cfg)
    assert fit.fix == {"tp": 4} and 2 in fit.other_tps
    gb2, users2 = fit.room[2]
    assert gb2 == pytest.approx(1.45, abs=0.01) and users2 < 6 <= fit.room[4][1]
    assert "needs tp 4 (36.7 GB KV per GPU, ~225 users)" in fit_words(fit, "en") and "tp 2 (~4 users)" in fit_words(
        fit, "en")
    assert "每卡 KV 36.7 GB，约 225 位用户" in fit_words(fit, "zh")
    few = explain_fit(replace(cfg, users=2))  # two users fit in tp 2's room: the nearest degree stays the fix
    assert few.fix == {"tp": 2}
