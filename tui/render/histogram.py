"""A text histogram on a log axis, for `tokensim run --plot`'s latency distributions.

Latencies spread over decades (a 20 ms TTFT beside a 9 s one behind a queue), so the bins are equal in log space;
each column is one bin, its height the share of requests in it, drawn with eighth blocks so small bins still show.
The percentile marks come from the caller (the run report's own p50/p90/p99), so the plot and the table beside it
cannot disagree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

EIGHTHS = " ▁▂▃▄▅▆▇█"  # a cell filled 0/8 .. 8/8 from the bottom


def log_bins(lo: float, hi: float, n: int) -> np.ndarray:
    """n + 1 edges equal in log space from lo to hi (a narrow band around lo when lo == hi)."""
    if hi <= lo:
        lo, hi = lo / 1.5, lo * 1.5
    return np.logspace(math.log10(lo), math.log10(hi), n + 1)


def column_cells(share: float, top: float, height: int) -> list[str]:
    """One column of `height` cells, bottom last, filled to share / top of the height in eighths."""
    eighths = round(share / top * height * 8) if top > 0 else 0
    if share > 0:
        eighths = max(eighths, 1)  # a bin with requests in it never vanishes
    cells = []
    for row in range(height):  # row 0 is the top
        below = (height - 1 - row) * 8
        cells.append(EIGHTHS[min(8, max(0, eighths - below))])
    return cells


def _fmt(v: float, scale: float) -> str:
    """A latency in the plot's unit, three significant figures."""
    return f"{v * scale:.3g}"


def unit_for(seconds: float) -> tuple[float, str]:
    """Milliseconds for latencies under a second, seconds above: (scale, unit)."""
    return (1.0, "s") if seconds >= 1.0 else (1e3, "ms")


def histogram(values: Sequence[float] | np.ndarray, marks: Sequence[tuple[str, float]] = (), width: int = 60,
              height: int = 6, title: str = "") -> list[str]:
    """Rows of text: the distribution of the positive, finite `values` (seconds) over `width` log bins, then the
    axis with its end labels, then one row marking each (name, value) in `marks` under its bin."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    head = [title] if title else []
    if v.size == 0:
        return head + ["(no finished requests to plot)"]
    scale, unit = unit_for(float(v.max()))
    edges = log_bins(float(v.min()), float(v.max()), width)
    counts, _ = np.histogram(v, bins=edges)
    share = counts / v.size
    cols = [column_cells(float(s), float(share.max()), height) for s in share]
    lab = 7
    rows = list(head)
    for r in range(height):
        tick = f"{share.max():.0%}" if r == 0 else ""
        rows.append(f"{tick:>{lab}} │" + "".join(c[r] for c in cols))
    rows.append(f"{'0%':>{lab}} └" + "─" * width)
    left, right = _fmt(edges[0], scale), f"{_fmt(edges[-1], scale)} {unit}"
    rows.append(" " * (lab + 2) + left + " " * max(1, width - len(left) - len(right)) + right)
    rows.extend(_mark_rows(marks, edges, width, lab, scale))
    return rows


def _mark_rows(marks: Sequence[tuple[str, float]], edges: np.ndarray, width: int, lab: int, scale: float) -> list[str]:
    """A row of ^ under each mark's bin, and a row naming them in order (p50 12.1 · p90 ...)."""
    if not marks:
        return []
    line = [" "] * width
    words = []
    for name, val in marks:
        if val is None or not math.isfinite(val) or val <= 0:
            continue
        i = int(np.clip(np.searchsorted(edges, val, side="right") - 1, 0, width - 1))
        line[i] = "^"
        words.append(f"{name} {_fmt(val, scale)}")
    if not words:
        return []
    return [" " * (lab + 2) + "".join(line).rstrip(), " " * (lab + 2) + "^ " + " · ".join(words)]
