"""#metrics: step time, tokens/s, TTFT, TPOT, batch, MFU, bandwidth use, bound-by, $/Mtok."""

from __future__ import annotations

from rich.text import Text

from tui.frame import Frame
from tui.render import metrics
from tui.widgets.panel import FramePanel


class Metrics(FramePanel):
    """The metrics panel."""

    def title_for(self, frame: Frame) -> str:
        """The panel's border title: the windows its figures average over."""
        return metrics.title(frame)

    def rows(self, frame: Frame, width: int, height: int) -> list[Text]:
        """The panel's rows, from its pure renderer."""
        return metrics.render(frame, width, height)
