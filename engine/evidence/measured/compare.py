"""Replay a measured run through the engine and compare: predicted vs measured TTFT, ITL and E2E per stage.

The record's arrivals, prompt and output lengths (and shared prefixes, for a Mooncake trace) become a trace
file the engine replays as `run --trace` would; the engine's finished requests are then put in the record's
stages by arrival time. ITL is each request's mean gap between tokens after the first (vLLM's TPOT; the
engine's TPOT column), so measured and predicted are the same statistic over the same requests.
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.config import EngineConfig
from engine.evidence.measured.record import Measured

METRICS = ("ttft", "itl", "e2e")
STATS = ("mean", "p50", "p90", "p99")


def write_trace(m: Measured, path: Path) -> None:
    """The record's requests as a `--trace` CSV (arrival_s, prompt and output tokens, prefix id and tokens)."""
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["arrival_s", "prompt_tokens", "output_tokens", "prefix_id", "prefix_tokens"])
        for t, p, o, g, n in zip(m.arrival, m.prompt, m.output, m.prefix, m.prefix_len, strict=True):
            w.writerow([repr(float(t)), int(p), int(o), "" if g < 0 else int(g), int(n) if g >= 0 else 0])


def config_for(m: Measured, base: EngineConfig, trace: Path) -> EngineConfig:
    """The base configuration (model, GPU, flags) serving the record's requests and nothing else."""
    return replace(base, trace=str(trace), trace_speed=1.0, workload=None, users=0, rate=0.0, requests=None,
                   duration=None)


def finished(sim: Any) -> tuple[np.ndarray, np.ndarray]:
    """(latency rows, times rows: engine.serving.accounting L and T columns) of every finished request an Engine or
    a Fleet (each replica's lanes) keeps, row for row."""
    if hasattr(sim, "replica_engine"):
        lanes = [ln for i in range(len(sim.replica_states())) for ln in sim.replica_engine(i).lanes]
    else:
        lanes = list(sim.lanes)
    return (np.concatenate([ln.stats.lat.last() for ln in lanes]),
            np.concatenate([ln.stats.times.last() for ln in lanes]))


def summary(x: np.ndarray) -> dict[str, float | None]:
    """Mean and p50/p90/p99 of the finite values (None when there are none)."""
    x = x[np.isfinite(x)]
    if not x.size:
        return dict.fromkeys(STATS)
    p = np.percentile(x, [50, 90, 99])
    return {"mean": float(x.mean()), "p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2])}


def err_pct(pred: float | None, meas: float | None) -> float | None:
    """Signed percent error of a prediction (None where either side is missing or the measurement is 0)."""
    if pred is None or meas is None or meas == 0:
        return None
    return 100.0 * (pred - meas) / meas


def table(meas: dict[str, np.ndarray], pred: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per metric: measured and predicted statistics (s) and each one's percent error."""
    out: dict[str, Any] = {}
    for k in METRICS:
        a, b = summary(meas[k]), summary(pred[k])
        out[k] = {"measured_s": a, "predicted_s": b, "err_pct": {s: err_pct(b[s], a[s]) for s in STATS}}
    return out


def compare(m: Measured, lat: np.ndarray, arrival: np.ndarray) -> dict[str, Any]:
    """The whole run's table and, where the record has stages, one per stage (requests put in stages by arrival)."""
    from engine.serving.accounting import L

    pred = {"ttft": lat[:, L.TTFT], "itl": lat[:, L.TPOT], "e2e": lat[:, L.E2E]}
    meas = {"ttft": m.ttft, "itl": m.itl, "e2e": m.e2e}
    out: dict[str, Any] = {"requests": {"measured": len(m), "predicted": int(lat.shape[0])}, **table(meas, pred)}
    if m.stages > 1:
        starts = np.array([m.arrival[m.stage == s].min() for s in range(m.stages)])
        ps = np.searchsorted(starts, arrival - 1e-9, side="right") - 1
        out["stages"] = [{"stage": s, "requests": int((m.stage == s).sum()),
                          **table({k: v[m.stage == s] for k, v in meas.items()},
                                  {k: v[ps == s] for k, v in pred.items()})} for s in range(m.stages)]
    return out


def replay(m: Measured, base: EngineConfig, tmp: Path, build: Any = None) -> tuple[dict[str, Any], Any]:
    """Run the record's requests on the base configuration; (comparison, the simulator). `build` makes the
    simulator from a config (default: one Engine); a command passes its own (fleets, checks)."""
    from engine.serving.accounting import T
    from engine.serving.engine import Engine

    path = tmp / "measured-trace.csv"
    write_trace(m, path)
    cfg = config_for(m, base, path)
    sim = (build or Engine)(cfg)
    sim.run()
    lat, times = finished(sim)
    return compare(m, lat, times[:, T.ARRIVAL]), sim
