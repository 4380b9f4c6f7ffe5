"""Speculative decoding: accepted-token statistics and what drafting costs."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import InputError
from engine.physics.batch import Batch
from engine.physics.specs import load_hardware, load_model
from engine.physics.speculative import Drafter, check, expected_tokens, sample_accepted
from engine.physics.step import StepModel


@pytest.mark.parametrize("k,a", [(1, 0.5), (3, 0.8), (4, 0.6), (5, 0.95), (2, 0.0), (3, 1.0)])
def test_sampled_runs_match_the_closed_form(k: int, a: float) -> None:
    acc = sample_accepted(np.random.default_rng(0), 200_000, k, a)
    assert acc.min() >= 0 and acc.max() <= k
    assert (acc + 1).mean() == pytest.approx(expected_tokens(k, a), rel=0.01)
    if 0 < a < 1:
        # P(run = 0) = 1 - A: the first draft is rejected.
        assert (acc == 0).mean() == pytest.approx(1 - a, abs=0.01)


def test_expected_tokens_limits() -> None:
    assert expected_tokens(3, 0.0) == 1.0 and expected_tokens(3, 1.0) == 4.0
    assert expected_tokens(3, 0.8) == pytest.approx(1 + 0.8 + 0.64 + 0.512)


def test_bad_settings_are_one_line() -> None:
    with pytest.raises(InputError, match=r"--spec-accept must be an acceptance probability in \[0, 1\], got 1.5"):
        check(3, 1.5)
    with pytest.raises(InputError, match="--spec-tokens must be a whole number"):
        check(-1, 0.5)
    with pytest.raises(InputError, match="--spec-draft: unknown model"):
        Drafter(StepModel(load_hardware("h100-sxm"), load_model("qwen2.5-7b")), "no-such-model", 3)


def test_draft_costs_order() -> None:
    sm = StepModel(load_hardware("h100-sxm"), load_model("qwen2.5-7b"))
    ngram = Drafter(sm, "ngram", 3)
    mtp = Drafter(sm, "mtp", 3)
    # (Qwen2.5-0.5B would not do: its whole pass reads less than the 7B's MTP head, whose LM head alone is 1.1 GB.)
    small = Drafter(sm, "qwen2.5-1.5b", 3)
    decode = sm.price(Batch(tokens=1, seqs=1, sum_ctx=1000, sum_win=0, attn_full=1000.5, attn_win=0, logits=1,
                           attn_decode=1000.5)).time
    assert ngram.free and ngram.time(1, 1000) == 0.0
    # An MTP head is one layer plus the LM head: far less than a decode step of the model, per draft token.
    assert 0 < mtp.time(1, 1000) / 3 < 0.5 * decode
    # A draft model is a whole (small) model per draft token; it holds its weights and KV beside the target's.
    assert small.time(1, 1000) > mtp.time(1, 1000)
    assert small.extra_weight_bytes == pytest.approx(small.sm.weight_bytes_per_gpu)
    assert mtp.extra_weight_bytes < small.extra_weight_bytes
    # More drafted tokens, more drafting time.
    assert Drafter(sm, "mtp", 5).time(8, 8000) > mtp.time(8, 8000)
