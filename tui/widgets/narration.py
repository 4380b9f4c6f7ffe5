"""#narration: the guide's text for the current scene step; hidden when there is none."""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from tui.frame import Frame
from tui.i18n import t
from tui.render import guide


class Narration(Widget):
    """A bottom panel the scenes fill through TokensimApp.narration (a tuple of lines, or None).

    It wraps its text itself (tui.render.guide), breaking between Chinese characters too, and is
    updated only when the lines or the language change.
    """

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002
        """An empty, hidden-by-CSS panel."""
        super().__init__(id=id)
        self._shown: tuple[tuple[str, ...] | None, str] = (None, "")
        self._lines: tuple[str, ...] = ()

    def show(self, frame: Frame) -> None:
        """Take the frame's lines when they or the language changed, and re-measure."""
        key = (frame.narration, frame.lang)
        if key == self._shown:
            return
        self._shown = key
        self._lines = frame.narration or ()
        self.border_title = t(frame.lang, "narration")
        self.refresh(layout=True)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """As many rows as the wrapped text needs at `width` (CSS max-height caps it)."""
        return max(1, len(guide.wrap(self._lines, width)))

    def render(self) -> Text:
        """The lines wrapped to the current width (pure: a function of the stored lines and the size)."""
        return Text("\n".join(guide.wrap(self._lines, self.content_size.width)), no_wrap=True, overflow="crop")
