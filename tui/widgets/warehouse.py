"""#warehouse: the HBM capacity bar (weights, KV used/free, reserve) and the bandwidth gauge."""

from __future__ import annotations

from rich.text import Text

from tui.frame import Frame
from tui.render import warehouse
from tui.widgets.panel import FramePanel


class Warehouse(FramePanel):
    """The HBM warehouse panel."""

    def title_for(self, frame: Frame) -> str:
        """The panel's border title in the frame's language."""
        return warehouse.title(frame)

    def rows(self, frame: Frame, width: int, height: int) -> list[Text]:
        """The panel's rows, from its pure renderer."""
        return warehouse.render(frame, width, height)
