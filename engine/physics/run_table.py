"""Price tables of quiet runs: many runs of decode steps priced from one pricing of their batch size.

A quiet run of n rows whose caches sum to s0 takes k decode steps; step j's record (engine.serving.steps.run_batch)
has sum_ctx = s0 + j n and every other field a function of n alone (tokens = logits = n, attention pairs sum_ctx +
n / 2, no window terms). The step model prices such a run elementwise (physics.step._run_times: + - * / and maximum
of one array element with scalars, each correctly rounded, so an element's double does not depend on the rest of
the array): a step's time, FLOPs and bytes are a function f_n(sum_ctx) of its own sum alone. A table holds f_n over
CHUNK + REACH consecutive sums, priced once by price_run itself; a run starting in the table's first CHUNK sums is
the strided slice s0, s0 + n, ... of it. A replica serving a few rows walks the same sums request after request
(its batch size and contexts come back), so a table is read many times: it costs one pricing of CHUNK + REACH
steps where each run it serves cost a pricing of its own (~20 numpy calls).

The tables' arrays are read-only (their slices go to the history, which keeps them): nothing may write a run's
priced arrays.
"""

from __future__ import annotations

import numpy as np

from engine.physics.batch import Batch
from engine.physics.step import StepModel, price_run

CHUNK = 2048  # cache sums whose runs a table serves (the runs starting at them)
REACH = 1024  # sums a table holds past its CHUNK: a run ending beyond them is priced directly
_TABLES = 128  # tables a step model keeps at most (3,072 sums of three doubles each: ~9 MB), the oldest dropped


def table_run(sm: StepModel, s0: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(times, FLOPs, bytes) of the k decode steps of n rows starting with caches summing to s0, as price_run of
    run_batch's record would give them: read-only views of the table of n-row steps at every sum from the chunk's
    start (the run's steps are every n-th: strided slices); None when none serves the run (it ends past the table's
    REACH, or the model's steps depend on more than n and the sum: window layers, pipeline stages)."""
    q, j = divmod(s0, CHUNK)
    end = j + (k - 1) * n + 1
    if end > CHUNK + REACH:
        return None
    tabs = sm._memo.get(_KEY)
    if tabs is None:
        if not _tabled(sm):  # (asked until a table is kept: never again for a model that has none)
            return None
        tabs = sm._memo.keep(_KEY, {})
    t = tabs.get((n, q))
    if t is None:
        if len(tabs) >= _TABLES:
            del tabs[next(iter(tabs))]  # the oldest table (a lane's sums move on: it rarely comes back)
        t = tabs[n, q] = price_table(sm, q * CHUNK, n, CHUNK + REACH)
    dts, flops, byts = t
    return dts[j:end:n], flops[j:end:n], byts[j:end:n]


def price_table(sm: StepModel, s: int, n: int, sums: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """price_run's (time, flops_total, bytes_total) of decode steps of n rows at each of the `sums` cache sums from
    s (s, s + 1, ...), read-only. The record is run_batch's, field by field: sums made as doubles (whole numbers
    below 2^53, exact), attention pairs sum + 0.5 n, one float for tokens and logits, no window terms, no adapters."""
    sum_ctx = np.arange(s, s + sums, dtype=np.float64)
    attn = sum_ctx + 0.5 * n
    tok = float(n)
    p = price_run(sm, tuple.__new__(Batch, (tok, n, sum_ctx, 0.0, attn, 0.0, tok, attn, 0)))
    out = (p.time, p.flops_total, p.bytes_total)
    for a in out:
        a.flags.writeable = False
    return out


def _tabled(sm: StepModel) -> bool:
    """Whether sm's decode steps are a function of their rows and cache sum alone, as price_run prices them: no
    window layers (their sums depend on each row's cache), no pipeline stages (price_run hands those to price)."""
    return sm.model.sliding_layers == 0 and sm.opts.pp == 1


_KEY = "run tables"  # sm._memo's entry holding the tables, keyed (n, s0 mod n, chunk)
