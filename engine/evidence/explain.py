"""Every number explains itself: a floor figure's formula with the current values filled in.

Pure: a Snapshot (the roof, the pool, the rolling metrics), the step shown (a StepCost) and, for the latency
figures, the finished requests' TTFT split (engine.serving.accounting) in; lines out, each a sentence's key and
the figures that fill it (formatted numbers, and `Word`s where a word of the reader's language goes). The words
themselves live in scenes.words (render), so the engine holds no prose; the app's explain screen (`e` or a click
on a figure) shows them; the tests check that the arithmetic on each line holds.
The roof is the step model's own (Snapshot.roof = StepModel.roof) and the step's split is engine.physics.xray's, so
the screen never re-derives a figure the floor shows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from engine.numbers import dur, pct, si, sig
from engine.physics.step import StepCost
from engine.physics.xray import step_xray
from engine.serving.accounting import PARTS, Split, percentile_rows
from engine.serving.snapshot import Snapshot

# The figures `e` steps through, in the order the floor shows them.
FIGURES = ("step", "bw", "mfu", "kv", "tok_s", "per_user", "ttft", "tpot", "cost_in", "cost_out", "batch", "queue",
           "bound")

@dataclass(frozen=True, slots=True)
class Word:
    """A word the reader's language supplies: `key` of the words table `table` ('bound', 'segment' or 'part')."""

    table: str
    key: str


@dataclass(frozen=True, slots=True)
class Line:
    """One line of an explanation: the sentence `key` (scenes.words.EXPLAIN) and the figures that fill it; a
    field is a formatted figure, a Word, or a tuple of (Word, figure) pairs (read 'word figure + ...')."""

    key: str
    fields: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class Explanation:
    """One figure's explanation: the figure (its title is the sentence f"t_{figure}") and its lines, formula
    first, then the values filled in."""

    figure: str
    lines: tuple[Line, ...]


def _t(key: str, **kw: object) -> Line:
    """The line `key` with its figures."""
    return Line(key, kw)


def _metric(snap: Snapshot, key: str) -> float | None:
    """A rolling metric, None when missing or not finite."""
    v = snap.metrics.get(key)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def next_figure(current: str | None, step: int = 1) -> str:
    """The figure `step` places after `current` in FIGURES (the first when None), wrapping around: what `e` (and
    the explain screen's arrows) select next."""
    if current not in FIGURES:
        return FIGURES[0]
    return FIGURES[(FIGURES.index(current) + step) % len(FIGURES)]


def explain_figure(name: str, snap: Snapshot, step: StepCost | None, split: Split | None = None,
                   price_per_hour: float | None = None) -> Explanation:
    """The explanation of figure `name` (one of FIGURES) for the floor showing `snap` and `step`.

    `split`: the finished requests' TTFT/E2E parts (for "ttft"); `price_per_hour`: $ per GPU-hour (default the
    hardware's), for the cost figures.
    """
    if name not in FIGURES:
        raise ValueError(f"no figure {name!r}; one of {', '.join(FIGURES)}")
    st = step if step is not None and step.tokens > 0 and step.time_s > 0 else None
    return Explanation(name, tuple(_LINES[name](snap, st, split, price_per_hour)))


# ---- one function per figure: (snapshot, step or None, split, price) -> lines -------------------------

def _step(snap: Snapshot, st: StepCost | None, split: Split | None, price: float | None) -> list[Line]:
    """Step time: the roofline at peak plus overhead, then the x-ray of the same time."""
    if st is None:
        return [_t("step_rule"), _t("no_step")]
    r = snap.roof
    tm, tc = st.bytes_total / r.bandwidth, st.flops_total / r.peak_flops
    floor = r.floor_s(st)
    common = {"b": si(st.bytes_total, "B"), "bw": si(r.bandwidth, "B/s"), "f": si(st.flops_total, "FLOP"),
              "p": si(r.peak_flops, "FLOP/s"), "tm": dur(tm), "tc": dur(tc), "t": dur(st.time_s)}
    out = [_t("step_rule")]
    ideal = snap.opts.ideal
    if ideal:
        out.append(_t("step_ideal", **common))
    else:
        out.append(_t("step_vals", o=dur(st.time_s - floor), **common))
    x = step_xray(st, ideal)
    parts = tuple((Word("segment", n), dur(v)) for n, v in x.segments() if v > 0)  # structural zeros left out
    out.append(_t("xray", parts=parts, t=dur(x.time_s)))
    if x.hidden_memory > 0 or x.hidden_compute > 0:
        out.append(_t("xray_hidden", hm=dur(x.hidden_memory), hc=dur(x.hidden_compute)))
    if not ideal:
        rt = snap.opts.runtime if isinstance(snap.opts.runtime, str) else "runtime"
        out.append(_t("overhead_why", rt=rt))
    return out


