"""Distribution specs: parsing, seeded sampling, rounding and clipping, and one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import InputError
from engine.traffic.workload import Sampler, Stream, parse_dist, seeded_rngs, seeded_streams


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


@pytest.mark.parametrize("seed", [0, 7, 2**40 + 3])
def test_a_stream_built_on_first_use_draws_as_the_spawned_generator(seed: int) -> None:
    # seeded_streams(seed, n)[i] builds seeded_rngs(seed, n)[i] when a Sampler first draws: same values, in every
    # way of taking them, for every stream of both lanes' ten.
    d = parse_dist("lognormal:200,0.5", "--output", 1)
    gens, streams = seeded_rngs(seed, 10), seeded_streams(seed, 10)
    for i, (g, s) in enumerate(zip(gens, streams, strict=True)):
        a, b = Sampler(d, g, integer=True, lo=1), Sampler(d, s, integer=True, lo=1)
        assert isinstance(b._rng, Stream)
        assert b.take_scalar() == a.take_scalar()
        assert np.array_equal(b.take(5000), a.take(5000)), i
        assert not isinstance(b._rng, Stream)
    assert not np.array_equal(streams[0].generator().random(8), streams[1].generator().random(8))


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


@pytest.mark.parametrize("spec", ["uniform:100,300", "normal:200,80", "lognormal:200,1.5", "exp:200"])
def test_a_block_of_draws_is_the_draws_one_at_a_time(spec: str) -> None:
    """Sampler draws _BLOCK values per generator call: numpy's Generator gives the same stream in one call of
    size n as in n calls of size 1 (normal's ziggurat and lognormal included), so block size never moves a length."""
    d = parse_dist(spec, "--prompt", 1)
    block = d.draw(np.random.default_rng(7), 500)
    rng = np.random.default_rng(7)
    one_by_one = np.concatenate([d.draw(rng, 1) for _ in range(500)])
    assert np.array_equal(block, one_by_one)


@pytest.mark.parametrize("prompt,output,think,cap", [("lognormal:900,1.2", "exp:300", "0", 2000),
                                                     ("uniform:10,4000", "lognormal:200,1.0", "exp:50", 3000),
                                                     ("300", "5000", "20", 4096), ("normal:500,400", "1", "0", 600)])
def test_a_few_requests_are_drawn_as_the_arrays_draw_them(prompt: str, output: str, think: str, cap: int) -> None:
    """RequestSource._create_few (1 to 8 requests, lengths taken ahead in blocks) gives the rows, clip counts and
    stream positions of the array path (draw_lengths + new_rows), clipped requests included (a small cap clips many),
    across blocks, the array path's and a new cap's give_back_lengths."""
    from engine.traffic.arrivals import Budget
    from engine.traffic.source import RequestSource, Workload, draw_lengths, new_rows

    def source() -> RequestSource:
        wl = Workload(parse_dist(prompt, "--prompt", 1), parse_dist(output, "--output", 1),
                      parse_dist(think, "--think", 0), parse_dist("0", "--think-time", 0))
        return RequestSource(wl, Budget(None, 0, None), seeded_rngs(3, 5), cap)

    one, arrays = source(), source()
    clipped = 0
    for j in range(2_000):
        k = 9 if j % 40 == 39 else 1 + j % 8  # (9: _create's own array path, past _FEW_NEW: gives back the
        t, u = 0.25 * j + 0.01 * np.arange(k), (j + np.arange(k)) % 7 - 1  # lengths taken ahead)
        if j == 1_010:  # a resized pool: lengths taken ahead for the old cap go back
            one.set_cap(cap // 2)
            arrays.set_cap(cap // 2)
        r1 = one._create(t, u, None, None)
        p, th, o, c = draw_lengths(arrays.s_prompt, arrays.s_think, arrays.s_output, k)
        r2, n = new_rows(arrays.budget, t, u, p, th, o, c, arrays.cap_tokens)
        clipped += n
        assert np.array_equal(r1.i, r2.i) and np.array_equal(r1.f, r2.f, equal_nan=True), j
    assert one.clipped == clipped and clipped > 0
    one.give_back_lengths()  # the streams, clip counts included, as if nothing had been taken ahead
    for a, b in ((one.s_prompt, arrays.s_prompt), (one.s_think, arrays.s_think), (one.s_output, arrays.s_output)):
        assert a.clipped == b.clipped and (a.take(100) == b.take(100)).all()


@pytest.mark.parametrize("rate,users,fast", [(3.0, 0, False), (40.0, 0, False), (2.0, 8, False), (2.0, 30, False),
                                             (3.0, 0, True), (2.0, 8, True)])
def test_drawing_into_a_queue_gives_the_rows_drawn_fresh(rate: float, users: int, fast: bool) -> None:
    """RequestSource.draw_into a lane's queue (up to 8 rows: Table.add_new; more: extend + new_rows) gives the
    rows, in order, that drawing fresh rows gives, and counts them, through the queue's growth and admissions
    from its head (the fast lane's rows too)."""
    from engine.config import EngineConfig
    from engine.serving.tables import Queue, Rows
    from engine.traffic.source import RequestSource

    cfg = EngineConfig(users=users, rate=rate, requests=3000, prompt="lognormal:900,1.2", output="exp:300",
                       think_time="exp:1")
    into, fresh = RequestSource.for_config(cfg, 4000), RequestSource.for_config(cfg, 4000)
    into.fast = fresh.fast = fast
    q = Queue(4)
    got: list[Rows] = []
    want: list[Rows] = []
    for t in np.arange(0.05, 60.0, 0.05).tolist():
        k, b = into.draw_into(t, q), fresh.draw(t)
        assert k == (0 if b is None else len(b)), t
        if k:
            a = q.cols.pick(slice(q.n - k, q.n))  # the queue's last k rows
            got.append(a.copy())
            want.append(b)
            for src, r in ((into, a), (fresh, b)):
                src.wake(r.user, t + 0.5)  # the answers come back: closed-loop users send again
        if q.size > 6:
            q.pop(q.size - 2)  # admitted from the head
    g, w = Rows.join(got), Rows.join(want)
    assert len(g) > 100 and (g.i == w.i).all() and np.array_equal(g.f, w.f, equal_nan=True)
    assert (g.fast == int(fast)).all()
    assert into.clipped == fresh.clipped and into.budget.next_id == fresh.budget.next_id
