"""Predict, then reveal: a scene step may ask a question before the floor shows the answer.

A question has 2-4 choices. Where the answer is a figure, the choices carry values and the engine decides:
the correct choice is the one nearest the step's `metric` once the step has run (by ratio for positive
figures, so 8 ms is nearer 10 than 1), or the one equal to a text metric ('memory', 'compute'). A
qualitative question names its `answer` (1-based) instead. The file looks like:

    [steps.question]
    metric = "step_ms/before"                       # any figure reference a checkpoint or placeholder may use
    ask = { en = "Compute doubles: ...?", zh = "..." }
    choices = [{ value = 1.0, en = "unchanged", zh = "..." }, { value = 0.5, en = "2x faster", zh = "..." }]
    explain = { en = "It is {step_ms/before:.2f}x ...", zh = "..." }   # placeholders filled after the reveal

The ask's placeholders are filled before the step runs (the floor the user predicts from), the
explanation's after it (the floor that answers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from engine.errors import suggest
from scenes.checks import Ctx, Text, is_num, whole
from scenes.placeholders import OVER, parse_ref

MIN_CHOICES, MAX_CHOICES = 2, 4
_KEYS = ("ask", "choices", "explain", "metric", "answer")


@dataclass(frozen=True, slots=True)
class Choice:
    """One answer offered: its text, and the figure it stands for (None in a qualitative question)."""

    text: Text
    value: float | str | None = None


@dataclass(frozen=True, slots=True)
class Question:
    """A step's question: asked before the step runs, answered from the engine (`metric`) or by `answer`."""

    ask: Text
    choices: tuple[Choice, ...]
    explain: Text
    metric: str | None = None  # a figure reference ('step_ms', 'step_ms/before'); None: `answer` is fixed
    answer: int | None = None  # 0-based index of the right choice, for questions with no metric


@dataclass(frozen=True, slots=True)
class Reveal:
    """A question answered by the engine: the right choice (0-based), the figure that decided it, the explanation."""

    correct: int
    value: float | str | None
    explain: str

    def verdict(self, picked: int | None) -> bool | None:
        """Whether the choice `picked` (0-based) was right; None when nothing was picked."""
        return None if picked is None else picked == self.correct


def correct_choice(q: Question, value: float | str | None) -> int:
    """The index of the choice the figure `value` picks (or q.answer when the question has no metric).

    Positive figures compare by ratio (|log(value / choice)|), others by difference; a text figure must equal
    a choice's value. -1 when no choice matches (a text figure none of the choices names, or no figure).
    """
    if q.metric is None:
        return q.answer if q.answer is not None else -1
    if isinstance(value, str):
        return next((i for i, c in enumerate(q.choices) if c.value == value), -1)
    if value is None or not math.isfinite(value):
        return -1
    nums = [float(c.value) for c in q.choices if isinstance(c.value, (int, float))]
    by_ratio = value > 0 and all(v > 0 for v in nums)

    def distance(c: Choice) -> float:
        """How far the figure is from this choice."""
        v = float(c.value)  # type: ignore[arg-type]
        return abs(math.log(value / v)) if by_ratio else abs(value - v)

    return min(range(len(q.choices)), key=lambda i: distance(q.choices[i]))


def parse_question(c: Ctx, where: str, v: Any, text: Any, metric_unit: Any) -> Question:
    """Validate a step's [steps.question] table. `text(c, where, v)` parses a two-language text;
    `metric_unit(name)` is a metric's unit (None for an unknown metric), for checking `metric` and the values."""
    if not isinstance(v, dict):
        raise c.fail(where, "expected a table [steps.question] with ask, choices, explain and metric or answer")
    for k in v:
        if k not in _KEYS:
            raise c.fail(f"{where}.{k}", f"unknown field '{k}'{suggest(k, list(_KEYS))}")
    for k in ("ask", "choices", "explain"):
        if k not in v:
            raise c.fail(f"{where}.{k}", "missing")
    ask, explain = text(c, f"{where}.ask", v["ask"]), text(c, f"{where}.explain", v["explain"])
    metric, answer = v.get("metric"), v.get("answer")
    if (metric is None) == (answer is None):
        raise c.fail(where, "give either 'metric' (the engine picks the right choice) or 'answer' (1-based), not both")
    unit = None
    if metric is not None:
        if not isinstance(metric, str):
            raise c.fail(f"{where}.metric", f"expected a figure reference like 'step_ms/before', got {metric!r}")
        ref = parse_ref(metric)
        unit = metric_unit(ref.metric)
        if unit is None:
            raise c.fail(f"{where}.metric", f"unknown metric '{ref.metric}'")
        if ref.sep == OVER:
            unit = "x"
    raw = v["choices"]
    if not isinstance(raw, list) or not MIN_CHOICES <= len(raw) <= MAX_CHOICES:
        raise c.fail(f"{where}.choices", f"expected {MIN_CHOICES} to {MAX_CHOICES} choices, got "
                                         f"{len(raw) if isinstance(raw, list) else repr(raw)}")
    choices = []
    for j, ch in enumerate(raw):
        w = f"{where}.choices[{j}]"
        if not isinstance(ch, dict):
            raise c.fail(w, "expected a table { value = ..., en = '...', zh = '...' }")
        value = ch.get("value")
        words = {k: x for k, x in ch.items() if k != "value"}
        if metric is None and value is not None:
            raise c.fail(f"{w}.value", "a question with a fixed 'answer' takes no values")
        if metric is not None:
            value = _value(c, f"{w}.value", value, unit)
        choices.append(Choice(text(c, w, words), value))
    if metric is not None and len({ch.value for ch in choices}) != len(choices):
        raise c.fail(f"{where}.choices", "two choices have the same value: the engine could not tell them apart")
    idx = None
    if answer is not None:
        idx = whole(c, f"{where}.answer", answer, 1) - 1
        if idx >= len(choices):
            raise c.fail(f"{where}.answer", f"there are only {len(choices)} choices, got {answer}")
    return Question(ask=ask, choices=tuple(choices), explain=explain, metric=metric, answer=idx)


def _value(c: Ctx, where: str, value: Any, unit: str | None) -> float | str:
    """A choice's figure: a string for a text metric, else a finite number."""
    if unit == "text":
        if not isinstance(value, str) or not value:
            raise c.fail(where, f"the metric is text: expected a string such as 'memory', got {value!r}")
        return value
    if not is_num(value):
        raise c.fail(where, f"expected a number (the figure this choice stands for), got {value!r}")
    return float(value)
