"""Request tables: dropping rows keeps the others in order, whichever way keep() compacts them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.serving import tables
from engine.serving.tables import Queue, Rows, Table


def _rows(n: int, seed: int) -> Rows:
    rng = np.random.default_rng(seed)
    r = Rows.new(n)
    r.i[:] = rng.integers(-5, 10_000, r.i.shape)
    r.f[:] = rng.random(r.f.shape)
    return r


@pytest.mark.parametrize("gather_rows", [0, 1 << 20])
@settings(max_examples=150, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=120) | st.builds(
    lambda n, a, b: [not (a <= i < a + b) for i in range(n)], st.integers(1, 120), st.integers(0, 120),
    st.integers(0, 40)), st.integers(0, 2**16), st.booleans())
def test_keep_drops_exactly_the_masked_rows_in_order(gather_rows: int, mask_list: list[bool], seed: int,
                                                     by_index: bool) -> None:
    # Few and many dropped rows, alone or in runs (a block of rows admitted together), take different paths
    # (sliding the kept rows between a few runs, one gather per part in a small table, masking each field in a big
    # one; the size where gathering stops is set both ways): every path must agree.
    mask = np.array(mask_list)
    r = _rows(mask.size, seed)
    t = Table(4)
    t.append(r)
    old, tables._GATHER_ROWS = tables._GATHER_ROWS, gather_rows
    try:
        if by_index:
            t.drop(np.flatnonzero(~mask), ~mask)
        else:
            t.keep(mask)
    finally:
        tables._GATHER_ROWS = old
    kept = t.rows()
    assert t.n == int(mask.sum())
    assert (kept.i == r.i[:, mask]).all() and np.array_equal(kept.f, r.f[:, mask])


@pytest.mark.parametrize(("n", "cap", "k"), [(8, 8, 3), (8, 16, 8), (20, 32, 1), (5, 64, 4)])
def test_dropping_the_first_rows_then_growing_again(n: int, cap: int, k: int) -> None:
    # Dropping a leading run (the oldest requests of a batch finishing together) shifts each part's whole buffer,
    # which leaves stale values in the dead space past the live rows: rows added after must not see them.
    r = _rows(n, 9)
    t = Table(cap)
    t.append(r)
    t.drop(np.arange(k))
    assert t.n == n - k and (t.rows().i == r.i[:, k:]).all() and np.array_equal(t.rows().f, r.f[:, k:])
    blank = t.extend(k + 1)
    fresh = Rows.new(k + 1)
    assert (blank.i == fresh.i).all() and np.array_equal(blank.f, fresh.f, equal_nan=True)
    more = _rows(3, 10)
    t.append(more)
    assert (t.rows().i[:, :n - k] == r.i[:, k:]).all() and (t.rows().i[:, -3:] == more.i).all()
    assert np.array_equal(t.rows().f[:, -3:], more.f)


@pytest.mark.parametrize("flat_span", [0, 8, 1 << 20])
@pytest.mark.parametrize("few_moves", [0, 2, 1 << 20])
def test_removing_one_row_anywhere_keeps_the_others_in_order(few_moves: int, flat_span: int,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # One row leaving (a tick's usual finisher, Table.drop_row) closes the gap one column at a time when few rows
    # follow it, by shifting each part's whole buffer when it is the first row (of a table not much longer than
    # its rows), with one 2-D move per part otherwise (tables._FEW_MOVES and _FLAT_SPAN set every way): the same
    # rows either way, in tables of several lengths and in a queue past its head; rows added after it (a blank
    # one and appended ones) see none of the stale values a move leaves past the live rows.
    monkeypatch.setattr(tables, "_FEW_MOVES", few_moves)
    monkeypatch.setattr(tables, "_FLAT_SPAN", flat_span)
    for n in range(1, 12):
        for cap in sorted({n, 16, 64}):
            for head in (0, 2):
                for a in range(n):
                    r = _rows(n + head, 100 * n + a + cap)
                    for how in ("drop", "remove_at"):
                        t = Queue(cap) if head else Table(cap)
                        t.append(r)
                        if head:
                            t.pop(head)
                        if how == "drop":
                            t.drop(np.array([head + a]))
                        else:
                            t.remove_at(a)
                        keep = np.arange(n + head) != head + a
                        keep[:head] = False
                        assert t.size == n - 1 and (t.rows().i == r.i[:, keep]).all()
                        assert np.array_equal(t.rows().f, r.f[:, keep])
                        blank, more = t.extend(1), _rows(2, a)
                        assert (blank.i == 0).all() and np.array_equal(blank.f, Rows.new(1).f, equal_nan=True)
                        t.append(more)
                        assert (t.rows().i[:, -2:] == more.i).all() and (t.rows().i[:, :n - 1] == r.i[:, keep]).all()


def test_extend_and_append_view_write_into_the_table() -> None:
    t = Table(2)
    t.append(_rows(3, 4))
    blank = t.extend(2)
    fresh = Rows.new(2)
    assert t.n == 5 and (t.cols.i[:, 3:5] == fresh.i).all() and np.array_equal(t.cols.f[:, 3:5], fresh.f, equal_nan=True)
    assert (fresh.i == 0).all() and np.isnan(fresh.arrival).all() and (fresh.f[tables.SPENT] == 0).all()
    blank.prompt[:] = [7, 9]
    r = _rows(2, 5)
    view = t.append_view(r)
    view.seq[:] = 42
    assert t.col("prompt")[3:5].tolist() == [7, 9] and t.col("seq")[5:].tolist() == [42, 42]
    other = np.arange(len(r.i)) != tables.IntCol.SEQ
    assert (t.cols.i[:, 5:7][other] == r.i[other]).all()


@pytest.mark.parametrize("queue", [False, True])
def test_add_new_writes_a_blank_row_with_its_head_and_arrival(queue: bool) -> None:
    # A lone arrival's row (Table.add_new): extend(1)'s blank row with the given leading integer fields and the
    # arrival time, written over whatever stale values the dead space holds, through growth and a queue's slide.
    t = Queue(4) if queue else Table(4)
    r = _rows(3, 6)
    t.append(r)
    t.drop(np.array([1]))  # stale values past the live rows
    if queue:
        t.pop(1)
    live = t.size
    for j in range(9):
        n = t.add_new([(100 + j, -1, 7 * j, 0, 9, 7 * j)], [0.5 * j])
        v = t.cols.pick(slice(n, n + 1))
        assert v.id.tolist() == [100 + j] and v.arrival.tolist() == [0.5 * j]  # n is the row written
    want = Rows.new(9)
    want.i[:6] = [range(100, 109), [-1] * 9, range(0, 63, 7), [0] * 9, [9] * 9, range(0, 63, 7)]
    want.arrival[:] = np.arange(9) * 0.5
    new = t.rows().pick(slice(live, None))
    assert t.size == live + 9 and (new.i == want.i).all() and np.array_equal(new.f, want.f, equal_nan=True)
    assert (t.rows().i[:, live - 1] == r.i[:, 2]).all()


def test_a_tables_field_views_follow_its_rows_through_growth_moves_and_pickling() -> None:
    # A table's rows keep each field's view in a slot (TableRows): after growth, drops of every kind and a pickle
    # round trip (a replica sent to a pool worker) each field must still be a view of its row of the parts.
    import pickle

    t = Table(4)
    t.append(_rows(9, 3))
    t.drop(np.array([0, 1]))
    t.drop(np.array([3]))
    t.keep(np.arange(t.n) % 2 == 0)
    for c in (t.cols, pickle.loads(pickle.dumps(t)).cols):
        assert isinstance(c, tables.TableRows)
        assert np.shares_memory(c.i, c.b) and np.shares_memory(c.f, c.b)  # one buffer: a drop moves both parts
        fields = [(c.i, col) for col in tables.IntCol] + [(c.f, col) for col in tables.FloatCol]
        for part, col in fields:
            v = getattr(c, col.name.lower())
            assert np.shares_memory(v, part) and np.array_equal(v, part[col], equal_nan=True), col.name
        c.cached[0] = 12345
        assert c.i[tables.IntCol.CACHED, 0] == 12345


def test_queue_slides_live_rows_down_before_growing() -> None:
    q = Queue(8)
    q.append(_rows(8, 1))
    q.pop(5)
    more = _rows(6, 2)
    q.append(more)  # 3 live + 6 new > 8: the live rows move to the front, then the table grows
    assert q.size == 9 and q.head == 0
    assert (q.col("id")[3:] == more.id).all()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=30), st.integers(0, 2**31))
def test_ring_claim_then_write_equals_push(sizes: list[int], seed: int) -> None:
    """Writing a batch into claimed rows leaves the ring exactly as pushing it does, wrap-arounds and
    over-full batches included (claim refuses those and the caller pushes)."""
    rng = np.random.default_rng(seed)
    pushed, claimed = tables.Ring(10, 3), tables.Ring(10, 3)
    for k in sizes:
        rows = rng.random((k, 3))
        pushed.push(rows)
        slot = claimed.claim(k)
        if slot is None:
            claimed.push(rows)
        else:
            slot[:] = rows
        assert (pushed.pos, pushed.count) == (claimed.pos, claimed.count)
        assert np.array_equal(pushed.last(), claimed.last())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["push", "claim", "row"]), st.integers(1, 40)), min_size=1, max_size=40),
       st.integers(0, 2**31))
def test_a_ring_that_grows_holds_what_a_full_size_one_holds(ops: list[tuple[str, int]], seed: int) -> None:
    """A ring's array starts small and doubles up to its cap: pushes, claims and single rows leave it holding exactly
    the rows (and the position and count) of a ring made at full size, through growth, wrap-around and over-full
    batches."""
    rng = np.random.default_rng(seed)
    cap = 50
    grows, full = tables.Ring(cap, 3), tables.Ring(cap, 3)
    grows.a = np.zeros((4, 3))  # far below cap, so a few rows make it grow (the default start is larger)
    full.a = np.zeros((cap, 3))
    for op, k in ops:
        rows = rng.random((k, 3))
        for r in (grows, full):
            if op == "row":
                r.push_row(tuple(rows[0]))
            elif op == "push" or (slot := r.claim(k)) is None:
                r.push(rows)
            else:
                slot[:] = rows
        assert (grows.pos, grows.count) == (full.pos, full.count)
        assert np.array_equal(grows.last(), full.last())
        assert grows.a.shape[0] <= cap
    assert grows.a.shape[0] >= min(cap, grows.count)
