"""Number formatting and cell-width helpers shared by the renderers (CJK-safe via rich.cells).

The plain number formatters (si, sig, fixed, dur, pct) live in engine.numbers so that headless code can use them too.
"""

from __future__ import annotations

import math

from rich.cells import cell_len, set_cell_size
from rich.text import Text

from engine.numbers import dur, fixed, pct, si, sig

__all__ = ["bar", "clock", "crop_left", "dur", "fit", "fixed", "gb", "nbytes", "num", "pad_join", "pct", "si", "sig"]


def num(x: float) -> str:
    """A count with thousands separators: 1,234."""
    return f"{int(round(x)):,}"


def nbytes(b: float) -> str:
    """Bytes as GB/TB/MB with 3 significant figures: 28.0 GB."""
    return si(b, "B")


def gb(b: float) -> str:
    """Bytes as a plain GB figure with one decimal: 28.0."""
    return f"{b / 1e9:.1f}"


def clock(s: float) -> str:
    """The simulated clock: 1.204 s, 2:03.4 past a minute."""
    if s < 60:
        return f"{s:.3f} s"
    m, sec = divmod(s, 60)
    return f"{int(m)}:{sec:04.1f}"


def fit(text: str, width: int) -> str:
    """Pad or crop `text` to exactly `width` cells (CJK characters count 2)."""
    return set_cell_size(text, max(0, width))


def crop_left(text: str, width: int) -> str:
    """The last `width` cells of `text` (keeps the tail of a streaming answer), padded to `width`."""
    if cell_len(text) <= width:
        return fit(text, width)
    out: list[str] = []
    used = 0
    for ch in reversed(text):
        w = cell_len(ch)
        if used + w > width:
            break
        out.append(ch)
        used += w
    return " " * (width - used) + "".join(reversed(out))


def bar(frac: float, width: int, full: str = "█", empty: str = "░") -> str:
    """A horizontal bar `width` cells wide, with eighth-block precision for the solid style."""
    frac = min(1.0, max(0.0, frac)) if math.isfinite(frac) else 0.0
    if width <= 0:
        return ""
    if full != "█":
        n = round(frac * width)
        return full * n + empty * (width - n)
    eighths = round(frac * width * 8)
    whole, part = divmod(eighths, 8)
    s = "█" * whole + ("▏▎▍▌▋▊▉"[part - 1] if part else "")
    return s + empty * (width - cell_len(s))


def pad_join(parts: list[Text], width: int, sep: str = "  ") -> Text:
    """Join `parts` with `sep` and crop/pad the result to `width` cells."""
    out = Text(sep).join(parts)
    out.truncate(width, overflow="crop", pad=True)
    return out
