"""The fleet panel's and the fleet header's pure renderers: Frame in, rows of text out."""

from __future__ import annotations

import math

import pytest
from rich.cells import cell_len

from engine.config import EngineConfig
from engine.fleet.fleet import CopyState, ReplicaState, Route
from engine.serving.engine import Engine
from tui.frame import FleetView, Frame, build_frame
from tui.render import fleet

SNAP = Engine(EngineConfig(users=4, seed=0)).snapshot()


def replica(i: int, role: str = "both", used: int = 0, held: int = 0, batch: int = 0, queued: int = 0,
            done: int = 0, busy: float = 0.0, history: tuple[float, ...] = ()) -> ReplicaState:
    """A replica row as the fleet reports it (a pool of 1,000 blocks)."""
    return ReplicaState(i, role, 10.0, used, 1000, held, batch, queued, done, busy, history)


def view(n: int = 4, selected: int | None = None, routes: tuple[Route, ...] = (), copies: tuple[CopyState, ...] = (),
         pd: tuple[int, int] | None = None, reps: tuple[ReplicaState, ...] | None = None) -> FleetView:
    """A fleet of n replicas."""
    reps = reps if reps is not None else tuple(replica(i, done=i) for i in range(n))
    return FleetView(reps, routes, copies, "least-loaded", pd, selected, 6, len(reps), 2.5 * len(reps), 42, 1234.0,
                     0.25, 0.011)


def frame(v: FleetView, lang: str = "en") -> Frame:
    """A frame at 10 s carrying the fleet."""
    return build_frame(SNAP, clock_s=10.0, lang=lang, fleet=v)


def plain(rows: list) -> list[str]:
    return [r.plain for r in rows]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("width", [60, 78, 118])
def test_every_row_is_exactly_the_width(lang: str, width: int) -> None:
    routes = tuple(Route(i, i % 3, i % 4, why, 7, float(i)) for i, why in
                   enumerate(("least-loaded", "kv-aware", "prefix", "round-robin", "only")))
    copies = (CopyState(5, 0, 2, 2999, 3.5), CopyState(6, 0, -1, 100, math.nan))
    rows = fleet.render(frame(view(routes=routes, copies=copies, pd=(1, 3)), lang), width, 20)
    assert len(rows) == 20 and all(cell_len(r.plain) == width for r in rows)
    head = fleet.header(frame(view(selected=1), lang), width + 2)
    assert cell_len(head.plain) == width + 2


def test_a_row_per_replica_with_kv_fill_batch_queue_done_and_busy() -> None:
    reps = (replica(0, "prefill", used=500, held=250, batch=2, queued=3, done=17, busy=5.0),
            replica(1, "decode", used=100, batch=9, done=4, busy=10.0, history=(0.0, 0.5, 1.0)))
    rows = plain(fleet.render(frame(view(reps=reps, pd=(1, 1), selected=1)), 100, 8))
    assert rows[0].split() == ["role", "KV", "cache", "KV", "history", "batch", "queue", "done", "busy"]
    # KV over the replica's last steps: empty, half, full, newest on the right of its column.
    assert "▁▄█   10 %" in rows[2] and rows[2].index("▁▄█") > rows[0].index("KV history")
    low = (replica(0, history=(0.01, 0.02)), replica(1, history=(0.95,)))  # the pool's own scale, as the floor's
    small = plain(fleet.render(frame(view(reps=low)), 100, 8))
    assert "▁▁ " in small[1] and "█ " in small[2]
    assert "▁" not in rows[1]
    r1, r2 = rows[1], rows[2]
    assert r1.split()[:2] == ["r1", "prefill"] and r1.split()[-7:] == ["50", "%", "2", "3", "17", "50", "%"]
    assert r2.startswith("▸r2") and r2.split()[1] == "decode" and r2.split()[-7:] == ["10", "%", "9", "0", "4", "100", "%"]
    # The bar: half the pool in use, half of that pinned by copies on their way (▒).
    bar = r1[r1.index("█"):r1.rindex("░") + 1]
    assert bar.count("█") + bar.count("▒") == round(len(bar) / 2)
    assert abs(bar.count("█") - len(bar) / 4) <= 1 and abs(bar.count("▒") - len(bar) / 4) <= 1


