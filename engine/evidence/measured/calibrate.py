"""Fit a runtime profile's few physical constants to a user's own measured runs (`tokensim calibrate`).

Each candidate replays every file through the engine (engine.evidence.measured.compare) and scores the mean
TTFT, ITL and E2E of each (file, stage) row: the loss is the root-mean-square ln(predicted / measured) over
those means, with the request path's cost outside the GPU (added to TTFT and E2E as the client measures them)
solved for at each candidate, as engine.evidence.fit does for the vllm profile. The search is a Nelder-Mead
simplex inside fit.py's plausible bounds (deterministic: the same files give the same profile). A constant the
files cannot pin (its standard error over 10 % at 2 % noise per mean) is refused, naming the measurement that
would pin it; leave-one-out (each file, or each stage of one file, held out in turn) gives the held-out error.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.config import EngineConfig
from engine.errors import InputError
from engine.evidence import bands
from engine.evidence.measured import campaign
from engine.evidence.measured.compare import replay
from engine.evidence.measured.record import Measured
from engine.physics.calibration import Runtime

FIT = ("bw_eff", "flops_eff", "step_overhead_s", "attn_bw_eff", "expert_bw_eff",  # what --fit can name
       "expert_fp8_bw_eff")
DEFAULT_FIT = ("bw_eff", "flops_eff")  # a fixed step cost needs loads far apart in bytes per step (see _HINT)
# On a campaign table (measured/campaign.py): the decode-side constants fit.py fits the shipped vllm profile with
# (fit.SERVING_PARAMS: both expert kernel paths', so a --blank fit carries none of the shipped profile's values).
CAMPAIGN_FIT = ("bw_eff", "attn_bw_eff", "expert_bw_eff", "expert_fp8_bw_eff")
# First simplex steps, and how close every vertex must come to the best to stop (a user's few files do not pin a
# constant to 0.1 %).
_FIRST = {"bw_eff": 0.1, "flops_eff": 0.1, "step_overhead_s": 2e-3, "attn_bw_eff": 0.1, "expert_bw_eff": 0.1,
          "expert_fp8_bw_eff": 0.1}
_LAST = {"bw_eff": 0.002, "flops_eff": 0.005, "step_overhead_s": 5e-5, "attn_bw_eff": 0.005, "expert_bw_eff": 0.005,
         "expert_fp8_bw_eff": 0.005}
# A campaign fit searches on short replays (campaign.SEARCH_REQUESTS a stage, ~1/10 of validate's CPU) whose bias
# (each stage's ramp weighs more in fewer requests) is taken out: each round replays the round's start both short
# and full (validate's length), and scales every short prediction of the round by that row's full/short ratio. The
# ramp depends on the arrivals, barely on the constants, so the corrected short replays track the full ones near
# the start; each round re-measures the ratio at the last round's optimum with a finer simplex (first step as a
# fraction of each constant's first step, and the stop tolerance as a multiple of its last).
_ROUNDS = ((1.0, 4.0), (0.3, 2.0), (0.1, 1.0))
_SAY_EVERY = 20  # a progress line every this many short replays
# Cross-validation's fold fits (held_out) search one round: a fold's held-out error then prices a shorter search
# than the full fit's, so it errs on the high side.
_CV_ROUNDS = ((1.0, 4.0),)
_ROUND_EVALS = 60  # at most this many short replays a round (~1.5 CPU s each on the 18-experiment table)
_LOADS_APART = 1.5  # two loads tell a fixed step cost from bandwidth when their mean concurrency differs this much
_SENSITIVE = 0.005  # a row "fixes" a constant when moving it 5 % moves one of the row's means this much


@dataclass(frozen=True, slots=True)
class Row:
    """One (file, stage) of measurements: its requests (a Measured record, or a campaign table's Experiment), the
    stage (None: the whole file), its measured mean TTFT, ITL, E2E (s) and mean requests in flight."""

    label: str
    record: Any
    measured: np.ndarray  # (3,) mean TTFT, ITL, E2E
    stage: int | None = None
    load: float = 0.0
    campaign: bool = False

    def prompts(self) -> np.ndarray:
        """The row's prompt lengths (a campaign experiment's one length)."""
        return np.array([self.record.prompt]) if self.campaign else self.record.prompt


def rows_of(records: Sequence[Measured], campaigns: Sequence[str] = ()) -> list[Row]:
    """The (file, stage) rows of the records and of the campaign tables (a file without latencies is refused:
    it fits nothing)."""
    out = []
    for m in records:
        if not m.measured:
            raise InputError(f"{m.path}: a trace has no measured latencies to calibrate on")
        for s in range(m.stages):
            k = m.stage == s
            label = m.path if m.stages == 1 else f"{m.path}#stage{s + 1}"
            out.append(Row(label, m, np.array([np.nanmean(m.ttft[k]), np.nanmean(m.itl[k]), np.nanmean(m.e2e[k])]),
                           None if m.stages == 1 else s, concurrency(m, s)))
    for path in campaigns:
        out += [Row(label, e, meas, st, load, True) for label, e, st, meas, load in campaign.stage_rows(path)]
    return out


def concurrency(m: Measured, stage: int) -> float:
    """Mean requests in flight over a stage (Little's law: time in system over the stage's span)."""
    k = m.stage == stage
    span = float((m.arrival[k] + m.e2e[k]).max() - m.arrival[k].min())
    return float(m.e2e[k].sum()) / span if span > 0 else 0.0


def check_identifiable(rows: list[Row], names: Sequence[str]) -> None:
    """Refuse a constant the rows cannot tell from another, saying which measurement would."""
    loads = sorted(r.load for r in rows)
    if "step_overhead_s" in names and (len(loads) < 2 or loads[-1] < _LOADS_APART * max(loads[0], 1e-9)):
        raise InputError("step_overhead_s: the files hold one load (mean concurrency "
                         f"{loads[0]:.2g}), where a fixed step cost and bandwidth move ITL alike; add a run at a "
                         f"load {_LOADS_APART:g}x higher or lower (another request rate or concurrency), or fit "
                         "--fit bw_eff,flops_eff")
    prompts = np.concatenate([r.prompts() for r in rows])
    if "flops_eff" in names and prompts.max() < 2 * prompts.min():
        raise InputError("flops_eff: every prompt is about as long (tokens "
                         f"{prompts.min():,} to {prompts.max():,}), so prefill compute and the request path move "
                         "TTFT alike; add requests with prompts twice as long or more, or fit --fit bw_eff")


# What would tell each constant apart, for a refusal to name.
_HINT = {"bw_eff": "runs whose decode steps read very different amounts of memory (other models or far longer "
                   "contexts)",
         "flops_eff": "requests with prompts of very different lengths (prefill compute grows with the prompt)",
         "step_overhead_s": "runs whose steps read very different amounts of memory (much larger batches or far "
                            "longer contexts), so a fixed cost and bandwidth move ITL differently"}
# A constant is identified when the files pin it to within 10 % (one standard error), if each measured mean
# carries 2 % of noise (run-to-run spread of a serving benchmark's means); the request path counts as one more
# constant, in units of 5 ms.
_NOISE = 0.02
_PIN = 0.10
_PATH_UNIT_S = 0.005


def standard_errors(rt: Runtime, rows: list[Row], base: EngineConfig, names: Sequence[str]) -> dict[str, float]:
    """Each constant's relative standard error (and the request path's, in _PATH_UNIT_S) from the rows: the
    linearised least-squares covariance (J^T J)^-1 noise^2, J the means' relative change per relative change of
    each constant (moving it 5 %)."""
    meas = np.array([r.measured for r in rows])
    with tempfile.TemporaryDirectory() as t:
        ref = _predict(rt, rows, base, Path(t))
        cols = [np.nan_to_num(_predict(replace(rt, **{n: _get(rt, n) * 1.05}), rows, base, Path(t)) / ref - 1)
                .ravel() / 0.05 for n in names]
    cols.append((np.array([_PATH_UNIT_S, 0.0, _PATH_UNIT_S]) / meas).ravel())
    jac = np.column_stack(cols)
    jtj = jac.T @ jac
    if np.linalg.matrix_rank(jtj, tol=1e-12 * max(np.abs(jtj).max(), 1e-300)) < jtj.shape[0]:
        return dict.fromkeys((*names, "request path"), np.inf)
    se = np.sqrt(np.maximum(np.diag(np.linalg.inv(jtj)), 0.0)) * _NOISE
    return dict(zip((*names, "request path"), (float(x) for x in se), strict=True))


def check_separable(rt: Runtime, rows: list[Row], base: EngineConfig, names: Sequence[str]) -> dict[str, float]:
    """Refuse a constant the rows pin only loosely (its effect on the means other constants can mimic), naming the
    measurement that would pin it; the standard errors otherwise."""
    se = standard_errors(rt, rows, base, names)
    loose = [n for n in names if not se[n] <= _PIN]
    if loose:
        worst = max(loose, key=lambda n: se[n])
        what = ", ".join(f"{n} ({'unpinned' if not np.isfinite(se[n]) else f'+-{100 * se[n]:.0f} %'})" for n in loose)
        raise InputError(f"{what}: these files cannot pin {'it' if len(loose) == 1 else 'them'} to {100 * _PIN:g} % "
                         f"(at {100 * _NOISE:g} % noise on each mean, other constants move the means alike); add "
                         f"{_HINT[worst]}, or leave {worst} out of --fit")
    return se


def _predict(rt: Runtime, rows: list[Row], base: EngineConfig, tmp: Path, full: bool = False,
             cache: dict[tuple[Any, ...], Any] | None = None) -> np.ndarray:
    """Predicted mean TTFT, ITL, E2E per row (the request path left out: it is solved for). Campaign rows replay
    campaign.SEARCH_REQUESTS a stage, or validate's full length when `full` (reusing `cache`'s replays)."""
    out = np.full((len(rows), 3), np.nan)
    done: dict[int, Any] = {}
    cfg = replace(base, runtime=replace(rt, request_overhead_s=0.0))  # type: ignore[arg-type]
    for i, r in enumerate(rows):
        if r.campaign:
            continue
        if id(r.record) not in done:
            done[id(r.record)] = replay(r.record, cfg, tmp)[0]
        res = done[id(r.record)]
        part = res if r.stage is None else res["stages"][r.stage]
        out[i] = [part[k]["predicted_s"]["mean"] or np.nan for k in ("ttft", "itl", "e2e")]
    camp = [i for i, r in enumerate(rows) if r.campaign]
    if camp:
        from engine.evidence.replay import STAGE_REQUESTS

        out[camp] = campaign.predict(cfg.runtime, [rows[i] for i in camp],
                                     STAGE_REQUESTS if full else campaign.SEARCH_REQUESTS, cache)
    return out


def _get(rt: Runtime, name: str) -> float:
    """A constant's value; an attention or expert bandwidth left unset (None) is the GEMMs' bw_eff, as step.py
    reads it."""
    v = getattr(rt, name)
    return float(rt.bw_eff if v is None else v)


def loss(pred: np.ndarray, meas: np.ndarray) -> tuple[float, float]:
    """(root-mean-square ln(predicted / measured), request path s) at the request path (0-50 ms, 0.5 ms steps)
    that minimises it. Squared, not absolute: a smooth loss lets the coordinate search follow a valley two
    constants share (bandwidth and compute both move TTFT) instead of stopping at its first kink."""
    best = (np.inf, 0.0)
    for o in np.arange(0.0, 0.050, 0.0005):
        e = np.log((pred + np.array([o, 0.0, o])) / meas)
        v = float(np.sqrt(np.nanmean(e * e)))
        if v < best[0]:
            best = (v, float(o))
    return best


def campaign_loss(pred: np.ndarray, meas: np.ndarray) -> tuple[float, float]:
    """On campaign rows, the objective the shipped vllm profile was fitted with (fit.py _serving_loss: per mean the
    median |ln err| in units of its target, plus a tenth of the mean), so a fit from blank constants is a like-for-
    like check of the shipped one: a few stages the physics misses for reasons of their own (Llama-4-Scout's
    reasoning TTFT) cannot drag every other stage off, as they would a squared loss."""
    from engine.evidence.fit import _serving_loss

    ok = np.isfinite(pred).all(axis=1)
    return _serving_loss(pred[ok], meas[ok]) if ok.any() else (np.inf, 0.0)


def simplex(f: Any, x0: np.ndarray, step: np.ndarray, lo: np.ndarray, hi: np.ndarray, tol: np.ndarray,
            max_evals: int = 200) -> tuple[np.ndarray, float]:
    """Minimise f inside [lo, hi] by Nelder and Mead's simplex (reflect, expand, contract, shrink). Unlike a
    coordinate search it walks along a valley two constants share; it stops when every vertex is within tol of
    the best, or after max_evals evaluations."""
    pts = [np.clip(x0, lo, hi)] + [np.clip(x0 + np.eye(x0.size)[i] * step[i] * (1 if x0[i] + step[i] <= hi[i]
                                                                                 else -1), lo, hi)
                                   for i in range(x0.size)]
    vals = [f(p) for p in pts]
    evals = len(pts)
    while evals < max_evals:
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if all((np.abs(p - pts[0]) <= tol).all() for p in pts[1:]):
            break
        mid = np.mean(pts[:-1], axis=0)
        refl = np.clip(2 * mid - pts[-1], lo, hi)
        fr = f(refl)
        evals += 1
        if fr < vals[0]:
            exp = np.clip(3 * mid - 2 * pts[-1], lo, hi)
            fe = f(exp)
            evals += 1
            pts[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = refl, fr
        else:
            con = (mid + pts[-1]) / 2
            fc = f(con)
            evals += 1
            if fc < vals[-1]:
                pts[-1], vals[-1] = con, fc
            else:  # shrink toward the best
                pts = [pts[0]] + [(pts[0] + p) / 2 for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
                evals += len(pts) - 1
    best = int(np.argmin(vals))
    return pts[best], float(vals[best])


Progress = Callable[[str], None]


def fit(rows: list[Row], base: EngineConfig, start: Runtime, names: Sequence[str],
        progress: Progress | None = None, rounds: Sequence[tuple[float, float]] = _ROUNDS,
        cache: dict[tuple[Any, ...], Any] | None = None) -> tuple[Runtime, float]:
    """The start profile with `names` fitted to the rows (and the request path solved for); (runtime, loss).
    A campaign's search runs `rounds` (see _ROUNDS); `cache` keeps replays across fits of the same rows."""
    from engine.evidence.fit import BOUNDS

    meas = np.array([r.measured for r in rows])
    lo, hi = (np.array([BOUNDS[n][i] for n in names]) for i in (0, 1))
    camp = any(r.campaign for r in rows)
    objective = campaign_loss if rows and all(r.campaign for r in rows) else loss
    first, last = np.array([_FIRST[n] for n in names]), np.array([_LAST[n] for n in names])
    cache = {} if cache is None else cache
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)

        def make(v: np.ndarray) -> Runtime:
            return replace(start, **dict(zip(names, (float(x) for x in v), strict=True)))

        def predict(v: np.ndarray, full: bool) -> np.ndarray:
            return _predict(make(v), rows, base, tmp, full, cache)

        x = np.array([_get(start, n) for n in names], dtype=float)
        if camp:
            x, best = _corrected_search(predict, lambda p: objective(p, meas)[0], x, (first, last, lo, hi),
                                        rounds, progress)
        else:
            x, best = simplex(lambda v: objective(predict(v, False), meas)[0], x, first, lo, hi, last)
        rt = make(np.array([float(f"{v:.3g}") for v in x]))
        over = objective(_predict(rt, rows, base, tmp, camp, cache), meas)[1]
    return replace(rt, request_overhead_s=float(f"{over:.3g}")), best


