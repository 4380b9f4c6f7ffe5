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
from engine.snapshot import Snapshot
from engine.step import StepModel
from scenes.metrics import METRICS
from scenes.schema import Action, Checkpoint, Probe, Scene, placeholder_names

# Actions that change the configuration in a way the engine can only take by a reset.
_CONFIG_ACTIONS: dict[str, str] = {
    "kv_dtype": "kv_dtype", "set_model": "model", "set_hardware": "hardware", "set_scheduler": "scheduler",
    "set_prompt": "prompt", "set_output": "output", "set_think": "think", "set_think_time": "think_time",
    "set_fast_share": "fast_share", "set_ideal": "ideal", "set_tp": "tp", "set_max_batch": "max_batch",
}


def _default_engine(config: EngineConfig) -> Any:
    from engine.serving import Engine

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
        actual = self.actual
        if isinstance(actual, float) and not math.isfinite(actual):
            actual = None  # JSON has no NaN or infinity
        d: dict[str, Any] = {"claim": self.claim, "metric": self.metric, "expected": self.expected,
                             "actual": actual, "ok": self.ok, "step": self.step, "op": self.op,
                             "tolerance": self.tolerance, "unit": self.unit}
        if self.vs_mark:
            d["vs_mark"] = self.vs_mark
        if self.error:
            d["error"] = self.error
        return d

    def describe(self) -> str:
        """One line: 'C02 step_ms_ideal 8.36 (expected ≈ 8.36 ±1%) ok'."""
        what = f"{self.metric}/{self.vs_mark}" if self.vs_mark else self.metric
        exp = self.expected if isinstance(self.expected, str) else f"{self.expected:g}"
        op = "≈" if self.op == "approx" else self.op
        act = "?" if self.actual is None else (self.actual if isinstance(self.actual, str) else f"{self.actual:.4g}")
        tol = f" {self.tolerance}" if self.tolerance else ""
        unit = f" {self.unit}" if self.unit and self.unit != "text" and not self.vs_mark else ""
        status = "ok" if self.ok else "FAIL"
        return f"{self.claim} {what} = {act}{unit} (expected {op} {exp}{tol}) {status}" + (
            f": {self.error}" if self.error else "")


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


# How the text metrics ("memory", "compute") read in Chinese narration.
_TEXT_ZH = {"memory": "带宽", "compute": "算力", "idle": "空闲"}


class _Figures(Mapping[str, Any]):
    """Lazily computed metric values for str.format_map: 'm', 'm@mark' (value at a mark), 'm/mark' (ratio)."""

    def __init__(self, director: Director) -> None:
        self._d = director

    def __getitem__(self, key: str) -> Any:
        v = self._d.value(key)
        if isinstance(v, str) and self._d.lang == "zh":
            return _TEXT_ZH.get(v, v)
        return v

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
            for lang in ("en", "zh"):
                for name in placeholder_names(step.narration.get(lang)):
                    for sep in ("@", "/"):
                        metric, _, mark = name.partition(sep)
                        if mark:
                            need.setdefault(mark, set()).add(metric)
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
        """Apply one action of the vocabulary (see scenes.schema.ACTIONS)."""
        name, v = action.name, action.value
        e = self.engine
        if name in ("set_users", "add_users"):
            n = v if name == "set_users" else max(0, self.config.users + v)
            self.config = replace(self.config, users=n)
            if not self._dirty:
                e.set_users(n)
        elif name == "compute_mult":
            self.config = replace(self.config, compute_mult=float(v))
            if not self._dirty:
                e.set_compute_mult(float(v))
        elif name == "bandwidth_mult":
            self.config = replace(self.config, bandwidth_mult=float(v))
            if not self._dirty:
                e.set_bandwidth_mult(float(v))
        elif name == "weight_dtype":
            self.config = replace(self.config, weight_dtype=v)
            if not self._dirty:
                e.set_weight_dtype(v)
        elif name in _CONFIG_ACTIONS:
            self.config = replace(self.config, **{_CONFIG_ACTIONS[name]: v})
            self._dirty = True
        elif name == "reset":
            self._dirty = True
        elif name.startswith("probe_"):
            self.probe = replace(self.probe, **{name.removeprefix("probe_"): int(v)})
        elif name == "run_seconds":
            self._sync()
            e.advance(float(v))
        elif name == "run_ticks":
            self._sync()
            for _ in range(int(v)):
                e.step()
        elif name == "mark":
            with self._pass():
                self.marks[v] = {m: METRICS[m].fn(self) for m in sorted(self._marks_needed.get(v, ()))}
        else:  # the schema rejects unknown actions; this guards the vocabulary staying in sync
            raise InputError(f"{self.scene.path}: action '{name}' is not implemented by the director")

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
    def value(self, key: str) -> float | str:
        """A metric now ('step_ms'), at a mark ('step_ms@before') or now over the mark ('step_ms/before')."""
        for sep in ("@", "/"):
            metric, _, mark = key.partition(sep)
            if mark:
                then = self.marks.get(mark, {}).get(metric)
                if then is None:
                    raise KeyError(f"mark '{mark}' has no value for '{metric}' yet")
                if sep == "@":
                    return then
                now = METRICS[metric].fn(self)
                return float(now) / float(then) if float(then) else math.inf
        return METRICS[key].fn(self)

    def current_narration(self) -> str:
        """The current step's narration in the director's language, numbers from the live engine."""
        text = self.steps[self.index].narration.get(self.lang)
        with self._pass():
            return text.format_map(_Figures(self))

    def current_highlight(self) -> str | None:
        """The widget id the current step talks about (None: nothing in particular)."""
        return self.steps[self.index].highlight

    def step_label(self) -> str:
        """'3/5', for the narration panel's step indicator."""
        return f"{self.index + 1}/{len(self.steps)}"

    def evaluate(self) -> list[CheckpointResult]:
        """Evaluate the current step's checkpoints against the live engine."""
        out = []
        with self._pass():
            for cp in self.steps[self.index].checkpoints:
                key = f"{cp.metric}/{cp.vs_mark}" if cp.vs_mark else cp.metric
                unit = METRICS[cp.metric].unit
                try:
                    actual = self.value(key)
                    if not isinstance(actual, str):
                        actual = float(actual)
                    ok, err = check(cp, actual), ""
                except (KeyError, ValueError, ZeroDivisionError, InputError) as e:
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
        while True:
            res = self.evaluate()
            results.extend(res)
            steps.append({"index": self.index, "highlight": self.current_highlight(),
                          "narration": self.current_narration(), "checkpoints": [r.as_dict() for r in res]})
            if not self.next():
                break
        return {"id": self.scene.id, "title": self.scene.title.get(self.lang), "lang": self.lang,
                "claims": list(self.scene.claims), "ok": all(r.ok for r in results),
                "checkpoints": [r.as_dict() for r in results], "steps": steps}
