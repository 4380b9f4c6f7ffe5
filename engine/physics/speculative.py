"""Speculative decoding and MTP: draft K tokens, verify them in one step of K+1 tokens, keep the accepted run.

Each draft token is accepted with probability A, independently, until the first rejection; the verify
step adds one token of its own (the target model's correction, or a bonus token after K acceptances), so
a sequence emits j + 1 tokens per step where j is its accepted run: P(j) = A^j (1 - A) for j < K and
A^K for j = K, which gives (1 - A^(K+1)) / (1 - A) tokens per step on average. The KV written for
rejected drafts is rolled back: the cache keeps the emitted tokens only.

The physics it shows: a verify step reads the weights once for K+1 tokens per sequence, so while the batch
is memory-bound the extra tokens are nearly free; once it is compute-bound the step costs about K+1 times
as much and the rejected drafts are a loss. Drafting has its own price (`draft`): `ngram` (prompt lookup,
no GPU work), `mtp` (the model's multi-token-prediction head: one extra transformer layer and the LM head
per draft token) or a draft model preset (K decode steps of that model at the same batch).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from engine.errors import InputError
from engine.physics.batch import Batch
from engine.physics.specs import count_params, load_model
from engine.physics.step import StepModel
from engine.validation import MAX_SPEC_TOKENS

DRAFT_KINDS = ("mtp", "ngram")


def expected_tokens(k: int, a: float) -> float:
    """Tokens a sequence emits per verify step on average: (1 - A^(K+1)) / (1 - A) (K + 1 when A = 1)."""
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def sample_accepted(rng: np.random.Generator, n: int, k: int, a: float) -> np.ndarray:
    """Accepted drafts for n sequences (int64 in [0, K]): a run of acceptances cut at the first rejection."""
    if a <= 0.0 or k == 0:
        return np.zeros(n, dtype=np.int64)
    if a >= 1.0:
        return np.full(n, k, dtype=np.int64)
    # Failures before the first success of a geometric with success probability 1 - A, capped at K.
    return np.minimum(rng.geometric(1.0 - a, n) - 1, k).astype(np.int64)


def check(k: int, a: float, what: str = "") -> None:
    """One-line InputErrors for impossible speculative settings."""
    pre = f"{what}: " if what else ""
    if isinstance(k, bool) or int(k) != k or not 0 <= k <= MAX_SPEC_TOKENS:
        raise InputError(f"{pre}--spec-tokens must be a whole number >= 0 and <= {MAX_SPEC_TOKENS}, got {k!r}")
    if not (isinstance(a, (int, float)) and math.isfinite(a) and 0.0 <= a <= 1.0):
        raise InputError(f"{pre}--spec-accept must be an acceptance probability in [0, 1], got {a!r}")


class Drafter:
    """What drafting K tokens for a batch costs, and what the drafter holds in memory beside the model."""

    def __init__(self, sm: StepModel, draft: str, k: int) -> None:
        self.kind = draft
        self.k = k
        self.sm: StepModel | None = None
        self.extra_weight_bytes = 0.0
        self.extra_kv_bytes_per_token = 0.0
        if draft == "ngram":
            return
        if draft == "mtp":
            # One extra decoder layer (MoE where the model is) sharing the embedding and the LM head.
            m = replace(sm.model, name=f"{sm.model.name}-mtp", layers=1, first_dense_layers=0, sliding_layers=0)
            object.__setattr__(m, "counts", count_params(m))
            self.sm = StepModel(sm.hw, m, sm.opts)
            # Only the layer itself is extra in memory: the embedding and the head are the model's own.
            self.extra_weight_bytes = self._layer_bytes(sm)
        else:
            try:
                dm = load_model(draft)
            except InputError as e:
                raise InputError(f"--spec-draft: {e} (or use {', '.join(DRAFT_KINDS)})") from None
            opts = replace(sm.opts, weight_dtype=None, head_dtype=None, quant_format=None, max_model_len=None)
            self.sm = StepModel(sm.hw, dm, opts)
            self.extra_weight_bytes = self.sm.weight_bytes_per_gpu
        self.extra_kv_bytes_per_token = self.sm.kv_bytes_per_token

    @staticmethod
    def _layer_bytes(sm: StepModel) -> float:
        """Per-GPU bytes of one of the model's layers (what an MTP head adds beside the model)."""
        m = sm.model
        c = m.counts
        per_layer = (c["total"] - c["embed"] - c["lm_head_separate"]) / m.layers
        return sm.weight_bytes_per_gpu * per_layer / c["total"]

    @property
    def free(self) -> bool:
        """Drafting costs no GPU time (prompt lookup)."""
        return self.sm is None

    def time(self, n: int, sum_ctx: float) -> float:
        """Seconds to draft K tokens for n sequences holding sum_ctx cached tokens: K decode passes of the
        drafter, the context growing by one token per pass."""
        if self.sm is None or n == 0 or self.k == 0:
            return 0.0
        d = self.sm
        t = 0.0
        for j in range(self.k):
            ctx = sum_ctx + j * n
            c = d.price(Batch(tokens=n, seqs=n, sum_ctx=ctx, sum_win=0.0, attn_full=ctx + 0.5 * n, attn_win=0.0,
                              logits=n, attn_decode=ctx + 0.5 * n))
            # A draft pass runs inside the engine step: the step's fixed cost (scheduling, sampling, input
            # preparation) is paid once, by the target's pass, not once per draft pass.
            t += c.time - (d.runtime.step_overhead_s if c.over > 0 else 0.0)
        return t