def _corrected_search(predict: Callable[[np.ndarray, bool], np.ndarray], score: Callable[[np.ndarray], float],
                      x: np.ndarray, steps: tuple[np.ndarray, ...], rounds: Sequence[tuple[float, float]],
                      progress: Progress | None) -> tuple[np.ndarray, float]:
    """Rounds of simplex on short replays scaled by the full/short ratio measured at each round's start (see
    _ROUNDS); a round's optimum is kept only when its full replay scores better than the round's start. `steps`:
    each constant's first and last step, low and high bound."""
    first, last, lo, hi = steps
    say = progress or (lambda _: None)
    prev, best = x, np.inf
    for i, rnd in enumerate((*rounds, None)):
        here = score(full := predict(x, True))
        if here >= best:  # the corrected optimum scores worse on the full replay: keep the round's start
            break
        prev, best = x, here
        say(f"round {i}/{len(rounds)}: loss {here:.4f} on full replays at " + ", ".join(f"{v:.3f}" for v in x))
        if rnd is None:
            break
        ratio = full / predict(x, False)
        x, _ = simplex(_counted(lambda v, r=ratio: score(predict(v, False) * r), say, f"round {i + 1}"), x,
                       first * rnd[0], lo, hi, last * rnd[1], max_evals=_ROUND_EVALS)
    return prev, best


