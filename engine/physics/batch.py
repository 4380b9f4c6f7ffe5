"""The batch record: what the step model needs to know about one step's batch, by name.

A step runs every sequence i through the model once, computing new_i tokens on top of ctx_i cached ones. The
step model's cost depends on the batch only through a handful of sums over the rows (DESIGN.md, "The physics
of one step"), so the serving loop computes those sums once per step (without a Python loop) and hands them
over in this record; the step model prices it with one call, StepModel.price.

Every field may be a float (one step) or an array (many steps priced at once: a run of quiet decode steps, a
replayed benchmark). The record lives in physics, beside the step model that reads it, so that the serving
loop (engine.serving.steps builds it from the request table) and the planners (engine.fleet) both depend on
physics, never the other way round.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from engine.errors import InputError
from engine.physics.specs import Model


class Batch(NamedTuple):
    """One step's (or many steps') batch aggregates. With new_i and ctx_i as above:

    tokens       T = sum new_i, the tokens the step computes (each passes through every weight)
    seqs         sequences with new_i > 0 (StepCost.seqs; not priced)
    sum_ctx      sum ctx_i, the cached tokens full-attention layers read
    sum_win      sum local_seen(ctx_i), the cached tokens sliding-window (or chunked) layers read
    attn_full    sum new_i (ctx_i + new_i / 2), query-key pairs in a full-attention layer (causal: a new
                 token sees the cache and the new tokens before it, half the square on average)
    attn_win     the same pairs in a local layer, each query seeing at most its window (Model.local_pairs)
    logits       positions that need logits (the LM head runs on these only)
    attn_decode  the part of attn_full from decode rows (and speculative verify rows): MLA prices those
                 pairs at its absorbed width. Pass the very object given as attn_full when every row
                 decodes: the step model then skips the prefill-width term (same value, less work).
    adapters     multi-LoRA: distinct adapters among the batch's requests (each one's A/B matrices are read
                 once by the batched LoRA kernels, engine.physics.lora); 0 with LoRA off
    """

    tokens: Any
    seqs: Any
    sum_ctx: Any
    sum_win: Any
    attn_full: Any
    attn_win: Any
    logits: Any
    attn_decode: Any
    adapters: Any = 0

    @classmethod
    def of_rows(cls, model: Model, new: Any, ctx: Any, logits: int | None = None) -> Batch:
        """The record of one step straight from its rows: `new` tokens on top of `ctx` cached ones each (a row
        with exactly one new token decodes). The reference computation: the serving loop's faster builders
        must give the same sums. logits: positions that need logits (None: every sequence with new tokens)."""
        n = np.asarray(new, dtype=np.float64)
        x = np.asarray(ctx, dtype=np.float64)
        if n.shape != x.shape:
            raise InputError("new and ctx must have one entry per sequence")
        if n.size and (n.min() < 0 or x.min() < 0):
            raise InputError("token counts must be >= 0")
        seqs = int((n > 0).sum())
        dec = n == 1
        return cls(tokens=int(n.sum()), seqs=seqs, sum_ctx=float(x.sum()), sum_win=float(model.local_seen(x).sum()),
                   attn_full=float((n * (x + n / 2)).sum()), attn_win=float(model.local_pairs(x, n).sum()),
                   logits=seqs if logits is None else logits, attn_decode=float((x[dec] + 0.5).sum()))
