"""StepModel.price's paths agree bit for bit: one step of Python floats (_one_step), the general path with Python
numbers, a run of steps as arrays (its scalars as 0-d arrays), steps of many token counts as arrays (nothing
remembered), and a model priced cold or with its memo of (tokens, logits) terms. Each run's step j, priced alone,
must give exactly element j of the run's price; every path's flops_total and bytes_total are its parts summed in
order."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import pytest

from engine.physics.batch import Batch
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions, StepParts, price_run
from engine.serving.steps import run_batch

# (hardware, model, options): dense, MoE, MLA with block FP8, sliding window, chunked attention, fp8 weights and KV,
# --ideal, LoRA adapters, the eager runtime (KV read in several passes, no CUDA graphs), tp > 1, expert parallel
# both ways, pipeline parallel.
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("h100-sxm", "llama-3.1-8b", {}),
    ("h100-sxm", "qwen3-30b-a3b", {}),
    ("h200", "deepseek-v3", {"tp": 8}),
    ("h100-sxm", "gpt-oss-20b", {}),
    ("h100-sxm", "llama-4-scout", {"tp": 2, "ep": 2}),
    ("h100-sxm", "llama-3.1-8b", {"weight_dtype": "fp8", "kv_dtype": "fp8", "ideal": True}),
    ("h100-sxm", "llama-3.1-8b", {"max_loras": 4, "max_lora_rank": 16}),
    ("a100-80g", "llama-3.1-8b", {"runtime": "hf-eager"}),
    ("h100-sxm", "llama-3.1-70b", {"tp": 4}),
    ("h100-pcie", "qwen3-30b-a3b", {"tp": 2, "ep": 2, "ep_comm": "all-gather"}),
    ("h100-sxm", "llama-3.1-70b", {"tp": 2, "pp": 2}),
]


def _bits(v: Any) -> tuple[str, bytes]:
    """A value's type and exact bytes (float64), so that == compares bit for bit."""
    return type(v).__name__, np.float64(v).tobytes()


def _at(p: StepParts, j: int) -> list[tuple[str, bytes]]:
    """Step j of a priced run: each field's element j (a field shared by every step is one float)."""
    return [_bits(float(v[j]) if isinstance(v, np.ndarray) and v.ndim else v) for v in p]


def _model(hw: str, model: str, opts: dict[str, Any]) -> StepModel:
    return StepModel(load_hardware(hw), load_model(model), StepOptions(**opts))


@pytest.mark.parametrize(("hw", "model", "opts"), CASES)
def test_a_run_of_steps_prices_each_step_as_one_step_alone(hw: str, model: str, opts: dict[str, Any]) -> None:
    sm = _model(hw, model, opts)
    rng = np.random.default_rng(26)
    adapters = 3 if opts.get("max_loras") else 0
    for n in (1, 3, 8, 37, 200, 300, 9000):
        k = int(rng.integers(1, 40))
        b = run_batch(sm.model, rng.integers(0, 20_000, n), k)._replace(adapters=adapters)
        p = sm.price(b)
        assert len(p) == len(StepParts._fields)
        for j in range(k):
            win = b.sum_win if isinstance(b.sum_win, float) else float(b.sum_win[j])
            aw = b.attn_win if isinstance(b.attn_win, float) else float(b.attn_win[j])
            a = float(b.attn_full[j])
            one = Batch(tokens=n, seqs=n, sum_ctx=float(b.sum_ctx[j]), sum_win=win, attn_full=a, attn_win=aw, logits=n,
                        attn_decode=a, adapters=adapters)
            cold = _model(hw, model, opts).price(one)  # nothing remembered yet
            assert [_bits(v) for v in cold] == [_bits(v) for v in sm.price(one)] == _at(p, j)
            # an int among the fields takes the general path (StepModel._fixed, _step_times) with Python numbers
            assert [_bits(v) for v in sm.price(one._replace(sum_ctx=int(one.sum_ctx)))] == _at(p, j)


