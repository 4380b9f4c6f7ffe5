"""The ITL mean's sum is exact: it does not depend on how the steps were grouped into calls (issue 26)."""

from __future__ import annotations

import numpy as np

from engine.serving.accounting import Itl, fixed, fixed_sum


def test_fixed_sum_is_the_sum_of_each_gap_rounded_alone() -> None:
    rng = np.random.default_rng(7)
    for scale in (1e-4, 1e-2, 1.0, 40.0, 5e3):  # the last two pass int64: exact as Python ints
        d = rng.random(500) * scale
        assert fixed_sum(d) == sum(fixed(float(x)) for x in d)
    for k in (3, 33, 200):  # fractions of a unit are cut, in the short (Python) and long (int64) paths alike
        cut = np.resize([0.5, 1.5, 2.7], k) * 2.0 ** -60
        assert fixed_sum(cut) == sum(fixed(float(x)) for x in cut) == sum(np.resize([0, 1, 2], k))


def test_the_mean_is_the_same_whatever_the_run_boundaries() -> None:
    rng = np.random.default_rng(3)
    dts = rng.lognormal(-4.0, 0.5, 999)
    one, runs, mixed = Itl(2), Itl(2), Itl(2)
    stage = np.array([0, 1, 1, 0, 1])
    for dt in dts:
        one.add(float(dt), stage, 5)
    for a, b in ((0, 1), (1, 400), (400, 401), (401, 999)):
        runs.add_steps(dts[a:b], stage, 5)
    mixed.add_steps(dts[:998], stage, 5)
    mixed.add(float(dts[998]), stage, 5)
    assert one.sum == runs.sum == mixed.sum
    assert one.summary() == runs.summary() == mixed.summary()
    assert one.summary(1) == runs.summary(1)
    # a float running sum in a different grouping drifts in the last bits; the fixed point total does not
    assert one.summary().mean == sum(fixed(float(x)) for x in dts) * 5 / (999 * 5 * 2 ** 60)


def test_short_and_long_runs_bin_each_step_as_one_step_would() -> None:
    rng = np.random.default_rng(5)
    for k in (1, 5, 6, 7, 16, 300):  # the Python path (up to 6 steps) and the numpy one
        d = rng.lognormal(-4.0, 1.5, k)
        d[0] = 1e-7  # below the first edge: the first bin
        d[-1] = 2e3  # past the last: the last bin
        run, one = Itl(3), Itl(3)
        stage = rng.integers(0, 3, 9)
        run.add_steps(d, stage, 9)
        for x in d:
            one.add(float(x), stage, 9)
        assert (run.counts == one.counts).all() and run.sum == one.sum and (run.n == one.n).all()


def test_pending_runs_count_as_each_step_alone() -> None:
    """Quiet runs wait to be counted (Itl.add_steps, counted at a read or when enough wait): however many wait,
    in one stage or several, in one bin or across bins, with gaps past int64's fixed-point room, the histogram,
    sums and counts are those of adding each step as it came."""
    rng = np.random.default_rng(17)
    for stages in (1, 3):
        runs, one = Itl(stages), Itl(stages)
        for r in range(700):  # past _RUNS_PENDING: counted in several batches, the last at the read
            k = int(rng.integers(1, 120))
            d = np.full(k, rng.lognormal(-4.0, 1.0)) * (1 + np.arange(k) * (1e-6 if r % 3 else 1e-3))
            if r == 5:
                d[-1] = 9.0  # a gap past int64's room in fixed point
            stage = 0 if stages == 1 or r % 2 else rng.integers(0, stages, 7)
            n = 7
            runs.add_steps(d, stage, n)
            for x in d.tolist():
                one.add(x, stage, n)
            if r == 350:
                assert runs.sum == one.sum  # a read mid-way counts what waits
        assert (runs.counts == one.counts).all() and runs.sum == one.sum and (runs.n == one.n).all()
        assert runs.summary() == one.summary()
