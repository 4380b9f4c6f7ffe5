"""The batch record (engine.physics.batch.Batch) and the step kinds that build it (engine.serving.steps).

Each serving-loop builder must give the sums a direct per-row computation gives (Batch.of_rows, or the formulas
written out here), for dense, sliding-window, chunked-attention and MLA models and for speculative verify
passes; and a step kind registered from outside prices through the same entry point (StepModel.price).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.physics.batch import Batch
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions
from engine.serving import steps
from engine.serving.engine import Engine

# dense, sliding window (128), chunked attention (8,192-token chunks), MLA
MODELS = ["llama-3.1-8b", "gpt-oss-20b", "llama-4-scout", "deepseek-v3"]
RNG = np.random.default_rng(11)
CACHED = np.r_[0, 1, 15, 16, 127, 128, 129, 8191, 8192, 8193, RNG.integers(0, 40_000, 40)].astype(np.int64)


def _close(a: Batch, b: Batch) -> None:
    """Every field equal (to 1e-12 relative: builders and the reference sum in different orders)."""
    for name, x, y in zip(Batch._fields, a, b, strict=True):
        assert np.asarray(x, dtype=np.float64) == pytest.approx(np.asarray(y, dtype=np.float64), rel=1e-12), name


@pytest.mark.parametrize("model", MODELS)
def test_decode_batch_is_the_per_row_sum(model: str) -> None:
    m = load_model(model)
    got = steps.decode_batch(m, CACHED)
    _close(got, Batch.of_rows(m, np.ones(CACHED.size), CACHED))
    assert got.attn_decode is got.attn_full  # every row decodes: the step model's shortcut applies
    if m.sliding_layers:  # the window really caps what local layers read
        assert got.sum_win < got.sum_ctx


@pytest.mark.parametrize("model", MODELS)
def test_join_and_mixed_batches_are_the_per_row_sums(model: str) -> None:
    m = load_model(model)
    dec = CACHED[:20]
    chunks = RNG.integers(1, 9000, 7).astype(np.int64)
    rows_new = np.r_[np.ones(dec.size), chunks]
    rows_ctx = np.r_[dec, np.zeros(chunks.size)]
    reference = Batch.of_rows(m, rows_new, rows_ctx)
    joined, attn_pf = steps.join_batch(m, dec, chunks)
    _close(joined, reference)
    assert attn_pf == pytest.approx(float((chunks * (chunks / 2)).sum()))
    # The general builder on the same rows: prefill rows are those not yet at their target.
    nf = rows_new.astype(np.float64)
    cached = rows_ctx.astype(np.int64)
    a = nf * (cached + nf / 2)
    decoding = np.r_[np.ones(dec.size, dtype=bool), np.zeros(chunks.size, dtype=bool)]
    _close(steps.mixed_batch(m, cached, rows_new.astype(np.int64), nf, a, decoding, rows_new.size), reference)


@pytest.mark.parametrize("model", MODELS)
def test_verify_batch_counts_every_draft(model: str) -> None:
    """Speculative decoding: q = K + 1 tokens a row (fewer near the end), each scored, all priced as decode pairs."""
    m = load_model(model)
    q = np.minimum(4, RNG.integers(1, 6, CACHED.size)).astype(np.int64)
    got = steps.verify_batch(m, CACHED, q)
    x, n = CACHED.astype(np.float64), q.astype(np.float64)
    pairs = sum(sum(c + j + 0.5 for j in range(k)) for c, k in zip(x, n.astype(int), strict=True))
    win_pairs = sum(float(m.local_seen(np.array([c + j], dtype=np.float64))[0]) + 0.5
                    for c, k in zip(x, n.astype(int), strict=True) for j in range(k))
    want = Batch(tokens=int(q.sum()), seqs=CACHED.size, sum_ctx=float(x.sum()), sum_win=float(m.local_seen(x).sum()),
                 attn_full=pairs, attn_win=win_pairs if m.sliding_layers else 0.0, logits=int(q.sum()),
                 attn_decode=pairs)
    _close(got, want)


@pytest.mark.parametrize("model", MODELS)
def test_a_run_of_decode_steps_is_each_step_alone(model: str) -> None:
    m = load_model(model)
    k = 300  # crosses 128-token windows; within one 8,192-token chunk (window_sums' closed form needs k <= it)
    run = steps.run_batch(m, CACHED, k)
    for j in (0, 1, 127, 128, 200, k - 1):
        one = Batch.of_rows(m, np.ones(CACHED.size), CACHED + j)
        got = Batch(*(f if np.ndim(f) == 0 else f[j] for f in run))
        _close(got._replace(tokens=int(got.tokens), logits=int(got.logits)), one)


@pytest.mark.parametrize("model", MODELS)
def test_the_builders_price_as_the_reference_record(model: str) -> None:
    """What reaches the step model is all that matters: the same time, FLOPs and bytes to the last bits (MLA's
    decode pairs at their absorbed width, local layers' windows)."""
    sm = StepModel(load_hardware("h100-sxm"), load_model(model), StepOptions(tp=8 if model == "deepseek-v3" else 1,
                                                                              weight_dtype="fp8"))
    for got in (steps.decode_batch(sm.model, CACHED), steps.join_batch(sm.model, CACHED[:9], CACHED[9:15] + 1)[0]):
        direct = (Batch.of_rows(sm.model, np.ones(CACHED.size), CACHED) if got.seqs == CACHED.size else
                  Batch.of_rows(sm.model, np.r_[np.ones(9), CACHED[9:15] + 1], np.r_[CACHED[:9], np.zeros(6)]))
        a, b = sm.price(got), sm.price(direct)
        assert a.time == pytest.approx(b.time, rel=1e-12)
        assert a.flops_total == pytest.approx(b.flops_total, rel=1e-12)
        assert a.bytes_total == pytest.approx(b.bytes_total, rel=1e-12)


# ---- a step kind registered from outside --------------------------------------------------------------------

def toy_decode(lane: Any, s: steps.StepPlan) -> Any:
    """A decode kind written from the recipe (docs/extending/step-kinds.md): build the record, price, apply."""
    n = s.n
    lane.pool.alloc(s.need)
    c = lane.R.cols
    dt, p = lane.price(steps.decode_batch(lane.sm.model, c.cached[:n]))
    t1 = lane.advance(dt)
    c.cached[:n] += 1
    c.blocks[:n] += s.nb
    gen = c.gen[:n]
    gen += 1
    steps.fill_new_blocks(lane, n, c.cached[:n])  # with shared content, key the blocks rows just filled
    vis_tokens = steps.stamp_visible(lane, n, gen, None, t1)
    lane.stats.itl.add(dt, c.stage[:n] if lane.staged else 0, n)
    ids = c.id[:n].copy() if s.want else steps.ones(0)
    return steps.finish(lane, s, p, n, n, vis_tokens, t1, dt, ids, steps.ones(n))


def test_a_registered_step_kind_prices_through_the_one_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = EngineConfig(users=6, prompt="uniform:50,400", output="uniform:20,120", requests=30, seed=5, debug=True)
    base = Engine(cfg)
    base.run()
    priced: list[float] = []
    real_price = StepModel.price

    def counted_price(self: StepModel, b: Batch) -> Any:
        p = real_price(self, b)
        priced.append(float(np.sum(b.tokens)))
        return p

    ran: list[int] = []

    def toy(lane: Any, s: steps.StepPlan) -> Any:
        ran.append(len(priced))
        out = toy_decode(lane, s)
        assert len(priced) == ran[-1] + 1 and priced[-1] == s.n  # one record priced, one token a row
        return out

    monkeypatch.setattr(StepModel, "price", counted_price)
    monkeypatch.setattr(steps, "STEP_KINDS", list(steps.STEP_KINDS))
    steps.register(steps.StepKind("toy-decode", lambda lane, s: s.n == s.n_run and s.new is None and not lane.spec_k,
                                  toy), before="decode")
    with pytest.raises(ValueError):
        steps.register(steps.StepKind("toy-decode", lambda lane, s: False, toy))
    e = Engine(cfg)
    e.skip_quiet = base.skip_quiet
    e.run()
    assert ran, "the toy kind never ran: the comparison would prove nothing"
    assert e.metrics() == base.metrics()  # the same physics through the same entry point: the same run
    steps.unregister("toy-decode")
    assert [k.name for k in steps.STEP_KINDS] == ["join", "spec", "decode", "mixed"]


@pytest.mark.parametrize("model", MODELS)
def test_a_lone_admitted_row_joins_as_a_few_rows_do(model: str) -> None:
    """join_batch's lone-row path (Python ints) gives the few-rows path's record bit for bit: the general path's
    sum of one term, with a twin row of no prompt (0 pairs, 0 tokens) added to take that path."""
    m = load_model(model)
    for n_run in (0, 1, 5, 20, 45):
        dec = CACHED[:n_run]
        for x in (1, 2, 15, 16, 17, 511, 4097, 8191, 39_999):
            lone, pairs = steps.join_batch(m, dec, np.array([x], dtype=np.int64))
            few, few_pairs = steps.join_batch(m, dec, np.array([x, 0], dtype=np.int64))
            assert pairs == few_pairs and type(pairs) is float
            assert lone._replace(seqs=0, logits=0) == few._replace(seqs=0, logits=0)  # (the twin row is a sequence)
            assert (lone.seqs, lone.logits) == (n_run + 1, n_run + 1) and type(lone.tokens) is int


def _plans() -> list[steps.StepPlan]:
    """Plans of every shape the lane makes: decode, join, prefill planned, whole or split prompts."""
    e = np.zeros(0, dtype=np.int64)
    out = []
    for n_run, n in ((3, 3), (3, 4), (0, 2), (5, 7)):
        for new in (None, np.ones(n_run, dtype=np.int64)):
            for whole in (True, False):
                out.append(steps.StepPlan(n_run, n, new, None, 0, np.ones(n - n_run, dtype=np.int64), whole, 0, e, e,
                                          False))
    return out


def test_the_built_in_kinds_are_picked_as_their_whens_pick(monkeypatch: pytest.MonkeyPatch) -> None:
    """run's shortcut for the built-in kinds chooses the kind the `when` loop chooses, for every plan shape and lane
    (speculation on or off, a tier load pending or not), and whole runs give the same figures either way."""
    picked: list[str] = []

    def rec(name: str) -> Any:
        return lambda lane, s: picked.append(name)

    kinds = [k._replace(run=rec(k.name)) for k in steps.STEP_KINDS]
    monkeypatch.setattr(steps, "STEP_KINDS", kinds)
    monkeypatch.setattr(steps, "_BUILT_IN", kinds)  # the shortcut is on: it calls the kinds below by name
    monkeypatch.setattr(steps, "decode_step", rec("decode*"))
    monkeypatch.setattr(steps, "join_step", rec("join*"))
    lane = Engine(EngineConfig(users=2, requests=4))._lanes[0]
    short = 0
    for spec_k in (0, 3):
        for load_s in (0.0, 0.5):
            lane.spec_k, lane.load_s = spec_k, load_s
            for s in _plans():
                expect = next(k.name for k in kinds if k.when(lane, s))
                steps.run(lane, s)
                got = picked.pop()
                short += got.endswith("*")
                assert got.rstrip("*") == expect
    assert short >= 4, "the shortcut never ran: the comparison would prove nothing"
    monkeypatch.undo()
    for cfg in (EngineConfig(rate=8, prompt="uniform:20,900", output="uniform:1,300", requests=300, seed=3),
                EngineConfig(users=24, think="uniform:0,40", output="uniform:1,200", requests=200, seed=4)):
        fast = Engine(cfg)
        fast.run()
        # The same kinds behind other objects: run asks each `when` in turn.
        monkeypatch.setattr(steps, "STEP_KINDS", [k._replace(run=partial(k.run)) for k in steps.STEP_KINDS])
        general = Engine(cfg)
        general.run()
        monkeypatch.undo()
        assert fast.metrics() == general.metrics()
