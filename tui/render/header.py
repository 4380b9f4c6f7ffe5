"""The top bar: what is simulated (GPU, model, dtype, users, scheduler, what-if knobs) and the sim clock."""

from __future__ import annotations

from functools import lru_cache

from rich.cells import cell_len
from rich.text import Text

from tui.frame import Frame
from tui.i18n import t
from tui.keys import bar_rows
from tui.render import palette as pal
from tui.render.fmt import clock, num


def speed_label(lang: str, speed: float) -> str:
    """×0.01 slow-mo, ×1 real time, ×10 fast-fwd."""
    if abs(speed - 1.0) < 1e-9:
        return t(lang, "speed_real")
    return t(lang, "speed_slow" if speed < 1 else "speed_fast", x=f"{speed:g}")


def knobs(frame: Frame) -> list[str]:
    """Badges for the what-if knobs that are on."""
    o = frame.snapshot.opts
    out = []
    if o.compute_mult != 1:
        out.append(f"compute×{o.compute_mult:g}")
    if o.bandwidth_mult != 1:
        out.append(f"BW×{o.bandwidth_mult:g}")
    return out


def who(lang: str, rate: float, users: int) -> str:
    """Who sends: '4.5 req/s' (open loop) or '6 users'."""
    if rate > 0:
        return t(lang, "rate_n", rate=rate)
    return t(lang, "users_1") if users == 1 else t(lang, "users_n", n=num(users))


def status(frame: Frame, short: bool) -> Text:
    """The bar's right side: behind (if the simulation cannot keep up), the sim clock, the speed (`short`: the bare
    factor) and play state. One engine's bar and a fleet's end alike."""
    lang = frame.lang
    out = Text()
    if frame.behind:  # wide: say what it means (the simulation, not the GPU, is slower than the speed asked)
        label = t(lang, "behind") if short else t(lang, "behind_long", s=f"{frame.speed:g}")
        out.append(label + "  ", style=pal.COMPUTE)
    out.append(t(lang, "sim", t=clock(frame.clock_s)) + "  ")
    out.append((f"×{frame.speed:g}" if short else speed_label(lang, frame.speed)) + "  ", style=pal.WEIGHTS)
    out.append(t(lang, "playing" if frame.playing else "paused") + " ", style="bold")
    return out


def render(frame: Frame, width: int) -> Text:
    """One row: left the configuration, right the clock, speed and play state."""
    s, lang = frame.snapshot, frame.lang
    dtype = s.opts.weight_dtype or s.model.weight_dtype
    who_ = who(lang, frame.rate, s.users)
    tp = f" ×{s.opts.tp}" if s.opts.tp > 1 else ""
    left = Text(" tokensim ", style="bold reverse")
    if width >= 100:
        left.append(f" {s.hardware.display}{tp} · {s.model.name} {dtype} · {who_} · {s.scheduler}")
    else:  # narrow: preset names, no scheduler, so the user count survives
        left.append(f" {s.hardware.name}{tp} · {s.model.name} {dtype} · {who_}")
    for k in knobs(frame):
        left.append(" ")
        left.append(f" {k} ", style="bold reverse " + pal.COMPUTE)
    right = status(frame, short=width < 100)  # narrow: the bare speed factor, so the left keeps the user count
    room = width - cell_len(right.plain)
    left.truncate(max(0, room), overflow="ellipsis", pad=True)
    left.append_text(right)
    left.truncate(width, overflow="crop", pad=True)
    return left


# The footer's keys, from the one key table (tui.keys); a fleet's lists picking a replica before the knobs, which
# restart the fleet.
KEYS: tuple[tuple[str, str], ...] = bar_rows(fleet=False)
FLEET_KEYS: tuple[tuple[str, str], ...] = bar_rows(fleet=True)
_ALWAYS = 2  # "? help" and "q quit" stay even when the bar is cropped


@lru_cache(maxsize=16)
def keybar(lang: str, width: int, fleet: bool = False) -> Text:
    """The footer: every key with its label; keys drop from the middle when the line is too narrow.

    Cached: it depends on nothing but language, width and whether a fleet is shown (callers must not modify
    the Text)."""
    items = list(FLEET_KEYS if fleet else KEYS)
    while True:
        out = Text(" ")
        for i, (key, label) in enumerate(items):
            if i:
                out.append("  ")
            out.append(key, style="bold " + pal.WEIGHTS)
            out.append(" " + t(lang, label), style=pal.DIM)
        if cell_len(out.plain) <= width or len(items) <= _ALWAYS + 1:
            break
        del items[-_ALWAYS - 1]
    out.truncate(width, overflow="crop", pad=True)
    return out
