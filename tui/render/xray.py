"""The step x-ray: the shown step's time as one stacked bar of what it waited on (engine.physics.xray's segments).

weights read, KV read, compute, communication (collective by collective, each named with its algorithm: "AR
one-shot", "A2A", "PP send"), the fixed cost and a pipeline's bubble, each a share of the bar as of the step time,
labelled inside where it has room (and a legend row when the panel has two rows). Pure: a Frame in, rows of cells out.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text

from engine.physics.xray import SEGMENTS, XRay, step_xray
from scenes.words import SEGMENT_WORDS
from tui.frame import Frame
from tui.i18n import t
from tui.render import palette as pal
from tui.render.fmt import dur

COLOURS = {"weights": pal.WEIGHTS, "kv": pal.KV_USED, "compute": pal.COMPUTE, "communication": pal.PACKET,
           "overhead": pal.RESERVE, "bubble": pal.SM_IDLE, "lora": pal.DROP_BG}
assert set(COLOURS) == set(SEGMENTS)


def words(lang: str) -> dict[str, str]:
    """The segment names and the title in `lang` (English when it has none)."""
    return SEGMENT_WORDS.get(lang, SEGMENT_WORDS["en"])


def xray(frame: Frame) -> XRay | None:
    """The x-ray of the frame's step (None when idle or before the first step)."""
    st = frame.step
    if st is None or st.tokens <= 0 or st.time_s <= 0:
        return None
    return step_xray(st, frame.snapshot.opts.ideal)


def widths(seconds: list[float], width: int) -> list[int]:
    """Cells per segment: proportional to its seconds, summing to `width` (largest remainders round up); a
    segment with any time gets at least one cell while the bar has cells to give."""
    total = sum(seconds)
    if width <= 0 or total <= 0:
        return [0] * len(seconds)
    exact = [s / total * width for s in seconds]
    cells = [int(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: exact[i] - cells[i], reverse=True)[:width - sum(cells)]:
        cells[i] += 1
    for i, s in enumerate(seconds):
        if s > 0 and cells[i] == 0:
            j = max(range(len(cells)), key=lambda j: cells[j])
            if cells[j] > 1:
                cells[j] -= 1
                cells[i] = 1
    return cells


def pieces(x: XRay, lang: str) -> list[tuple[str, str, float]]:
    """(segment, label, seconds) in display order: the segments, the communication one collective by collective
    where the step has collectives (their names are the algorithms', the same in every language)."""
    w = words(lang)
    out = []
    for name, secs in x.segments():
        if name == "communication" and x.collectives:
            out += [(name, label, v) for label, v in x.collectives]
        else:
            out.append((name, w[name], secs))
    return out


def bar(x: XRay, width: int, lang: str = "en") -> Text:
    """The stacked bar, `width` cells: each segment in its colour, labelled inside with its name and time (or
    just its time, or nothing) as far as its cells allow."""
    out = Text()
    segs = pieces(x, lang)
    for (name, word, secs), n in zip(segs, widths([s for _, _, s in segs], width), strict=True):
        if n <= 0:
            continue
        # longest first; a collective's name shortens to its kind ("AR two-shot" -> "AR") before it vanishes
        tries = (f"{word} {dur(secs)}", dur(secs), word, word.split()[0] if word else "")
        label = next((lab for lab in tries if cell_len(lab) + 1 <= n), "")
        pad = n - cell_len(label)
        out.append(" " * (pad // 2) + label + " " * (pad - pad // 2), style=f"bold #000000 on {COLOURS[name]}")
    return out


def legend(x: XRay, lang: str, width: int) -> Text:
    """■ weights 9.92 ms ■ KV 2.02 ms ■ fixed 1.50 ms: every segment with time in it."""
    out = Text()
    for name, word, s in pieces(x, lang):
        if s <= 0:
            continue
        if out.plain:
            out.append(" ")
        out.append("■ ", style=COLOURS[name])
        out.append(f"{word} {dur(s)}")
    out.truncate(width, overflow="ellipsis", pad=True)
    return out


def inputs(frame: Frame) -> tuple[object, ...]:
    """Everything `render` reads from a frame."""
    return frame.step, frame.snapshot.opts.ideal, frame.lang


def render(frame: Frame, width: int, height: int = 1) -> list[Text]:
    """Row 1: the labelled bar and the step time; a second row, if given one, the legend. Idle: blank."""
    x = xray(frame)
    if x is None:
        return [Text(" " * width)] * max(0, min(height, 2))
    tail = f" {t(frame.lang, 'xray_total')} {dur(x.time_s)}"  # the whole step, not the last segment's time
    top = bar(x, max(1, width - len(tail)), frame.lang)
    top.append(tail, style="bold")
    top.truncate(width, overflow="crop", pad=True)
    return [top, legend(x, frame.lang, width)][:max(0, height)]
