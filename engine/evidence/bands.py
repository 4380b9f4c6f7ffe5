"""Error bars: how far a prediction can be trusted, from the runtime profile's residuals on its calibration data.

A profile's record (runtimes.toml, or a `tokensim calibrate` file) carries, beside its constants, the 10th and 90th
percentile of the signed relative error (predicted / measured - 1) of each metric over the rows it was fitted on
(`band_ttft = [p10, p90]`, ...), how many rows (`band_rows`), and the range those rows covered (`scope_*`: GPUs,
model families, dense or MoE, TP, batch, weight precision). A prediction p then has an 80 % interval on what
would be measured: [p / (1 + p90), p / (1 + p10)]. A question outside the covered range is priced by physics the
residuals never tested, so the interval is widened (WIDEN, added in quadrature per dimension left) and the words
say which dimension was left ("calibrated on H100 dense+MoE TP1-4; this is A100: +-21 %").

Metrics: ttft, itl (TPOT and a decode step's time), e2e and throughput (tokens/s). A table that measured only one
of them (a speed table measures throughput) lends it to the others: throughput's error is the inverse of
ITL's (tokens/s = 1 / time per token), and TTFT and E2E borrow the per-token band.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from engine.errors import InputError
from engine.physics.calibration import Runtime, load_runtime_file, runtime_table

METRICS = ("ttft", "itl", "e2e", "throughput")
PERCENTILES = (10.0, 90.0)  # the band: an 80 % interval
# Latency percentiles with a band of their own (band_ttft_p90, ...: the residuals of that percentile, where a table
# measured it: the vLLM v0.15 campaign has TTFT and E2E p90 and p99); a median (p50) takes its mean's band.
TAILS = ("p90", "p99")
# A tail no table measured (ITL's; every tail of a speed-table profile) takes its mean's band widened on each side
# (in quadrature) by TAIL_WIDEN: a tail rides on queueing and batch bursts the means average away. p90: the median,
# over the sides of the campaign's TTFT and E2E p90 bands, of the extra half-width (in quadrature) each needed over
# its mean's band (0.22, 0.06, 0.03, 0.10 -> 0.08; vllm profile, runtimes.toml); p99: twice that, a rule, since the
# campaign's p99 residuals are one-sided (TTFT p99 is under-predicted by 12-60 %: tails the engine does not model).
TAIL_WIDEN = {"p90": 0.08, "p99": 0.16}
# Extra relative spread per dimension a question leaves (added in quadrature to each side of the band). Judgement,
# not a fit: the shipped tables' held-out rows miss by up to ~25 % inside one GPU and framework (runtimes.toml:
# vllm-0.6 held-out max 25.3 %, hf-eager 26.4 %), and another GPU or MoE adds kernels the fit never saw, so those
# two count for more than a model family, TP, batch or precision step inside a measured kernel path.
WIDEN = {"hardware": 0.15, "moe": 0.15, "family": 0.10, "tp": 0.10, "batch": 0.10, "precision": 0.10}
# A profile no measured table fits borrows its lender's band (runtimes.toml: sglang takes vllm-0.6's constants),
# widened on each side (in quadrature) for running on another serving stack: its own scheduler, kernels and graph
# capture, which the lender's residuals never tested. Judgement, not a fit: as much as another GPU or MoE in WIDEN.
BORROWED = {"sglang": "vllm-0.6"}
STACK_WIDEN = 0.15


@dataclass(frozen=True, slots=True)
class Scope:
    """What a profile's calibration rows covered (None: not recorded, never counted as left)."""

    hardware: tuple[str, ...]
    family: tuple[str, ...]
    moe: tuple[bool, ...]
    tp: tuple[int, int]
    precision: tuple[str, ...]
    batch: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class Band:
    """A profile's residual band: per measured metric (p10, p90) of predicted / measured - 1, over `rows` rows
    (the metrics it did not measure are lent at use, see _complete)."""

    runtime: str
    err: dict[str, tuple[float, float]]
    rows: int
    scope: Scope
    borrowed: str | None = None  # the lender whose band this is, widened (BORROWED); None: the profile's own


@dataclass(frozen=True, slots=True)
class Question:
    """What a prediction is about, in the scope's terms (batch None: not known, not checked)."""

    hardware: str
    family: str
    moe: bool
    tp: int
    precision: str
    batch: float | None = None


