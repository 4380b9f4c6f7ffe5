"""Figures as SVG and HTML files: `run --plot-file` and `plan --plot-file` (a plot to keep, mail or put on a page).

Plain SVG written here (no plotting library to install): panels stacked in one document, each a scatter on log
axes, a log-binned histogram or a step-function time series, with its axes, ticks and a title. `page` wraps the
document in a self-contained HTML file with the figures' numbers in a table beneath. Every text is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np

from tui.render.histogram import log_bins, unit_for

W, H = 720, 300  # one panel
LEFT, RIGHT, TOP, BOTTOM = 78, 24, 34, 48  # plot-area margins
INK, GRID, FONT = "#222", "#ddd", "font-family='DejaVu Sans, Noto Sans CJK SC, sans-serif' font-size='12'"
COLORS = {"★": "#d62728", "◆": "#1f77b4", "o": "#2ca02c", "x": "#999999", "·": "#999999"}
SERIES = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


@dataclass(frozen=True)
class Axis:
    """One axis: its data range, log or linear, and the pixel span it maps to."""

    lo: float
    hi: float
    log: bool
    p0: float
    p1: float

    def px(self, v: float) -> float:
        """The pixel of data value v."""
        if self.log:
            a, b, x = math.log10(self.lo), math.log10(self.hi), math.log10(v)
        else:
            a, b, x = self.lo, self.hi, v
        f = 0.5 if b <= a else (x - a) / (b - a)
        return self.p0 + f * (self.p1 - self.p0)

    def ticks(self) -> list[float]:
        """Tick values: 1-2-5 steps per decade on a log axis (decades only past three), five steps on a linear one."""
        if self.log:
            d0, d1 = math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi))
            mults = (1.0,) if d1 - d0 > 3 else (1.0, 2.0, 5.0)
            ticks = [m * 10**d for d in range(d0, d1 + 1) for m in mults if self.lo <= m * 10**d <= self.hi]
            if len(ticks) >= 2:
                return ticks  # a narrower log axis (13-19 ms) gets the linear ticks below
        step = _nice((self.hi - self.lo) / 5 or 1.0)
        first = math.ceil(self.lo / step) * step
        return [first + i * step for i in range(int((self.hi - first) / step + 1e-9) + 1)]


def _nice(x: float) -> float:
    """The 1-2-5 number nearest above x, for linear tick steps."""
    mag = 10 ** math.floor(math.log10(x))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= x)


def _num(v: float) -> str:
    """A tick label: three significant figures, no trailing zeros."""
    return f"{v:.3g}"


def _frame(title: str, xa: Axis, ya: Axis, xlabel: str, ylabel: str) -> list[str]:
    """The panel's title, grid lines, tick labels and axis names."""
    out = [f"<text x='{LEFT}' y='20' {FONT} font-weight='bold' fill='{INK}'>{escape(title)}</text>"]
    for v in xa.ticks():
        x = xa.px(v)
        out.append(f"<line x1='{x:.1f}' y1='{TOP}' x2='{x:.1f}' y2='{H - BOTTOM}' stroke='{GRID}'/>")
        out.append(f"<text x='{x:.1f}' y='{H - BOTTOM + 16}' {FONT} text-anchor='middle' fill='{INK}'>{_num(v)}</text>")
    for v in ya.ticks():
        y = ya.px(v)
        out.append(f"<line x1='{LEFT}' y1='{y:.1f}' x2='{W - RIGHT}' y2='{y:.1f}' stroke='{GRID}'/>")
        out.append(f"<text x='{LEFT - 6}' y='{y + 4:.1f}' {FONT} text-anchor='end' fill='{INK}'>{_num(v)}</text>")
    out.append(f"<rect x='{LEFT}' y='{TOP}' width='{W - LEFT - RIGHT}' height='{H - TOP - BOTTOM}' fill='none'"
               f" stroke='{INK}'/>")
    out.append(f"<text x='{(LEFT + W - RIGHT) / 2:.0f}' y='{H - 10}' {FONT} text-anchor='middle'"
               f" fill='{INK}'>{escape(xlabel)}</text>")
    out.append(f"<text transform='translate(16 {(TOP + H - BOTTOM) / 2:.0f}) rotate(-90)' {FONT}"
               f" text-anchor='middle' fill='{INK}'>{escape(ylabel)}</text>")
    return out


