"""The metrics panel: step time, tokens/s, TTFT, TPOT, batch, MFU, bandwidth use, bound-by, $/Mtok (and at batch 1)."""

from __future__ import annotations

import math

from rich.cells import cell_len
from rich.text import Text

from engine.evidence import bands
from tui.frame import Frame
from tui.i18n import t
from tui.render import palette as pal
from tui.render.figures import window
from tui.render.fmt import dur, fit, num, pct

# Engine.rolling_metrics() key (Snapshot.metrics) for each figure.
KEYS: dict[str, str] = {
    "tok_s_out": "tok_s_out", "tok_s_in": "tok_s_in", "tok_s_user": "tok_s_per_user", "ttft": "ttft_p50",
    "tpot": "tpot_p50", "mfu": "mfu", "bw": "bw_util", "cost_in": "cost_per_mtok_in", "cost_out": "cost_per_mtok_out",
    "cost_b1": "cost_per_mtok_out_batch1",
}


def title(frame: Frame) -> str:
    """metrics · last 4.21 s · p50 of 37 answers: the windows every figure below averages over."""
    span, answers = window(frame)
    if span <= 0:
        return t(frame.lang, "metrics")
    key = "metrics_window" if answers > 1 else f"metrics_window_{answers}"
    return t(frame.lang, key, t=dur(span), n=num(answers))


def metric(frame: Frame, name: str) -> float | None:
    """A rolling metric from the snapshot, or None when the engine has none yet (NaN: no answers so far)."""
    v = frame.snapshot.metrics.get(KEYS[name])
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def _f(v: float | None, fmt: str = "{:,.0f}") -> str:
    """A number with `fmt`, or '-' when unknown."""
    return "-" if v is None else fmt.format(v)


def _money(v: float | None) -> str:
    """Dollars: two decimals below 100, whole above."""
    if v is None:
        return "-"
    return f"{v:,.2f}" if v < 100 else f"{v:,.0f}"


def _solo(frame: Frame) -> str:
    """One user alone: its $/Mtok out on the same step model and context, and how many times today's it is."""
    b1, now = metric(frame, "cost_b1"), metric(frame, "cost_out")
    if b1 is None:
        return "-"
    x = b1 / now if now else None
    if x is None:
        return t(frame.lang, "m_cost_b1_v", b1=_money(b1), x="-")
    return t(frame.lang, "m_cost_b1_v", b1=_money(b1), x=f"{x:,.1f}" if x < 100 else f"{x:,.0f}")


def _pm(value: str, bars: tuple[float, float] | None, i: int) -> str:
    """A figure with its error band beside it: "41 ms ±5%" (as it is when unknown or without a band)."""
    return value if bars is None or value == "-" else f"{value} ±{bars[i]:.0f}%"


def items(frame: Frame) -> dict[str, tuple[str, str, str | None]]:
    """name -> (label, value, style), labels in the frame's language."""
    lang, s, st = frame.lang, frame.snapshot, frame.step
    step_t = st.time_s if st is not None and st.tokens > 0 else None
    bound = st.bound if st is not None and st.tokens > 0 else None
    bars = bands.snapshot_pcts(s)  # the profile's 80 % error band for this deployment (engine.evidence.bands)
    return {
        "step": (t(lang, "m_step"), dur(step_t), None),
        # The batch of the step shown (as step time and bound by are: live, in flight or replayed), so the row
        # and the roofline's point describe one step; the snapshot's when no step is shown.
        "batch": (t(lang, "m_batch"), num(st.seqs if step_t is not None else s.batch_size), None),
        # Reading and writing side by side: a prompt is read thousands of tokens a step, an answer one a step.
        "tok_s": (t(lang, "m_tok_s"), f"{_f(metric(frame, 'tok_s_in'))}/{_f(metric(frame, 'tok_s_out'))}", "bold"),
        "per_user": (t(lang, "m_per_user"), _f(metric(frame, "tok_s_user"), "{:,.1f}"), "bold"),
        "ttft": (t(lang, "m_ttft"), _pm(dur(metric(frame, "ttft")), bars, 0), None),
        "tpot": (t(lang, "m_tpot"), _pm(dur(metric(frame, "tpot")), bars, 1), None),
        "mfu": (t(lang, "m_mfu"), pct(metric(frame, "mfu")), None),
        "bw": (t(lang, "m_bw"), pct(metric(frame, "bw")), None),
        "bound": (t(lang, "m_bound"), t(lang, bound) if bound else "-",
                  pal.MEMORY if bound == "memory" else pal.COMPUTE if bound else None),
        "queue": (t(lang, "m_queue"), num(s.queued + s.preempted), None),
        "cost_in": (t(lang, "m_cost_in"), _money(metric(frame, "cost_in")), None),
        "cost_out": (t(lang, "m_cost_out"), _money(metric(frame, "cost_out")), None),
        "cost_b1": (t(lang, "m_cost_b1"), _solo(frame), pal.DIM),
    }


# Two columns: related figures side by side (a row of one spans both). One column: most telling first, so a short
# panel keeps them.
PAIRS = (("step", "batch"), ("tok_s", "per_user"), ("ttft", "tpot"), ("mfu", "bw"), ("bound", "queue"),
         ("cost_in", "cost_out"), ("cost_b1",))
PRIORITY = ("step", "tok_s", "per_user", "ttft", "tpot", "bound", "batch", "mfu", "bw", "cost_in", "cost_out",
            "queue", "cost_b1")


def layout(width: int) -> tuple[tuple[str, ...], ...]:
    """The figures on each row: PAIRS side by side from 44 cells, else PRIORITY one a row."""
    return PAIRS if width >= 44 else tuple((k,) for k in PRIORITY)


def figure_at(width: int, x: int, y: int) -> str | None:
    """The figure drawn at cell (x, y) of a panel `width` cells wide (None past the last row): for clicks."""
    rows = layout(width)
    if not 0 <= y < len(rows) or not 0 <= x < width:
        return None
    names = rows[y]
    name = names[min(len(names) - 1, x // max(1, width // len(names)))]
    return "cost_out" if name == "cost_b1" else name  # the batch-1 figure is explained with $/Mtok out


def render(frame: Frame, width: int, height: int = 6) -> list[Text]:
    """Two columns of label/value pairs (one column when narrow); rows beyond `height` are dropped."""
    its = items(frame)
    lay = layout(width)
    lab_w = max(cell_len(v[0]) for k, v in its.items() if k != "cost_b1") + 1  # (a row of its own: not aligned)
    rows: list[Text] = []
    for names in lay[:max(0, height)]:
        col_w = width // len(names)
        line = Text()
        for k in names:
            lab, val, style = its[k]
            cell = Text(fit(lab, max(lab_w, cell_len(lab) + 1)), style=pal.DIM)
            cell.append(val, style=style)
            cell.truncate(col_w, overflow="ellipsis", pad=True)
            line.append_text(cell)
        line.truncate(width, overflow="crop", pad=True)
        rows.append(line)
    return rows
