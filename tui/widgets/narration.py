"""#narration: the guide's text for the current scene step; hidden when there is none."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from tui.frame import Frame
from tui.i18n import t


class Narration(Static):
    """A bottom panel the scenes fill through TokensimApp.narration (a tuple of lines, or None).

    Unlike the gauges it wraps its text, so it is a Static, updated only when the lines change.
    """

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002
        """An empty, hidden-by-CSS panel."""
        super().__init__("", id=id)
        self._shown: tuple[tuple[str, ...] | None, str] = (None, "")

    def show(self, frame: Frame) -> None:
        """Update the text only when the lines or the language changed."""
        key = (frame.narration, frame.lang)
        if key == self._shown:
            return
        self._shown = key
        self.border_title = t(frame.lang, "narration")
        self.update(Text("\n").join(Text(line) for line in frame.narration or ()))