def _span(vals: Sequence[float], log: bool) -> tuple[float, float]:
    """A data range with a little room at both ends (a factor on a log axis, a share on a linear one)."""
    lo, hi = min(vals), max(vals)
    if log:
        return lo / 1.15, hi * 1.15
    pad = (hi - lo) * 0.05 or abs(hi) * 0.1 or 1.0
    return min(0.0, lo), hi + pad


def scatter(points: Sequence[tuple[float, float, str]], title: str, xlabel: str, ylabel: str,
            front: Sequence[tuple[float, float]] = ()) -> str:
    """A panel of (x, y, mark) points on log-log axes (mark: ★ best, ◆ Pareto, o meets the SLO, x misses), coloured
    by mark with a legend, the Pareto front joined by a dashed line."""
    pts = [(x, y, m) for x, y, m in points if x > 0 and y > 0 and math.isfinite(x) and math.isfinite(y)]
    if not pts:
        return _empty(title)
    xa = Axis(*_span([p[0] for p in pts], True), True, LEFT, W - RIGHT)
    ya = Axis(*_span([p[1] for p in pts], True), True, H - BOTTOM, TOP)
    out = _frame(title, xa, ya, xlabel, ylabel)
    f = sorted((x, y) for x, y in front if x > 0 and y > 0)
    if len(f) > 1:
        path = " ".join(f"{xa.px(x):.1f},{ya.px(y):.1f}" for x, y in f)
        out.append(f"<polyline points='{path}' fill='none' stroke='{COLORS['◆']}' stroke-dasharray='4 3'/>")
    order = {"x": 0, "·": 0, "o": 1, "◆": 2, "★": 3}
    for x, y, m in sorted(pts, key=lambda p: order.get(p[2], 0)):
        r = 6 if m == "★" else 4
        out.append(f"<circle class='pt' cx='{xa.px(x):.1f}' cy='{ya.px(y):.1f}' r='{r}'"
                   f" fill='{COLORS.get(m, INK)}'><title>{escape(f'{_num(x)}, {_num(y)}')}</title></circle>")
    out += _legend([m for m in LEGEND if any(p[2] == m for p in pts)])
    return _panel(out)


LEGEND = {"★": "best", "◆": "Pareto front", "o": "meets the SLOs", "x": "misses them"}


def _legend(marks: Sequence[str]) -> list[str]:
    """Coloured dots with their meaning, in a row under the title, right-aligned."""
    out, x = [], W - RIGHT
    for m in reversed(marks):
        word = LEGEND[m]
        x -= 7 * len(word) + 22
        out.append(f"<circle cx='{x + 5}' cy='{TOP - 10}' r='4' fill='{COLORS[m]}'/>"
                   f"<text x='{x + 12}' y='{TOP - 6}' {FONT} fill='{INK}'>{escape(word)}</text>")
    return out


