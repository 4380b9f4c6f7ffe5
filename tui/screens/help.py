"""The help screen: every key and what each panel shows, in the current language."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tui.i18n import t

HELP_KEYS: tuple[tuple[str, str], ...] = (
    ("space", "h_space"), ("n", "h_n"), ("[ ]", "h_speed"), ("+ -", "h_users"), ("c", "h_c"), ("b", "h_b"),
    ("f", "h_f"), ("m", "h_m"), ("h", "h_h"), ("o", "h_o"), ("r", "h_r"), ("l", "h_l"),
    ("e", "h_e"), ("↑ ↓", "h_guide"), ("?", "h_help"), ("q", "h_q"),
)
HELP_PANELS = ("p_warehouse", "p_traffic", "p_l2", "p_sm", "p_roofline", "p_xray", "p_users")
# On a fleet: how to move between the overview and the replicas' floors (after space; n says what it steps).
FLEET_HELP_KEYS: tuple[tuple[str, str], ...] = (("n", "h_n_fleet"), ("tab", "h_replica"), ("0", "h_fleet"))


def help_text(lang: str, fleet: bool = False) -> Text:
    """The help body: a keys table then one line per panel (a fleet's keys and panel too when one is shown)."""
    keys = HELP_KEYS
    if fleet:
        keys = (HELP_KEYS[0], *FLEET_HELP_KEYS, *HELP_KEYS[2:])
    out = Text()
    out.append(t(lang, "help_keys") + "\n", style="bold underline")
    kw = max(cell_len(k) for k, _ in keys) + 2
    for key, label in keys:
        out.append(f"  {key:<{kw}}", style="bold #e5a50a")
        out.append(t(lang, label) + "\n")
    out.append("\n" + t(lang, "help_panels") + "\n", style="bold underline")
    for label in (("p_fleet",) if fleet else ()) + HELP_PANELS:
        out.append("  • " + t(lang, label) + "\n")
    out.append("\n" + t(lang, "help_close"), style="dim")
    return out


class HelpScreen(ModalScreen[None]):
    """Keys and panels; escape, ? or q closes it."""

    BINDINGS = [Binding("escape,question_mark,q", "close", "close")]

    def __init__(self, lang: str, fleet: bool = False) -> None:
        """The help in `lang` (with a fleet's keys when `fleet`)."""
        super().__init__(id="help")
        self.lang = lang
        self.fleet = fleet

    def compose(self) -> ComposeResult:
        """A titled, scrollable box with the help text."""
        with VerticalScroll(id="help-box") as box:
            box.border_title = t(self.lang, "help_title")
            yield Static(help_text(self.lang, self.fleet), id="help-body")

    def action_close(self) -> None:
        """escape, ? or q: back to the floor."""
        self.dismiss(None)
