"""#keys: the footer listing every key in the current language (a Frame-driven Footer)."""

from __future__ import annotations

from rich.text import Text

from tui.frame import Frame
from tui.render import header
from tui.widgets.panel import FramePanel


class KeyBar(FramePanel):
    """The footer with the keys."""

    def rows(self, frame: Frame, width: int, height: int) -> list[Text]:
        """The panel's rows, from its pure renderer."""
        return [header.keybar(frame.lang, width, frame.fleet is not None)]
