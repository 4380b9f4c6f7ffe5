"""KV pool use and queue length over time, as two labelled sparklines."""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.text import Text

from tui.frame import Frame
from tui.i18n import t
from tui.render import palette as pal
from tui.render.fmt import fit, num, pct

BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int, top: float | None = None) -> str:
    """The last values squeezed into `width` cells (max of each bucket), scaled to `top` or their max."""
    if width <= 0:
        return ""
    vals = list(values)
    if not vals:
        return " " * width
    if len(vals) > width:  # bucket: each cell shows the max of its share, so peaks never vanish
        n = len(vals)
        vals = [max(vals[i * n // width:max(i * n // width + 1, (i + 1) * n // width)]) for i in range(width)]
    hi = top if top is not None else max(vals)
    if hi <= 0:
        s = BLOCKS[0] * len(vals)
    else:
        s = "".join(BLOCKS[min(7, max(0, int(v / hi * 7.999)))] for v in vals)
    return s.rjust(width)


def render(frame: Frame, width: int, height: int = 2) -> list[Text]:
    """KV pool ▁▂▃▅▇ 87 % / queue ▁▁▂▄ 12, newest on the right."""
    lang = frame.lang
    s = frame.snapshot
    h = s.history
    kv_now = s.kv_blocks_used / s.kv_blocks_total if s.kv_blocks_total else 0.0
    q_now = s.queued + s.preempted
    labels = [t(lang, "kv_pool"), t(lang, "queue")]
    lab_w = max(cell_len(x) for x in labels) + 1
    rows = []
    for label, series, top, now, style in (
        (labels[0], h.get("kv_util", ()), 1.0, pct(kv_now), pal.KV_USED),
        (labels[1], h.get("queue", ()), None, num(q_now), pal.PHASE[0]),
    ):
        tail = f" {now:>6}"
        line = Text(fit(label, lab_w), style=pal.DIM)
        line.append(sparkline(series, max(0, width - lab_w - len(tail)), top), style=style)
        line.append(tail)
        line.truncate(width, overflow="crop", pad=True)
        rows.append(line)
    return rows[:max(0, height)]


def tier_hits(frame: Frame) -> str:
    """One short line of the KV tiers' hit shares (GPU 12 % · host 5 % · disk 70 %), "" without tiers."""
    hits = frame.snapshot.kv_tiers
    if not hits:
        return ""
    lang = frame.lang
    parts = " · ".join(f"{t(lang, 'tier_' + name)} {pct(v)}" for name, v in hits.items())
    return f"{t(lang, 'kv_tier_hits')} {parts}"
