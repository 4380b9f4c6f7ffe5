"""#xray: the shown step's time as a stacked bar of what it waited on (weights, KV, compute, comm, fixed)."""

from __future__ import annotations

from rich.text import Text

from tui.frame import Frame
from tui.render import xray
from tui.widgets.panel import FramePanel


class XRayBar(FramePanel):
    """The step x-ray panel."""

    def title_for(self, frame: Frame) -> str:
        """The panel's border title in the frame's language."""
        return xray.words(frame.lang)["title"]

    def rows(self, frame: Frame, width: int, height: int) -> list[Text]:
        """The panel's rows, from its pure renderer."""
        return xray.render(frame, width, height)

    def inputs(self, frame: Frame, width: int, height: int) -> tuple[object, ...]:
        """The step shown, whether it is priced ideal, and the language: a new step, not a frame."""
        return xray.inputs(frame)