def test_the_routers_choices_newest_first_with_their_reasons() -> None:
    routes = (Route(7, 2, 1, "least-loaded", 3, 1.0), Route(8, -1, 0, "kv-aware", 912, 1.1),
              Route(9, -1, 2, "round-robin", 2, 1.2), Route(10, 5, 3, "prefix", 480, 1.3))
    rows = plain(fleet.render(frame(view(routes=routes)), 100, 12))
    i = rows.index(next(r for r in rows if r.startswith("router least-loaded")))
    assert rows[i + 1].split()[:4] == ["#10", "user", "5", "→"] and "longest prefix 480 tokens" in rows[i + 1]
    assert rows[i + 2].split()[:3] == ["#9", "→", "r3"] and "round-robin, its turn" in rows[i + 2]
    assert rows[i + 3].split()[:3] == ["#8", "→", "r1"] and "most free KV (912 blocks)" in rows[i + 3]
    assert "r2" in rows[i + 4] and "least loaded (3 queued or running)" in rows[i + 4]


def test_copies_in_flight_say_where_and_when() -> None:
    copies = (CopyState(5, 0, 2, 2999, 3.5), CopyState(6, 1, -1, 100, math.nan))
    rows = plain(fleet.render(frame(view(copies=copies, pd=(2, 2))), 100, 12))
    i = rows.index(next(r for r in rows if r.startswith("KV copies in flight 2")))
    assert rows[i + 1].split() == ["#5", "r1", "→", "r3", "2,999", "tok", "lands", "at", "3.500", "s"]
    assert rows[i + 2].split()[:4] == ["#6", "r2", "→", "?"] and "waits for a decode replica" in rows[i + 2]
    # Without P/D there is no copies section at all.
    assert not any("KV copies" in r for r in plain(fleet.render(frame(view()), 100, 12)))


@pytest.mark.parametrize("selected", [None, 0, 17, 39])
def test_a_long_fleet_shows_a_window_around_the_selected_replica(selected: int | None) -> None:
    v = view(40, selected=selected)
    height = 10
    rows = plain(fleet.render(frame(v), 100, height))
    shown = [int(r.split()[0].lstrip("▸r")) - 1 for r in rows[1:] if r.lstrip("▸ ").startswith("r")
             and r.split()[0].lstrip("▸r").isdigit()]
    assert (selected or 0) in shown and shown == list(range(shown[0], shown[0] + len(shown)))
    assert any(f"… {40 - len(shown)} more" in r for r in rows)
    for y in range(height):  # a click lands on the replica drawn on that row
        i = fleet.replica_at(v, height, y)
        assert (i in shown and rows[y].split()[0].lstrip("▸") == f"r{i + 1}") if i is not None else True
    assert {fleet.replica_at(v, height, y) for y in range(height)} - {None} == set(shown)


def test_the_header_gives_fleet_wide_figures_and_the_replica_shown() -> None:
    wide = fleet.header(frame(view(selected=2)), 150).plain
    assert "4 replicas × h100-sxm" in wide and "6 users" in wide and " r3 mixed " in wide
    assert "done 42 · 1,234 tok/s · TTFT 250 ms · $10.00/h" in wide and "sim 10.000 s" in wide
    narrow = fleet.header(frame(view(selected=2)), 80).plain
    assert "done 42 · 1,234 tok/s" in narrow and "TTFT" not in narrow and narrow.rstrip().endswith("paused")
    assert " r3 mixed " in narrow
    zh = fleet.header(frame(view(), "zh"), 120).plain
    assert "4 个副本" in zh and "完成 42" in zh


def test_a_strip_over_a_replicas_floor_is_replica_rows_only() -> None:
    v = view(16, selected=12, routes=(Route(1, 0, 0, "least-loaded", 0, 0.0),), pd=(4, 12))
    p = fleet.plan(v, 8)
    assert (p.count, p.more, p.routes, p.copies) == (6, True, -1, -1) and p.first <= 12 < p.first + p.count
    rows = plain(fleet.render(frame(v), 100, 8))
    assert not any("router" in r or "KV copies" in r for r in rows) and rows[-1].startswith("… 10 more")
    # The overview at full height keeps room for the router's choices and the copies.
    q = fleet.plan(v, 34)
    assert (q.count, q.more, q.routes, q.copies) == (16, False, 1, 0)