@dataclass(frozen=True, slots=True)
class Interval:
    """Per metric the 80 % interval of measured / predicted - 1 (lo <= 0 <= hi), what the question left, words."""

    rel: dict[str, tuple[float, float]]
    outside: tuple[str, ...]
    note: str

    def bounds(self, metric: str, value: float | None) -> list[float] | None:
        """[low, high] around a predicted value (None for an unknown value)."""
        if value is None or not math.isfinite(value):
            return None
        lo, hi = self.rel[metric]
        return [_sig(value * (1.0 + lo)), _sig(value * (1.0 + hi))]

    def pct(self, metric: str) -> float:
        """The wider side of a metric's interval in percent (the "+-x %" shown beside a figure)."""
        lo, hi = self.rel[metric]
        return 100.0 * max(-lo, hi)


def _sig(x: float) -> float:
    """Four significant figures: an 80 % interval is not known past them."""
    return float(f"{x:.4g}")


def family(model_name: str) -> str:
    """A model's family: its name's leading letters (llama-3.1-70b -> llama, qwen2.5-7b -> qwen)."""
    m = re.match(r"[a-z]+", model_name.lower())
    return m.group(0) if m else model_name.lower()


def precision(weight_dtype: str) -> str:
    """Weight precision class: 16-bit floats are one (bf16 and fp16 run the same kernels)."""
    return "16-bit" if weight_dtype in ("bf16", "fp16") else weight_dtype


def question_of(sm: Any, batch: float | None = None) -> Question:
    """The question a StepModel (and, where known, its batch) asks."""
    return Question(hardware=sm.hw.name, family=family(sm.model.name), moe=bool(sm.model.is_moe), tp=int(sm.opts.tp),
                    precision=precision(sm.wdtype), batch=batch)


def derive(runtime: str, errors: dict[str, Sequence[float]], scope: Scope) -> Band:
    """A band from signed relative errors per metric (fractions, predicted / measured - 1)."""
    err = {}
    for k, v in errors.items():
        a = np.asarray(v, dtype=float)
        a = a[np.isfinite(a)]
        if a.size:
            lo, hi = np.percentile(a, PERCENTILES)
            err[k] = (float(lo), float(hi))
    n = max((len(v) for v in errors.values()), default=0)
    return Band(runtime, err, n, scope)


