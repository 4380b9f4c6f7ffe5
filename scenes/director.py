"""The director: plays a scene against a live Engine, step by step, and checks its claims.

Pure (no UI imports): the app and the headless `tokensim scene ID --headless` drive the same object.
Entering a step applies its actions; `prev()` rebuilds from the start and replays, so going back
always lands on exactly the state a straight run would reach. Narration placeholders ({metric:fmt},
{metric@mark}, {metric/mark}) are filled from the live engine when the text is shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from engine.config import EngineConfig
from engine.errors import InputError
from engine.fleet.fleet import Fleet, FleetSpec
from engine.numbers import json_safe
from engine.physics.step import StepModel
from engine.serving.engine import Engine
from engine.serving.snapshot import Snapshot
from scenes.actions import ACTIONS, FleetRun
from scenes.metrics import METRICS, Probe
from scenes.placeholders import AT, OVER, Ref, parse_ref, refs
from scenes.quiz import Question, Reveal, correct_choice
from scenes.schema import Action, Checkpoint, Scene
from scenes.words import LANGS, bound_word

# What reading a figure raises when the engine has not got it (a fleet before it ran, a P/D figure of a colocated
# fleet, a ratio over a zero): the text reads "nan" and the checkpoint that names it fails and says why.
_MISSING = (KeyError, ValueError, ZeroDivisionError, InputError)


def _default_engine(config: EngineConfig) -> Any:
    """The engine a scene plays on unless the app hands it one."""
    return Engine(config)


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    """One evaluated checkpoint: the claim, what was expected, what the engine gave, and whether it holds."""

    step: int
    claim: str
    metric: str
    expected: float | str
    actual: float | str | None
    ok: bool
    op: str = "approx"
    tolerance: str = ""
    unit: str = ""
    vs_mark: str | None = None
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the five documented keys first, then the details."""
        d: dict[str, Any] = {"claim": self.claim, "metric": self.metric, "expected": self.expected,
                             "actual": json_safe(self.actual), "ok": self.ok, "step": self.step, "op": self.op,
                             "tolerance": self.tolerance, "unit": self.unit}
        if self.vs_mark:
            d["vs_mark"] = self.vs_mark
        if self.error:
            d["error"] = self.error
        return d


def check(cp: Checkpoint, actual: float | str) -> bool:
    """Whether `actual` satisfies the checkpoint's op, expected value and tolerance."""
    exp = cp.expected
    if isinstance(exp, str) or isinstance(actual, str):
        return actual == exp
    if not math.isfinite(actual):
        return False
    if cp.op == "approx":
        tol = cp.rel * abs(exp) if cp.rel is not None else (cp.abs or 0.0)
        return abs(actual - exp) <= tol + 1e-12
    return {">": actual > exp, ">=": actual >= exp, "<": actual < exp, "<=": actual <= exp}[cp.op]


class _Figures(Mapping[str, Any]):
    """Lazily computed metric values for str.format_map: 'm', 'm@mark' (value at a mark), 'm/mark' (ratio)."""

    def __init__(self, director: Director) -> None:
        self._d = director

    def __getitem__(self, key: str) -> Any:
        try:
            v = self._d.value(key)
        except _MISSING:
            # A figure the engine has not got (a fleet before one ran, a P/D figure of a colocated fleet) reads
            # "nan" in the text; the checkpoint that names it fails and says why.
            return math.nan
        return bound_word(self._d.lang, v) if isinstance(v, str) else v

    def __iter__(self) -> Iterator[str]:
        return iter(METRICS)

    def __len__(self) -> int:
        return len(METRICS)


