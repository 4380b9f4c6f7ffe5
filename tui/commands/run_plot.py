"""`run --plot` and `run --plot-file`: a run's latency distributions and its KV pool and queue over the whole run.

The series is read while the run goes, in chunks of ticks short enough that the engine's per-tick history ring
(engine.serving.accounting.HISTORY_POINTS) never wraps between two reads, so an engine's series holds every step;
a fleet's replicas each keep their own clock, so a fleet is sampled at chunk ends (KV fill averaged over its
replicas, queue and batch summed). Long runs are thinned by keeping each pair's peak, so memory stays bounded and a
spike is never thinned away.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.fleet.fleet import Fleet
from engine.serving.accounting import HISTORY_POINTS, L
from engine.serving.engine import Engine
from tui.render import svg
from tui.render.histogram import histogram
from tui.render.timeline import timeline

CHUNK = HISTORY_POINTS // 2  # ticks between reads: half the ring, so no step is missed
FLEET_CHUNK = 64  # ticks between a fleet's samples
MAX_POINTS = 16_384  # a series longer than this is halved (pairwise peaks)
LATENCIES = (("TTFT", "ttft_s", L.TTFT), ("time per output token", "tpot_s", L.TPOT), ("end to end", "e2e_s", L.E2E))


@dataclass
class Series:
    """KV pool fill (%), requests waiting and requests running, against simulated time (s)."""

    t: list[float] = field(default_factory=list)
    kv: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)
    running: list[float] = field(default_factory=list)

    def add(self, t: Any, kv: Any, queue: Any, running: Any) -> None:
        """Append samples (scalars or equal-length sequences), thinning when too long."""
        for name, v in (("t", t), ("kv", kv), ("queue", queue), ("running", running)):
            getattr(self, name).extend(np.atleast_1d(v).tolist())
        if len(self.t) > MAX_POINTS:
            self._halve()

    def _halve(self) -> None:
        """Keep every other time and each pair's peak value: half the points, no spike lost."""
        n = len(self.t) // 2 * 2
        for name in ("kv", "queue", "running"):
            a = np.asarray(getattr(self, name)[:n]).reshape(-1, 2).max(axis=1)
            setattr(self, name, a.tolist() + getattr(self, name)[n:])
        self.t = self.t[:n:2] + self.t[n:]


def sample(engine: Engine | Fleet, series: Series) -> None:
    """Add what happened since the last sample."""
    if isinstance(engine, Fleet):
        st = engine.replica_states()
        kv = 100.0 * float(np.mean([s.kv_used / s.kv_total if s.kv_total else 0.0 for s in st]))
        series.add(engine.clock, kv, sum(s.queued for s in st), sum(s.batch for s in st))
        return
    h = engine.history()
    t = np.asarray(h["time_s"])
    new = t > (series.t[-1] if series.t else -1.0)
    series.add(t[new], 100.0 * np.asarray(h["kv_util"])[new], np.asarray(h["queue"])[new],
               np.asarray(h["batch"])[new])


def chunk(engine: Engine | Fleet) -> int:
    """Ticks to run between two samples."""
    return FLEET_CHUNK if isinstance(engine, Fleet) else CHUNK


def _marks(r: dict[str, Any], key: str) -> list[tuple[str, float]]:
    """The report's own p50 / p90 / p99 of one latency: what the plot marks."""
    d = r.get(key) or {}
    return [(p, d[p]) for p in ("p50", "p90", "p99") if isinstance(d.get(p), (int, float))]


def text(r: dict[str, Any], lat: np.ndarray, series: Series, width: int = 60) -> list[str]:
    """The terminal figures: one histogram per latency, then KV fill and the queue over the run."""
    rows: list[str] = []
    for name, key, col in LATENCIES:
        rows += histogram(lat[:, col] if len(lat) else [], _marks(r, key), width=width,
                          title=f"{name}: share of {len(lat):,} finished requests per bin (log axis)")
        rows.append("")
    end = float(r.get("sim_time_s") or (series.t[-1] if series.t else 0.0))
    rows += timeline(series.t, series.kv, end, width=width, top=100.0, fmt="{:.0f}%",
                     title="KV pool fill over the run (peak per column)")
    rows.append("")
    rows += timeline(series.t, series.queue, end, width=width,
                     title="requests waiting (queued or preempted) over the run (peak per column)")
    return rows


def panels(r: dict[str, Any], lat: np.ndarray, series: Series) -> list[str]:
    """The same figures as SVG panels."""
    out = [svg.histogram(lat[:, col] if len(lat) else [], _marks(r, key), f"{name} of {len(lat):,} finished requests",
                         name) for name, key, col in LATENCIES]
    end = float(r.get("sim_time_s") or (series.t[-1] if series.t else 0.0))
    out.append(svg.timeline([("KV pool fill %", series.t, series.kv)], end, "KV pool fill over the run", "%"))
    out.append(svg.timeline([("waiting", series.t, series.queue), ("running", series.t, series.running)], end,
                            "requests waiting and running over the run", "requests"))
    return out


def file_text(path: str, r: dict[str, Any], lat: np.ndarray, series: Series) -> str:
    """The --plot-file's contents: an SVG document, or an HTML page with the figures' numbers."""
    ps = panels(r, lat, series)
    if svg.write_kind(path) == "svg":
        return svg.document(ps)
    title = f"tokensim run: {r['model']} on {r['hardware']}"
    rows = [(f"{name} p50 / p90 / p99 (s)", " / ".join(f"{v:.4g}" for _, v in _marks(r, key)))
            for name, key, _ in LATENCIES]
    rows += [("requests finished", f"{r['requests_completed']:,}"), ("simulated time", f"{r['sim_time_s']:.1f} s"),
             ("peak KV fill", f"{max(series.kv, default=0.0):.1f} %"),
             ("peak requests waiting", f"{max(series.queue, default=0.0):.0f}")]
    return svg.page(title, ps, rows)
