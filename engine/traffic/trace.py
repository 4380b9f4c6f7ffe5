"""Trace replay (`--trace FILE`): requests arrive when a recorded trace says, with its lengths.

A trace is CSV (with a header) or JSON lines, one request per row: an arrival time, prompt tokens and
output tokens; optionally a session id (the next turn's prompt extends the session's previous context,
generated tokens included, so it reads them back from the prefix cache) and a prefix id (requests with
the same prefix id share their first prefix_tokens tokens, or, without that column, each prompt is the
start of one shared text). The Azure LLM inference traces load as published (TIMESTAMP, ContextTokens,
GeneratedTokens). Mooncake traces (JSON lines of timestamp, input_length, output_length, hash_ids) load as
published too: their timestamp is in milliseconds, and requests that share leading hash ids share a cached
prefix (see hash_prefixes). Other times are seconds or ISO date-times; replay starts at the first request, and
`speed` > 1 compresses time. Bad rows are one InputError naming the file, line and column.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import InputError, suggest
from engine.serving.prefix_cache import NO_GROUP, NONE, TAG_GROUP, TAG_SESSION, stream_id
from engine.traffic.workload_file import Requests
from engine.validation import MAX_COUNT, MAX_JSON_DEPTH, MAX_SECONDS, parse_json, read_text

# Accepted column names (lower case) for each field; the first of each is the one the docs use.
COLUMNS: dict[str, tuple[str, ...]] = {
    "time": ("arrival_s", "timestamp", "arrival", "time"),
    "prompt": ("prompt_tokens", "contexttokens", "input_tokens", "prompt", "input_length"),
    "output": ("output_tokens", "generatedtokens", "output", "output_length"),
    "session": ("session_id", "session", "conversation_id"),
    "prefix": ("prefix_id", "prefix"),
    "prefix_tokens": ("prefix_tokens", "prefix_len"),
    "hash_ids": ("hash_ids",),
}
# Mooncake's trace format (github.com/kvcache-ai/Mooncake, FAST25-release/traces): `timestamp` is milliseconds
# since the first request, and each entry of `hash_ids` names one block of 512 prompt tokens.
MOONCAKE_BLOCK_TOKENS = 512
MOONCAKE_COLUMNS = ("timestamp", "input_length", "output_length")
_REQUIRED = ("time", "prompt", "output")


@dataclass(frozen=True, slots=True)
class Trace:
    """A loaded trace (struct of arrays, one entry per request, in arrival order)."""

    path: str
    arrival: np.ndarray  # float64 seconds from the first request, divided by the replay speed
    prompt: np.ndarray  # int64
    output: np.ndarray  # int64
    session: np.ndarray  # int64 session number, -1 for none
    prefix: np.ndarray  # int64 prefix number, -1 for none
    prefix_len: np.ndarray  # int64 tokens under the prefix id (0 without one)
    speed: float = 1.0

    def __len__(self) -> int:
        return int(self.arrival.size)

    @property
    def duration(self) -> float:
        """Seconds from the first arrival to the last (at the replay speed)."""
        return float(self.arrival[-1]) if self.arrival.size else 0.0

    def requests(self, idx: np.ndarray) -> Requests:
        """What trace rows `idx` send, as the engine takes new requests."""
        idx = np.asarray(idx, dtype=np.int64)
        pre = self.prefix[idx]
        ses = self.session[idx]
        has_pre = pre >= 0
        has_ses = ses >= 0
        return Requests(
            prompt=self.prompt[idx], output=self.output[idx], think=np.zeros(idx.size, dtype=np.int64),
            group=np.where(has_pre, stream_id(TAG_GROUP, np.maximum(pre, 0)), NO_GROUP),
            prefix_len=np.where(has_pre, self.prefix_len[idx], 0),
            body=np.where(has_ses, stream_id(TAG_SESSION, np.maximum(ses, 0)), NONE),
            session=has_ses, stage=np.zeros(idx.size, dtype=np.int64))


def bundled() -> dict[str, Path]:
    """Traces shipped with tokensim (name -> file), for trying replay without downloading anything."""
    d = resources.files("engine") / "presets" / "traces"
    return {Path(str(p)).stem: Path(str(p)) for p in d.iterdir() if str(p).endswith((".csv", ".jsonl"))}


def resolve(name: str) -> Path:
    """A trace file path, or a bundled trace's name (InputError naming what exists otherwise)."""
    p = Path(name)
    if p.is_file():
        return p
    b = bundled()
    if name in b:
        return b[name]
    raise InputError(f"--trace {name}: no such file or bundled trace{suggest(name, sorted(b))}")


