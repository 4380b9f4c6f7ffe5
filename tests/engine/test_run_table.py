"""A quiet run read from a price table (engine.physics.run_table) is the run priced directly, bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from engine.physics import run_table
from engine.physics.run_table import CHUNK, REACH, table_run
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions, price_run
from engine.serving.steps import last_of_run, run_batch

# (hardware, model, options): dense with CUDA graphs (padding below their largest size, none above), MoE, MLA at
# tp 8, tp 2 with expert parallel (all-gather), --ideal with fp8, the eager runtime (no graphs, KV read in several passes), tp 4.
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("h100-sxm", "llama-3.1-8b", {}),
    ("h100-sxm", "qwen3-30b-a3b", {}),
    ("h200", "deepseek-v3", {"tp": 8}),
    ("h100-pcie", "qwen3-30b-a3b", {"tp": 2, "ep": 2, "ep_comm": "all-gather"}),
    ("h100-sxm", "llama-3.1-8b", {"weight_dtype": "fp8", "kv_dtype": "fp8", "ideal": True}),
    ("a100-80g", "llama-3.1-8b", {"runtime": "hf-eager"}),
    ("h100-sxm", "llama-3.1-70b", {"tp": 4}),
]


def _model(hw: str, model: str, opts: dict[str, Any]) -> StepModel:
    return StepModel(load_hardware(hw), load_model(model), StepOptions(**opts))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit (float64 as integers: -0.0 and NaN compare by their bits)."""
    return a.shape == b.shape and np.array_equal(np.asarray(a).view(np.uint64), np.asarray(b).view(np.uint64))


@pytest.mark.parametrize(("hw", "model", "opts"), CASES)
def test_a_run_read_from_a_table_is_the_run_priced_directly(hw: str, model: str, opts: dict[str, Any]) -> None:
    sm = _model(hw, model, opts)
    rng = np.random.default_rng(8)
    read = 0
    for n in (1, 2, 3, 4, 7, 16, 33, 100, 257, 600):
        for _ in range(12):
            cached = rng.integers(0, 3 * CHUNK // n + 2000, n)
            k = int(rng.integers(2, 300))
            s0 = int(cached.sum())
            got = table_run(sm, s0, n, k)
            if got is None:  # the run ends past the table's reach: priced directly
                assert s0 % CHUNK + (k - 1) * n + 1 > CHUNK + REACH
                continue
            read += 1
            p = price_run(_model(hw, model, opts), run_batch(sm.model, cached, k))  # a fresh model: nothing kept
            for g, want in zip(got, (p.time, p.flops_total, p.bytes_total), strict=True):
                assert _same(g, want)
            assert not got[1].flags.writeable and not got[2].flags.writeable  # views of the table: never written
            # the last step's record from the run's start sum, as from its priced record
            last = int(rng.integers(0, k))
            assert last_of_run(sm, s0, last, n) == last_of_run(sm, run_batch(sm.model, cached, k), last, n)
    assert read > 60


def test_models_whose_steps_depend_on_more_than_the_sum_have_no_tables() -> None:
    """Window layers (sliding or chunked: each row's cache counts) and pipeline stages (price's own path) are
    priced directly."""
    for hw, model, opts in (("h100-sxm", "gpt-oss-20b", {}), ("h100-sxm", "llama-4-scout", {"tp": 2, "ep": 2}),
                            ("h100-sxm", "llama-3.1-70b", {"tp": 2, "pp": 2})):
        assert table_run(_model(hw, model, opts), 5000, 4, 20) is None


def test_a_step_model_keeps_a_bounded_number_of_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_table, "_TABLES", 3)
    sm = _model("h100-sxm", "llama-3.1-8b", {})
    first = table_run(sm, 10, 2, 5)
    assert first is not None
    for q in range(1, 6):
        assert table_run(sm, q * CHUNK + 10, 2, 5) is not None
    tabs = sm._memo[run_table._KEY]
    assert len(tabs) == 3 and (2, 5) in tabs and (2, 0) not in tabs  # the oldest dropped
    again = table_run(sm, 10, 2, 5)  # built anew: the same doubles
    assert again is not None and all(_same(a, b) for a, b in zip(first, again, strict=True))
