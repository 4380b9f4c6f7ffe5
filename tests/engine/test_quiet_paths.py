"""A quiet run's Python paths for short runs give exactly what its numpy paths give (engine.serving.steps,
engine.serving.accounting): the same left folds, the same cut, the same ITL bins and sums."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np

from engine.serving.accounting import ITL_EDGES, Itl, fixed, fixed_sum
from engine.serving.history import Growth
from engine.serving.steps import _FEW_STEPS_PY, CacheAggs, _quiet_blocks, fold_run, starts_before
from engine.serving.tables import BLOCK


def test_a_runs_fold_is_each_total_added_step_by_step() -> None:
    """fold_run's one accumulate gives, at every column, the clock and the five totals as += one step at a time."""
    rng = np.random.default_rng(11)
    for k in (1, 2, 7, 13, 40, 300):
        for scale in (1e-3, 1.0, 1e12):
            start = tuple(float(x) for x in rng.uniform(0, 1e3, 6) * scale)
            dts, flops, byts = rng.lognormal(-4, 1, k), rng.uniform(1e9, 1e13, k), rng.uniform(1e6, 1e11, k)
            got = fold_run(start, (dts, flops, byts))
            want = [list(start)]
            for d, f, b in zip(dts.tolist(), flops.tolist(), byts.tolist(), strict=True):
                w = want[-1]
                want.append([w[0] + d, w[1] + d, w[2] + d, w[3] + f, w[4] + f, w[5] + b])
            assert got.T.tolist() == want


def test_starts_before_is_searchsorted_left() -> None:
    rng = np.random.default_rng(12)
    for k in (1, 2, 7, _FEW_STEPS_PY, _FEW_STEPS_PY + 1, 200):
        clock = np.add.accumulate(np.concatenate(([5.0], rng.choice([0.0, 0.01, 0.02], k))))  # ties included
        for t in (*clock.tolist(), 0.0, 5.005, float(clock[-1]) + 1, np.inf):
            assert starts_before(clock, k, t) == int(np.searchsorted(clock[:-1], t, side="left"))


def test_runs_sharing_a_bin_count_as_one_step_at_a_time() -> None:
    rng = np.random.default_rng(13)
    edge = float(ITL_EDGES[900])
    for k in (2, 6, 7, 12, 40, 41, 300):  # 300: a long run, its extremes found by numpy
        for d in (np.full(k, 0.0123) * (1 + np.arange(k) * 1e-6),  # one bin
                  np.linspace(edge * 0.999, edge, k),  # up to an edge exactly (the edge opens the next bin)
                  np.linspace(edge, edge * 1.0001, k),
                  rng.lognormal(-4.0, 0.3, k)):  # several bins
            for stage, n in ((0, 9), (rng.integers(0, 3, 9), 9)):
                run, one = Itl(3), Itl(3)
                run.add_steps(d, stage, n)
                for x in d.tolist():
                    one.add(x, stage, n)
                assert (run.counts == one.counts).all() and run.sum == one.sum and (run.n == one.n).all()


def test_long_fixed_sums_past_int64_room_stay_exact() -> None:
    rng = np.random.default_rng(14)
    for k, scale in ((33, 3.9), (5000, 0.03), (5000, 3.9), (100_000, 0.05)):
        d = rng.random(k) * scale
        assert fixed_sum(d) == sum(fixed(x) for x in d.tolist())


def test_a_few_rows_growth_kept_is_the_growth_counted() -> None:
    """_quiet_blocks keeps the Growth of one or two rows by their lags (steps._GROWTHS): whatever the caches, as
    Python ints or a view, a run reads the Growth counting their lags gives (the pattern and every step's blocks),
    the caches' sum, and the same cut at the blocks available; three rows are counted as before."""
    rng = np.random.default_rng(15)
    for _ in range(600):
        n = int(rng.integers(1, 4))
        cached, gen = rng.integers(0, 5000, n), rng.integers(1, 300, n)
        total = gen + rng.integers(2, 400, n)
        opens = np.bincount(-cached & (BLOCK - 1), minlength=BLOCK).tolist()
        want = Growth(n, tuple(itertools.accumulate(opens, initial=0)))
        avail = int(rng.integers(0, 60))
        lane = SimpleNamespace(sm=SimpleNamespace(model=SimpleNamespace(sliding_layers=0, chunked=False)),
                               aggs=CacheAggs(), clock=0.0, pool=SimpleNamespace(available=avail))
        for rows in ((cached.tolist(), gen.tolist(), total.tolist()), (cached, gen, total)):
            k, grown, left, s0 = _quiet_blocks(lane, 10_000, 0, rows)  # type: ignore[arg-type]
            assert grown == want and [grown.after(m) for m in range(40)] == [want.after(m) for m in range(40)]
            assert s0 == int(cached.sum()) and left == int((total - gen).min())
            assert k == want.cut(left, avail)