def _use(kind: str, snap: Snapshot, st: StepCost | None) -> list[Line]:
    """Bandwidth use or MFU: the shown step's, then the metrics panel's window."""
    r = snap.roof
    out = [_t(f"{kind}_rule")]
    if st is None:
        out.append(_t("no_step"))
    elif kind == "bw":  # the figure the warehouse and traffic panels show
        out.append(_t("bw_vals", b=si(st.bytes_total, "B"), bw=si(r.bandwidth, "B/s"), t=dur(st.time_s),
                      v=pct(r.bandwidth_use(st))))
    else:  # the SM grid's figure
        out.append(_t("mfu_vals", f=si(st.flops_total, "FLOP"), p=si(r.peak_flops, "FLOP/s"),
                      t=dur(st.time_s), v=pct(r.mfu(st))))
    roll = _metric(snap, "bw_util" if kind == "bw" else "mfu")
    w = _metric(snap, "window_s")
    if roll is not None and w:
        out.append(_t("window", w=dur(w), v=pct(roll)))
    return out


def _kv(snap: Snapshot, st: StepCost | None, split: Split | None, price: float | None) -> list[Line]:
    """KV fill: blocks used over the pool, and where the pool comes from."""
    n = snap.kv_blocks_total
    out = [_t("kv_rule"), _t("kv_vals", u=f"{snap.kv_blocks_used:,}", n=f"{n:,}",
                                   v=pct(snap.kv_blocks_used / n if n else 0.0))]
    mem = snap.hardware.memory_bytes  # per GPU, as every figure here
    cap = snap.kv_capacity_bytes
    if mem and abs(mem - snap.weights_bytes - snap.reserve_bytes - cap) <= 0.01 * mem:
        out.append(_t("kv_pool", c=si(cap, "B"), m=si(mem, "B"), w=si(snap.weights_bytes, "B"),
                      r=si(snap.reserve_bytes, "B")))
    per_token = snap.model.kv_bytes_per_token(snap.opts.kv_dtype)
    out.append(_t("kv_block", pt=si(per_token, "B"), bb=si(16 * per_token, "B")))
    return out


def _tok_s(snap: Snapshot, st: StepCost | None, split: Split | None, price: float | None) -> list[Line]:
    """Output tokens/s: tokens over the window; the step's reading of it."""
    out = [_t("tok_rule")]
    v, w = _metric(snap, "tok_s_out"), _metric(snap, "window_s")
    if v is not None and w:
        out.append(_t("tok_vals", n=f"{v * w:,.0f}", w=dur(w), v=f"{v:,.0f}"))
    if st is not None and snap.batch_size:
        out.append(_t("tok_step", b=snap.batch_size, t=dur(st.time_s), v=f"{snap.batch_size / st.time_s:,.0f}"))
    return out


def _per_user(snap: Snapshot, st: StepCost | None, split: Split | None, price: float | None) -> list[Line]:
    """Tokens/s per user: the output rate over the mean batch, about one token a step."""
    out = [_t("pu_rule")]
    x, b, u = _metric(snap, "tok_s_out"), _metric(snap, "batch"), _metric(snap, "tok_s_per_user")
    if x is not None and b and u is not None:
        out.append(_t("pu_vals", x=f"{x:,.0f}", b=f"{b:,.1f}", v=f"{u:,.1f}",
                      t=dur(st.time_s) if st is not None else "-"))
    return out


def _split_lines(ids: np.ndarray, parts: np.ndarray) -> list[Line]:
    """The mean and the p99 request's split, and the part that dominates the p99 request."""
    if not len(parts):
        return [_t("no_answers")]
    mean = parts.mean(axis=0)
    out = [_t("split_mean", t=dur(float(mean.sum())), **{p: dur(float(v)) for p, v in zip(PARTS, mean,
                                                                                                  strict=True)})]
    (i,) = percentile_rows(parts, (99,))  # the request run --json --explain calls the p99 one
    row = parts[i]
    out.append(_t("split_req", q="p99", id=int(ids[i]), t=dur(float(row.sum())),
                  **{p: dur(float(v)) for p, v in zip(PARTS, row, strict=True)}))
    k = int(np.argmax(row))
    if row.sum() > 0:
        out.append(_t("split_most", part=Word("part", PARTS[k]),
                      share=pct(float(row[k] / row.sum()))))
    return out