def _counted(f: Callable[[np.ndarray], float], say: Progress, what: str) -> Callable[[np.ndarray], float]:
    """f, saying every _SAY_EVERY calls how many and the best value so far (a search's progress line)."""
    seen = [0, np.inf]

    def g(v: np.ndarray) -> float:
        y = f(v)
        seen[0], seen[1] = seen[0] + 1, min(seen[1], y)
        if seen[0] % _SAY_EVERY == 0:
            say(f"{what}: {seen[0]} short replays, best loss {seen[1]:.4f}")
        return y

    return g


def errors(rt: Runtime, rows: list[Row], base: EngineConfig,
           cache: dict[tuple[Any, ...], Any] | None = None) -> np.ndarray:
    """Signed percent error of each row's mean TTFT, ITL, E2E under a fitted profile."""
    with tempfile.TemporaryDirectory() as t:
        pred = _predict(rt, rows, base, Path(t), True, cache)
    pred = pred + np.array([rt.request_overhead_s, 0.0, rt.request_overhead_s])
    return 100.0 * (pred / np.array([r.measured for r in rows]) - 1.0)


def sensitivity(rt: Runtime, rows: list[Row], base: EngineConfig, names: Sequence[str]) -> dict[str, list[str]]:
    """Which rows fixed which constant: those whose mean TTFT, ITL or E2E moves _SENSITIVE when it moves 5 %."""
    with tempfile.TemporaryDirectory() as t:
        ref = _predict(rt, rows, base, Path(t))
        out = {}
        for n in names:
            moved = _predict(replace(rt, **{n: _get(rt, n) * 1.05}), rows, base, Path(t))
            hit = np.nanmax(np.abs(moved / ref - 1), axis=1) >= _SENSITIVE
            out[n] = [r.label for r, h in zip(rows, hit, strict=True) if h]
    out["request_overhead_s"] = [r.label for r in rows]
    return out


