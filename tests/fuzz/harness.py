"""Run `tokensim` in-process and hold it to the contract: exit 0 with a sane result, or exit 2 with one line.

`call` runs tui.cli.main with stdout/stderr captured and a wall-clock alarm, so a hang becomes a test
failure instead of a stuck suite; an exception escaping main is a traceback a user would have seen.
The file helpers write hardware, model and scene files in the formats users write them (TOML, JSON).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from engine import budget
from tui.cli import main

# Fixed example budgets: small in CI, larger with TOKENSIM_FUZZ_EXAMPLES=N (e.g. 2000 for a soak).
EXAMPLES = int(os.environ.get("TOKENSIM_FUZZ_EXAMPLES", "0") or 0)


def examples(ci: int) -> int:
    """The example count for one fuzz test: `ci` by default, TOKENSIM_FUZZ_EXAMPLES when set."""
    return EXAMPLES or ci


class Hang(Exception):
    """The command ran past its time bound."""


@dataclass(frozen=True)
class Outcome:
    """What a user would have seen."""

    code: int
    out: str
    err: str


@contextlib.contextmanager
def time_bound(seconds: float) -> Iterator[None]:
    """Raise Hang in the main thread after `seconds` of wall time."""
    def ring(signum: int, frame: Any) -> None:
        raise Hang(f"still running after {seconds:g} s")
    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def call(argv: list[str], seconds: float = 30.0) -> Outcome:
    """`tokensim ARGV` in-process: exit code and captured output. A traceback or a hang fails the test."""
    out, err = io.StringIO(), io.StringIO()
    code: int
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            with time_bound(seconds):
                code = main(argv)
        except SystemExit as e:
            code = int(e.code or 0) if not isinstance(e.code, str) else 2
        except Hang as e:
            pytest.fail(f"hang: tokensim {' '.join(argv)}: {e}")
        except Exception as e:  # noqa: BLE001 - any escape is the bug this harness exists to find
            pytest.fail(f"traceback: tokensim {' '.join(argv)}: {type(e).__name__}: {e}")
    return Outcome(code, out.getvalue(), err.getvalue())


def assert_contract(o: Outcome, argv: list[str], allow: tuple[int, ...] = (0, 2)) -> None:
    """Exit 0 (a result on stdout, JSON that parses when asked) or exit 2 with exactly one stderr line."""
    where = f"tokensim {' '.join(argv)}"
    assert o.code in allow, f"{where}: exit {o.code}: {o.err[-300:]}"
    assert "Traceback" not in o.err, f"{where}: {o.err[-500:]}"
    if o.code == 2:
        lines = o.err.strip("\n").split("\n")
        assert len(lines) == 1 and lines[0], f"{where}: expected one stderr line, got {o.err!r}"
    elif o.code == 0:
        assert o.out.strip(), f"{where}: exit 0 with no output"
        if "--json" in argv:
            check_sane(json.loads(o.out), where)


def check_sane(obj: Any, where: str) -> None:
    """Every number in a JSON result is finite; counts and times are not negative; clipped <= accepted."""
    def walk(v: Any, key: str) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, k)
        elif isinstance(v, list):
            for x in v:
                walk(x, key)
        elif isinstance(v, float):
            assert math.isfinite(v), f"{where}: {key} = {v}"
    walk(obj, "")
    if isinstance(obj, dict) and "requests_completed" in obj:
        for k in ("requests_completed", "requests_accepted", "input_tokens", "output_tokens", "ticks",
                  "clipped_requests", "requests_unfinished", "queue_end", "running_end"):
            assert obj[k] >= 0, f"{where}: {k} = {obj[k]}"
        assert obj["clipped_requests"] <= obj["requests_accepted"], f"{where}: more clipped than accepted"
        assert obj["sim_time_s"] >= 0 and math.isfinite(obj["sim_time_s"])


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse anything over 2e5 simulated steps, so every run the fuzz gets accepted finishes in seconds."""
    monkeypatch.setattr(budget, "STEPS_LIMIT", 2e5)
    monkeypatch.setattr(budget, "MEMORY_LIMIT_BYTES", 3e8)


# ---- writing files as users do -------------------------------------------------------------------------

def toml_value(v: Any) -> str:
    """One TOML value (inline tables and arrays for nesting; JSON string escapes are TOML's too)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def to_toml(d: dict[str, Any]) -> str:
    """A table as TOML text, one key per line."""
    return "".join(f"{json.dumps(str(k))} = {toml_value(v)}\n" for k, v in d.items())
