"""A text scatter plot: points on a log-log grid of characters, for `tokensim plan`'s front."""

from __future__ import annotations

import math

# Later marks win a shared cell: draw the ordinary points first, the front and the best last.
_ORDER = {"x": 0, "·": 1, "o": 2, "◆": 3, "★": 4}


def _scale(v: float, lo: float, hi: float, cells: int) -> int:
    """The cell (0..cells-1) of v on a log axis from lo to hi (linear middle when lo == hi)."""
    if hi <= lo:
        return cells // 2
    f = (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    return min(cells - 1, max(0, round(f * (cells - 1))))


def scatter(points: list[tuple[float, float, str]], width: int = 60, height: int = 14, xlabel: str = "",
            ylabel: str = "") -> list[str]:
    """Rows of text: each (x, y, mark) at its log-scaled cell, y growing upwards, with min/max axis labels.

    Points with a non-positive or non-finite coordinate are left out (a log axis cannot show them).
    """
    pts = [(x, y, m) for x, y, m in points if x > 0 and y > 0 and math.isfinite(x) and math.isfinite(y)]
    if not pts:
        return ["(nothing to plot)"]
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    grid = [[" "] * width for _ in range(height)]
    for x, y, m in sorted(pts, key=lambda p: _ORDER.get(p[2], 1)):
        grid[height - 1 - _scale(y, y0, y1, height)][_scale(x, x0, x1, width)] = m
    lab = 9
    top, bot = f"{y1:.3g}", f"{y0:.3g}"
    rows = [f"{ylabel}"] if ylabel else []
    for i, cells in enumerate(grid):
        tick = top if i == 0 else bot if i == height - 1 else ""
        rows.append(f"{tick:>{lab}} │" + "".join(cells))
    rows.append(" " * lab + " └" + "─" * width)
    left, right = f"{x0:.3g}", f"{x1:.3g}"
    rows.append(" " * (lab + 2) + left + " " * max(1, width - len(left) - len(right)) + right)
    if xlabel:
        rows.append(" " * (lab + 2) + xlabel.center(width).rstrip())
    return rows
