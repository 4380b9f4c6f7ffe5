"""The fleet panel and the fleet's header: a row per replica, the router's last choices, KV copies under way.

Pure: a Frame carrying a FleetView in, rows of Rich Text out. Replicas are numbered from 1 on screen (r1, r2, ...),
as keys 1-9 pick them. When the panel is shorter than the fleet, the rows show a window around the selected
replica and say how many more there are; `replica_at` maps a clicked row back to its replica.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from rich.cells import cell_len
from rich.text import Text

from engine.fleet.fleet import CopyState, ReplicaState, Route
from tui.frame import FleetView, Frame
from tui.i18n import t
from tui.render import palette as pal
from tui.render.fmt import clock, dur, fit, num, pct
from tui.render.header import status, who
from tui.render.kvqueue import sparkline

MAX_ROUTE_ROWS = 8  # the router's latest choices shown (newest first), as many as the fleet keeps
MAX_COPY_ROWS = 6  # KV copies listed under their count (the next to land first)
MIN_REPLICA_ROWS = 4  # replica rows kept before the router's and copies' rows get any room
MIN_HISTORY_W = 12  # the KV history column appears when it and the bar each get this many cells
STRIP_ROWS = 8  # at most this many rows below the column names: replica rows only (the strip over a floor)
ROLE_STYLE = {"both": pal.L2, "prefill": pal.MEMORY, "decode": pal.KV_USED}
# Fixed columns of a replica row: mark, number, role, then the KV bar's figure, batch, queue, done, busy; with
# --energy, power per GPU and joules per output token after done.
_NUM_W, _ROLE_W, _PCT_W, _COL_W, _DONE_W, _BUSY_W, _ENERGY_W = 5, 9, 7, 6, 7, 7, 7  # role: "draining" and a space
SCALE_STYLE = {"starting": pal.COMPUTE, "draining": pal.MEMORY, "off": pal.DIM}


class Plan(NamedTuple):
    """Which rows the panel draws at a given height: a window of replicas, then routes and copies."""

    first: int  # index of the first replica row
    count: int  # replica rows drawn
    more: bool  # one row says how many replicas are not drawn
    routes: int  # route rows (after a title row; 0: no title either)
    copies: int  # copy rows (after a count row; -1: no copies section)


def role(lang: str, name: str) -> str:
    """mixed / prefill / decode (a replica that both reads prompts and writes answers is 'mixed')."""
    return t(lang, f"role_{name}")


def plan(view: FleetView, height: int) -> Plan:
    """Share `height` rows: the column header, replicas (at least MIN_REPLICA_ROWS), the routes, the copies."""
    n = len(view.replicas)
    room = max(0, height - 1)
    want_routes = 1 + min(len(view.routes), MAX_ROUTE_ROWS) if view.routes else 2
    want_copies = 1 + min(len(view.copies), MAX_COPY_ROWS) if view.pd else 0
    if room <= STRIP_ROWS:  # a strip above a replica's floor: replicas only
        want_routes = want_copies = 0
    rep_rows = min(n, room, max(MIN_REPLICA_ROWS, room - want_routes - want_copies))
    left = room - rep_rows
    copies = min(want_copies, left)
    left -= copies
    routes = min(want_routes, left)
    more = rep_rows < n
    count = max(0, rep_rows - 1) if more else rep_rows
    if more and count == 0:  # one row only: the selected replica, no "more" line
        count, more = min(1, rep_rows), False
    sel = view.selected or 0
    first = min(max(0, sel - count // 2), max(0, n - count))
    return Plan(first, count, more, routes - 1, copies - 1 if want_copies else -1)


def replica_at(view: FleetView, height: int, y: int) -> int | None:
    """The replica drawn on content row `y` (for a click), or None."""
    p = plan(view, height)
    i = y - 1
    return p.first + i if 0 <= i < p.count else None


def _cols(lang: str, width: int, energy: bool = False) -> tuple[int, int, bool]:
    """The KV bar's and the KV history's widths (0: no room for it), and whether the busy column fits."""
    fixed = _NUM_W + _ROLE_W + _PCT_W + 2 * _COL_W + _DONE_W + (2 * _ENERGY_W if energy else 0)
    busy = width - fixed - _BUSY_W >= 12
    kv = max(4, width - fixed - (_BUSY_W if busy else 0) - 1)
    hist = (kv - 1) // 2 if kv >= MIN_HISTORY_W * 2 + 1 else 0  # now | over the last steps, side by side
    return kv - hist - (1 if hist else 0), hist, busy


def column_header(lang: str, width: int, energy: bool = False) -> Text:
    """The column names over the replica rows."""
    bar_w, hist_w, busy = _cols(lang, width, energy)
    out = Text(fit("", _NUM_W) + fit(t(lang, "f_role"), _ROLE_W) + fit(t(lang, "f_kv"), bar_w + (1 if hist_w else 0))
               + (fit(t(lang, "f_kv_hist"), hist_w) if hist_w else "") + " " * (_PCT_W + 1), style=pal.DIM)
    cols = (("f_batch", _COL_W), ("f_queue", _COL_W), ("f_done", _DONE_W))
    cols += (("f_power", _ENERGY_W), ("f_j_tok", _ENERGY_W)) if energy else ()
    cols += (("f_busy", _BUSY_W),) if busy else ()
    for key, w in cols:
        label = t(lang, key)
        out.append(" " * max(0, w - cell_len(label)) + label, style=pal.DIM)
    out.truncate(width, overflow="crop", pad=True)
    return out


def replica_row(r: ReplicaState, lang: str, width: int, selected: bool, energy: bool = False) -> Text:
    """▸ r2 decode  ███▒▒░░░░  41 %  12  3  104  96 %: KV in use (▒ pinned by copies), batch, queue, done, busy.

    Under --autoscale a replica not serving shows its phase in the role's place (starting, draining, off), and one
    starting or off says what it is doing in its KV bar's: the cold start's countdown, or that it is off. With
    --energy, its power per GPU and joules per output token follow done."""
    bar_w, hist_w, busy = _cols(lang, width, energy)
    out = Text("▸" if selected else " ", style="bold " + pal.SM_LIT)
    out.append(fit(f"r{r.index + 1}", _NUM_W - 1), style="bold " + pal.SM_LIT if selected else "bold")
    if r.scale != "serving":
        out.append(fit(t(lang, f"scale_{r.scale}"), _ROLE_W), style="bold " + SCALE_STYLE.get(r.scale, ""))
    else:
        out.append(fit(role(lang, r.role), _ROLE_W), style=ROLE_STYLE.get(r.role, ""))
    if r.scale in ("starting", "off"):
        text = t(lang, "f_starting", t=dur(r.ready_in_s)) if r.scale == "starting" else t(lang, "f_off")
        out.append(fit(text, bar_w + (hist_w + 1 if hist_w else 0) + _PCT_W), style=SCALE_STYLE[r.scale])
    else:
        _kv_cells(out, r, bar_w, hist_w)
    out.append(num(r.batch).rjust(_COL_W + 1), style=pal.PHASE[3] if r.batch else pal.DIM)
    out.append(num(r.queued).rjust(_COL_W), style=pal.PHASE[0] if r.queued else pal.DIM)
    out.append(num(r.done).rjust(_DONE_W))
    if energy:
        w, j = r.power_w, r.j_per_token
        out.append(("-" if math.isnan(w) else f"{w:,.0f}").rjust(_ENERGY_W), style=pal.COMPUTE)
        out.append(("-" if math.isnan(j) else f"{j:,.2f}" if j < 100 else f"{j:,.0f}").rjust(_ENERGY_W),
                   style=pal.COMPUTE)
    if busy:
        # Busy over the replica's own clock (a replica's last step may end past the view's clock).
        out.append(pct(r.busy_s / r.clock_s if r.clock_s > 0 else 0.0).rjust(_BUSY_W), style=pal.COMPUTE)
    out.truncate(width, overflow="crop", pad=True)
    return out


def _kv_cells(out: Text, r: ReplicaState, bar_w: int, hist_w: int) -> None:
    """Append a replica's KV bar (█ its own, ▒ pinned by copies), its KV history and its fill figure."""
    total = max(1, r.kv_total)
    own = round((r.kv_used - r.held) / total * bar_w)
    pinned = round(r.kv_used / total * bar_w) - own
    out.append("█" * own, style=pal.KV_USED)
    out.append("▒" * pinned, style=pal.MEMORY)
    out.append("░" * (bar_w - own - pinned), style=pal.KV_FREE)
    if hist_w:
        # On the pool's own scale, as the floor's KV sparkline: a nearly empty pool draws a flat line.
        out.append(" " + sparkline(r.kv_history, hist_w, top=1.0), style=pal.KV_USED)
    out.append(pct(r.kv_used / total).rjust(_PCT_W))