def _complete(err: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """Every metric: throughput and ITL lend each other their inverse, TTFT and E2E borrow ITL's band."""
    out = dict(err)
    if "itl" not in out and "throughput" in out:
        lo, hi = out["throughput"]
        out["itl"] = (1.0 / (1.0 + hi) - 1.0, 1.0 / (1.0 + lo) - 1.0)
    if "throughput" not in out and "itl" in out:
        lo, hi = out["itl"]
        out["throughput"] = (1.0 / (1.0 + hi) - 1.0, 1.0 / (1.0 + lo) - 1.0)
    for k in ("ttft", "e2e"):
        if k not in out and "itl" in out:
            out[k] = out["itl"]
    for k in ("ttft", "itl", "e2e"):
        for p in TAILS:
            if f"{k}_{p}" not in out and k in out:
                lo, hi = out[k]
                out[f"{k}_{p}"] = (-math.hypot(min(lo, 0.0), TAIL_WIDEN[p]), math.hypot(max(hi, 0.0), TAIL_WIDEN[p]))
    return out


def band_from_table(name: str, d: dict[str, Any]) -> Band | None:
    """The band a profile section records (None when it records none)."""
    keys = [*METRICS, *(f"{k}_{p}" for k in ("ttft", "itl", "e2e") for p in TAILS)]
    err = {k: (float(d[f"band_{k}"][0]), float(d[f"band_{k}"][1])) for k in keys if f"band_{k}" in d}
    if not err:
        return None
    batch = d.get("scope_batch")
    scope = Scope(hardware=tuple(d.get("scope_hardware", ())), family=tuple(d.get("scope_family", ())),
                  moe=tuple(bool(x) for x in d.get("scope_moe", ())),
                  tp=(int(d.get("scope_tp", (1, 1))[0]), int(d.get("scope_tp", (1, 1))[1])),
                  precision=tuple(d.get("scope_precision", ())),
                  batch=None if batch is None else (float(batch[0]), float(batch[1])))
    return Band(name, err, int(d.get("band_rows", 0)), scope)


def band(runtime: str | None) -> Band | None:
    """The band of a profile by name (shipped or registered by --runtime-file); None for none or no record."""
    own = own_band(runtime)
    lender = band(BORROWED[runtime]) if own is None and runtime in BORROWED else None
    if lender is None:
        return own
    err = {k: (-math.hypot(min(lo, 0.0), STACK_WIDEN), math.hypot(max(hi, 0.0), STACK_WIDEN))
           for k, (lo, hi) in lender.err.items()}
    return Band(runtime, err, lender.rows, lender.scope, lender.runtime)


def own_band(runtime: str | None) -> Band | None:
    """The band a profile's own record holds (None: none, or no record); band() lends a borrowed one."""
    d = None if runtime is None else runtime_table(runtime)
    return None if d is None or runtime is None else band_from_table(runtime, d)


def toml_lines(b: Band | None) -> list[str]:
    """The band and scope as runtimes.toml lines (empty for no band)."""
    if b is None:
        return []

    def arr(xs: Iterable[Any]) -> str:
        return "[" + ", ".join(f'"{x}"' if isinstance(x, str) else ("true" if x is True else "false" if x is False
                                                                    else f"{x:.4g}") for x in xs) + "]"

    s = b.scope
    lines = [f"# Error band ({b.rows} rows): 10th and 90th percentile of predicted / measured - 1 per metric "
             "(engine/evidence/bands.py)."]
    lines += [f"band_{k} = {arr(v)}" for k, v in b.err.items()]
    lines += [f"band_rows = {b.rows}", f"scope_hardware = {arr(s.hardware)}", f"scope_family = {arr(s.family)}",
              f"scope_moe = {arr(s.moe)}", f"scope_tp = {arr(s.tp)}", f"scope_precision = {arr(s.precision)}"]
    if s.batch is not None:
        lines.append(f"scope_batch = {arr(s.batch)}")
    return lines


def left(s: Scope, q: Question) -> tuple[str, ...]:
    """The dimensions of the question outside the calibrated scope, in WIDEN's order."""
    out = {"hardware": bool(s.hardware) and q.hardware not in s.hardware,
           "moe": bool(s.moe) and q.moe not in s.moe,
           "family": bool(s.family) and q.family not in s.family,
           "tp": not s.tp[0] <= q.tp <= s.tp[1],
           "batch": s.batch is not None and q.batch is not None and not s.batch[0] / 2 <= q.batch <= 2 * s.batch[1],
           "precision": bool(s.precision) and q.precision not in s.precision}
    return tuple(k for k in WIDEN if out[k])


def interval(b: Band, q: Question) -> Interval:
    """The 80 % interval of each metric for a question, widened for each dimension it leaves, with its words."""
    out = left(b.scope, q)
    extra = math.sqrt(sum(WIDEN[k] ** 2 for k in out))
    rel = {}
    for k, (e10, e90) in _complete(b.err).items():
        lo, hi = 1.0 / (1.0 + e90) - 1.0, 1.0 / (1.0 + e10) - 1.0  # measured / predicted - 1
        rel[k] = (-math.hypot(min(lo, 0.0), extra), math.hypot(max(hi, 0.0), extra))
    span = ", ".join(f"{n} {100 * rel[k][0]:+.0f}/{100 * rel[k][1]:+.0f} %" for n, k in (("TTFT", "ttft"),
                                                                                        ("TPOT", "itl")))
    where = f"calibrated on {_scope_words(b.scope)} ({b.rows} rows)"
    if b.borrowed is not None:
        where = (f"no {b.runtime} table: {b.borrowed}'s band widened +-{100 * STACK_WIDEN:.0f} % for another stack, "
                 + where)
    note = f"{where}; this is {_question_words(q, out)}: {span}" if out else f"{where}: {span}"
    return Interval(rel, out, note)


def for_run(report: dict[str, Any], sm: Any, runtime: str | None) -> dict[str, Any] | None:
    """run --json's "interval": the note, what was left, each metric's relative interval, and [low, high] of
    every latency percentile and the throughputs (None: an ideal run or a profile without a band)."""
    b = band(runtime)
    if b is None:
        return None
    it = interval(b, question_of(sm, report.get("batch_p50")))
    out: dict[str, Any] = {"runtime": b.runtime, "note": it.note, "outside": list(it.outside),
                           "rel": {k: [_sig(x) for x in v] for k, v in it.rel.items()}}
    for key, metric in (("ttft_s", "ttft"), ("tpot_s", "itl"), ("itl_s", "itl"), ("e2e_s", "e2e")):
        if isinstance(report.get(key), dict):
            out[key] = {p: it.bounds(f"{metric}_{p}" if p in TAILS else metric, v) for p, v in report[key].items()}
    for key in ("throughput_in_tok_s", "throughput_out_tok_s"):
        if key in report:
            out[key] = it.bounds("throughput", report[key])
    return out


def _scope_words(s: Scope) -> str:
    """'H100-SXM dense+MoE TP1-4 16-bit/fp8'."""
    kinds = "+".join(k for k, v in (("dense", False), ("MoE", True)) if v in s.moe) or "any"
    tp = f"TP{s.tp[0]}" if s.tp[0] == s.tp[1] else f"TP{s.tp[0]}-{s.tp[1]}"
    batch = "" if s.batch is None else f" batch {s.batch[0]:.3g}-{s.batch[1]:.3g}"
    return f"{'/'.join(h.upper() for h in s.hardware)} {kinds} {tp}{batch} {'/'.join(s.precision)}"


def _question_words(q: Question, out: Sequence[str]) -> str:
    """The question's values on the dimensions it left: 'A100-80G MoE TP8'."""
    words = {"hardware": q.hardware.upper(), "moe": "MoE" if q.moe else "dense", "family": q.family,
             "tp": f"TP{q.tp}", "batch": f"batch {q.batch:.3g}" if q.batch is not None else "",
             "precision": q.precision}
    return " ".join(words[k] for k in out)


def coverage(errs: Sequence[float], e10: float, e90: float) -> float | None:
    """Share of rows whose signed error (fraction) lies inside the band [e10, e90] (None for no rows)."""
    a = np.asarray(errs, dtype=float)
    a = a[np.isfinite(a)]
    return float(np.mean((a >= e10 - 1e-12) & (a <= e90 + 1e-12))) if a.size else None


def expected_coverage_range(n: int, z: float = 3.0) -> tuple[float, float]:
    """What an 80 % band's coverage of n rows may sanely be: 0.8 +- z binomial standard deviations."""
    p = (PERCENTILES[1] - PERCENTILES[0]) / 100.0
    sd = math.sqrt(p * (1.0 - p) / max(n, 1))
    return max(0.0, p - z * sd), min(1.0, p + z * sd)


def for_step(sm: Any, kind: str, batch: int, time_s: float, tokens_per_s: float,
             ideal: bool) -> dict[str, Any] | None:
    """step --json's "interval": a decode step's time carries the ITL band (one step is one token's gap), a
    prefill's the TTFT band; its tokens/s the inverse (None when ideal or the profile has no band)."""
    b = None if ideal else band(sm.opts.runtime)
    if b is None:
        return None
    it = interval(b, question_of(sm, float(batch)))
    metric = "ttft" if kind == "prefill" else "itl"
    lo, hi = it.rel[metric]
    return {"runtime": b.runtime, "note": it.note, "outside": list(it.outside),
            "rel": {k: [_sig(x) for x in v] for k, v in it.rel.items()}, "time_s": it.bounds(metric, time_s),
            "tokens_per_s": [_sig(tokens_per_s / (1.0 + hi)), _sig(tokens_per_s / (1.0 + lo))]}


def _flips(bounds: list[float] | None, target: float | None) -> bool:
    """Whether a target lies inside an interval, so the verdict "value <= target" differs between its ends."""
    return bounds is not None and target is not None and bounds[0] <= target < bounds[1]


def for_plan_row(row: dict[str, Any], runtime: str | None, weight_dtype: str | None, ttft_slo: float | None,
                 tpot_slo: float | None) -> dict[str, Any] | None:
    """A plan row's "interval": [low, high] of its TTFT and TPOT at the SLO percentile, the note, and whether its
    SLO verdict flips inside the interval (None when the profile has no band)."""
    from engine.physics.specs import load_model

    b = band(runtime)
    if b is None:
        return None
    m = load_model(row["model"])
    q = Question(row["hardware"], family(m.name), bool(m.is_moe), int(row["tp"]),
                 precision(weight_dtype or m.weight_dtype))
    it = interval(b, q)
    ttft, tpot = it.bounds("ttft", row.get("ttft_s")), it.bounds("itl", row.get("tpot_s"))
    return {"note": it.note, "outside": list(it.outside), "ttft_s": ttft, "tpot_s": tpot,
            "slo_flips": _flips(ttft, ttft_slo) or _flips(tpot, tpot_slo)}


def annotate_plan(out: dict[str, Any], results: list[dict[str, Any]], runtime: str | None,
                  weight_dtype: str | None) -> None:
    """plan's report in place: an "interval" on its best and Pareto rows, and "slo_flips", the configurations
    (of every one simulated) whose verdict flips inside their interval."""
    slo = out["slo"]

    def one(r: dict[str, Any]) -> dict[str, Any] | None:
        return for_plan_row(r, runtime, weight_dtype, slo["ttft_s"], slo["tpot_s"])

    if out["best"] is not None:
        out["best"]["interval"] = one(out["best"])
    for r in out["pareto"]:
        r["interval"] = one(r)
    out["slo_flips"] = [r["config"] for r in results
                        if (x := one({**r["config"], **r})) is not None and x["slo_flips"]]


def _cover(errs: list[float], b: tuple[float, float] | None) -> dict[str, Any]:
    """{n, inside, fraction} of signed errors (%) inside a band (fraction None without rows or band)."""
    f = coverage([e / 100.0 for e in errs], *b) if b is not None else None
    return {"n": len(errs), "inside": None if f is None else int(round(f * len(errs))), "fraction": f}


def table_coverage(t: dict[str, Any], runtime: str | None = None) -> dict[str, Any] | None:
    """How often a validation table's rows fall inside their profile's 80 % band: the held-in rows (those the
    profile was fitted on: a speed table's train split, every experiment of the serving campaign) should come out
    near 0.8 (`expected`: 0.8 +- 3 binomial standard deviations for their count); the held-out rows are the
    band's honest test. None when no row's profile records a band."""
    if t.get("kind") == "serving":
        b = band(runtime or "vllm")
        if b is None:
            return None
        per = {k: _cover([r[k]["err_pct"] for r in t["rows"]], b.err.get(k)) for k in ("ttft", "itl", "e2e")}
        n = sum(c["n"] for c in per.values())
        inside = sum(c["inside"] or 0 for c in per.values())
        held = {"n": n, "inside": inside, "fraction": inside / n if n else None}
        return {"metric": "mean TTFT, ITL, E2E", "held_in": held, "per_metric": per, "held_out": None,
                "expected": list(expected_coverage_range(n))}
    split: dict[str, list[float]] = {"train": [], "test": []}
    for r in t["rows"]:
        b = band(runtime or r["sim"]["runtime"])
        rng = None if b is None else b.err.get("throughput")
        if rng is not None:
            split[r["split"]].append(bool(rng[0] - 1e-12 <= r["err_pct"] / 100.0 <= rng[1] + 1e-12))
    if not split["train"] and not split["test"]:
        return None

    def share(x: list[float]) -> dict[str, Any]:
        return {"n": len(x), "inside": int(sum(x)), "fraction": float(np.mean(x)) if x else None}

    return {"metric": "speed", "held_in": share(split["train"]), "per_metric": None, "held_out": share(split["test"]),
            "expected": list(expected_coverage_range(len(split["train"])))}


@lru_cache(maxsize=64)
def _pcts(runtime: str, q: Question) -> tuple[float, float] | None:
    """(TTFT, TPOT) "+-x %" for a profile and question (None: no band); cached, as the app asks every frame."""
    b = band(runtime)
    if b is None:
        return None
    it = interval(b, q)
    return it.pct("ttft"), it.pct("itl")


def snapshot_pcts(snap: Any) -> tuple[float, float] | None:
    """The "+-x %" of TTFT and TPOT for an engine Snapshot's deployment (None when ideal or without a band)."""
    o = snap.opts
    if o.ideal or not isinstance(o.runtime, str):
        return None
    q = Question(snap.hardware.name, family(snap.model.name), bool(snap.model.is_moe), int(o.tp),
                 precision(o.weight_dtype or snap.model.weight_dtype))
    return _pcts(o.runtime, q)


def load_profile_file(path: str) -> Runtime:
    """A `tokensim calibrate` profile file registered (engine.physics.calibration.load_runtime_file) with its error
    band checked, so a malformed band is one line too. The band is read here, not in calibration: physics does not
    import the evidence that is built on it."""
    rt = load_runtime_file(path)
    try:
        band(rt.name)
    except (TypeError, ValueError, IndexError, KeyError) as e:
        raise InputError(f"{path}: [{rt.name}]: {e}") from None
    return rt
