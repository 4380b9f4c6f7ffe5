"""One record for every measured run or trace tokensim reads: per request, in arrival order (struct of arrays).

Every reader (engine.evidence.measured.formats) turns its file into a Measured; `replay` and `--bench-json`
work on this record only. Times are seconds. A trace has arrivals and lengths but no latencies (those
arrays are NaN and `measured` is False). `make` checks what every reader must: arrays of one length,
whole positive token counts, finite non-negative latencies, and a known unit for every time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine import validation as V
from engine.errors import InputError

# Seconds per unit, for files that name the unit of each value (AIPerf's "unit", a column's suffix).
UNITS: dict[str, float] = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}
# Epoch timestamps tell their unit by size: a date between 2001 and 2286 is 1e9..1e10 seconds, 1e12..1e13 ms,
# 1e15..1e16 us and 1e18..1e19 ns; nothing else falls in those ranges, so the unit is read, not guessed.
_EPOCH = ((1e9, 1.0), (1e12, 1e-3), (1e15, 1e-6), (1e18, 1e-9))


@dataclass(frozen=True, slots=True)
class Measured:
    """A benchmark result or trace: per request, sorted by arrival; latencies NaN where the file has none."""

    path: str
    format: str
    arrival: np.ndarray  # float64 s from the first request
    prompt: np.ndarray  # int64 prompt tokens
    output: np.ndarray  # int64 output tokens
    ttft: np.ndarray  # float64 s, arrival to first token
    itl: np.ndarray  # float64 s, the request's mean gap between tokens after the first (NaN with one token)
    e2e: np.ndarray  # float64 s, arrival to last token
    stage: np.ndarray  # int64 stage (benchmark) the request belongs to, from 0
    prefix: np.ndarray  # int64 shared-prefix id, -1 for none
    prefix_len: np.ndarray  # int64 tokens under the prefix id
    settings: dict[str, Any] = field(default_factory=dict)  # what the file says about the run (model, rate...)
    dropped: int = 0  # failed requests the file lists, left out

    def __len__(self) -> int:
        return int(self.arrival.size)

    @property
    def measured(self) -> bool:
        """Whether the file measured latencies (a result) or only says what was sent (a trace)."""
        return bool(np.isfinite(self.ttft).any())

    @property
    def stages(self) -> int:
        """How many stages the file holds."""
        return int(self.stage.max()) + 1 if self.stage.size else 0


def unit_scale(unit: Any, where: str, key: str) -> float:
    """Seconds per `unit` as the file names it (InputError for a unit it does not)."""
    u = str(unit).strip().lower()
    if u not in UNITS:
        raise V.fail(where, key, f"a time in one of {', '.join(UNITS)}", unit)
    return UNITS[u]


def epoch_seconds(values: np.ndarray, where: str, key: str) -> np.ndarray:
    """Epoch timestamps in seconds, their unit read from their size (InputError when it cannot be told)."""
    if not values.size:
        return values
    mid = float(np.median(np.abs(values)))
    for lo, scale in _EPOCH:
        if lo <= mid < 10 * lo:
            return values * scale
    raise InputError(f"{where}: field '{key}': cannot tell the unit of {mid:.6g} (expected epoch seconds, ms, us "
                     "or ns)")


def check_mean(values_s: np.ndarray, summary_ms: Any, where: str, key: str, summary_key: str) -> None:
    """The file's own mean (ms) must match its per-request values read as seconds: a file whose values are in
    another unit than its format documents is refused, not read 1,000 times off."""
    if not isinstance(summary_ms, (int, float)) or not values_s.size or not np.isfinite(values_s).any():
        return
    mean_ms = 1e3 * float(np.nanmean(values_s))
    if math.isclose(mean_ms, float(summary_ms), rel_tol=0.05, abs_tol=1e-6):
        return
    hint = ""
    if summary_ms and math.isclose(mean_ms / 1e3, float(summary_ms), rel_tol=0.05):
        hint = " (are they milliseconds? the format writes seconds)"
    raise InputError(f"{where}: field '{key}': mean {mean_ms:.6g} ms read as seconds does not match the file's "
                     f"{summary_key} {float(summary_ms):.6g}{hint}")


def _floats(a: Any, where: str, key: str, n: int, lo: float | None = 0.0, nan_ok: bool = False) -> np.ndarray:
    """A float column of length n: finite (or NaN where nan_ok: not measured), >= lo (InputError naming the first
    bad entry)."""
    try:
        x = np.asarray(a, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise V.fail(where, key, "a list of numbers", a) from None
    if x.size != n:
        raise InputError(f"{where}: field '{key}' has {x.size} entries, the file's other per-request fields {n}")
    bad = ~np.isfinite(x) if lo is None else ~(np.isfinite(x) & (x >= lo))
    if nan_ok:
        bad &= ~np.isnan(x)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise V.fail(where, f"{key}[{j}]", "a finite number" + ("" if lo is None else f" >= {lo:g}"), float(x[j]))
    return x


def _counts(a: Any, where: str, key: str, n: int) -> np.ndarray:
    """A token-count column of length n: whole numbers from 1 to the validation layer's MAX_COUNT (so the int64
    cast below is exact: 1e19 tokens would wrap)."""
    x = _floats(a, where, key, n, lo=1.0)
    big = np.flatnonzero(x > V.MAX_COUNT)
    if big.size:
        j = int(big[0])
        raise V.fail(where, f"{key}[{j}]", f"a whole number >= 1 and <= {V.MAX_COUNT:,}", float(x[j]))
    frac = np.flatnonzero(x != np.floor(x))
    if frac.size:
        raise V.fail(where, f"{key}[{int(frac[0])}]", "a whole number >= 1", float(x[int(frac[0])]))
    return x.astype(np.int64)


def make(where: str, fmt: str, start: Any, prompt: Any, output: Any, *, ttft: Any = None, itl: Any = None,
         e2e: Any = None, stage: Any = None, prefix: Any = None, prefix_len: Any = None,
         settings: dict[str, Any] | None = None, dropped: int = 0, names: dict[str, str] | None = None) -> Measured:
    """Check a reader's columns (start times in seconds on any origin) and build the Measured, sorted by arrival.
    `names` maps each argument to the file's own field name, so a message names what the user can find."""
    nm = {k: k for k in ("start", "prompt", "output", "ttft", "itl", "e2e")} | (names or {})
    n = len(prompt) if hasattr(prompt, "__len__") else -1
    if n <= 0:
        raise InputError(f"{where}: no requests in the file")
    t = _floats(start, where, nm["start"], n, lo=None)
    p, o = _counts(prompt, where, nm["prompt"], n), _counts(output, where, nm["output"], n)
    nan = np.full(n, np.nan)
    lat = {k: nan if v is None else _floats(v, where, nm[k], n) for k, v in (("ttft", ttft), ("e2e", e2e))}
    it = nan if itl is None else _floats(itl, where, nm["itl"], n, nan_ok=True)  # NaN: one output token
    late = np.flatnonzero(lat["e2e"] + 1e-9 < lat["ttft"])
    if late.size:
        j = int(late[0])
        raise InputError(f"{where}: request {j} ends ({lat['e2e'][j]:.6g} s) before its first token "
                         f"({lat['ttft'][j]:.6g} s)")
    st = np.zeros(n, dtype=np.int64) if stage is None else np.asarray(stage, dtype=np.int64)
    pre = np.full(n, -1, dtype=np.int64) if prefix is None else np.asarray(prefix, dtype=np.int64)
    plen = np.zeros(n, dtype=np.int64) if prefix_len is None else np.asarray(prefix_len, dtype=np.int64)
    order = np.argsort(t, kind="stable")
    return Measured(where, fmt, t[order] - t[order[0]], p[order], o[order], lat["ttft"][order], it[order],
                    lat["e2e"][order], st[order], pre[order], plen[order], dict(settings or {}), dropped)
