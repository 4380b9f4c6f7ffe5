"""#l2: the L2 shelf filling as the step's bytes pass through, with the refills counter."""

from __future__ import annotations

from rich.text import Text

from tui.frame import Frame
from tui.render import l2
from tui.widgets.panel import FramePanel


class L2Shelf(FramePanel):
    """The L2 shelf panel."""

    def title_for(self, frame: Frame) -> str:
        """The panel's border title in the frame's language."""
        return l2.title(frame)

    def rows(self, frame: Frame, width: int, height: int) -> list[Text]:
        """The panel's rows, from its pure renderer."""
        return l2.render(frame, width, height)