def load_trace(name: str | Path, speed: float = 1.0) -> Trace:
    """Read and check a trace (CSV or JSON lines, by extension or by content)."""
    if not (isinstance(speed, (int, float)) and speed > 0 and math.isfinite(speed)):
        raise InputError(f"--trace-speed must be a finite number > 0, got {speed!r}")
    path = resolve(str(name))
    label = str(name)
    text = read_text(path, "trace")  # one line for binary, UTF-16, NUL bytes or an unreadable file
    jsonl = path.suffix.lower() in (".jsonl", ".ndjson") or text.lstrip().startswith("{")
    cols, lines, names = _read_jsonl(text, label) if jsonl else _read_csv(text, label)
    return _build(cols, lines, names, label, speed)


def _read_csv(text: str, label: str) -> tuple[dict[str, list[Any]], np.ndarray, dict[str, str]]:
    """Columns by field, each row's line number, and each field's column name as the file spells it."""
    rd = csv.reader(io.StringIO(text))
    try:
        header = next(rd)
    except StopIteration:
        raise InputError(f"{label}: the trace is empty") from None
    except csv.Error as e:  # e.g. a field over the csv module's 131,072-character limit
        raise InputError(f"{label}:{rd.line_num}: unreadable CSV: {e}") from None
    names = [h.strip().lower() for h in header]
    pick = _pick(names, label)
    cols: dict[str, list[Any]] = {f: [] for f in pick}
    lines: list[int] = []
    try:
        for row in rd:
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(names):
                raise InputError(f"{label}:{rd.line_num}: expected {len(names)} columns, got {len(row)}")
            for f, j in pick.items():
                cols[f].append(row[j].strip())
            lines.append(rd.line_num)
    except csv.Error as e:
        raise InputError(f"{label}:{rd.line_num}: unreadable CSV: {e}") from None
    return cols, np.array(lines, dtype=np.int64), {f: header[j].strip() for f, j in pick.items()}


def _read_jsonl(text: str, label: str) -> tuple[dict[str, list[Any]], np.ndarray, dict[str, str]]:
    """Columns by field from JSON objects, one per line, their line numbers, and each field's key."""
    cols: dict[str, list[Any]] = {}
    pick: dict[str, str] = {}
    lines: list[int] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        obj = _json_line(line, f"{label}:{n}")
        if not isinstance(obj, dict):
            raise InputError(f"{label}:{n}: expected a JSON object per line")
        low = {str(k).strip().lower(): v for k, v in obj.items()}
        if not pick:
            names = list(low)
            pick = {f: names[j] for f, j in _pick(names, label, n).items()}
            cols = {f: [] for f in pick}
        for f, k in pick.items():
            if k not in low:
                raise InputError(f"{label}:{n}: {k}: missing")
            cols[f].append(low[k])
        lines.append(n)
    if not pick:
        raise InputError(f"{label}: the trace is empty")
    return cols, np.array(lines, dtype=np.int64), pick


def _json_line(line: str, where: str) -> Any:
    """One JSON line. A line with more brackets than MAX_JSON_DEPTH goes through the validation layer's depth
    check (json recurses per level: 100,000 brackets are a RecursionError); integers past Python's 4,300-digit
    limit are one line too."""
    if line.count("[") + line.count("{") > MAX_JSON_DEPTH:
        return parse_json(line, where)
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise InputError(f"{where}: not valid JSON: {e.msg}") from None
    except (ValueError, RecursionError) as e:
        raise InputError(f"{where}: unreadable JSON: {str(e).split(';')[0]}") from None


