"""#sm-grid: one cell per SM, lit by the SM busy fraction; the title names the tray (L1/shared) size."""

from __future__ import annotations

from rich.text import Text

from tui.frame import Frame
from tui.render import sm_grid
from tui.widgets.panel import FramePanel


class SmGrid(FramePanel):
    """The SM workstations panel."""

    def title_for(self, frame: Frame) -> str:
        """The panel's border title in the frame's language."""
        return sm_grid.title(frame)

    def rows(self, frame: Frame, width: int, height: int) -> list[Text]:
        """The panel's rows, from its pure renderer."""
        return sm_grid.render(frame, width, height)

    def inputs(self, frame: Frame, width: int, height: int) -> tuple[object, ...]:
        """How many SMs, how many lit and where the lit block starts: it moves only while a busy step plays."""
        return sm_grid.inputs(frame, width, height)
