"""Request tables: dropping rows keeps the others in order, whichever way keep() compacts them."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.serving.tables import Queue, Rows, Table


def _rows(n: int, seed: int) -> Rows:
    rng = np.random.default_rng(seed)
    r = Rows.new(n)
    r.i[:] = rng.integers(-5, 10_000, r.i.shape)
    r.f[:] = rng.random(r.f.shape)
    return r


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=120), st.integers(0, 2**16))
def test_keep_drops_exactly_the_masked_rows_in_order(mask_list: list[bool], seed: int) -> None:
    # Few and many dropped rows take different paths (sliding runs or masking each field): both must agree.
    mask = np.array(mask_list)
    r = _rows(mask.size, seed)
    t = Table(4)
    t.append(r)
    t.keep(mask)
    kept = t.rows()
    assert t.n == int(mask.sum())
    assert (kept.i == r.i[:, mask]).all() and np.array_equal(kept.f, r.f[:, mask])


def test_queue_slides_live_rows_down_before_growing() -> None:
    q = Queue(8)
    q.append(_rows(8, 1))
    q.pop(5)
    more = _rows(6, 2)
    q.append(more)  # 3 live + 6 new > 8: the live rows move to the front, then the table grows
    assert q.size == 9 and q.head == 0
    assert (q.col("id")[3:] == more.id).all()
