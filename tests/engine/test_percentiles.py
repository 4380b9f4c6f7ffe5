"""One percentile helper for every latency summary: unfinished requests (NaN, inf) are left out."""

from __future__ import annotations

import numpy as np

from engine.fleet.plan import _pct
from engine.serving.accounting import Summary, _median, finite_percentiles


def test_finite_percentiles_leave_out_nan_and_inf() -> None:
    x = np.array([4.0, np.nan, 1.0, np.inf, 3.0, 2.0, -np.inf])
    assert finite_percentiles(x, (0, 50, 100)) == [1.0, 2.5, 4.0]
    assert finite_percentiles(np.array([np.nan, np.inf]), (50,)) is None


def test_every_summary_reads_the_same_percentiles() -> None:
    x = np.array([0.5, np.nan, 0.25, 2.0, 1.0])
    s = Summary.of(x)
    assert (s.mean, s.p50) == (0.9375, 0.75) and np.allclose((s.p90, s.p99), (1.7, 1.97), rtol=1e-12)
    assert _median(x) == s.p50 == _pct(x, 50)
    assert _pct(x, 99) == s.p99
    assert _pct(np.array([np.nan]), 50) is None and np.isnan(_median(np.array([np.nan])))
    assert Summary.of(np.array([np.inf])) == Summary(None, None, None, None)
