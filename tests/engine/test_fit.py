"""The fit's criterion and the precision its constants are written at."""

from __future__ import annotations

import re
from importlib import resources

import numpy as np
import pytest

import engine.evidence.fit as fit
from engine.evidence.validate import cases
from engine.physics.calibration import runtimes


def test_loss_weighs_one_large_miss_above_several_small_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """RMS log error: a runtime that misses one row by a factor e scores worse than one missing four rows by
    a factor e^(1/4) each, where a mean absolute log error would score them the same."""
    rows = list(cases("trtllm")[0][:4])
    off = {c.key: 1.0 for c in rows}  # each row's predicted / measured
    # The loss only sees predictions: pin them to chosen multiples of the measured speeds.
    monkeypatch.setattr(fit, "predict", lambda c, r=None: c.measured * off[c.key])
    rt = runtimes()["trtllm"]
    assert fit._loss(rt, rows) == pytest.approx(0.0, abs=1e-12)
    off[rows[0].key] = np.e  # one row off by e
    one = fit._loss(rt, rows)
    off.update({c.key: np.e ** 0.25 for c in rows})  # each off by e^(1/4)
    spread = fit._loss(rt, rows)
    assert one == pytest.approx(0.5)  # sqrt(1 / 4)
    assert spread == pytest.approx(0.25)
    assert one > spread


def test_constants_round_to_three_figures_and_to_zero_below_the_last_step() -> None:
    got = fit._round(np.array([3.05e-20, 0.012345, 0.00174]), np.array([1e-8, 1e-3, 1e-6]))
    assert list(got) == [0.0, 0.0123, 0.00174]
    rt = runtimes()["trtllm"]
    assert all(getattr(rt, p) == 0 or abs(getattr(rt, p)) >= fit.LAST_STEP[p] for p in fit.fitted_params("trtllm"))


def test_the_fit_prints_both_kinds_of_record() -> None:
    # `python -m engine.evidence.fit --profile vllm` crashed at its last line on the serving campaign's record
    # (per-mean errors, not per-split ones), after minutes of fitting.
    from engine.evidence.fit import summary

    split = {"train": {"n": 3, "median": 4.0, "max": 9.0}}
    assert summary(split) == "train n=3 median 4.0% max 9.0%"
    assert summary({"errors": {"ttft": 9.1, "itl": 4.7, "e2e": 4.7}}) == "TTFT median 9.1%, ITL median 4.7%, E2E median 4.7%"
    assert summary({}) == ""


def test_the_serving_fit_is_robust_to_one_experiment_it_cannot_explain() -> None:
    # Per mean, the median |ln err| over experiments (in units of its target): one experiment's TTFT off by a factor
    # e moves the loss less than a tenth of what most experiments' ITL 10 % off does, where RMS would rank them
    # the other way round.
    meas = np.tile([0.05, 0.01, 3.0], (13, 1))
    assert fit._serving_loss(meas.copy(), meas) == (pytest.approx(0.0, abs=1e-12), 0.0)
    one = meas.copy()
    one[0, 0] *= np.e
    most = meas.copy()
    most[:7, 1] *= 1.1
    assert fit._serving_loss(one, meas)[0] < fit._serving_loss(most, meas)[0] / 10
    # A common shortfall in TTFT and E2E is the request path's cost, solved for rather than fitted.
    short = meas - np.array([0.008, 0.0, 0.008])
    assert fit._serving_loss(short, meas)[1] == pytest.approx(0.008)


def test_new_serving_constants_are_written_only_when_every_median_holds() -> None:
    old = {"errors": {"ttft": 5.0, "itl": 4.0, "e2e": 4.0}, "saturated": 0}
    assert fit.keeps_medians({"errors": {"ttft": 4.0, "itl": 4.03, "e2e": 3.0}, "saturated": 0}, old)
    assert not fit.keeps_medians({"errors": {"ttft": 1.0, "itl": 4.2, "e2e": 1.0}, "saturated": 0}, old)
    assert not fit.keeps_medians({"errors": {"ttft": 1.0, "itl": 1.0, "e2e": 1.0}, "saturated": 1}, old)


def test_the_vllm_record_is_what_validate_reproduces() -> None:
    """runtimes.toml's vllm record (written by `python -m engine.evidence.fit --profile vllm --write`): its medians are those
    of its per-experiment rows, and three experiments replayed as validate does (a TP4 dense one, the MoE
    Llama-4-Scout, a TP1 one) give the errors it records."""
    from engine.evidence import replay

    text = resources.files("engine").joinpath("presets", "runtimes.toml").read_text("utf-8")
    block = text.split("[vllm]")[1].split("\n[")[0]
    m = re.search(r"vllm015\): TTFT (\d+\.\d) %, ITL (\d+\.\d) %, E2E (\d+\.\d) %, (\d+) saturated", block)
    assert m
    rows = {r[0]: [float(x) for x in r[1:]]
            for r in re.findall(r"(\S+) +([+-]\d+\.\d) +([+-]\d+\.\d) +([+-]\d+\.\d)", block.split("signed err")[1])}
    done = replay.experiments()[0]
    assert sorted(rows) == sorted(e.exp_id[:8] for e in done)
    med = np.median(np.abs(np.array(list(rows.values()))), axis=0)
    assert med == pytest.approx([float(m.group(i)) for i in (1, 2, 3)], abs=0.06)
    for e in (e for e in done if e.exp_id in ("60", "21", "64")):
        got = replay.experiment_row(e)
        assert [got[k]["err_pct"] for k in ("ttft", "itl", "e2e")] == pytest.approx(rows[e.exp_id], abs=0.06)


def test_a_replay_is_keyed_by_the_expert_constant_its_kernel_path_reads() -> None:
    # The fit replays an experiment again only when a constant it reads moves: Mixtral's BF16 experts read
    # expert_bw_eff, Scout's FP8 ones expert_fp8_bw_eff, a dense model neither.
    from dataclasses import replace

    from engine.evidence.replay import experiments

    ex = {e.model: e for e in experiments()[0]}
    rt = runtimes()["vllm"]
    moved16 = replace(rt, expert_bw_eff=(rt.expert_bw_eff or 0.5) * 1.05)
    moved8 = replace(rt, expert_fp8_bw_eff=(rt.expert_fp8_bw_eff or 0.5) * 1.05)
    key = fit._replay_key
    assert key(ex["mixtral-8x7b"], rt, 60) != key(ex["mixtral-8x7b"], moved16, 60)
    assert key(ex["mixtral-8x7b"], rt, 60) == key(ex["mixtral-8x7b"], moved8, 60)
    assert key(ex["llama-4-scout"], rt, 60) == key(ex["llama-4-scout"], moved16, 60)
    assert key(ex["llama-4-scout"], rt, 60) != key(ex["llama-4-scout"], moved8, 60)
    assert key(ex["qwen2.5-7b"], rt, 60) == key(ex["qwen2.5-7b"], moved16, 60) == key(ex["qwen2.5-7b"], moved8, 60)
    assert key(ex["qwen2.5-7b"], rt, 60) != key(ex["qwen2.5-7b"], replace(rt, bw_eff=rt.bw_eff * 1.05), 60)


def test_params_outside_the_serving_set_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert fit.main(["--profile", "vllm", "--params", "bw_eff,warp_speed"]) == 2
    assert "warp_speed" in capsys.readouterr().err
