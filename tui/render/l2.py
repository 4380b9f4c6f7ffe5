"""The L2 shelf: refilled bytes/L2-size times per step; the shelf fills as the step's bytes pass through."""

from __future__ import annotations

import math

from rich.cells import cell_len
from rich.text import Text

from tui.frame import Frame
from tui.i18n import t
from tui.render import palette as pal
from tui.render.fmt import bar, num


def title(frame: Frame) -> str:
    """L2 shelf 50 MB."""
    return t(frame.lang, "l2", mb=f"{frame.snapshot.hardware.l2_mb:g}")


def refills_done(frame: Frame) -> tuple[int, int]:
    """(refills so far in the in-flight step, refills the whole step needs)."""
    st = frame.step
    if st is None or st.tokens <= 0:
        return 0, 0
    total = max(1, math.ceil(st.l2_refills))
    return min(total, int(frame.progress * st.l2_refills)), total


def shelf(frame: Frame, width: int) -> Text:
    """[▤▤▤▤░░░] refill 343/560: the shelf's current fill (fractional part of refills done)."""
    lang = frame.lang
    done, total = refills_done(frame)
    st = frame.step
    if total == 0 or st is None:
        fill = 0.0
    elif frame.progress >= 1.0:
        # Not in slow motion: the shelf turns over l2_refills times per step time of simulated clock.
        fill = (frame.clock_s / st.time_s * st.l2_refills) % 1.0 if frame.animate and st.time_s > 0 else 1.0
    else:
        fill = (frame.progress * st.l2_refills) % 1.0
    tail = f" {t(lang, 'refill')} {num(done)}/{num(total)}"
    w = max(4, width - cell_len(tail) - 2)
    out = Text("[")
    out.append(bar(fill, w, full="▤", empty="·"), style=pal.L2)
    out.append("]" + tail)
    out.truncate(width, overflow="crop", pad=True)
    return out


def cumulative(frame: Frame, width: int) -> Text:
    """Total refills since start: all bytes through L2 over its size."""
    s = frame.snapshot
    total = s.bytes_moved.get("l2", s.bytes_moved.get("hbm", 0.0)) / s.hardware.l2_bytes
    out = Text(t(frame.lang, "refills_total", n=num(total)), style=pal.DIM)
    out.truncate(width, overflow="ellipsis", pad=True)
    return out


def render(frame: Frame, width: int, height: int = 2) -> list[Text]:
    """The shelf with its refill counter, then the total refills since start."""
    return [shelf(frame, width), cumulative(frame, width)][:max(0, height)]