class Director:
    """Drives an Engine through a scene's steps; `index` is the step on screen (0-based)."""

    def __init__(self, scene: Scene, lang: str = "en", engine: Any = None,
                 engine_factory: Callable[[EngineConfig], Any] | None = None) -> None:
        """Build (or, given `engine`, reset and reuse) an engine for the scene and enter its first step."""
        self.scene = scene
        self.lang = lang
        self._factory = engine_factory or _default_engine
        self._marks_needed = self._collect_mark_metrics()
        # A fleet run is a pure function of (config, FleetRun): replaying the scene (going back) reuses it.
        self._fleets: dict[tuple[EngineConfig, FleetRun], dict[str, Any]] = {}
        self.engine: Any = engine
        self._build()
        self._enter(0)

    # ---- state ----------------------------------------------------------------------------
    def _collect_mark_metrics(self) -> dict[str, set[str]]:
        """For each mark, the metrics any checkpoint or placeholder compares against it."""
        need: dict[str, set[str]] = {}
        for step in self.scene.steps:
            for cp in step.checkpoints:
                if cp.vs_mark:
                    need.setdefault(cp.vs_mark, set()).add(cp.metric)
            q = step.question
            texts = [step.narration] + ([q.ask, q.explain, *(c.text for c in q.choices)] if q else [])
            found = [parse_ref(q.metric)] if q and q.metric else []
            for lang in LANGS:
                for t in texts:
                    found += refs(t.get(lang))
            for ref in found:
                if ref.mark:
                    need.setdefault(ref.mark, set()).add(ref.metric)
        return need

    def _build(self) -> None:
        """Start over from the scene's setup: a fresh engine (or a reset one), no marks, before step 0."""
        self.config: EngineConfig = self.scene.setup.config
        self.probe: Probe = self.scene.setup.probe
        self.marks: dict[str, dict[str, float | str]] = {}
        self.index = -1
        self._dirty = False
        self._snap: Snapshot | None = None
        self._pass_metrics: dict[str, Any] | None = None
        self._other: tuple[StepModel | None, StepModel | None] = (None, None)  # the engine's model, ideal flipped
        self._fleet: dict[str, Any] | None = None  # metrics of the fleet the last run_fleet action ran
        if self.engine is not None and hasattr(self.engine, "reset"):
            self.engine.reset(self.config)
        else:
            self.engine = self._factory(self.config)

    @property
    def steps(self) -> tuple[Any, ...]:
        """The scene's steps."""
        return self.scene.steps

    @property
    def speed(self) -> float:
        """Simulated seconds per wall second the app should run this scene at."""
        return self.scene.setup.speed

    @property
    def at_start(self) -> bool:
        return self.index <= 0

    @property
    def at_end(self) -> bool:
        return self.index >= len(self.steps) - 1

    def step_model(self, ideal: bool | None = None) -> StepModel:
        """The live engine's step model (every knob applied); `ideal` switches peak figures on or off."""
        self._sync()
        sm = self.engine.step_model
        if ideal is None or ideal == sm.opts.ideal:
            return sm
        base, variant = self._other
        if base is not sm or variant is None:
            variant = sm.with_options(ideal=ideal)
            self._other = (sm, variant)
        return variant

    def snapshot(self) -> Snapshot:
        """The engine's latest snapshot (taken once per evaluation pass)."""
        self._sync()
        if self._snap is None:
            return self.engine.snapshot()
        return self._snap

    def engine_metrics(self) -> dict[str, Any]:
        """The engine's run metrics (Engine.metrics()), computed once per evaluation pass."""
        self._sync()
        if self._pass_metrics is None:
            m = self.engine.metrics()
            if self._snap is None:
                return m
            self._pass_metrics = m
        return self._pass_metrics

    def lane_metrics(self, fast: bool) -> dict[str, Any]:
        """One lane's run metrics (the fast lane or the normal one)."""
        self._sync()
        return self.engine.metrics(fast=fast)

    def fleet_metrics(self) -> dict[str, Any]:
        """The metrics of the fleet the last run_fleet action ran (KeyError before one ran)."""
        if self._fleet is None:
            raise KeyError("no fleet has run yet: a step's run_fleet action runs one")
        return self._fleet

    @contextmanager
    def _pass(self) -> Iterator[None]:
        """Hold one snapshot for a whole narration or evaluation pass, so all figures agree."""
        self._sync()
        self._snap = self.engine.snapshot()
        self._pass_metrics = None
        try:
            yield
        finally:
            self._snap = None
            self._pass_metrics = None

    # ---- actions --------------------------------------------------------------------------
    def _sync(self) -> None:
        """Apply pending configuration changes (a reset) before anything looks at the engine."""
        if self._dirty:
            self._dirty = False
            self.engine.reset(self.config)
        self.config = self.engine.config

    def apply(self, action: Action) -> None:
        """Apply one action of the vocabulary (scenes.actions.ACTIONS)."""
        kind = ACTIONS.get(action.name)
        if kind is None:  # the schema rejects unknown actions; this guards a scene built in code
            raise InputError(f"{self.scene.path}: unknown action '{action.name}'")
        kind.apply(self, action.value)

    # What actions do (scenes.actions.Player).
    def live(self, field: str, value: Any) -> None:
        """Set a field the running engine takes between ticks through its set_<field> (unless a reset is due)."""
        self.config = replace(self.config, **{field: value})
        if not self._dirty:
            getattr(self.engine, f"set_{field}")(value)

    def reconfigure(self, **changes: Any) -> None:
        """Change fields the engine takes only by a reset (none: just reset); the reset comes before the next look."""
        self.config = replace(self.config, **changes)
        self._dirty = True

    def set_probe(self, field: str, value: int) -> None:
        """Move the probe step the step-model metrics price."""
        self.probe = replace(self.probe, **{field: value})

    def run_seconds(self, seconds: float) -> None:
        """Run the engine for `seconds` of simulated time."""
        self._sync()
        self.engine.advance(seconds)

    def run_ticks(self, ticks: int) -> None:
        """Run the engine `ticks` steps."""
        self._sync()
        for _ in range(ticks):
            self.engine.step()

    def run_fleet(self, run: FleetRun) -> None:
        """Serve the scene's traffic (its config: open loop with a request bound) on a fleet to its end, headless;
        the floor keeps showing the one engine. Its metrics feed the fleet_* figures until the next fleet."""
        self._sync()
        key = (self.config, run)
        if key not in self._fleets:
            try:
                fleet = Fleet(FleetSpec(self.config, replicas=run.replicas, router=run.router, pd=run.pd))
                fleet.run()
            except InputError as e:  # the fleet's message names CLI options: say where the scene went wrong
                raise InputError(f"{self.scene.path}: run_fleet: {e} (a fleet scene's setup gives rate and requests, "
                                 "or users and requests)") from None
            self._fleets[key] = fleet.metrics()
        self._fleet = self._fleets[key]

    def mark(self, name: str) -> None:
        """Remember, now, every figure a later checkpoint or placeholder compares against mark `name`."""
        with self._pass():
            self.marks[name] = {m: self._figure(m) for m in sorted(self._marks_needed.get(name, ()))}

    def _figure(self, metric: str) -> float | str:
        """A metric now, NaN when the engine has not got it (a fleet figure before any fleet ran): a mark keeps
        what there is, and a later comparison with the missing figure fails its checkpoint instead of the play."""
        try:
            return METRICS[metric].fn(self)
        except _MISSING:
            return math.nan

    def _enter(self, i: int) -> None:
        for a in self.steps[i].actions:
            self.apply(a)
        self._sync()
        self.index = i

    # ---- navigation -----------------------------------------------------------------------
    def next(self) -> bool:
        """Enter the next step (apply its actions); False at the last step."""
        if self.at_end:
            return False
        self._enter(self.index + 1)
        return True

    def prev(self) -> bool:
        """Go back one step by rebuilding from the start and replaying; False at the first step."""
        if self.at_start:
            return False
        self.goto(self.index - 1)
        return True

    def goto(self, i: int) -> None:
        """Land on step i exactly as a straight run from the start would."""
        if not 0 <= i < len(self.steps):
            raise IndexError(f"step {i} out of range 0..{len(self.steps) - 1}")
        self._build()
        for j in range(i + 1):
            self._enter(j)

    def restart(self) -> None:
        """Back to step 0."""
        self.goto(0)

    # ---- figures --------------------------------------------------------------------------
    def value(self, key: str | Ref) -> float | str:
        """A metric now ('step_ms'), at a mark ('step_ms@before') or now over the mark ('step_ms/before')."""
        ref = parse_ref(key) if isinstance(key, str) else key
        if not ref.sep:
            return METRICS[ref.metric].fn(self)
        then = self.marks.get(ref.mark, {}).get(ref.metric)
        if then is None:
            raise KeyError(f"mark '{ref.mark}' has no value for '{ref.metric}' yet")
        if ref.sep == AT:
            return then
        now = METRICS[ref.metric].fn(self)
        return float(now) / float(then) if float(then) else math.inf

    def current_narration(self) -> str:
        """The current step's narration in the director's language, numbers from the live engine."""
        return self.fill(self.steps[self.index].narration.get(self.lang))

    def fill(self, text: str) -> str:
        """`text` with its {placeholders} filled from the live engine (one snapshot for all of them)."""
        with self._pass():
            return text.format_map(_Figures(self))

    # ---- predict, then reveal ---------------------------------------------------------------
    def upcoming_question(self) -> Question | None:
        """The question the next step asks before it runs (None: the next step just runs, or there is none)."""
        return None if self.at_end else self.steps[self.index + 1].question

    def ask(self) -> tuple[str, tuple[str, ...]]:
        """The next step's question and its choices, figures filled from the floor as it is now (before the step)."""
        q = self.upcoming_question()
        if q is None:
            raise ValueError("the next step asks no question")
        return self.fill(q.ask.get(self.lang)), tuple(self.fill(c.text.get(self.lang)) for c in q.choices)

    def reveal(self) -> Reveal | None:
        """The current step's question answered by the engine now that the step has run (None: no question)."""
        q = self.steps[self.index].question
        if q is None:
            return None
        value: float | str | None = None
        if q.metric is not None:
            with self._pass():
                try:
                    value = self.value(q.metric)
                except _MISSING:
                    value = None
            value = value if isinstance(value, str) or value is None else float(value)
        return Reveal(correct=correct_choice(q, value), value=value, explain=self.fill(q.explain.get(self.lang)))

    def current_highlight(self) -> str | None:
        """The floor part the current step talks about (schema.FLOOR_PARTS; None: nothing in particular)."""
        return self.steps[self.index].highlight

    def step_label(self) -> str:
        """'3/5', for the narration panel's step indicator."""
        return f"{self.index + 1}/{len(self.steps)}"

    def evaluate(self) -> list[CheckpointResult]:
        """Evaluate the current step's checkpoints against the live engine."""
        out = []
        with self._pass():
            for cp in self.steps[self.index].checkpoints:
                key = Ref(cp.metric, OVER, cp.vs_mark) if cp.vs_mark else Ref(cp.metric)
                unit = METRICS[cp.metric].unit
                try:
                    actual = self.value(key)
                    if not isinstance(actual, str):
                        actual = float(actual)
                    ok, err = check(cp, actual), ""
                except _MISSING as e:
                    actual, ok, err = None, False, f"{type(e).__name__}: {e}"
                out.append(CheckpointResult(step=self.index, claim=cp.claim, metric=cp.metric, expected=cp.expected,
                                            actual=actual, ok=ok, op=cp.op, tolerance=cp.tolerance_text(),
                                            unit="x" if cp.vs_mark else unit, vs_mark=cp.vs_mark, error=err))
        return out

    def play_headless(self) -> dict[str, Any]:
        """Play every step from the start; narration per step and every checkpoint result."""
        self.goto(0)
        steps: list[dict[str, Any]] = []
        results: list[CheckpointResult] = []
        asked: tuple[str, tuple[str, ...]] | None = None
        while True:
            res = self.evaluate()
            results.extend(res)
            steps.append({"index": self.index, "highlight": self.current_highlight(),
                          "narration": self.current_narration(), "checkpoints": [r.as_dict() for r in res]})
            if asked is not None:
                steps[-1]["question"] = self._question_record(asked)
            asked = self.ask() if self.upcoming_question() is not None else None
            if not self.next():
                break
        questions = [st["question"] for st in steps if "question" in st]
        return {"id": self.scene.id, "title": self.scene.title.get(self.lang), "lang": self.lang,
                "claims": list(self.scene.claims), "ok": all(r.ok for r in results) and all(
                    q["correct"] >= 0 for q in questions), "checkpoints": [r.as_dict() for r in results],
                "questions": len(questions), "steps": steps}

    def _question_record(self, asked: tuple[str, tuple[str, ...]]) -> dict[str, Any]:
        """A headless run's record of the current step's question: as asked, and as the engine answered it."""
        rev, q = self.reveal(), self.steps[self.index].question
        assert rev is not None and q is not None
        value = rev.value
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        return {"ask": asked[0], "choices": list(asked[1]), "correct": rev.correct, "value": value,
                "metric": q.metric, "explain": rev.explain}
