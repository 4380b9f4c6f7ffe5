"""The SM workstations: one cell per SM, lit by the shown step's MFU (its FLOPs over the peak's in its time)."""

from __future__ import annotations

import math

from rich.text import Text

from tui.frame import Frame
from tui.i18n import t
from tui.render import palette as pal
from tui.render.figures import mfu
from tui.render.fmt import pct

LIT, IDLE = "■", "□"


def title(frame: Frame) -> str:
    """SM workstations 132 · MFU 1.0 % this step · tray 256 KB."""
    hw = frame.snapshot.hardware
    # The live figure first: a narrow screen crops the tray size, never it.
    return t(frame.lang, "sm_grid", n=hw.sm_count, kb=f"{hw.smem_per_sm_kb:g}", p=pct(mfu(frame)))


def lit_count(frame: Frame) -> int:
    """How many SM cells are lit: MFU x SMs, at least one whenever any compute happens."""
    n = frame.snapshot.hardware.sm_count
    b = mfu(frame)
    return 0 if b <= 0 else min(n, max(1, round(b * n)))


def layout(n: int, width: int, height: int) -> tuple[int, int]:
    """(cell width, cells per row): 2-cell squares with a gap when they fit in `height` rows, else 1."""
    for cw in (2, 1):
        per_row = max(1, width // cw)
        if math.ceil(n / per_row) <= max(1, height):
            return cw, per_row
    return 1, max(1, width)


def first_lit(frame: Frame, lit: int, per_row: int) -> int:
    """Where the lit block starts. Inside a step (live or replayed) the work moves over the tiles as the step
    crosses its layers, once round the grid per step: a step with a row's worth of work or more (a prompt's
    many tokens) lights whole rows and moves a row at a time; a decode step's few lit tiles walk cell by
    cell. Between steps it stays put, so the grid only repaints when the busy share changes."""
    n = frame.snapshot.hardware.sm_count
    if not frame.in_step or lit >= n or n <= 0:
        return 0
    if lit >= per_row:
        rows = -(-n // per_row)
        return (int(frame.progress * rows) * per_row) % n
    return int(frame.progress * n) % n


def inputs(frame: Frame, width: int, height: int) -> tuple[int, int, int]:
    """(SMs, lit cells, first lit cell): all `render` draws from at a size."""
    n = frame.snapshot.hardware.sm_count
    lit = lit_count(frame)
    return n, lit, first_lit(frame, lit, layout(n, width, height)[1])


def render(frame: Frame, width: int, height: int = 3) -> list[Text]:
    """Rows of SM cells, as many lit as the shown step's MFU, placed by `first_lit`."""
    n, lit, start = inputs(frame, width, height)
    cw, per_row = layout(n, width, height)
    lit_set = {(start + i) % n for i in range(lit)}
    rows: list[Text] = []
    gap = " " if cw == 2 else ""
    for r0 in range(0, n, per_row):
        row = Text()
        run, run_on = "", None
        # One span per run of equal cells, not one per SM: keeps 10k-cell grids cheap to draw.
        for i in range(r0, min(n, r0 + per_row)):
            on = i in lit_set
            if on is not run_on and run:
                row.append(run, style=pal.SM_LIT if run_on else pal.SM_IDLE)
                run = ""
            run_on = on
            run += (LIT if on else IDLE) + gap
        if run:
            row.append(run, style=pal.SM_LIT if run_on else pal.SM_IDLE)
        row.truncate(width, overflow="crop", pad=True)
        rows.append(row)
    return rows[:max(0, height)]
