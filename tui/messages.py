"""Messages between the app's parts. Widgets never talk to the engine; they post one of these."""

from __future__ import annotations

from textual.message import Message

from tui.frame import Frame


class FramePublished(Message):
    """The app published a new frame (scenes can watch for it to check their checkpoints)."""

    def __init__(self, frame: Frame) -> None:
        """Carry the frame just published."""
        super().__init__()
        self.frame = frame


class ReplicaPicked(Message):
    """A replica's row was clicked in the fleet panel: the app shows that replica's floor."""

    def __init__(self, index: int) -> None:
        """Carry the replica's index (0-based)."""
        super().__init__()
        self.index = index
