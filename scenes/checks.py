"""Small validators for scene-file values: each returns the value (typed) or raises a one-line InputError
naming the file and the field, e.g. "scenes/data/05-compute-x2.toml: steps[2].actions[0]: ...".

Shared by the schema (setup, steps, checkpoints) and the action table (scenes.actions).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine import validation as V
from engine.errors import InputError, suggest
from engine.traffic.workload import parse_dist


@dataclass(frozen=True, slots=True)
class Text:
    """One piece of text in every language the project speaks (a scene's narration, a question and its choices)."""

    en: str
    zh: str

    def get(self, lang: str) -> str:
        """The text in `lang` ('en' or 'zh')."""
        return self.zh if lang == "zh" else self.en


class Ctx:
    """Where we are in the file, for error messages."""

    def __init__(self, path: str) -> None:
        """`path` is what the messages call the file."""
        self.path = path

    def fail(self, where: str, msg: str) -> InputError:
        """The error for field `where` ('' for the file as a whole)."""
        return InputError(f"{self.path}: {where}: {msg}" if where else f"{self.path}: {msg}")


    def check(self, where: str, checker: Callable[..., Any], v: Any, **kw: Any) -> Any:
        """Run one of engine.validation's checks on field `where`, its message prefixed with this file."""
        try:
            return checker(v, where, **kw)
        except InputError as e:
            raise InputError(f"{self.path}: {e}") from None


# What one scene may ask of the engine: enough for any lesson, little enough that a headless play
# (and the test that plays every scene) stays quick.
MAX_SCENE_USERS = 100_000
MAX_RUN_TICKS = 100_000
MAX_RUN_SECONDS = 3600.0
MAX_SPEC_TOKENS = 16  # draft tokens per step: real drafters propose a handful
MAX_PROBE_BATCH = 10**6  # sequences the step probe prices at once (as `tokensim step --batch`)


def is_num(v: Any) -> bool:
    """A finite int or float (bool is not a number here; nor is a 400-digit integer, which has no float)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def whole(c: Ctx, where: str, v: Any, lo: int = 0, hi: int = V.MAX_COUNT) -> int:
    """A whole number in [lo, hi] (engine.validation's rule), written as one (not 4.0)."""
    if not isinstance(v, int) or isinstance(v, bool):
        raise c.fail(where, f"expected a whole number, got {V.show(v)}")
    return c.check(where, V.whole, v, lo=lo, hi=hi)


def positive(c: Ctx, where: str, v: Any, hi: float | None = V.MAX_MULT) -> float:
    """A finite number > 0 and <= hi (engine.validation's rule)."""
    return c.check(where, V.positive, v, hi=hi)


def word(c: Ctx, where: str, v: Any, choices: tuple[str, ...] | list[str] | None = None, what: str = "") -> str:
    """A non-empty string, one of `choices` when given (the error suggests the nearest)."""
    if not isinstance(v, str) or not v:
        raise c.fail(where, f"expected a non-empty string, got {v!r}")
    if choices is not None and v not in choices:
        raise c.fail(where, f"unknown {what or 'value'} '{v}'{suggest(v, list(choices))}")
    return v


def dist(c: Ctx, where: str, v: Any) -> str:
    """A length spec the workload parses ("200", "uniform:100,300"); the field name is the part after the dot."""
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        raise c.fail(where, f"expected a length spec like \"200\" or \"uniform:100,300\", got {v!r}")
    try:
        parse_dist(v, where.rsplit(".", 1)[-1])
    except InputError as e:
        raise c.fail(where, str(e)) from None
    return str(v).strip()


def share(c: Ctx, where: str, v: Any) -> float:
    """A fraction between 0 and 1."""
    if not is_num(v) or not 0 <= v <= 1:
        raise c.fail(where, f"expected a fraction between 0 and 1, got {v!r}")
    return float(v)


def flag(c: Ctx, where: str, v: Any) -> bool:
    """true or false."""
    if not isinstance(v, bool):
        raise c.fail(where, f"expected true or false, got {v!r}")
    return v


def mark_name(c: Ctx, where: str, v: Any) -> str:
    """A mark's name: lowercase letters, digits and _, starting with a letter."""
    if not isinstance(v, str) or not re.match(r"^[a-z][a-z0-9_]*$", v):
        raise c.fail(where, f"expected a mark name like 'before' (lowercase, digits, _), got {v!r}")
    return v