def why(lang: str, r: Route) -> str:
    """Why the router picked this replica, with the figure that decided it."""
    if r.why == "least-loaded":
        return t(lang, "why_least", n=num(r.figure))
    if r.why == "kv-aware":
        return t(lang, "why_kv", n=num(r.figure))
    if r.why == "prefix":
        return t(lang, "why_prefix", n=num(r.figure))
    if r.why == "round-robin":
        return t(lang, "why_rr")
    return t(lang, "why_only")


def route_row(r: Route, lang: str, width: int) -> Text:
    """  #21 user 3 → r2  least loaded (0 queued or running)."""
    who = f" {t(lang, 'f_user', u=r.user)}" if r.user >= 0 else ""
    out = Text(f"  #{r.req_id}{who} → ", style=pal.DIM)
    out.append(f"r{r.replica + 1}", style="bold")
    out.append("  " + why(lang, r))
    out.truncate(width, overflow="crop", pad=True)
    return out


def copy_row(c: CopyState, lang: str, width: int) -> Text:
    """  #18 r1 → r3  2,636 tok  lands at 5.093 s (or: waits for a decode replica with room)."""
    if math.isnan(c.lands_s):
        text = t(lang, "f_copy_wait", id=c.req_id, src=c.src + 1, tok=num(c.tokens))
    else:
        text = t(lang, "f_copy", id=c.req_id, src=c.src + 1, dst=c.dst + 1, tok=num(c.tokens), t=clock(c.lands_s))
    out = Text("  " + text, style=pal.MEMORY)
    out.truncate(width, overflow="crop", pad=True)
    return out


