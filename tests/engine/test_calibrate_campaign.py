"""`calibrate` on the vLLM v0.15 campaign's per-stage aggregate table: detected by its columns, each stage a
calibration row with the table's measured means, and a fit that moves a wrong constant toward the measurements."""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.errors import InputError
from engine.evidence import replay as rp
from engine.evidence.measured import calibrate as C
from engine.evidence.measured import campaign
from engine.physics.calibration import runtimes

SHIPPED = Path(str(resources.files("engine").joinpath("presets", "measured", rp.TABLE_FILE)))


def _one(tmp: Path, exp_id: str) -> Path:
    """The shipped table cut to one experiment (its comment lines, header and rows kept)."""
    lines = SHIPPED.read_text(encoding="utf-8").splitlines(True)
    keep = [ln for ln in lines if ln.startswith("#") or ln.startswith("exp_id,") or ln.startswith(f"{exp_id},")]
    p = tmp / f"exp{exp_id}.csv"
    p.write_text("".join(keep), encoding="utf-8")
    return p


def test_detected_by_columns_and_stages_become_rows(tmp_path: Path) -> None:
    assert campaign.is_campaign(SHIPPED)
    other = tmp_path / "x.csv"
    other.write_text("timestamp,input_length\n1,2\n", encoding="utf-8")
    assert not campaign.is_campaign(other)
    rows = campaign.stage_rows(_one(tmp_path, "17"))
    src = [r for r in rp.load_rows() if r["exp_id"] == "17" and r["stage_index"] != "-1"]
    assert [lab for lab, *_ in rows] == ["exp 17#stage1", "exp 17#stage2"] and len(src) == 2
    for (_, e, st, meas, load), r in zip(rows, src, strict=True):
        assert e.exp_id == "17" and st == int(r["stage_index"])
        assert meas * 1e3 == pytest.approx([float(r[f"actual_{k}_mean_ms"]) for k in ("ttft", "itl", "e2e")])
        assert load == pytest.approx(float(r["rate_rps"]) * meas[2])


def test_a_bad_mean_is_one_input_error(tmp_path: Path) -> None:
    p = _one(tmp_path, "64")
    text = p.read_text(encoding="utf-8").replace(",26.716,", ",abc,")
    p.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match="exp64.csv"):
        campaign.stage_rows(p)


def test_fit_moves_a_wrong_bandwidth_toward_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(campaign, "SEARCH_REQUESTS", 40)
    monkeypatch.setattr(rp, "STAGE_REQUESTS", 40)
    path = _one(tmp_path, "64")
    wrong = replace(runtimes()["vllm"], bw_eff=0.5, attn_bw_eff=0.5)
    rows = C.rows_of([], [str(path)])
    base = EngineConfig(model="qwen2.5-7b")
    before = C.errors(wrong, rows, base)[0]
    res = C.calibrate([], base, wrong, ("bw_eff",), cross_validate=False, campaigns=[str(path)])
    after = np.array(res["rows"]["exp 64#stage1"])
    assert res["runtime"].bw_eff > 0.6  # moved up from 0.5: the step model at 0.5 is far too slow for the table
    assert abs(after[1]) < abs(before[1]) and abs(after[1]) < 10.0  # ITL, the mean bandwidth sets
    assert res["held_out"] is None and res["band"].rows == 1


def test_folds_keep_an_experiments_stages_together_and_deal_experiments_round_robin() -> None:
    rows = C.rows_of([], [str(SHIPPED)])
    folds = C.folds_of(rows, 3)
    assert sorted(i for f in folds for i in f) == list(range(len(rows)))
    exps = [{rows[i].record.exp_id for i in f} for f in folds]
    assert not (exps[0] & exps[1]) and not (exps[0] & exps[2]) and not (exps[1] & exps[2])
    mixtral = [sum(rows[i].record.model == "mixtral-8x7b" for i in f) for f in folds]
    assert all(m > 0 for m in mixtral)  # the five runs of one deployment are spread, not one fold's
    assert len(C.folds_of(rows[:2], 5)) == 1  # one experiment's two stages: one fold, never split


def test_k_fold_held_out_errors_come_from_fits_on_the_other_experiments(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(campaign, "SEARCH_REQUESTS", 40)
    monkeypatch.setattr(rp, "STAGE_REQUESTS", 40)
    lines = SHIPPED.read_text(encoding="utf-8").splitlines(True)
    path = tmp_path / "two.csv"
    path.write_text("".join(ln for ln in lines if ln.startswith(("#", "exp_id,", "64,", "66,"))), encoding="utf-8")
    wrong = replace(runtimes()["vllm"], bw_eff=0.5, attn_bw_eff=0.5)
    rows = C.rows_of([], [str(path)])
    base = EngineConfig(model="qwen2.5-7b")
    before = C.errors(wrong, rows, base)
    res = C.calibrate([], base, wrong, ("bw_eff",), campaigns=[str(path)], folds=2)
    held = res["held_out"]
    assert set(held) == {"exp 64#stage1", "exp 66#stage1"}
    for r, b in zip(rows, before, strict=True):  # each fitted on the other qwen2.5-7b experiment alone
        assert abs(held[r.label][1]) < abs(b[1]) / 2
    assert C.medians(held) == pytest.approx(np.median(np.abs(list(held.values())), axis=0).tolist())
