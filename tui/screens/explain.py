"""The explain screen: one floor figure's formula with the current values filled in (engine.evidence.explain).

`e` on the floor opens it on the last figure explained (step time first); `e`, tab or → moves to the next
figure, shift+tab or ← to the previous one (in a scene ← → keep turning the scene's pages), esc closes it.
A click on a figure of the floor opens that figure (`figure_at_click`). Each move reads the app's latest frame
again, so the values are those of the floor behind it.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.dom import DOMNode
from textual.screen import ModalScreen
from textual.widgets import Static

from engine.evidence.explain import FIGURES, next_figure
from scenes.words import Explained, explain_text
from tui.render import metrics

# The panel a click lands in -> the figure it explains (the metrics panel and the warehouse decide by the row
# clicked, in figure_at_click).
PANEL_FIGURES = {"traffic": "step", "l2": "bw", "sm-grid": "mfu", "roofline": "bound",
                 "xray": "step", "kvqueue": "kv"}
WAREHOUSE_KV_ROWS = 2  # the warehouse's first two rows: the memory bar and its labels (weights, KV, reserve, free)


def figure_at_click(event: events.Click) -> str | None:
    """The figure a click on the floor asks about: the metrics panel's figure under the pointer, else the figure
    of the panel clicked (PANEL_FIGURES); None off the panels."""
    node: DOMNode | None = event.widget
    while node is not None:
        if node.id == "metrics":
            off = event.get_content_offset(node)  # type: ignore[arg-type]
            if off is None:
                return None
            return metrics.figure_at(node.content_size.width, off.x, off.y)  # type: ignore[attr-defined]
        if node.id == "warehouse":
            off = event.get_content_offset(node)  # type: ignore[arg-type]
            return "kv" if off is not None and off.y < WAREHOUSE_KV_ROWS else "bw"
        if node.id in PANEL_FIGURES:
            return PANEL_FIGURES[node.id]
        node = node.parent
    return None


def body(x: Explained, lang: str, clock: str) -> Text:
    """The screen's text: the formula (bold), the lines with values, and the keys."""
    out = Text()
    for i, line in enumerate(x.lines):
        out.append(line + "\n", style="bold" if i == 0 else "")
    out.append("\n" + explain_text(lang, "hint", t=clock), style="dim")
    return out


class ExplainScreen(ModalScreen[str]):
    """A figure's explanation; dismissed with the figure last shown (the next `e` opens it again)."""

    BINDINGS = [
        Binding("escape,q", "close", "close"),
        Binding("e,right,tab", "move(1)", "next figure"),
        Binding("left,shift+tab", "move(-1)", "previous figure"),
    ]

    def __init__(self, figure: str, explain: Callable[[str], tuple[Explained, str]], lang: str) -> None:
        """Open on `figure`; `explain(name)` gives its Explanation and the sim clock it was read at."""
        super().__init__(id="explain")
        self.figure = figure if figure in FIGURES else FIGURES[0]
        self.explain = explain
        self.lang = lang

    def compose(self) -> ComposeResult:
        """A titled box with the explanation."""
        with VerticalScroll(id="explain-box"):
            yield Static("", id="explain-body")

    def on_mount(self) -> None:
        """Fill in the figure it opened on."""
        self._show()

    def _show(self) -> None:
        """Render the current figure from the app's latest frame."""
        x, clock = self.explain(self.figure)
        box = self.query_one("#explain-box")
        box.border_title = explain_text(self.lang, "screen", fig=x.title, i=FIGURES.index(self.figure) + 1,
                                        n=len(FIGURES))
        self.query_one("#explain-body", Static).update(body(x, self.lang, clock))

    def action_move(self, step: int) -> None:
        """e, tab, →: the next figure; shift+tab, ←: the previous one (wrapping)."""
        self.figure = next_figure(self.figure, step)
        self._show()

    def action_close(self) -> None:
        """esc: back to the floor."""
        self.dismiss(self.figure)
