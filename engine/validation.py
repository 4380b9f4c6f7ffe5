"""One validation layer: typed field checks that turn a bad value into one line naming where, what and why.

Every input surface uses these: command-line options (through `option`), EngineConfig (serving),
hardware and model files (specs), scene files (scenes.schema) and step options. A message reads
"FILE: field 'KEY' must be EXPECTED, got VALUE" for a file and "--KEY must be EXPECTED, got VALUE"
for an option, so the user always learns which key to fix and what would be accepted.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from engine.errors import InputError, suggest

T = TypeVar("T")

# Limits that keep every derived figure a finite float64 and every array allocation sane. They are far
# beyond any real part or model (the largest real values are ~1e3 times smaller), so they only stop typos
# and hostile input: above them products of fields overflow or allocations fail.
MAX_COUNT = 10**9  # users, requests, batch, blocks, tokens: int64-safe, with room for sums
MAX_SECONDS = 1e9  # ~32 years of simulated time: any clock sum of these stays finite and exact to the ms
MAX_MULT = 1e6  # what-if multipliers on FLOP/s and bandwidth
# Draft tokens per speculative step: MTP and EAGLE heads propose 1-8 (vLLM's num_speculative_tokens examples use 1-5),
# so 64 is generous; past it the per-token acceptance arrays of a step grow with the option itself (1e9 hung).
MAX_SPEC_TOKENS = 64
MAX_JSON_DEPTH = 64  # nesting of a config.json; HF configs nest 3 deep


def show(value: Any) -> str:
    """The offending value as the user wrote it, short (a 5,000-digit int cannot even be repr'd)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a {len(str(abs(value))) if value.bit_length() < 13000 else 'many'}-digit number"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, ensure_ascii=False, default=str)
        return text if len(text) <= 40 else text[:37] + "..."
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def fail(where: str, key: str, expected: str, value: Any = None, got: bool = True) -> InputError:
    """The one message format: a file names its key, an option names itself."""
    tail = f", got {show(value)}" if got else ""
    if where:
        return InputError(f"{where}: field '{key}' must be {expected}{tail}")
    return InputError(f"{key} must be {expected}{tail}")


def _n(x: float) -> str:
    """A bound as people read it: 1,000,000 for whole numbers, 1e+300 style only for floats."""
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def _range_text(lo: float | None, hi: float | None, lo_open: bool = False) -> str:
    """' >= 0', ' > 0', ' between 1 and 64'."""
    if lo is not None and hi is not None:
        return f" between {_n(lo)} and {_n(hi)}" if not lo_open else f" > {_n(lo)} and <= {_n(hi)}"
    if lo is not None:
        return f" {'>' if lo_open else '>='} {_n(lo)}"
    if hi is not None:
        return f" <= {_n(hi)}"
    return ""


def whole(value: Any, key: str, where: str = "", lo: int | None = 0, hi: int | None = MAX_COUNT) -> int:
    """A whole number in [lo, hi] (a float like 4.0 is accepted as 4; bools and strings are not)."""
    expected = f"a whole number{_range_text(lo, hi)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(where, key, expected, value)
    if isinstance(value, float) and not (math.isfinite(value) and value == int(value)):
        raise fail(where, key, expected, value)
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise fail(where, key, expected, value)
    return v


def number(value: Any, key: str, where: str = "", lo: float | None = 0.0, hi: float | None = None,
           lo_open: bool = False) -> float:
    """A finite number in [lo, hi] (or (lo, hi] with lo_open)."""
    expected = f"a finite number{_range_text(lo, hi, lo_open)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(where, key, expected, value)
    try:
        v = float(value)
    except OverflowError:
        raise fail(where, key, expected, value) from None
    if not math.isfinite(v) or (lo is not None and (v <= lo if lo_open else v < lo)) or (hi is not None and v > hi):
        raise fail(where, key, expected, value)
    return v


def positive(value: Any, key: str, where: str = "", hi: float | None = None) -> float:
    """A finite number > 0 (and <= hi)."""
    return number(value, key, where, lo=0.0, hi=hi, lo_open=True)


def text(value: Any, key: str, where: str = "", choices: Sequence[str] | None = None, what: str = "") -> str:
    """A non-empty string, one of `choices` when given (with a did-you-mean)."""
    if not isinstance(value, str) or not value:
        raise fail(where, key, "a non-empty string", value)
    if choices is not None and value not in choices:
        hint = suggest(value, list(choices))
        if where:
            raise InputError(f"{where}: field '{key}': unknown {what or 'value'} '{value}'{hint}")
        raise InputError(f"{key}: unknown {what or 'value'} '{value}'{hint}")
    return value


def flag(value: Any, key: str, where: str = "") -> bool:
    """true or false (not 0/1, not a string)."""
    if not isinstance(value, bool):
        raise fail(where, key, "true or false", value)
    return value


def table(value: Any, key: str, where: str = "") -> dict[str, Any]:
    """A table (TOML) or object (JSON)."""
    if not isinstance(value, dict):
        raise fail(where, key, "a table of fields", value)
    return value


def optional(d: dict[str, Any], key: str, check: Callable[..., T], where: str, default: T, **kw: Any) -> T:
    """d[key] checked by `check`, or `default` when the key is absent or null (JSON) ."""
    v = d.get(key)
    return default if v is None else check(v, key, where, **kw)


def required(d: dict[str, Any], key: str, check: Callable[..., T], where: str, **kw: Any) -> T:
    """d[key] checked by `check`; a missing key says so."""
    if d.get(key) is None:
        raise InputError(f"{where}: missing field '{key}'")
    return check(d[key], key, where, **kw)


# ---- command-line options --------------------------------------------------------------------------

def option(check: Callable[..., T], **kw: Any) -> Callable[[str], T]:
    """An argparse `type=` from a checker: parses the text as a number, then checks it with the same rule
    (and message) as a file field. argparse prefixes the option's name, so the message here omits it."""

    def parse(raw: str) -> T:
        """Text -> checked value, or argparse's one-line error."""
        val: Any
        try:
            val = int(raw)
        except ValueError:
            try:
                val = float(raw)
            except ValueError:
                val = raw
        if isinstance(val, float) and val.is_integer() and check is whole and abs(val) < 2**63:
            val = int(val)
        try:
            return check(val, "value", **kw)
        except InputError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix("value ")) from None
    parse.__name__ = check.__name__
    return parse