def _pick(names: list[str], label: str, line: int = 1) -> dict[str, int]:
    """Which column holds each field (InputError when a required one is missing, or when two columns could give
    one field: a duplicated name, or two of a field's spellings, would otherwise be chosen between silently)."""
    out: dict[str, int] = {}
    for f, aliases in COLUMNS.items():
        given = [a for a in aliases if a in names]
        for a in given:
            if names.count(a) > 1:
                raise InputError(f"{label}:{line}: the column {a} appears {names.count(a)} times; keep one")
        if len(given) > 1:
            raise InputError(f"{label}:{line}: columns {' and '.join(given)} both give the {f}; keep one")
        if given:
            out[f] = names.index(given[0])
    for f in _REQUIRED:
        if f not in out:
            raise InputError(f"{label}:{line}: no {f} column (one of {', '.join(COLUMNS[f])}); columns are "
                             f"{', '.join(names)}")
    return out


def _numbers(vals: list[Any], lines: np.ndarray, label: str, col: str, whole: bool, minimum: float,
             maximum: float = MAX_COUNT) -> np.ndarray:
    """A numeric column in [minimum, maximum]; InputError at the first bad row. JSON true/false are not numbers
    (numpy would read true as 1 token), and the bound keeps counts inside int64 with room for their sums (1e19
    tokens wrapped negative) and times where a step of a millisecond still moves the clock."""
    try:
        if any(isinstance(v, bool) for v in vals):
            raise TypeError("a JSON true/false is not a number")
        a = np.array(vals, dtype=np.float64)
        ok = np.isfinite(a) & (a >= minimum) & (a <= maximum)
        if whole:
            ok &= a == np.floor(a)
    except (ValueError, TypeError, OverflowError):
        a = None
        ok = None
    if ok is None or not ok.all():
        for j, v in enumerate(vals):
            try:
                x = math.nan if isinstance(v, bool) else float(v)
            except (ValueError, TypeError, OverflowError):
                x = math.nan
            if not (math.isfinite(x) and minimum <= x <= maximum and (not whole or x == int(x))):
                kind = "a whole number" if whole else "a number"
                raise InputError(f"{label}:{lines[j]}: {col}: must be {kind} >= {minimum:g} and <= {maximum:g},"
                                 f" got {str(v)[:40]!r}")
    assert a is not None
    return a.astype(np.int64) if whole else a


def _times(vals: list[Any], lines: np.ndarray, label: str, col: str) -> np.ndarray:
    """Arrival times in seconds: numbers as they are (none negative), date-times relative to the first."""
    try:
        t = _numbers(vals, lines, label, col, False, -math.inf, math.inf)
    except InputError:
        pass
    else:
        neg = np.flatnonzero(t < 0)
        if neg.size:
            j = int(neg[0])
            raise InputError(f"{label}:{lines[j]}: {col}: negative arrival time {vals[j]!r}")
        return t
    for j, v in enumerate(vals):  # numpy reads "5" as the year 5: a number among date-times is refused
        if isinstance(v, (int, float)) or _is_number(v):
            raise InputError(f"{label}:{lines[j]}: {col}: {str(v)[:40]!r} is a number among date-times; give every"
                             " time as seconds or every time as an ISO date-time")
    try:
        ts = np.array(vals, dtype="datetime64[ns]")
    except (ValueError, TypeError):
        for j, v in enumerate(vals):
            try:
                np.datetime64(v, "ns")
            except (ValueError, TypeError):
                raise InputError(f"{label}:{lines[j]}: {col}: expected seconds or an ISO date-time, "
                                 f"got {v!r}") from None
        raise
    return (ts - ts[0]).astype(np.int64) / 1e9


def _is_number(v: Any) -> bool:
    """Whether text reads as a plain number."""
    try:
        float(v)
    except (ValueError, TypeError, OverflowError):
        return False
    return True


def _ids(vals: list[Any]) -> np.ndarray:
    """Dense numbers for id values (strings or numbers); empty values are -1 (no id)."""
    keys = np.array(["" if v is None else str(v).strip() for v in vals])
    uniq, inv = np.unique(keys, return_inverse=True)
    out = inv.astype(np.int64)
    if uniq.size and uniq[0] == "":
        out -= 1  # "" sorts first: it becomes -1 and the rest start at 0
    return out


