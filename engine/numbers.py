"""Numbers for people and for JSON, shared by the engine, the scenes and the app (no UI imports here).

tui/render/fmt.py builds its cell-width helpers on these; the headless commands format with them too.
"""

from __future__ import annotations

import math
from typing import Any


def sig(v: float, digits: int) -> str:
    """v to `digits` significant figures without scientific notation: sig(3.3501, 3) -> '3.35'."""
    if v == 0:
        return "0"
    places = max(0, digits - 1 - int(math.floor(math.log10(abs(v)))))
    return f"{v:.{places}f}"


def si(x: float, unit: str = "", digits: int = 3) -> str:
    """x with an SI prefix (k, M, G, T, P) and `digits` significant figures: 3.35 T; '-' when not finite."""
    if x == 0 or not math.isfinite(x):
        return f"0 {unit}".rstrip() if x == 0 else "-"
    prefixes = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
    for scale, p in prefixes:
        if abs(x) >= scale:
            return f"{sig(x / scale, digits)} {p}{unit}"
    return f"{sig(x, digits)} {unit}".rstrip()


def fixed(v: float | None, scale: float = 1.0, digits: int = 1, unit: str = "") -> str:
    """v x scale with `digits` decimals and thousands separators, then `unit`; '-' when there is no figure."""
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v * scale:,.{digits}f}{unit}"


def dur(s: float | None) -> str:
    """Seconds as µs/ms/s with 3 significant figures; '-' when unknown."""
    if s is None or not math.isfinite(s):
        return "-"
    if s < 1e-3:
        return f"{sig(s * 1e6, 3)} µs"
    if s < 1:
        return f"{sig(s * 1e3, 3)} ms"
    if s < 600:
        return f"{sig(s, 4)} s"
    return f"{int(s // 60)} min {int(s % 60):02d} s"


def pct(f: float | None) -> str:
    """A fraction as a percentage; one decimal below 10 %, '-' when unknown."""
    if f is None or not math.isfinite(f):
        return "-"
    p = f * 100
    return f"{p:.1f} %" if p < 10 else f"{p:.0f} %"


def err_pct(predicted: float, measured: float) -> float:
    """Signed percent error of a prediction against the measurement (validate's, replay's and fit's one figure)."""
    return 100.0 * (predicted - measured) / measured


def json_safe(o: Any) -> Any:
    """`o` with every NaN or infinity (which JSON cannot write) replaced by None, through dicts, lists and tuples."""
    if isinstance(o, dict):
        return {k: json_safe(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [json_safe(v) for v in o]
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o
