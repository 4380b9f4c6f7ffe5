"""One row of the users list: who, phase, KV blocks held, and the phase's detail (prefill bar, streaming answer).

Rows are rendered on demand (the Line API asks only for the visible ones), so 10,000 users cost the
same per frame as 20. A row is a list of (text, style) pieces exactly `width` cells wide: the widget
turns pieces straight into Segments, skipping Rich's Text machinery (the list's hottest path).
"""

from __future__ import annotations

from functools import cache

from rich.cells import cell_len
from rich.text import Text

from engine.serving.snapshot import Phase
from tui.frame import PHASE_KEYS, Frame
from tui.i18n import t
from tui.render import palette as pal
from tui.render.answers import answer_tail
from tui.render.fmt import bar, crop_left, fit, num

Pieces = list[tuple[str, str]]  # (text, Rich style string)
_HOLDS_KV = (Phase.PREFILL, Phase.THINKING, Phase.DECODING)


@cache
def phase_width(lang: str) -> int:
    """Cells of the widest phase label in `lang`, so the columns line up (CJK counts 2)."""
    return max(cell_len(t(lang, k)) for k in PHASE_KEYS.values())


def title(frame: Frame) -> str:
    """users 6 · running 4 · queued 1 · done 1 · preempted 0 so far: evictions under KV pressure since the start
    (the engine does them from ~128 users on the default floor; a user row says so while one waits to recompute)."""
    s = frame.snapshot
    n = s.users if s.users > 0 else frame.row_count
    return t(frame.lang, "users_title", n=num(n), r=num(s.running), q=num(s.queued + s.preempted), d=num(s.done),
             p=num(s.preemptions_total))


def row_pieces(frame: Frame, y: int, width: int) -> Pieces:
    """The y-th row of the list as (text, style) pieces, exactly `width` cells (blank past the end)."""
    if frame.rows is None or y < 0 or y >= frame.rows.size or width <= 0:
        return [(" " * max(0, width), "")]
    lang = frame.lang
    r = frame.snapshot.requests
    i = int(frame.rows[y])
    rid, user, ph = int(r.req_id[i]), int(r.user[i]), int(r.phase[i])
    who = f"u{user + 1}" if user >= 0 else f"#{rid}"
    blocks = int(r.kv_blocks[i]) if ph in _HOLDS_KV else 0  # queued, preempted and done hold none
    mark, kv_style = step_mark(frame, rid, ph)
    head: Pieces = [
        (f"{who:>6} ", "bold"),
        (fit(t(lang, PHASE_KEYS.get(ph, "phase_queued")), phase_width(lang)), pal.PHASE.get(ph, "")),
        (" ", ""),
        (fit(f"KV{blocks:>5} {t(lang, 'kv_blk')}", 12), kv_style) if blocks else (" " * 12, ""),
        ("⚡" if bool(r.fast[i]) else "  ", ""),
        mark,
    ]
    used = sum(cell_len(text) for text, _ in head)
    if used >= width:
        return _crop(head, width)
    return head + detail(frame, i, ph, width - used)


def step_mark(frame: Frame, rid: int, ph: int) -> tuple[tuple[str, str], str]:
    """(the one-cell mark, the KV column's style) for request `rid` and the shown step.

    While the step crosses its layers, each user it serves has its KV read with every layer: the KV column
    lights up. When the step ends, it has dropped one token into that user's answer: a ▾ marks it (it stays
    through a replay's hold). Requests outside the step, or a frame without one, show neither."""
    b = frame.batch
    if b is None or frame.step is None or b.ids.size == 0:
        return (" ", ""), pal.KV_USED
    new = b.new_of(rid)
    if new <= 0:
        return (" ", ""), pal.KV_USED
    if frame.in_step:
        return ("▸", pal.KV_USED), pal.KV_READ
    if new == 1 or ph != Phase.PREFILL:  # a prompt read only in part has no token to show yet
        return ("▾", pal.DROP), pal.KV_USED
    return (" ", ""), pal.KV_USED


def _crop(pieces: Pieces, width: int) -> Pieces:
    """Pieces cut (or padded) to exactly `width` cells."""
    out: Pieces = []
    used = 0
    for text, style in pieces:
        w = cell_len(text)
        if used + w > width:
            out.append((fit(text, width - used), style))
            return out
        out.append((text, style))
        used += w
    if used < width:
        out.append((" " * (width - used), ""))
    return out


def detail(frame: Frame, i: int, ph: int, width: int) -> Pieces:
    """The phase's own column, `width` cells: a prefill bar, hidden reasoning, the streaming answer, or why it waits."""
    lang = frame.lang
    r = frame.snapshot.requests
    if ph == Phase.QUEUED:
        return [(fit(t(lang, "wait_queue", n=num(int(r.prompt_len[i]))), width), pal.DIM)]
    if ph == Phase.PREEMPTED:
        n = int(r.prefilled[i]) + int(r.generated[i])
        return [(fit(t(lang, "wait_preempted", n=num(n)), width), pal.PHASE[Phase.PREEMPTED])]
    if ph == Phase.PREFILL:
        done, total = int(r.prefilled[i]), int(r.prompt_len[i])
        tail = f" {num(done)}/{num(total)}"
        w = max(0, min(30, width - len(tail)))
        return _crop([(bar(done / total if total else 1.0, w), pal.PHASE[Phase.PREFILL]), (tail, "")], width)
    gen, think, outlen = int(r.generated[i]), int(r.think_len[i]), int(r.output_len[i])
    if ph == Phase.THINKING:
        tail = f" {num(gen)}/{num(think)} {t(lang, 'tok')}"
        return _crop([(fit(t(lang, "hidden"), max(0, width - cell_len(tail))), pal.PHASE[Phase.THINKING]),
                      (tail, pal.DIM)], width)
    visible = max(0, gen - think)
    tail = f" {num(visible)}/{num(outlen)}" if ph == Phase.DECODING else f" ✓{num(visible)}"
    text_w = max(0, width - cell_len(tail) - 2)
    text = answer_tail(lang, int(r.req_id[i]), visible, text_w)
    if cell_len(text) > text_w:
        text = crop_left(text, text_w).lstrip(" ")
    pad = max(0, width - cell_len(tail) - cell_len(text) - 2)
    return _crop([("“", pal.DIM), (text, "" if ph == Phase.DECODING else pal.DIM), ("”", pal.DIM),
                  (" " * pad, ""), (tail, pal.DIM)], width)


def row(frame: Frame, y: int, width: int) -> Text:
    """The y-th row as Rich Text (for tests and anything that wants Text rather than Segments)."""
    out = Text()
    for text, style in row_pieces(frame, y, width):
        out.append(text, style=style or None)
    return out
