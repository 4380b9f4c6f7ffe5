"""Distribution specs: parsing, seeded sampling, rounding and clipping, and one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import InputError
from engine.traffic.workload import Sampler, parse_dist, seeded_rngs


def test_fixed_spec_is_a_constant() -> None:
    d = parse_dist("200", "--output", 1)
    assert d.is_fixed and d.a == 200 and d.mean == 200
    s = Sampler(d, np.random.default_rng(0), integer=True, lo=1)
    v = s.take(5)
    assert v.dtype == np.int64 and v.tolist() == [200] * 5


@pytest.mark.parametrize("spec,mean", [("uniform:100,300", 200), ("normal:200,20", 200),
                                       ("lognormal:200,0.5", 200 * np.exp(0.125)), ("exp:200", 200)])
def test_sampled_means_match_the_spec(spec: str, mean: float) -> None:
    d = parse_dist(spec, "--prompt", 1)
    assert d.mean == pytest.approx(mean)
    v = Sampler(d, np.random.default_rng(1), integer=True, lo=1).take(20_000)
    assert v.min() >= 1
    assert v.mean() == pytest.approx(mean, rel=0.03)


def test_uniform_stays_in_bounds_and_lognormal_median() -> None:
    u = Sampler(parse_dist("uniform:10,20", "--x"), np.random.default_rng(2), integer=True).take(5000)
    assert u.min() >= 10 and u.max() <= 20
    ln = Sampler(parse_dist("lognormal:300,0.4", "--x"), np.random.default_rng(3), integer=False).take(20_000)
    assert np.median(ln) == pytest.approx(300, rel=0.03)


def test_same_seed_same_values_whatever_the_chunking() -> None:
    d = parse_dist("lognormal:200,0.5", "--output", 1)
    a = Sampler(d, seeded_rngs(7, 2)[1], integer=True, lo=1)
    b = Sampler(d, seeded_rngs(7, 2)[1], integer=True, lo=1)
    whole = a.take(3000)
    parts = np.concatenate([b.take(1), b.take(1500), b.take(1499)])
    assert np.array_equal(whole, parts)
    other = Sampler(d, seeded_rngs(8, 2)[1], integer=True, lo=1).take(3000)
    assert not np.array_equal(whole, other)


def test_clipping_is_counted_only_for_values_handed_out() -> None:
    s = Sampler(parse_dist("uniform:0,100", "--prompt"), np.random.default_rng(4), integer=True, lo=1, hi=50)
    v = s.take(1000)
    assert v.max() == 50 and v.min() >= 1
    assert s.clipped <= int((v == 50).sum())  # a draw of exactly 50 is not a clip
    assert 400 < s.clipped < 600


@pytest.mark.parametrize("spec", ["abc", "uniform:5", "uniform:9,3", "normal:10,-1", "lognormal:0,1", "exp:-3",
                                  "gamma:1,2", "nan", "inf", "-5", "uniform:a,b"])
def test_bad_specs_are_one_line_input_errors(spec: str) -> None:
    with pytest.raises(InputError) as e:
        parse_dist(spec, "--output", 1)
    msg = str(e.value)
    assert "--output" in msg and "\n" not in msg
