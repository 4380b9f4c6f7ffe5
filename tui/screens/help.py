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
from tui.keys import help_rows

HELP_PANELS = ("p_warehouse", "p_traffic", "p_l2", "p_sm", "p_roofline", "p_xray", "p_users")


def help_text(lang: str, fleet: bool = False) -> Text:
    """The help body: a keys table then one line per panel (a fleet's keys and panel too when one is shown)."""
    keys = help_rows(fleet)  # the one key table (tui.keys)
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
