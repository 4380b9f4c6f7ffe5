"""#fleet: a row per replica (role, KV fill, batch, queue, done, busy), the router's last choices, KV copies.

A FramePanel (Line API): only the rows that fit are rendered. A click on a replica's row asks the app to show
that replica's floor (a ReplicaPicked message; the app owns the selection).
"""

from __future__ import annotations

from rich.text import Text
from textual import events

from tui.frame import Frame
from tui.messages import ReplicaPicked
from tui.render import fleet
from tui.widgets.panel import FramePanel


class FleetPanel(FramePanel):
    """The fleet at a glance."""

    def title_for(self, frame: Frame) -> str | None:
        """fleet · 4 replicas · router least-loaded."""
        return fleet.title(frame)

    def rows(self, frame: Frame, width: int, height: int) -> list[Text]:
        """The panel's rows, from its pure renderer."""
        return fleet.render(frame, width, height)

    def on_click(self, event: events.Click) -> None:
        """A click on a replica's row picks it."""
        frame = self.frame
        offset = event.get_content_offset(self)
        if frame is None or frame.fleet is None or offset is None:
            return
        index = fleet.replica_at(frame.fleet, self.content_size.height, offset.y)
        if index is not None:
            self.post_message(ReplicaPicked(index))
