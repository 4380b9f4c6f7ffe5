"""The shared number helpers: JSON-safe figures at any depth, and the formatters the app and the commands share."""

from __future__ import annotations

import json
import math

from engine.numbers import fixed, json_safe, si, sig


def test_json_safe_nulls_every_non_finite_float_at_any_depth_and_keeps_the_rest() -> None:
    data = {"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf, "d": "nan"}], "e": (2, None), "f": 0.5}
    out = json_safe(data)
    assert out == {"a": None, "b": [1.0, None, {"c": None, "d": "nan"}], "e": [2, None], "f": 0.5}
    json.dumps(out, allow_nan=False)  # would raise on a NaN left behind


def test_formatters() -> None:
    assert sig(3.3501, 3) == "3.35" and sig(0.012345, 2) == "0.012"
    assert si(3.35e12, "B/s") == "3.35 TB/s" and si(131072, "B", 4) == "131.1 kB" and si(0, "B") == "0 B"
    assert si(math.nan) == "-"
    assert fixed(1234.5, 1, 0) == "1,234" and fixed(0.0123, 1e3, 1, " ms") == "12.3 ms"
    assert fixed(None) == "-" and fixed(math.nan, unit=" %") == "-"
