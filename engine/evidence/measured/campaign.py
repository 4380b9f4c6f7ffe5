"""The vLLM v0.15 campaign's per-stage aggregate CSV (engine/presets/measured/measured_vllm_v015_trainval.csv's
columns) as `tokensim calibrate` input: each experiment's stages become calibration rows.

The table holds means per stage, not requests, so it is not a Measured record: each experiment is rebuilt as a
workload by engine.evidence.replay (its stages, lengths and shared prefixes; its model, GPU, TP, batch limits) and
replayed, and the replay's finished requests are put in their stages (the stage each was sent in). The row's
measured means are the stage row's (stage_index 0, 1, ...); an experiment without stage rows gives its whole-run row.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine import validation as V
from engine.errors import InputError
from engine.evidence import replay as rp

# A campaign table has these columns (the stage's index, the client's measured means).
COLUMNS = ("exp_id", "stage_index", "rate_rps", "actual_ttft_mean_ms", "actual_itl_mean_ms", "actual_e2e_mean_ms")
# Requests per stage each candidate of the search replays: a twentieth of validate's (~1.5 CPU s for the 18
# experiments' 31 stages, against ~25 s in full), so a fit takes CPU minutes; the search corrects these short
# replays' bias by the full replay's (calibrate._ROUNDS) and the fitted profile's errors are scored on validate's
# full replay (replay.STAGE_REQUESTS).
SEARCH_REQUESTS = 50


def is_campaign(path: str | Path) -> bool:
    """Whether a file is a campaign table: its first line that is not a comment names every column of COLUMNS."""
    try:
        with Path(path).open(encoding="utf-8") as f:
            head = next((ln for ln in f if ln.strip() and not ln.startswith("#")), "")
    except (OSError, UnicodeDecodeError):
        return False
    return set(COLUMNS) <= {c.strip() for c in head.split(",")}


def read(path: str | Path) -> tuple[list[rp.Experiment], list[dict[str, str]]]:
    """The file's replayable experiments and all its rows (stage rows carry the measured stage means)."""
    rows = rp.rows_of_text(V.read_text(Path(path), "result file"))
    try:
        done, skipped = rp.experiments_of(rows)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
        raise InputError(f"{path}: not a campaign table tokensim can read ({type(e).__name__}: {e})") from None
    if not done:
        why = "; ".join(sorted({s["reason"] for s in skipped})) or "no whole-run rows (stage_index -1)"
        raise InputError(f"{path}: no experiment tokensim can replay ({why})")
    return list(done), list(rows)


def stage_rows(path: str | Path) -> list[tuple[str, rp.Experiment, int | None, np.ndarray, float]]:
    """(label, experiment, stage index or None for the whole run, measured mean TTFT/ITL/E2E in s, mean requests in
    flight by Little's law) for every stage of every replayable experiment of the file."""
    exps, rows = read(path)
    out = []
    for e in exps:
        mine = sorted((r for r in rows if r["exp_id"] == e.exp_id and r["stage_index"] != "-1"),
                      key=lambda r: int(r["stage_index"]))
        for i, r in enumerate(mine or [e.row]):
            try:
                meas = np.array([float(r[f"actual_{k}_mean_ms"]) for k in ("ttft", "itl", "e2e")]) / 1e3
                rate = float(r["rate_rps"] or e.stages[0][0])
            except ValueError:
                raise InputError(f"{path}: experiment {e.exp_id} stage {r['stage_index']}: a mean is not a "
                                 "number") from None
            if not (np.isfinite(meas).all() and (meas > 0).all()):
                raise InputError(f"{path}: experiment {e.exp_id} stage {r['stage_index']}: means must be > 0")
            out.append((f"exp {e.exp_id}#stage{i + 1}" if mine else f"exp {e.exp_id}", e, i if mine else None,
                        meas, rate * float(meas[2])))
    return out


def predict(rt: Any, rows: Sequence[Any], requests: int | None,
            cache: dict[tuple[Any, ...], dict[str, Any]] | None = None) -> np.ndarray:
    """Predicted mean TTFT, ITL, E2E (s) per row, each experiment replayed once with `requests` per stage; with a
    cache, a replay already run for what decides it (fit._replay_key: a routed-expert constant replays only the
    experiments whose experts stream at it) is not run again."""
    from engine.evidence.fit import _replay_key

    done: dict[tuple[Any, ...], dict[str, Any]] = {} if cache is None else cache
    out = []
    for r in rows:
        e = r.record
        key = (id(e), *_replay_key(e, rt, requests))
        if key not in done:
            done[key] = rp.replay(e, rt, stage_requests=requests, by_stage=True)
        res = done[key]
        vals = (res["ttft_ms"], res["itl_ms"], res["e2e_ms"]) if r.stage is None else res["stages"][r.stage]
        out.append(vals)
    return np.array(out, dtype=float) / 1e3