def folds_of(rows: list[Row], k: int) -> list[list[int]]:
    """Row indices in k folds by experiment (a result file, or one experiment of a campaign table): an
    experiment's stages stay together, so a held-out row's own other stages never fitted it; experiments are dealt
    round-robin in their order, so the several runs of one deployment spread over the folds."""
    recs = list(dict.fromkeys(id(r.record) for r in rows))
    k = max(1, min(k, len(recs)))
    fold = {rid: i % k for i, rid in enumerate(recs)}
    return [[j for j, r in enumerate(rows) if fold[id(r.record)] == f] for f in range(k)]


def held_out(rows: list[Row], base: EngineConfig, start: Runtime, names: Sequence[str], folds: int | None = None,
             progress: Progress | None = None) -> dict[str, list[float]]:
    """Each row's signed errors (TTFT, ITL, E2E %) under a profile fitted without it: leave one row out in turn, or
    with `folds`, k folds by experiment (folds_of). A campaign fold searches one round (_CV_ROUNDS) from the same
    start as the full fit, sharing its replays (those of the start are the same for every fold)."""
    groups = [[i] for i in range(len(rows))] if folds is None else folds_of(rows, folds)
    camp = any(r.campaign for r in rows)
    cache: dict[tuple[Any, ...], Any] = {}
    out: dict[str, list[float]] = {}
    for n, out_rows in enumerate(groups):
        rest = [r for i, r in enumerate(rows) if i not in out_rows]
        rt, _ = fit(rest, base, start, names, rounds=_CV_ROUNDS if camp else _ROUNDS, cache=cache)
        test = [rows[i] for i in out_rows]
        for r, e in zip(test, errors(rt, test, base, cache), strict=True):
            out[r.label] = [float(x) for x in e]
        if progress is not None:
            progress(f"held out {n + 1}/{len(groups)}: " + ", ".join(r.label for r in test))
    return out


