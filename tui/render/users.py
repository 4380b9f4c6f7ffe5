"""One row of the users list: who, phase, KV blocks held, and the phase's detail (prefill bar, streaming answer).

Rows are rendered on demand (the Line API asks only for the visible ones), so 10,000 users cost
the same per frame as 20.
"""

from __future__ import annotations

from functools import cache

from rich.cells import cell_len
from rich.text import Text

from engine.snapshot import Phase
from tui.frame import PHASE_KEYS, Frame
from tui.i18n import t
from tui.render import palette as pal
from tui.render.answers import answer_tail
from tui.render.fmt import bar, crop_left, fit, num


@cache
def phase_width(lang: str) -> int:
    """Cells of the widest phase label in `lang`, so the columns line up (CJK counts 2)."""
    return max(cell_len(t(lang, k)) for k in PHASE_KEYS.values())


def title(frame: Frame) -> str:
    s = frame.snapshot
    n = s.users if s.users > 0 else frame.row_count
    return t(frame.lang, "users_title", n=num(n), r=num(s.running), q=num(s.queued + s.preempted), d=num(s.done))


def row(frame: Frame, y: int, width: int) -> Text:
    """The y-th row of the list (blank past the end)."""
    if frame.rows is None or y < 0 or y >= frame.rows.size:
        return Text(" " * width)
    lang = frame.lang
    r = frame.snapshot.requests
    i = int(frame.rows[y])
    rid, user, ph = int(r.req_id[i]), int(r.user[i]), int(r.phase[i])
    who = f"u{user + 1}" if user >= 0 else f"#{rid}"
    style = pal.PHASE.get(ph, "")
    out = Text(f"{who:>6} ", style="bold")
    out.append(fit(t(lang, PHASE_KEYS.get(ph, "phase_queued")), phase_width(lang)), style=style)
    blocks = int(r.kv_blocks[i])
    out.append(f" KV{blocks:>5} " if blocks else "         ", style=pal.KV_USED)
    out.append("⚡" if bool(r.fast[i]) else " ")
    room = width - cell_len(out.plain) - 1
    if room > 0:
        out.append(" ")
        out.append_text(detail(frame, i, ph, room))
    out.truncate(width, overflow="crop", pad=True)
    return out


def detail(frame: Frame, i: int, ph: int, width: int) -> Text:
    """The phase's own column: a prefill bar, hidden reasoning, the streaming answer, or why it waits."""
    lang = frame.lang
    r = frame.snapshot.requests
    if ph == Phase.QUEUED:
        return Text(fit(t(lang, "wait_queue", n=num(int(r.prompt_len[i]))), width), style=pal.DIM)
    if ph == Phase.PREEMPTED:
        n = int(r.prefilled[i]) + int(r.generated[i])
        return Text(fit(t(lang, "wait_preempted", n=num(n)), width), style=pal.PHASE[Phase.PREEMPTED])
    if ph == Phase.PREFILL:
        done, total = int(r.prefilled[i]), int(r.prompt_len[i])
        tail = f" {num(done)}/{num(total)}"
        w = max(0, min(30, width - len(tail)))
        out = Text(bar(done / total if total else 1.0, w), style=pal.PHASE[Phase.PREFILL])
        out.append(tail)
        out.truncate(width, pad=True)
        return out
    gen, think, outlen = int(r.generated[i]), int(r.think_len[i]), int(r.output_len[i])
    if ph == Phase.THINKING:
        tail = f" {num(gen)}/{num(think)} {t(lang, 'tok')}"
        out = Text(fit(t(lang, "hidden"), max(0, width - cell_len(tail))), style=pal.PHASE[Phase.THINKING])
        out.append(tail, style=pal.DIM)
        out.truncate(width, pad=True)
        return out
    visible = max(0, gen - think)
    tail = f" {num(visible)}/{num(outlen)}" if ph == Phase.DECODING else f" ✓{num(visible)}"
    text_w = max(0, width - cell_len(tail) - 2)
    text = answer_tail(lang, int(r.req_id[i]), visible, text_w)
    if cell_len(text) > text_w:
        text = crop_left(text, text_w).lstrip(" ")
    out = Text("“", style=pal.DIM)
    out.append(text, style=None if ph == Phase.DECODING else pal.DIM)
    out.append("”", style=pal.DIM)
    out.truncate(max(0, width - cell_len(tail)), pad=True)
    out.append(tail, style=pal.DIM)
    out.truncate(width, pad=True)
    return out
