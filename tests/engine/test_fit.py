"""The fit's criterion and the precision its constants are written at."""

from __future__ import annotations

import numpy as np
import pytest

import engine.fit as fit
from engine.calibration import runtimes
from engine.validate import cases


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
    # `python -m engine.fit --profile vllm` crashed at its last line on the serving campaign's record
    # (per-mean errors, not per-split ones), after minutes of fitting.
    from engine.fit import summary

    split = {"train": {"n": 3, "median": 4.0, "max": 9.0}}
    assert summary(split) == "train n=3 median 4.0% max 9.0%"
    assert summary({"errors": {"ttft": 9.1, "itl": 4.7, "e2e": 4.7}}) == "TTFT median 9.1%, ITL median 4.7%, E2E median 4.7%"
    assert summary({}) == ""