def calibrate(records: Sequence[Measured], base: EngineConfig, start: Runtime, names: Sequence[str] = DEFAULT_FIT,
              cross_validate: bool = True, campaigns: Sequence[str] = (),
              progress: Progress | None = None, folds: int | None = None) -> dict[str, Any]:
    """Fit, then the record: constants, the rows that fixed each, each row's errors, the held-out errors and the
    error band (engine.evidence.bands) of the fitted rows. Held out: leave one row out, or with `folds` k folds by
    experiment; campaign tables only with `folds` (each fold is a whole fit over replays: CPU minutes)."""
    unknown = [n for n in names if n not in FIT]
    if unknown:
        raise InputError(f"--fit {','.join(unknown)}: can fit {', '.join(FIT)}")
    rows = rows_of(records, campaigns)
    check_identifiable(rows, names)
    se = check_separable(start, rows, base, names)
    cache: dict[tuple[Any, ...], Any] = {}
    rt, train = fit(rows, base, start, names, progress, cache=cache)
    err = errors(rt, rows, base, cache)
    out: dict[str, Any] = {"runtime": rt, "fitted": list(names), "loss": train,
                           "rows": {r.label: [float(x) for x in e] for r, e in zip(rows, err, strict=True)},
                           "fixed_by": sensitivity(rt, rows, base, names), "held_out": None,
                           "standard_error": se, "band": _band(rt.name, rows, err, base)}
    if cross_validate and len(rows) > 1 and (folds is not None or not campaigns):
        out["held_out"] = held_out(rows, base, start, names, folds, progress)
    return out