def title(frame: Frame) -> str:
    """fleet · 4 replicas · router least-loaded (P/D: the split instead of the count)."""
    v = frame.fleet
    if v is None:
        return ""
    if v.pd:
        return t(frame.lang, "fleet_title_pd", p=v.pd[0], d=v.pd[1], router=v.router)
    return t(frame.lang, "fleet_title", n=len(v.replicas), router=v.router)


def render(frame: Frame, width: int, height: int) -> list[Text]:
    """The panel's rows: column header, replica rows (a window when they do not all fit), routes, copies."""
    v, lang = frame.fleet, frame.lang
    if v is None or height <= 0:
        return []
    p = plan(v, height)
    rows = [column_header(lang, width, v.energy)]
    for i in range(p.first, p.first + p.count):
        rows.append(replica_row(v.replicas[i], lang, width, i == v.selected, v.energy))
    if p.more:
        rows.append(Text(fit(t(lang, "f_more", n=len(v.replicas) - p.count), width), style=pal.DIM))
    if p.routes >= 0 and len(rows) < height:
        rows.append(Text(fit(t(lang, "f_routes", router=v.router), width), style=pal.LABEL))
        if not v.routes and p.routes:
            rows.append(Text(fit("  " + t(lang, "f_no_routes"), width), style=pal.DIM))
        for r in reversed(v.routes[-p.routes:] if p.routes else ()):
            rows.append(route_row(r, lang, width))
    if p.copies >= 0 and len(rows) < height:
        rows.append(Text(fit(t(lang, "f_copies", n=len(v.copies)), width), style=pal.LABEL))
        for c in v.copies[:p.copies]:
            rows.append(copy_row(c, lang, width))
    rows = rows[:height]
    blank = Text(" " * width)
    return rows + [blank] * (height - len(rows))


def header(frame: Frame, width: int) -> Text:
    """The top bar of a fleet: the deployment and router, fleet-wide figures, the replica shown, the clock."""
    v, s, lang = frame.fleet, frame.snapshot, frame.lang
    assert v is not None
    tp = f" ×{s.opts.tp}" if s.opts.tp > 1 else ""
    left = Text(" tokensim ", style="bold reverse")
    left.append(" " + t(lang, "f_head", n=len(v.replicas), hw=f"{s.hardware.name}{tp}")
                + f" · {s.model.name} · {who(lang, frame.rate, v.users)}")
    badge = Text()
    if v.selected is not None:
        r = v.replicas[v.selected]
        badge.append(f" {t(lang, 'f_viewing', i=r.index + 1, role=role(lang, r.role))} ",
                     style="bold reverse " + ROLE_STYLE.get(r.role, ""))
        badge.append(" ")
    # Fleet-wide figures come before the deployment's name, which the panel's title and --help repeat.
    full = t(lang, "f_figs", n=num(v.done), tok=num(v.tok_s_out), ttft=dur(v.ttft_p50), cost=f"{v.cost_per_hour:,.2f}")
    short = t(lang, "f_figs_short", n=num(v.done), tok=num(v.tok_s_out))
    right = status(frame, short=True)
    room = width - cell_len(right.plain) - cell_len(badge.plain)
    # Narrow: the short figures, then none; the deployment keeps at least 12 cells ("tokensim 4…").
    figs = Text(next((f + "  " for f in (full, short) if cell_len(f) + 14 <= room), ""))
    room -= cell_len(figs.plain) + 1
    left.truncate(max(0, room), overflow="ellipsis", pad=True)
    left.append(" ")
    for part in (badge, figs, right):  # one Text: the bar's base style runs under every part, as on one engine
        left.append_text(part)
    left.truncate(width, overflow="crop", pad=True)
    return left
