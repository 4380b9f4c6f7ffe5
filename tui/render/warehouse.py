"""The HBM warehouse: a capacity bar split into weights, KV pool (used / free) and reserve; the bandwidth gauge."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text

from tui.frame import Frame
from tui.i18n import t
from tui.render import palette as pal
from tui.render.figures import bandwidth_use
from tui.render.fmt import bar, fit, gb, pct, si


def title(frame: Frame) -> str:
    """The panel title: the memory per GPU (and the tensor-parallel group size)."""
    s = frame.snapshot
    tp = s.opts.tp
    key = "warehouse_tp" if tp > 1 else "warehouse"
    return t(frame.lang, key, gb=f"{s.hardware.memory_gb:g}", tp=tp)


def capacity_split(frame: Frame) -> tuple[float, float, float, float]:
    """(weights, KV used, KV free, reserve) in bytes per GPU; they add up to the GPU's memory."""
    s = frame.snapshot
    kv_cap = max(0.0, s.kv_capacity_bytes)
    used = kv_pool(frame) * s.kv_blocks_used / s.kv_blocks_total if s.kv_blocks_total else 0.0
    return s.weights_bytes, used, kv_cap - used, s.reserve_bytes


def kv_pool(frame: Frame) -> float:
    """Bytes per GPU of the KV pool the engine runs: what memory leaves, or a pool held smaller with --kv-blocks
    (drawn within memory: a what-if pool larger than memory fills the KV share)."""
    s = frame.snapshot
    kv_cap = max(0.0, s.kv_capacity_bytes)
    return kv_cap if s.kv_pool_bytes is None else min(kv_cap, s.kv_pool_bytes)


def capacity_bar(frame: Frame, width: int) -> Text:
    """One row: █ weights, █ KV used, ░ KV free, ▒ reserve, proportional to bytes (each >= 1 cell if > 0)."""
    w, used, free, res = capacity_split(frame)
    total = w + used + free + res
    parts = [(w, "█", pal.WEIGHTS), (used, "█", pal.KV_USED), (free, "░", pal.KV_FREE), (res, "▒", pal.RESERVE)]
    if total <= 0 or width <= 0:
        return Text(" " * max(0, width))
    cells = [round(v / total * width) for v, _, _ in parts]
    for i, (v, _, _) in enumerate(parts):  # a non-empty share never vanishes
        if v > 0 and cells[i] == 0:
            cells[i] = 1
    # Make the cells add up to width by trimming or growing the largest part.
    big = max(range(4), key=lambda i: cells[i])
    cells[big] += width - sum(cells)
    heads = reading(frame)
    out = Text()
    for i, ((_, ch, style), n) in enumerate(zip(parts, cells, strict=True)):
        n = max(0, n)
        head = heads[i] if i < len(heads) else None
        if head is None or n == 0:
            out.append(ch * n, style=style)
            continue
        at = min(n - 1, int(head * n))  # the cell holding the layer being read
        out.append(ch * at, style=style)
        out.append("▓", style=pal.WEIGHTS_HOT if i == 0 else pal.KV_READ)
        out.append(ch * (n - at - 1), style=style)
    return out


def reading(frame: Frame) -> tuple[float | None, float | None]:
    """Where the shown step is reading, as a share of (the weights, the KV cache in use): the layer it is on.

    Layers sit side by side in both, so as the step crosses them one cell after the other lights up: crates
    of weights leave the warehouse, and each user's KV for the same layer with them. None: not reading."""
    st = frame.step
    if not frame.in_step or st is None or st.tokens <= 0:
        return None, None
    at = (frame.layer - 1) / max(1, frame.layers)
    b = frame.batch
    reads_kv = st.bytes.get("kv_read", 0.0) > 0 and (b is None or int(b.ctx.sum()) > 0)
    return at, at if reads_kv else None


def legend(frame: Frame, width: int) -> Text:
    """One row naming each share in GB: weights 28.0 · KV 3.1/44.0 · reserve 8.0 · free 40.9."""
    lang = frame.lang
    w, used, free, res = capacity_split(frame)
    out = Text()
    for glyph, style, text in (
        ("█", pal.WEIGHTS, f"{t(lang, 'weights')} {gb(w)}"),
        ("█", pal.KV_USED, f"{t(lang, 'kv')} {gb(used)}/{gb(kv_pool(frame))}"),
        ("▒", pal.RESERVE, f"{t(lang, 'reserve')} {gb(res)}"),
        ("░", pal.KV_FREE, f"{t(lang, 'free')} {gb(free)} GB"),
    ):
        if out:
            out.append(" ")
        out.append(glyph, style=style)
        out.append(text)
    out.truncate(width, overflow="ellipsis", pad=True)
    return out


def bandwidth_gauge(frame: Frame, width: int) -> Text:
    """One row: peak bandwidth (with the what-if multiplier) and the share of it the shown step uses."""
    s, lang = frame.snapshot, frame.lang
    bw = s.roof.bandwidth
    use = bandwidth_use(frame)
    head = f"{t(lang, 'bandwidth')} {si(bw, 'B/s')}"
    if s.opts.bandwidth_mult != 1:
        head += f" (×{s.opts.bandwidth_mult:g})"
    tail = f" {t(lang, 'use_this_step', p=pct(use))}"
    gauge_w = max(0, width - cell_len(head) - cell_len(tail) - 3)
    out = Text(head + " ▕")
    out.append(bar(use, gauge_w), style=pal.PACKET)
    out.append("▏" + tail)
    out.truncate(width, overflow="crop", pad=True)
    return out


def render(frame: Frame, width: int, height: int = 3) -> list[Text]:
    """The panel's rows: capacity bar, legend, bandwidth gauge (fewer when `height` is smaller)."""
    rows = [capacity_bar(frame, width), legend(frame, width), bandwidth_gauge(frame, width)]
    if height >= 4:
        rows.insert(2, Text(fit("", width)))
    return rows[:max(0, height)]
