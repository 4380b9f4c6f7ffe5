"""The app's keys, written once: each row is a key, the action it runs, and how each place shows it.

The app's BINDINGS, its command palette (ctrl+p), the help screen (?) and the footer (#keys) are all
built from KEYS, so a new key is one row here plus its `action_*` method on the app (and its labels in
tui.i18n). Rows next to each other with the same label print as one ("[ ]", "+ -", "↑ ↓"). Pure data:
no Textual (the footer's renderer reads it too).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Key:
    """One key. `keys`: Textual's key names ("plus,equals_sign"); `action`: the app action ("guide_scroll(1)");
    `shown`: how help, palette and footer print it. `help`, `palette`, `bar`: the i18n keys of its help line, its
    palette title and its footer label ("": not there); `fleet_help`: its help line on a fleet. `bar_at`: its place
    in the footer (which orders keys by use, not as the help does); `bar_shown`: the footer's print of it.
    `fleet`: shown only with a fleet (True) or everywhere (False). `priority`: before any focused widget."""

    keys: str
    action: str
    shown: str
    help: str = ""
    palette: str = ""
    bar: str = ""
    bar_at: int = 0
    fleet_help: str = ""
    bar_shown: str = ""
    fleet: bool = False
    priority: bool = False


KEYS: tuple[Key, ...] = (
    Key("space", "toggle_play", "space", "h_space", "cmd_play", "k_play", 1),
    Key("n", "step_once", "n", "h_n", "cmd_step", "k_step", 2, fleet_help="h_n_fleet"),
    # A fleet: tab / shift+tab walk the replicas' floors and the overview, 1-9 pick one, 0 the overview.
    Key("tab", "next_replica", "tab", "h_replica", "cmd_next_replica", "k_replica", 4, bar_shown="tab 1-9",
        fleet=True, priority=True),
    Key("shift+tab", "prev_replica", "shift+tab", fleet=True, priority=True),
    Key("0", "select_replica(0)", "0", "h_fleet", "cmd_overview", "k_fleet", 5, fleet=True),
    *(Key(str(k), f"select_replica({k})", str(k), fleet=True) for k in range(1, 10)),
    Key("left_square_bracket", "slower", "[", "h_speed", "cmd_slower", "k_speed", 3),
    Key("right_square_bracket", "faster", "]", "h_speed", "cmd_faster", "k_speed", 3),
    Key("plus,equals_sign", "more_users", "+", "h_users", "cmd_more", "k_users", 6),
    Key("minus,underscore", "fewer_users", "-", "h_users", "cmd_fewer", "k_users", 6),
    Key("c", "compute", "c", "h_c", "cmd_compute", "k_compute", 7),
    Key("b", "bandwidth", "b", "h_b", "cmd_bw", "k_bw", 8),
    Key("f", "fp8", "f", "h_f", "cmd_fp8", "k_fp8", 9),
    Key("m", "pick_model", "m", "h_m", "cmd_model", "k_model", 10),
    Key("h", "pick_gpu", "h", "h_h", "cmd_gpu", "k_gpu", 11),
    Key("o", "settings", "o", "h_o", "cmd_settings", "k_settings", 15),
    Key("r", "reset", "r", "h_r", "cmd_reset", "k_reset", 12),
    Key("l", "toggle_lang", "l", "h_l", "cmd_lang", "k_lang", 13),
    Key("e", "explain", "e", "h_e", "cmd_explain", "k_explain", 14),
    Key("up", "guide_scroll(-1)", "↑", "h_guide"),
    Key("down", "guide_scroll(1)", "↓", "h_guide"),
    Key("question_mark", "help", "?", "h_help", "cmd_help", "k_help", 16),
    Key("q", "quit", "q", "h_q", bar="k_quit", bar_at=17),
    Key("ctrl+l", "redraw", "ctrl+l"),  # repaint the terminal, as shells do: no line anywhere
)


def _merged(rows: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """Neighbouring (shown, label) rows with one label as one row: ("[", "h_speed"), ("]", "h_speed") -> "[ ]"."""
    out: list[tuple[str, str]] = []
    for shown, label in rows:
        if out and out[-1][1] == label:
            out[-1] = (f"{out[-1][0]} {shown}", label)
        else:
            out.append((shown, label))
    return tuple(out)


def help_rows(fleet: bool) -> tuple[tuple[str, str], ...]:
    """The help screen's keys table: (key as printed, i18n key of its line), a fleet's keys only with a fleet."""
    return _merged([(k.shown, (k.fleet_help if fleet else "") or k.help) for k in KEYS
                    if k.help and (fleet or not k.fleet)])


def bar_rows(fleet: bool) -> tuple[tuple[str, str], ...]:
    """The footer's keys: (key as printed, i18n key of its label), in footer order."""
    rows = sorted((k for k in KEYS if k.bar and (fleet or not k.fleet)), key=lambda k: k.bar_at)
    return _merged([(k.bar_shown or k.shown, k.bar) for k in rows])


def palette_rows(fleet: bool) -> tuple[Key, ...]:
    """The keys the command palette offers (each with its own entry: '[' and ']' are two)."""
    return tuple(k for k in KEYS if k.palette and (fleet or not k.fleet))
