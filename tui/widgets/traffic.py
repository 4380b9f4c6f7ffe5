"""#traffic: conveyor packets HBM -> L2 -> SM at the step's bytes/s; in slow motion, layer k of L."""

from __future__ import annotations

from rich.text import Text

from tui.frame import Frame
from tui.render import traffic
from tui.widgets.panel import FramePanel


class Traffic(FramePanel):
    """The traffic panel."""

    def title_for(self, frame: Frame) -> str:
        """The panel's border title in the frame's language."""
        return traffic.title(frame)

    def rows(self, frame: Frame, width: int, height: int) -> list[Text]:
        """The panel's rows, from its pure renderer."""
        return traffic.render(frame, width, height)
