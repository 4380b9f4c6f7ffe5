"""Traffic HBM -> L2 -> SM: conveyor packets at the step's bytes/s, and the step crossing the layers."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text

from tui.frame import Frame
from tui.i18n import t
from tui.render import palette as pal
from tui.render.figures import bandwidth_use, floor_s
from tui.render.fmt import bar, dur, nbytes, pct, si


def rate(frame: Frame) -> float:
    """Bytes per second the step moves: its bytes over its time (0 when idle)."""
    st = frame.step
    if st is None or st.time_s <= 0 or st.tokens <= 0:
        return 0.0
    return st.bytes_total / st.time_s


def density(frame: Frame) -> float:
    """Share of belt cells carrying a packet: the step's bandwidth use (achieved bytes/s over the peak)."""
    return bandwidth_use(frame)


def _packet(k: int, dens: float) -> bool:
    """Whether belt position k holds a packet: a fixed integer-hash scatter, so the belt looks busy, not striped."""
    h = (k * 0x45D9F3B) & 0xFFFFFFFF
    h = (((h >> 16) ^ h) * 0x45D9F3B) & 0xFFFFFFFF
    h = (h >> 16) ^ h
    return h % 1000 < dens * 1000


def belt(frame: Frame, width: int, shift: int) -> Text:
    """`width` belt cells; packets ▸ move right by `shift` cells (derived from simulated time)."""
    dens = density(frame)
    out = Text()
    if dens <= 0:
        return Text("·" * width, style=pal.DIM)
    cells = "".join("▸" if _packet(p - shift, dens) else "·" for p in range(width))
    for ch in cells:
        out.append(ch, style=pal.PACKET if ch == "▸" else pal.DIM)
    return out


def conveyor(frame: Frame, width: int) -> Text:
    """HBM ▸▸·▸ L2 ▸·▸ SM  2.98 TB/s: one belt into L2 and one out to the SMs."""
    r = rate(frame)
    tail = f"  {si(r, 'B/s')}" if r > 0 else ""
    belt_w = max(2, width - len("HBM  L2  SM") - cell_len(tail) - 1)
    w1 = belt_w // 2
    w2 = belt_w - w1
    shift = int(frame.phase * max(1, w1))
    out = Text()
    out.append("HBM ", style=pal.WEIGHTS)
    out.append_text(belt(frame, w1, shift))
    out.append(" L2 ", style=pal.L2)
    out.append_text(belt(frame, w2, shift))
    out.append(" SM", style=pal.SM_LIT)
    out.append(tail, style="bold")
    out.truncate(width, overflow="crop", pad=True)
    return out


def layer_bar(frame: Frame, width: int) -> Text:
    """layer 31/48 ▕██████▌   ▏ 64 % · step 143: the in-flight step crossing the model."""
    lang = frame.lang
    st = frame.step
    if st is None:
        out = Text(t(lang, "no_step"), style=pal.DIM)
        out.truncate(width, pad=True)
        return out
    if st.tokens <= 0:
        out = Text(f"{t(lang, 'step')} {frame.step_tick} · {t(lang, 'idle')}", style=pal.DIM)
        out.truncate(width, pad=True)
        return out
    head = f"{t(lang, 'layer')} {frame.layer:>{len(str(frame.layers))}}/{frame.layers} ▕"
    tail = f"▏ {pct(frame.progress):>5} · {t(lang, 'step')} {frame.step_tick}"
    w = max(4, width - cell_len(head) - cell_len(tail) - 2)
    out = Text(head)
    out.append(bar(frame.progress, w), style=pal.WEIGHTS if frame.in_step else pal.DIM)
    out.append(tail)
    out.truncate(width, overflow="crop", pad=True)
    return out


def step_time(frame: Frame) -> str:
    """'16.0 ms = 8.48 ms floor + 7.52 ms overhead': the calibrated step beside the arithmetic's floor."""
    st = frame.step
    if st is None or st.tokens <= 0:
        return ""
    floor = floor_s(frame)
    over = st.time_s - floor
    if over <= 0.005 * st.time_s:  # --ideal: the step is its floor
        return t(frame.lang, "floor_only", t=dur(st.time_s))
    return t(frame.lang, "floor_split", t=dur(st.time_s), f=dur(floor), o=dur(over))


def summary(frame: Frame, width: int) -> Text:
    """this step 28.1 GB in 16.0 ms = 8.48 ms floor + 7.52 ms overhead."""
    st = frame.step
    if st is None or st.tokens <= 0:
        out = Text("", style=pal.DIM)
    else:
        out = Text(t(frame.lang, "this_step", b=nbytes(st.bytes_total), t=step_time(frame)), style=pal.DIM)
    out.truncate(width, overflow="ellipsis", pad=True)
    return out


def moved(frame: Frame, width: int) -> Text:
    """moved 2.8 TB so far (the C03 running total)."""
    out = Text(t(frame.lang, "moved", b=nbytes(frame.snapshot.bytes_moved.get("hbm", 0.0))), style=pal.DIM)
    out.truncate(width, overflow="ellipsis", pad=True)
    return out


def render(frame: Frame, width: int, height: int = 3) -> list[Text]:
    """Conveyor, layer progress, the step's time against its floor, and the bytes moved so far."""
    rows = [conveyor(frame, width), layer_bar(frame, width), summary(frame, width), moved(frame, width)]
    return rows[:max(0, height)]
