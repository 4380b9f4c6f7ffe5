"""StepModel.price's paths agree bit for bit: one step of Python floats (_one_step), the general path with Python
numbers, a run of steps as arrays (its scalars as 0-d arrays), steps of many token counts as arrays (nothing
remembered), and a model priced cold or with its memo of (tokens, logits) terms. Each run's step j, priced alone,
must give exactly element j of the run's price."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import pytest

from engine.physics.batch import Batch
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions, StepParts
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
