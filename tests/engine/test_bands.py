"""Error bars (engine.evidence.bands): the band from residuals, its widening outside the calibrated range, the words,
and the fields run, step and plan carry."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import InputError
from engine.evidence import bands as B
from engine.physics.calibration import load_runtime_file


def _band() -> B.Band:
    b = B.band("vllm")
    assert b is not None, "the shipped vllm profile records its band"
    return b


def test_band_covers_its_own_residuals_about_eighty_percent() -> None:
    rng = np.random.default_rng(1)
    errs = rng.normal(0.02, 0.1, 400)
    scope = B.Scope(("h100-sxm",), ("llama",), (False,), (1, 1), ("16-bit",))
    b = B.derive("x", {"itl": errs}, scope)
    lo, hi = b.err["itl"]
    assert lo < 0.02 < hi
    assert B.coverage(errs, lo, hi) == pytest.approx(0.8, abs=0.01)
    # a speed table's throughput band lends ITL its inverse, and TTFT / E2E borrow ITL's
    t = B.derive("y", {"throughput": errs}, scope)
    it = B.interval(t, B.Question("h100-sxm", "llama", False, 1, "16-bit"))
    assert set(it.rel) == set(B.METRICS) | {f"{k}_{p}" for k in ("ttft", "itl", "e2e") for p in B.TAILS}
    assert it.rel["ttft"] == it.rel["itl"]


def test_interval_inside_scope_is_the_band_inverted() -> None:
    b = _band()
    it = B.interval(b, B.Question("h100-sxm", "llama", False, 2, "16-bit", 20.0))
    assert it.outside == ()
    e10, e90 = b.err["itl"]
    lo, hi = it.rel["itl"]
    assert lo == pytest.approx(min(1 / (1 + e90) - 1, 0.0)) and hi == pytest.approx(max(1 / (1 + e10) - 1, 0.0))
    assert it.note.startswith("calibrated on H100-SXM") and "this is" not in it.note
    assert it.bounds("itl", 0.01)[0] <= 0.01 <= it.bounds("itl", 0.01)[1]


def test_leaving_the_scope_widens_and_says_so() -> None:
    b = _band()
    home = B.interval(b, B.Question("h100-sxm", "llama", False, 2, "16-bit", 20.0))
    away = B.interval(b, B.Question("a100-80g", "llama", False, 8, "16-bit", 20.0))
    assert away.outside == ("hardware", "tp")
    for k in B.METRICS:
        assert away.rel[k][0] < home.rel[k][0] and away.rel[k][1] > home.rel[k][1]
    assert "this is A100-80G TP8" in away.note
    further = B.interval(b, B.Question("a100-80g", "deepseek", True, 8, "nvfp4", 1000.0))
    assert further.outside == ("hardware", "family", "tp", "batch", "precision")  # MoE is inside: vllm saw Scout
    assert further.pct("itl") > away.pct("itl")


def test_runtime_file_band_is_read_and_a_bad_one_is_one_line(tmp_path) -> None:
    good = tmp_path / "mine.toml"
    good.write_text('[bands-test]\ndescription = "x (calibrated)"\nbw_eff = 0.8\nflops_eff = 0.7\n'
                    "step_overhead_s = 0.001\nlayer_overhead_s = 0.0\nband_itl = [-0.05, 0.1]\nband_rows = 6\n"
                    'scope_hardware = ["l40s"]\nscope_tp = [1, 2]\n', encoding="utf-8")
    load_runtime_file(good)
    b = B.band("bands-test")
    assert b is not None and b.err == {"itl": (-0.05, 0.1)} and b.rows == 6
    bad = tmp_path / "bad.toml"
    bad.write_text('[bands-bad]\ndescription = "x (calibrated)"\nbw_eff = 0.8\nflops_eff = 0.7\n'
                   "step_overhead_s = 0.001\nlayer_overhead_s = 0.0\nband_itl = [-0.05]\n", encoding="utf-8")
    with pytest.raises(InputError, match="bad.toml"):
        B.load_profile_file(str(bad))


def test_plan_row_flips_when_the_target_is_inside_the_interval() -> None:
    row = {"hardware": "h100-sxm", "model": "qwen2.5-7b", "tp": 1, "ttft_s": 0.1, "tpot_s": 0.01}
    inside = B.for_plan_row(row, "vllm", None, None, 0.01)
    assert inside is not None and inside["tpot_s"][0] < 0.01 < inside["tpot_s"][1] and inside["slo_flips"]
    assert not B.for_plan_row(row, "vllm", None, None, 0.02)["slo_flips"]
    assert not B.for_plan_row(row, "vllm", None, 1e-4, None)["slo_flips"]
    assert B.for_plan_row(row, None, None, None, 0.01) is None  # --ideal: no band


@pytest.mark.parametrize("table", ["qwen25", "trtllm"])
def test_shipped_bands_cover_their_held_in_rows_as_claimed(table: str) -> None:
    from engine.evidence.validate import report

    t = report([table])["tables"][0]
    c = t["coverage"]
    n = c["held_in"]["n"]
    assert n == sum(1 for r in t["rows"] if r["split"] == "train" and B.band(r["sim"]["runtime"]) is not None)
    lo, hi = B.expected_coverage_range(n)  # 0.8 +- 3 binomial standard deviations for this many rows
    assert lo <= c["held_in"]["fraction"] <= hi
    assert c["held_out"]["n"] > 0 and 0.0 < c["held_out"]["fraction"] <= 1.0


def test_a_profile_without_a_table_borrows_its_lenders_band_widened_and_says_so() -> None:
    own, lent = B.band("vllm-0.6"), B.band("sglang")
    assert own is not None and lent is not None and lent.borrowed == "vllm-0.6"
    assert lent.rows == own.rows and lent.scope == own.scope
    for k, (lo, hi) in own.err.items():  # each side at least STACK_WIDEN, and wider than the lender's
        assert lent.err[k][0] <= min(lo, 0.0) - 1e-9 and lent.err[k][0] <= -B.STACK_WIDEN + 1e-12
        assert lent.err[k][1] >= max(hi, 0.0) + 1e-9 and lent.err[k][1] >= B.STACK_WIDEN - 1e-12
    q = B.Question("a100-80g", "qwen", False, 1, "16-bit")
    it = B.interval(lent, q)
    assert it.note.startswith("no sglang table: vllm-0.6's band widened +-15 % for another stack")
    assert it.pct("itl") > B.interval(own, q).pct("itl")
    assert B.own_band("sglang") is None  # lent at use: runtimes.toml (fit.py --write) never records it as its own


def test_each_percentile_carries_its_own_band_and_an_unmeasured_tail_is_widened_by_the_rule() -> None:
    b = _band()
    assert {"ttft_p90", "ttft_p99", "e2e_p90", "e2e_p99"} <= set(b.err)  # measured on the campaign's tails
    assert "itl_p90" not in b.err  # the campaign has no ITL percentiles
    it = B.interval(b, B.Question("h100-sxm", "llama", False, 2, "16-bit", 20.0))
    e10, e90 = b.err["ttft_p99"]  # measured / predicted - 1 of the p99's own residuals
    assert it.rel["ttft_p99"] == pytest.approx((min(1 / (1 + e90) - 1, 0.0), max(1 / (1 + e10) - 1, 0.0)))
    lo, hi = it.rel["itl"]
    for p in B.TAILS:  # ITL's tails: its mean's interval widened in quadrature by TAIL_WIDEN
        assert it.rel[f"itl_{p}"][1] >= hi and it.rel[f"itl_{p}"][0] <= lo
        assert it.rel[f"itl_{p}"][1] >= B.TAIL_WIDEN[p] * 0.9
    report = {"ttft_s": {"mean": 0.05, "p50": 0.05, "p90": 0.05, "p99": 0.05}}
    sm = type("SM", (), {})()
    sm.hw, sm.model = type("H", (), {"name": "h100-sxm"})(), type("M", (), {"name": "llama-3.1-8b", "is_moe": False})()
    sm.opts, sm.wdtype = type("O", (), {"tp": 2})(), "bf16"
    got = B.for_run(report, sm, "vllm")["ttft_s"]
    assert got["p50"] == got["mean"] and got["p99"] != got["p90"] != got["mean"]
    assert got["p99"][1] > got["p90"][1] > got["mean"][1]  # the measured TTFT tails are under-predicted more