def _build(cols: dict[str, list[Any]], lines: np.ndarray, names: dict[str, str], label: str,
           speed: float) -> Trace:
    """Check the columns and assemble the Trace."""
    if not lines.size:
        raise InputError(f"{label}: the trace has no requests")
    t = _times(cols["time"], lines, label, names["time"])
    if is_mooncake(names):
        t = t / 1e3  # Mooncake's timestamp is milliseconds
    back = np.flatnonzero(np.diff(t) < 0)
    if back.size:
        j = int(back[0]) + 1
        raise InputError(f"{label}:{lines[j]}: {names['time']}: {cols['time'][j]!r} is before the previous "
                         f"row's {cols['time'][j - 1]!r}; a trace must be sorted by arrival")
    prompt = _numbers(cols["prompt"], lines, label, names["prompt"], True, 1)
    output = _numbers(cols["output"], lines, label, names["output"], True, 1)
    n = lines.size
    session = _ids(cols["session"]) if "session" in cols else np.full(n, -1, dtype=np.int64)
    prefix = _ids(cols["prefix"]) if "prefix" in cols else np.full(n, -1, dtype=np.int64)
    if "hash_ids" in cols and "prefix" not in cols:
        prefix, plen = hash_prefixes(_hash_lists(cols["hash_ids"], lines, label), prompt)
    elif "prefix_tokens" in cols:
        plen = _numbers(cols["prefix_tokens"], lines, label, names["prefix_tokens"], True, 0)
        over = np.flatnonzero(plen > prompt)
        if over.size:
            j = int(over[0])
            raise InputError(f"{label}:{lines[j]}: {names['prefix_tokens']}: {plen[j]} is longer than the prompt's "
                             f"{prompt[j]}")
    else:
        plen = prompt.copy()  # no length given: each prompt is the start of its prefix id's one shared text
    plen = np.where(prefix >= 0, plen, 0)
    with np.errstate(over="ignore"):  # a span past float64 is inf, refused just below
        arrival = (t - t[0]) / speed
    if arrival[-1] > MAX_SECONDS:  # past it, a millisecond step no longer moves a float64 clock reliably
        raise InputError(f"{label}: the trace spans {arrival[-1]:.3g} s at --trace-speed {speed:g}, over the"
                         f" {MAX_SECONDS:.0e} s a run's clock can hold; give times in seconds or a higher"
                         " --trace-speed")
    return Trace(label, arrival, prompt, output, session, prefix, plen, float(speed))


def is_mooncake(names: dict[str, str]) -> bool:
    """Whether the columns are Mooncake's (timestamp, input_length, output_length): then time is milliseconds."""
    return tuple(names.get(f, "").lower() for f in ("time", "prompt", "output")) == MOONCAKE_COLUMNS


def _hash_lists(vals: list[Any], lines: np.ndarray, label: str) -> list[list[int]]:
    """The hash_ids column: a list of whole numbers per row (InputError at the first that is not)."""
    for j, v in enumerate(vals):
        if not (isinstance(v, list) and all(isinstance(h, int) and not isinstance(h, bool) for h in v)):
            raise InputError(f"{label}:{lines[j]}: hash_ids: must be a list of whole numbers, got {v!r}"[:200])
    return vals


def hash_prefixes(hash_ids: list[list[int]], prompt: np.ndarray,
                  block: int = MOONCAKE_BLOCK_TOKENS) -> tuple[np.ndarray, np.ndarray]:
    """(prefix id, prefix tokens) per request from Mooncake-style block hashes.

    Requests whose hash lists start alike share those blocks' KV. Each leading run of hashes is a node of a
    tree; a request's shared prefix is the run of its nodes that another request also passes through, and its
    prefix id is its first block's node, so the engine keys those blocks as one group's text. Where two
    requests of one group diverge and each then shares a deeper run with a third, the group keys both runs
    alike (a slight over-estimate of reuse that a tree of branching system prompts can show).
    """
    node_of: dict[tuple[int, int], int] = {}
    count: list[int] = []
    paths: list[list[int]] = []
    for ids in hash_ids:
        parent, path = -1, []
        for h in ids:
            node = node_of.setdefault((parent, h), len(count))
            if node == len(count):
                count.append(0)
            count[node] += 1
            path.append(node)
            parent = node
        paths.append(path)
    n = len(paths)
    prefix = np.full(n, -1, dtype=np.int64)
    plen = np.zeros(n, dtype=np.int64)
    for i, path in enumerate(paths):
        shared = sum(1 for node in path if count[node] > 1)  # counts never rise along a path
        if shared:
            prefix[i] = path[0]
            plen[i] = min(shared * block, int(prompt[i]))
    return prefix, plen
