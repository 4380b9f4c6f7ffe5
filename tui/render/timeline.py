"""A text time series over a whole run, for `tokensim run --plot`: the KV pool and the queue.

Each column covers an equal slice of simulated time and shows the slice's peak (a queue that spiked for one step
still shows; an average would hide the very moment the pool ran out), drawn in eighth blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tui.render.histogram import column_cells


def peaks(t: np.ndarray, v: np.ndarray, t_end: float, width: int) -> np.ndarray:
    """The largest value v takes in each of `width` equal slices of [0, t_end], v being a step function of the
    samples (t sorted): each value holds until the next sample, so a slice with no sample shows the value held
    into it, and a slice's peak counts the value it started with."""
    if t.size == 0 or t_end <= 0:
        return np.zeros(width)
    idx = np.clip((t / t_end * width).astype(int), 0, width - 1)
    out = np.full(width, -np.inf)
    np.maximum.at(out, idx, v)
    last = np.searchsorted(idx, np.arange(width), side="right") - 1  # each slice's last sample at or before it
    held = np.r_[0.0, np.where(last[:-1] >= 0, v[np.maximum(last[:-1], 0)], 0.0)]  # the value each slice starts at
    return np.maximum(out, held)


def timeline(t: Sequence[float] | np.ndarray, v: Sequence[float] | np.ndarray, t_end: float, width: int = 60,
             height: int = 5, title: str = "", top: float | None = None, fmt: str = "{:.0f}") -> list[str]:
    """Rows of text: v(t) over [0, t_end] as `width` columns of slice peaks, `height` rows high, scaled to `top`
    (the series' own peak when None), with the top label and the time axis in seconds."""
    tt = np.asarray(t, dtype=float)
    vv = np.asarray(v, dtype=float)
    head = [title] if title else []
    if tt.size == 0:
        return head + ["(no steps to plot)"]
    col = peaks(tt, vv, t_end, width)
    hi = float(col.max()) if top is None else top
    cols = [column_cells(float(x), hi, height) if hi > 0 else [" "] * height for x in col]
    lab = 7
    rows = list(head)
    for r in range(height):
        tick = fmt.format(hi) if r == 0 else ""
        rows.append(f"{tick:>{lab}} │" + "".join(c[r] for c in cols))
    rows.append(f"{fmt.format(0):>{lab}} └" + "─" * width)
    right = f"{t_end:,.0f} s" if t_end >= 10 else f"{t_end:.2g} s"
    rows.append(" " * (lab + 2) + "0" + " " * max(1, width - 1 - len(right)) + right)
    return rows