@pytest.mark.parametrize(("hw", "model", "opts"), CASES)
def test_steps_of_many_token_counts_price_as_each_step_alone(hw: str, model: str, opts: dict[str, Any]) -> None:
    """Mixed steps (prefill chunks beside decodes) as arrays of every field, against each priced alone."""
    sm = _model(hw, model, opts)
    rng = np.random.default_rng(7)
    k = 40
    dec = rng.integers(0, 64, k).astype(np.float64)  # decoding rows
    pre = rng.integers(0, 3000, k).astype(np.float64)  # prefill tokens
    pre[::5] = 0.0  # some steps only decode
    dec[::7] = 0.0
    ctx = rng.integers(0, 500_000, k).astype(np.float64)
    ad = ctx + 0.5 * dec
    af = ad + pre * (pre / 2)
    win = np.minimum(ctx, 0.3 * ctx) if sm.model.sliding_layers else 0.0 * ctx
    aw = win + 0.5 * dec + pre * (pre / 2) if sm.model.sliding_layers else 0.0 * ctx
    T = dec + pre
    seqs = dec + (pre > 0)
    b = Batch(tokens=T, seqs=seqs, sum_ctx=ctx, sum_win=win, attn_full=af, attn_win=aw, logits=seqs, attn_decode=ad)
    if opts.get("pp"):  # the pipeline splits a step into micro-batches by its sequences: one count for all
        b = b._replace(seqs=8)
    p = sm.price(b)
    for j in range(k):
        one = Batch(tokens=float(T[j]), seqs=8 if opts.get("pp") else int(seqs[j]), sum_ctx=float(ctx[j]),
                    sum_win=float(win[j]), attn_full=float(af[j]), attn_win=float(aw[j]), logits=int(seqs[j]),
                    attn_decode=float(ad[j]))
        assert [_bits(v) for v in sm.price(one)] == _at(p, j)


def test_a_pickled_model_starts_with_an_empty_memo() -> None:
    """The memo's keys hold ids of the model's constants dicts: a copy sent to a pool's worker must not read them."""
    sm = _model("h100-sxm", "llama-3.1-70b", {"tp": 2, "pp": 2})
    b = run_batch(sm.model, np.arange(10), 5)
    p = sm.price(b)
    assert len(sm._memo) > 0
    for other in (pickle.loads(pickle.dumps(sm)), copy.deepcopy(sm)):
        assert len(other._memo) == 0
        assert [np.asarray(v).tobytes() for v in other.price(b)] == [np.asarray(v).tobytes() for v in p]


def _folded(p: StepParts) -> tuple[Any, Any]:
    """A record's FLOP and byte totals summed from its parts left to right, LoRA terms too (what the totals were as
    properties of StepParts, and what StepCost.flops_total and bytes_total sum)."""
    return p.fl_mm + p.fl_attn + p.fl_lm + p.fl_lora, p.weights + p.kv_read + p.kv_write + p.act + p.lora_bytes


def _same(a: Any, b: Any) -> bool:
    """The same type and the same float64 bits, element for element."""
    return type(a) is type(b) and np.asarray(a, dtype=np.float64).tobytes() == np.asarray(b, dtype=np.float64).tobytes()