def _ttft(snap: Snapshot, st: StepCost | None, split: Split | None, price: float | None) -> list[Line]:
    """TTFT: its definition, the p50, and where the mean and the p99 request's time went."""
    out = [_t("ttft_rule")]
    v, n = _metric(snap, "ttft_p50"), _metric(snap, "answers")
    if v is not None and n:
        out.append(_t("ttft_vals", n=f"{n:,.0f}", v=dur(v)))
    if split is not None:
        out += _split_lines(split.ids, split.ttft)
    return out


def _tpot(snap: Snapshot, st: StepCost | None, split: Split | None, price: float | None) -> list[Line]:
    """TPOT: its definition and the p50 against the step time."""
    out = [_t("tpot_rule")]
    v, n = _metric(snap, "tpot_p50"), _metric(snap, "answers")
    if v is not None and n:
        out.append(_t("tpot_vals", n=f"{n:,.0f}", v=dur(v), t=dur(st.time_s) if st is not None else "-"))
    return out


def _cost(side: str, snap: Snapshot, price: float | None) -> list[Line]:
    """$/Mtok in or out: the GPU's $/s times the share of time charged to that side over its tokens/s."""
    h = snap.hardware.price_per_hour if price is None else price
    gpus = max(1, snap.opts.tp)
    ps = h * gpus / 3600.0
    out = [_t("cost_rule"), _t("price", n=gpus, h=f"{h:g}", ps=sig(ps, 3))]
    v, r = _metric(snap, f"cost_per_mtok_{side}"), _metric(snap, f"tok_s_{side}")
    if v is not None and r and ps:
        share = v * r / (ps * 1e6)  # the charged seconds per second of the window, read back from the figure
        out.append(_t("cost_vals", ps=sig(ps, 3), f=pct(share), r=f"{r:,.0f}", v=f"{v:,.3g}"))
    out.append(_t(f"cost_{side}_why"))
    return out


def _batch(snap: Snapshot, st: StepCost | None, split: Split | None, price: float | None) -> list[Line]:
    """Batch: the sequences in the step and where the rest are."""
    return [_t("batch_rule"), _t("batch_vals", n=snap.batch_size, r=snap.running, q=snap.queued,
                                       p=snap.preempted)]


def _queue(snap: Snapshot, st: StepCost | None, split: Split | None, price: float | None) -> list[Line]:
    """Queue: queued plus preempted."""
    return [_t("queue_rule"), _t("queue_vals", q=snap.queued, p=snap.preempted,
                                       w=snap.queued + snap.preempted, tot=snap.preemptions_total)]


def _bound(snap: Snapshot, st: StepCost | None, split: Split | None, price: float | None) -> list[Line]:
    """Bound by: the roofline's two terms at peak, and intensity against the ridge."""
    out = [_t("bound_rule")]
    if st is None:
        return out + [_t("no_step")]
    r = snap.roof
    tm, tc = st.bytes_total / r.bandwidth, st.flops_total / r.peak_flops
    out.append(_t("bound_vals", tm=dur(tm), tc=dur(tc), b=Word("bound", "memory" if tm >= tc else "compute")))
    out.append(_t("ai", f=si(st.flops_total, "FLOP"), b=si(st.bytes_total, "B"),
                  ai=sig(st.arithmetic_intensity, 3), p=si(r.peak_flops, "FLOP/s"), bw=si(r.bandwidth, "B/s"),
                  r=sig(r.ridge, 3)))
    return out


_LINES = {
    "step": _step, "kv": _kv, "tok_s": _tok_s, "per_user": _per_user, "ttft": _ttft, "tpot": _tpot,
    "batch": _batch, "queue": _queue, "bound": _bound,
    "bw": lambda s, st, sp, p: _use("bw", s, st),
    "mfu": lambda s, st, sp, p: _use("mfu", s, st),
    "cost_in": lambda s, st, sp, p: _cost("in", s, p),
    "cost_out": lambda s, st, sp, p: _cost("out", s, p),
}
assert set(_LINES) == set(FIGURES)