# ---- text from files, made safe to print ------------------------------------------------------------

# C0 and C1 control characters (ESC starts every terminal escape sequence; CR overwrites what a line showed) and the
# bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069: they reorder what a terminal shows, as in
# "Trojan Source", CVE-2021-42574). Text kept whole (a scene's narration) may keep its tabs and line breaks; a
# line (an error message) may not.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    return m.group().encode("unicode_escape").decode("ascii")


def printable(value: Any) -> Any:
    """`value` with every unsafe character in its strings (keys included, recursively) written as a visible escape
    (ESC -> \\x1b), so a name read from a file can never drive the terminal it is printed on. Tabs and line
    breaks stay: narration and notes are written with them."""
    if isinstance(value, str):
        return _UNSAFE.sub(_escape, value)
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable(v) for v in value]
    return value


def printable_line(text_: str) -> str:
    """`text_` as one printable line: every control character escaped, line breaks included."""
    return _UNSAFE_LINE.sub(_escape, text_)


# ---- files -----------------------------------------------------------------------------------------

def read_text(path: Path, what: str) -> str:
    """A UTF-8 text file, or one line saying it is not one (binary, UTF-16, unreadable)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read {what} ({e.strerror or e})") from None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(f"{path}: the {what} is UTF-16; save it as UTF-8")
    try:
        text_ = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: the {what} is not UTF-8 text (byte {e.start}: {data[e.start]:#04x});"
                         " is it binary?") from None
    if "\x00" in text_:
        raise InputError(f"{path}: the {what} contains NUL bytes; is it binary?")
    return text_


def check_json_depth(text_: str, where: str) -> None:
    """Refuse JSON (or JSON lines) nested deeper than MAX_JSON_DEPTH before json ever recurses into it: a cheap
    pre-pass counting bracket depth outside strings."""
    depth = cur = 0
    in_str = esc = False
    for ch in text_:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            cur += 1
            depth = max(depth, cur)
            if depth > MAX_JSON_DEPTH:
                raise InputError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
        elif ch in "]}":
            cur -= 1


def parse_json(text_: str, where: str) -> Any:
    """JSON with sane limits: nesting at most MAX_JSON_DEPTH, integers of at most 4,300 digits."""
    check_json_depth(text_, where)
    try:
        return printable(json.loads(text_))  # names and notes are printed: no terminal escapes in them
    except json.JSONDecodeError as e:
        raise InputError(f"{where}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except (ValueError, RecursionError) as e:  # e.g. an integer longer than Python's 4,300-digit limit
        raise InputError(f"{where}: unreadable JSON: {str(e).split(';')[0]}") from None
