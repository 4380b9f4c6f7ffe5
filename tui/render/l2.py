"""The L2 shelf: refilled bytes/L2-size times per step; the shelf fills and empties with each layer's crates."""

from __future__ import annotations

import math

from rich.cells import cell_len
from rich.text import Text

from tui.frame import Frame
from tui.i18n import t
from tui.render import palette as pal
from tui.render import traffic
from tui.render.fmt import num, si


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


def fill(frame: Frame) -> float:
    """How full the shelf is: inside a step, the share of the current layer's crates that have arrived, so it
    fills and empties once per layer (each layer's bytes pass through it l2_refills / layers times: far too
    many turns to draw); full at a step's end; empty with no step."""
    st = frame.step
    if st is None or st.tokens <= 0:
        return 0.0
    if not frame.in_step:
        return 1.0
    return (frame.progress * max(1, st.layers)) % 1.0


def shelf(frame: Frame, width: int) -> Text:
    """[▤▤▤▦▥···] refill 343/560: the current layer's crates on the shelf, coloured weights / KV / activations."""
    lang = frame.lang
    done, total = refills_done(frame)
    tail = f" {t(lang, 'refill')} {num(done)}/{num(total)}"
    w = max(4, width - cell_len(tail) - 2)
    n = round(fill(frame) * w)
    weights, kv = traffic.mix(frame)
    # The layer's crates arrive in its byte mix: weights, each user's KV (at least one crate), activations.
    nk = min(n, max(1 if kv > 0 else 0, round(kv * n)))
    nw = min(n - nk, round(weights * n))
    out = Text("[")
    out.append("▤" * nw, style=pal.WEIGHTS)
    out.append("▦" * nk, style=pal.KV_USED)
    out.append("▥" * (n - nw - nk), style=pal.ACTS)
    out.append("·" * (w - n), style=pal.L2)
    out.append("]" + tail)
    out.truncate(width, overflow="crop", pad=True)
    return out


def cumulative(frame: Frame, width: int) -> Text:
    """Why the counter runs so high, in words: every byte a step reads from HBM passes the shelf, so a step
    refills it bytes / L2 size times ('each step streams 29.4 GB through this 50 MB shelf: 588 refills a step')."""
    s, st = frame.snapshot, frame.step
    busy = st is not None and st.tokens > 0
    gb = si(float(st.bytes_total), "B") if busy else "-"
    n = num(max(1, math.ceil(st.l2_refills))) if busy else "-"
    out = Text(t(frame.lang, "refills_total", gb=gb, mb=f"{s.hardware.l2_mb:g}", n=n), style=pal.DIM)
    out.truncate(width, overflow="ellipsis", pad=True)
    return out


def render(frame: Frame, width: int, height: int = 2) -> list[Text]:
    """The shelf with its refill counter, then the words that say what a refill count means."""
    return [shelf(frame, width), cumulative(frame, width)][:max(0, height)]
