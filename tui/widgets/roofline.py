"""#roofline: a small log-log roofline with the live operating point."""

from __future__ import annotations

from rich.text import Text

from tui.frame import Frame
from tui.i18n import t
from tui.render import roofline
from tui.widgets.panel import FramePanel


class Roofline(FramePanel):
    """The roofline panel."""

    def title_for(self, frame: Frame) -> str:
        """The panel's border title in the frame's language."""
        return t(frame.lang, "roofline")

    def rows(self, frame: Frame, width: int, height: int) -> list[Text]:
        """The panel's rows, from its pure renderer."""
        return roofline.render(frame, width, height)

    def inputs(self, frame: Frame, width: int, height: int) -> tuple[object, ...]:
        """The roof, the step plotted (its point, batch and bound) and the language: a new step, not a frame."""
        return roofline.inputs(frame)
