"""#narration: the guide's text for the current scene step; hidden when there is none."""

from __future__ import annotations

from rich.segment import Segment
from textual import events
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.frame import Frame
from tui.i18n import t
from tui.render import guide
from tui.render.fmt import fit

SCROLLBAR = 1  # columns kept for the scrollbar (scrollbar-size-vertical in app.tcss)


class Narration(ScrollView):
    """A bottom panel the scenes fill through TokensimApp.narration (a tuple of lines, or None).

    It wraps its text itself (tui.render.guide), breaking between Chinese characters too, and is
    updated only when the lines or the language change. When the text is taller than the rows the
    floor can spare (80x24), it scrolls (mouse wheel, or ↑ / ↓ in TokensimApp) and its title says so.
    """

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002
        """An empty, hidden-by-CSS panel."""
        super().__init__(id=id)
        self._shown: tuple[tuple[str, ...] | None, str] = (None, "")
        self._lines: tuple[str, ...] = ()
        self._wrapped: tuple[tuple[int, int], list[str]] = ((-1, -1), [])  # ((width, height), lines wrapped to it)
        self._lang = "en"

    def show(self, frame: Frame) -> None:
        """Take the frame's lines when they or the language changed, re-measure, and go back to the top."""
        key = (frame.narration, frame.lang)
        if key == self._shown:
            return
        self._shown = key
        self._lines = frame.narration or ()
        self._wrapped = ((-1, -1), [])
        self._lang = frame.lang
        self._measure()
        self.scroll_home(animate=False)
        self.refresh(layout=True)

    def wrapped(self, width: int) -> list[str]:
        """The lines wrapped for a panel `width` cells wide: to the full width when they fit in its rows, else
        one column narrower, for the scrollbar (kept for the last width and height asked)."""
        height = self.content_region.height
        key = (width, height)
        if self._wrapped[0] != key:
            lines = guide.wrap(self._lines, max(1, width))
            if height > 0 and len(lines) > height:
                lines = guide.wrap(self._lines, max(1, width - SCROLLBAR))
            self._wrapped = (key, lines)
        return self._wrapped[1]

    def _measure(self) -> None:
        """Size the scrollable canvas to the wrapped text at the current width; the title says when it scrolls."""
        width, height = self.content_region.width, self.content_region.height
        more = False
        if width > 0:
            rows = len(self.wrapped(width))
            more = rows > height > 0
            self.virtual_size = Size(width - SCROLLBAR if more else width, rows)
        self.border_title = t(self._lang, "narration_more" if more else "narration")

    def on_resize(self, event: events.Resize) -> None:
        """A new width re-wraps the text."""
        self._measure()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """As many rows as the text needs at `width` (CSS max-height caps it; the rest scrolls)."""
        return max(1, len(guide.wrap(self._lines, max(1, width))))

    def render_line(self, y: int) -> Strip:
        """Row y of the view: wrapped line y + scroll offset (pure: a function of the lines, size and offset)."""
        width = self.scrollable_content_region.width  # one column less while the scrollbar shows
        lines = self.wrapped(self.content_region.width)
        i = y + int(self.scroll_offset.y)
        text = lines[i] if 0 <= i < len(lines) else ""
        return Strip([Segment(fit(text, width), self.rich_style)], width)