@pytest.mark.parametrize(("hw", "model", "opts"), CASES)
def test_the_totals_priced_are_the_parts_summed_in_order(hw: str, model: str, opts: dict[str, Any]) -> None:
    """StepParts.flops_total and bytes_total, summed once where a record is priced, on every path: one step of
    floats (_one_step), one with an int (the general path), a run (StepModel._run), steps of every field as arrays,
    cold and with the memo warm; and one step's StepCost sums the same."""
    sm = _model(hw, model, opts)
    rng = np.random.default_rng(11)
    adapters = 2 if opts.get("max_loras") else 0
    for _ in range(2):  # the second pass reads the memo the first filled
        for n in (1, 5, 64, 700):
            b = run_batch(sm.model, rng.integers(0, 50_000, n), int(rng.integers(2, 30)))._replace(adapters=adapters)
            batches = [b, b._replace(attn_decode=b.attn_full.copy())]
            a = float(b.attn_full[0])
            one = Batch(tokens=float(n), seqs=n, sum_ctx=float(b.sum_ctx[0]), sum_win=0.25 * a, attn_full=a + 99.0,
                        attn_win=0.5 * a, logits=n, attn_decode=a, adapters=adapters)
            batches += [one, one._replace(attn_decode=one.attn_full), one._replace(sum_ctx=int(one.sum_ctx)),
                        one._replace(tokens=0.0, logits=0, sum_ctx=0.0, attn_full=0.0, attn_decode=0.0)]
            steps = rng.integers(1, 3000, 9).astype(np.float64)
            batches.append(Batch(tokens=steps, seqs=8, sum_ctx=steps * 40, sum_win=steps * 10, attn_full=steps * 70,
                                 attn_win=steps * 20, logits=steps, attn_decode=steps * 30, adapters=adapters))
            for x in batches:
                p = sm.price(x)
                flops, byts = _folded(p)
                assert _same(p.flops_total, flops) and _same(p.bytes_total, byts)
                if isinstance(x.sum_ctx, (int, float)):
                    st = sm.record(x, p)
                    assert _same(st.flops_total, float(p.flops_total)) and _same(st.bytes_total, float(p.bytes_total))


@pytest.mark.parametrize(("hw", "model", "opts"), CASES)
def test_a_quiet_runs_pricing_is_price(hw: str, model: str, opts: dict[str, Any]) -> None:
    """price_run (a quiet run's entry, straight to _run where price would go) gives price's every field."""
    sm = _model(hw, model, opts)
    rng = np.random.default_rng(41)
    for adapters in ((0, 3) if opts.get("max_loras") else (0,)):
        for n in (1, 2, 37, 300):
            b = run_batch(sm.model, rng.integers(0, 20_000, n), int(rng.integers(1, 300)))._replace(adapters=adapters)
            got, want = price_run(_model(hw, model, opts), b), sm.price(b)
            assert [(type(x), np.asarray(x).tobytes()) for x in got] == [(type(y), np.asarray(y).tobytes()) for y in want]


@pytest.mark.parametrize(("hw", "model", "opts"), CASES)
def test_one_step_of_python_numbers_prices_as_the_general_route(hw: str, model: str, opts: dict[str, Any]) -> None:
    """StepModel.price sends one step of Python numbers (int or float tokens and logits, float sums: every eventful
    tick's batch record) straight to _one_step where no stage or adapter term applies; a numpy scalar among the sums
    takes the general route (_agg: _fixed and _step_times, the pipeline's or LoRA's terms). Both must give the same
    bits in every field, for join-like (prefill and decode rows), decode-only and empty steps."""
    sm = _model(hw, model, opts)
    rng = np.random.default_rng(5)
    adapters = 2 if opts.get("max_loras") else 0
    for _ in range(60):
        n_run = int(rng.integers(0, 6))
        x = int(rng.integers(1, 9000))
        s = float(rng.integers(0, 40_000)) if n_run else 0.0
        ad = s + 0.5 * n_run
        win = 0.0 if not sm.model.sliding_layers else float(rng.integers(0, 4000))
        join = Batch(tokens=x + n_run, seqs=n_run + 1, sum_ctx=s, sum_win=win, attn_full=ad + x * (x / 2),
                     attn_win=win + 0.5 * n_run, logits=n_run + 1, attn_decode=ad, adapters=adapters)
        dec = Batch(tokens=float(n_run), seqs=n_run, sum_ctx=s, sum_win=win, attn_full=ad, attn_win=win,
                    logits=n_run, attn_decode=ad, adapters=adapters)
        dec = dec._replace(attn_decode=dec.attn_full)  # (every row decodes: the very object, as decode_batch)
        for b in (join, dec, join._replace(logits=float(n_run + 1))):
            general = sm.price(b._replace(sum_ctx=np.float64(b.sum_ctx)))
            assert [np.float64(v).tobytes() for v in sm.price(b)] == [np.float64(v).tobytes() for v in general]