def histogram(values: Sequence[float] | np.ndarray, marks: Sequence[tuple[str, float]], title: str, name: str,
              bins: int = 40) -> str:
    """A panel: the share of requests per log-spaced bin of `values` (seconds; shown in ms under a second), with a
    dashed line at each (name, value) mark."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size == 0:
        return _empty(title)
    scale, unit = unit_for(float(v.max()))
    v = v * scale
    xlabel = f"{name} ({unit}, log axis)"
    edges = log_bins(float(v.min()), float(v.max()), bins)
    counts, _ = np.histogram(v, bins=edges)
    share = counts / v.size
    xa = Axis(float(edges[0]), float(edges[-1]), True, LEFT, W - RIGHT)
    ya = Axis(0.0, float(share.max()) * 1.1, False, H - BOTTOM, TOP)
    out = _frame(title, xa, ya, xlabel, "share of requests")
    for i, s in enumerate(share):
        if s > 0:
            x0, x1, y = xa.px(edges[i]), xa.px(edges[i + 1]), ya.px(float(s))
            out.append(f"<rect class='bar' x='{x0:.1f}' y='{y:.1f}' width='{max(x1 - x0 - 1, 1):.1f}'"
                       f" height='{H - BOTTOM - y:.1f}' fill='{SERIES[0]}'/>")
    for name, val in marks:
        if val is None or not math.isfinite(val) or not edges[0] <= val * scale <= edges[-1]:
            continue
        x = xa.px(val * scale)
        out.append(f"<line class='mark' x1='{x:.1f}' y1='{TOP}' x2='{x:.1f}' y2='{H - BOTTOM}' stroke='{INK}'"
                   f" stroke-dasharray='3 3'/>")
        out.append(f"<text x='{x + 3:.1f}' y='{TOP + 12}' {FONT} fill='{INK}'>{escape(name)}</text>")
    return _panel(out)


def timeline(series: Sequence[tuple[str, Sequence[float], Sequence[float]]], t_end: float, title: str,
             ylabel: str) -> str:
    """A panel of step-function series (name, times, values) over [0, t_end] seconds, one colour each, named in a
    legend."""
    tops = [max(v) for _, _, v in series if len(v)]
    if not tops or t_end <= 0:
        return _empty(title)
    xa = Axis(0.0, t_end, False, LEFT, W - RIGHT)
    ya = Axis(0.0, (max(tops) or 1.0) * 1.05, False, H - BOTTOM, TOP)
    out = _frame(title, xa, ya, "simulated time (s)", ylabel)
    for k, (name, t, v) in enumerate(series):
        color = SERIES[k % len(SERIES)]
        pts, prev = [], None
        for ti, vi in zip(t, v, strict=True):
            if prev is not None:
                pts.append(f"{xa.px(ti):.1f},{ya.px(prev):.1f}")
            pts.append(f"{xa.px(ti):.1f},{ya.px(vi):.1f}")
            prev = vi
        out.append(f"<polyline class='series' points='{' '.join(pts)}' fill='none' stroke='{color}'/>")
        out.append(f"<text x='{W - RIGHT - 6}' y='{TOP + 14 + 14 * k}' {FONT} text-anchor='end'"
                   f" fill='{color}'>{escape(name)}</text>")
    return _panel(out)


def _panel(parts: list[str]) -> str:
    """One panel's elements as a group (placed by `document`)."""
    return "<g class='panel'>" + "".join(parts) + "</g>"


def _empty(title: str) -> str:
    """A panel saying there is nothing to draw."""
    return _panel([f"<text x='{LEFT}' y='20' {FONT} font-weight='bold'>{escape(title)}</text>",
                   f"<text x='{W / 2}' y='{H / 2}' {FONT} text-anchor='middle'>(nothing to plot)</text>"])


def document(panels: Sequence[str]) -> str:
    """One SVG document of the panels stacked top to bottom."""
    body = "".join(f"<g transform='translate(0 {i * H})'>{p}</g>" for i, p in enumerate(panels))
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{H * len(panels)}'"
            f" viewBox='0 0 {W} {H * len(panels)}'><rect width='100%' height='100%' fill='white'/>{body}</svg>\n")


def page(title: str, panels: Sequence[str], rows: Sequence[tuple[str, str]]) -> str:
    """A self-contained HTML page: the title, the figures and a table of the numbers behind them."""
    table = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return ("<!doctype html>\n<html><head><meta charset='utf-8'>"
            f"<title>{escape(title)}</title><style>body{{font-family:sans-serif;margin:2em}}"
            "th{text-align:left;padding-right:1em}</style></head>"
            f"<body><h1>{escape(title)}</h1>{document(panels)}<table>{table}</table></body></html>\n")


def write_kind(path: str) -> str:
    """'svg' or 'html' from a --plot-file name; anything else is refused by the caller."""
    low = path.lower()
    return "html" if low.endswith((".html", ".htm")) else "svg" if low.endswith(".svg") else ""
