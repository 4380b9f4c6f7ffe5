"""#header: one row naming the configuration, the sim clock, the speed and play state."""

from __future__ import annotations

from rich.text import Text

from tui.frame import Frame
from tui.render import fleet, header
from tui.widgets.panel import FramePanel


class HeaderBar(FramePanel):
    """The top bar."""

    def rows(self, frame: Frame, width: int, height: int) -> list[Text]:
        """The panel's rows, from its pure renderer (a fleet's own top bar when the frame carries a fleet)."""
        return [header.render(frame, width) if frame.fleet is None else fleet.header(frame, width)]