def medians(errs: dict[str, list[float]] | None) -> list[float] | None:
    """Median |error| % of mean TTFT, ITL and E2E over rows (None for none)."""
    if not errs:
        return None
    return [float(x) for x in np.nanmedian(np.abs(np.array(list(errs.values()), dtype=float)), axis=0)]


def _band(name: str, rows: list[Row], err: np.ndarray, base: EngineConfig) -> bands.Band:
    """The fitted rows' error band and the range they cover (a campaign row: its experiment's model, GPU, TP and
    precision; a result file: the deployment the flags name)."""
    from engine.physics.specs import load_model

    conds = []
    for r in rows:
        e = r.record if r.campaign else base
        m = load_model(e.model)
        conds.append((e.hardware, bands.family(m.name), bool(m.is_moe), int(e.tp),
                      bands.precision(e.weight_dtype or m.weight_dtype)))
    hw, fam, moe, tp, prec = (sorted(set(c)) for c in zip(*conds, strict=True))
    loads = [r.load for r in rows]
    scope = bands.Scope(tuple(hw), tuple(fam), tuple(moe), (tp[0], tp[-1]), tuple(prec), (min(loads), max(loads)))
    return bands.derive(name, {k: err[:, i] / 100.0 for i, k in enumerate(("ttft", "itl", "e2e"))}, scope)


def toml_text(name: str, res: dict[str, Any]) -> str:
    """The fitted profile as a runtimes.toml section, its record (rows, errors, held-out errors) as comments."""
    rt: Runtime = res["runtime"]
    lines = [f"# Fitted by tokensim calibrate on: {', '.join(res['rows'])}",
             f"# Fitted constants: {', '.join(res['fitted'])} (and request_overhead_s, solved for); the rest carried"
             f" from {rt.name}.", "# Rows that fixed each constant (moving it 5 % moves their mean by 0.5 % or more):"]
    lines += [f"#   {k}: {', '.join(v) or 'none'}" for k, v in res["fixed_by"].items()]
    lines.append("# Signed error % of mean TTFT / ITL / E2E per row, fitted on all rows:")
    lines += [f"#   {k}: {e[0]:+.1f} {e[1]:+.1f} {e[2]:+.1f}" for k, e in res["rows"].items()]
    if res["held_out"]:
        lines.append("# Held out (fitted on the other rows):")
        lines += [f"#   {k}: {e[0]:+.1f} {e[1]:+.1f} {e[2]:+.1f}" for k, e in res["held_out"].items()]
    lines.append(f"[{name}]")
    band = res.get("band")
    for f in fields(Runtime):
        v = getattr(rt, f.name)
        if f.name == "name" or v is None:
            continue
        if f.name == "description":
            v = f"{rt.description} (calibrated)"
        lines.append(f"{f.name} = {_toml(v)}")
    if band is not None:
        lines += bands.toml_lines(bands.Band(name, band.err, band.rows, band.scope))
    return "\n".join(lines) + "\n"


def _toml(v: Any) -> str:
    """A TOML value: strings quoted, booleans lower case, tuples as arrays."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, tuple):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return repr(float(v)) if isinstance(v, float) else str(v)
