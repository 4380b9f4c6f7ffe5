"""Traffic HBM -> L2 -> SM: the step's crates (weights, KV, activations) travel layer by layer, and the step
crossing the layers; a fast step replayed time-dilated says so in the title."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text

from tui.frame import Frame
from tui.i18n import t
from tui.render import palette as pal
from tui.render.figures import bandwidth_use, floor_s
from tui.render.fmt import bar, dur, nbytes, num, pct, si


def rate(frame: Frame) -> float:
    """Bytes per second the step moves: its bytes over its time (0 when idle)."""
    st = frame.step
    if st is None or st.time_s <= 0 or st.tokens <= 0:
        return 0.0
    return st.bytes_total / st.time_s


def density(frame: Frame) -> float:
    """Share of belt cells carrying a crate: the step's bandwidth use (achieved bytes/s over the peak)."""
    return bandwidth_use(frame)


def mix(frame: Frame) -> tuple[float, float]:
    """(weights, KV) shares of the shown step's bytes; activations are the rest (each layer has the same mix)."""
    st = frame.step
    total = st.bytes_total if st is not None else 0.0
    if total <= 0:
        return 1.0, 0.0
    kv = st.bytes.get("kv_read", 0.0) + st.bytes.get("kv_write", 0.0)
    return st.bytes.get("weights", 0.0) / total, kv / total


def _hash(k: int, salt: int = 0) -> int:
    """A fixed integer hash of a belt position in 0..999, so crates look scattered, not striped."""
    h = ((k + salt * 0x9E3779B1) * 0x45D9F3B) & 0xFFFFFFFF
    h = (((h >> 16) ^ h) * 0x45D9F3B) & 0xFFFFFFFF
    return ((h >> 16) ^ h) % 1000


def _packet(k: int, dens: float) -> bool:
    """Whether belt position k holds a crate (a share `dens` of positions do)."""
    return _hash(k) < dens * 1000


TRAIN = 6  # belt cells per layer: five crate slots and a gap, so each layer's crates travel as one train
CRATE = "▪"


def crate_style(k: int, weights: float, kv: float) -> str:
    """The colour of the crate at belt position k: weights, KV or activations, in the step's byte mix."""
    h = _hash(k, 1) / 1000
    return pal.WEIGHTS if h < weights else pal.KV_USED if h < weights + kv else pal.ACTS


def offset(frame: Frame) -> int:
    """How far the belt has moved: one train (TRAIN cells) per layer the shown step has crossed, so it follows
    the step's progress (simulated time), and stands still between steps and when paused."""
    st = frame.step
    if st is None:
        return 0
    return int(frame.progress * max(1, st.layers) * TRAIN)


def belt(frame: Frame, width: int, shift: int) -> Text:
    """`width` belt cells; crates ▪ in trains, one per layer, moving right by `shift` cells."""
    dens = density(frame)
    if dens <= 0:
        return Text("·" * width, style=pal.DIM)
    w, kv = mix(frame)
    out = Text()
    run, run_style = "", pal.DIM
    for p in range(width):
        k = p - shift
        crate = k % TRAIN != TRAIN - 1 and _packet(k, dens)
        style = crate_style(k, w, kv) if crate else pal.DIM
        if style != run_style and run:
            out.append(run, style=run_style)
            run = ""
        run_style = style
        run += CRATE if crate else "·"
    out.append(run, style=run_style)
    return out


def conveyor(frame: Frame, width: int) -> Text:
    """HBM ▪▪·▪ L2 ▪·▪ SM  2.98 TB/s: one belt into L2 and one out to the SMs, crates coloured by what they carry."""
    r = rate(frame)
    tail = f"  {si(r, 'B/s')}" if r > 0 else ""
    belt_w = max(2, width - len("HBM  L2  SM") - cell_len(tail) - 1)
    w1 = belt_w // 2
    w2 = belt_w - w1
    shift = offset(frame)
    out = Text()
    out.append("HBM ", style=pal.WEIGHTS)
    out.append_text(belt(frame, w1, shift))
    out.append(" L2 ", style=pal.L2)
    out.append_text(belt(frame, w2, shift - w1))
    out.append(" SM", style=pal.SM_LIT)
    out.append(tail, style="bold")
    out.truncate(width, overflow="crop", pad=True)
    return out


def title(frame: Frame) -> str:
    """The panel title; while a fast step is replayed, it says so with the true factor."""
    if frame.dilation > 0 and frame.step is not None:
        return t(frame.lang, "traffic_replay", x=factor(frame.dilation))
    return t(frame.lang, "traffic")


def factor(x: float) -> str:
    """A slow-down factor for the screen: 320, 1,200, 4.5."""
    return num(x) if x >= 10 else f"{x:.1f}"


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


def kind(frame: Frame) -> str:
    """What the shown step did: 'prefill 2,300 tok', 'decoding ×4', or both (from its batch; '' when unknown)."""
    b, lang = frame.batch, frame.lang
    if b is None or frame.step is None or b.ids.size == 0:
        return ""
    prompt = int(b.new[b.new > 1].sum())
    decode = int((b.new == 1).sum())
    parts = []
    if prompt:
        parts.append(f"{t(lang, 'phase_prefill')} {num(prompt)} {t(lang, 'tok')}")
    if decode:
        parts.append(f"{t(lang, 'phase_decoding')} ×{num(decode)}")
    return " + ".join(parts)


def moved(frame: Frame, width: int) -> Text:
    """decoding ×4 · moved 2.8 TB so far: what the shown step did, and the C03 running total."""
    what = kind(frame)
    out = Text()
    if what:
        out.append(what + " · ", style="bold")
    out.append(t(frame.lang, "moved", b=nbytes(frame.snapshot.bytes_moved.get("hbm", 0.0))), style=pal.DIM)
    out.truncate(width, overflow="ellipsis", pad=True)
    return out


def render(frame: Frame, width: int, height: int = 3) -> list[Text]:
    """Conveyor, layer progress, the step's time against its floor, and the bytes moved so far."""
    rows = [conveyor(frame, width), layer_bar(frame, width), summary(frame, width), moved(frame, width)]
    return rows[:max(0, height)]
