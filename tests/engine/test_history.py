"""The per-tick history written when read (engine.serving.history) holds exactly what an eager ring held."""

from __future__ import annotations

import itertools

import numpy as np

from engine.serving.history import N_COLS, Growth, History, Run, run_rows
from engine.serving.tables import Ring


def _random_run(rng: np.random.Generator, t: float) -> Run:
    k = int(rng.integers(2, 300))
    dts = rng.uniform(0.005, 0.05, k)
    n = int(rng.integers(1, 64))
    opens = np.bincount(rng.integers(0, 16, n), minlength=16).tolist()
    grown = Growth(n, tuple(itertools.accumulate(opens, initial=0)))
    j = int(rng.integers(0, k + 1))
    return Run(t, dts, rng.uniform(1e9, 1e12, k), rng.uniform(1e9, 1e11, k), int(rng.integers(0, 99)), grown,
               1000, float(rng.uniform()),
               int(rng.integers(0, 5)), (j, int(rng.integers(0, 5))), n)


def test_lazy_history_matches_an_eager_ring_at_every_read() -> None:
    rng = np.random.default_rng(7)
    for cap in (1, 7, 512):
        lazy, eager = History(cap), Ring(cap, N_COLS)
        t = 0.0
        for i in range(400):
            if rng.uniform() < 0.5:
                r = _random_run(rng, t)
                lazy.push_run(r)
                eager.push(run_rows(r))
                t = float(run_rows(r)[-1, 0])
            else:
                row = (t, float(rng.uniform()), float(rng.uniform()), int(rng.integers(0, 9)), 3, 3, 5, 0.1, 0.2,
                       1e9, 2e9)
                lazy.push_row(row)
                eager.push_row(row)
            if i % 37 == 0 or i == 399:  # reads at odd moments flush what is pending
                assert lazy.count == eager.count
                for k in (None, 1, 5, cap):
                    assert np.array_equal(lazy.last(k), eager.last(k))


def test_run_rows_follow_the_columns() -> None:
    r = _random_run(np.random.default_rng(1), 3.7)
    h = run_rows(r)
    j, w = r.queue
    ends = [r.start]
    for dt in r.dts.tolist():  # the clock, step by step
        ends.append(ends[-1] + dt)
    assert h[:, 0].tolist() == ends[1:] and np.array_equal(h[:, 1], r.dts) and np.array_equal(h[:, 8], r.dts)
    assert np.array_equal(h[:-1, 2], (r.used0 + r.grown.array(len(r.dts))[:-1]) / r.total) and h[-1, 2] == r.last_kv
    assert (h[:j, 3] == w).all() and (h[j:, 3] == r.waiting).all()
    assert (h[:, 4] == r.n).all() and (h[:, 5] == r.n).all() and not h[:, 6:8].any()


def test_growth_is_the_cumulative_count_of_blocks_opened() -> None:
    """Growth.after / array against counting, step by step, the rows whose cache reaches a multiple of 16."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        cached = rng.integers(0, 5000, int(rng.integers(1, 40)))
        opens = np.bincount((-cached) & 15, minlength=16).tolist()
        g = Growth(cached.size, tuple(itertools.accumulate(opens, initial=0)))
        k = int(rng.integers(1, 100))
        direct = np.cumsum([int(np.count_nonzero((cached + j) % 16 == 0)) for j in range(k)])
        assert np.array_equal(g.array(k), direct) and [g.after(m) for m in range(1, k + 1)] == direct.tolist()
        assert g.after(0) == 0


def test_pending_rows_stay_bounded() -> None:
    """However long the run, what waits unread is under twice the ring's rows (older entries are dropped)."""
    rng = np.random.default_rng(5)
    h, t = History(64), 0.0
    for _ in range(3000):
        r = _random_run(rng, t) if rng.uniform() < 0.3 else None
        if r is None:
            h.push_row((t, 0.01, 0.5, 0, 1, 1, 0, 0.0, 0.01, 1e9, 1e9))
        else:
            h.push_run(r)
            t = float(run_rows(r)[-1, 0])
        held = sum(len(e.dts) if isinstance(e, Run) else 1 for e in h._pend)
        assert held < 2 * 64 + 300  # at most twice the ring, plus the one run just pushed
