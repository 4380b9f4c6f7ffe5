"""The base of every floor panel: holds the latest Frame and draws it with the Line API.

`show(frame)` renders the panel's rows once (through a pure renderer in tui/render) into Strips and
repaints only the rows that changed; `render_line` only indexes them. Going straight from Rich
segments to Strips skips Textual's Content conversion, and skipping unchanged rows skips most of the
compositor's work: together they are most of a frame's cost at 30 frames a second.
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from tui.frame import Frame


def row_key(row: Text) -> tuple[object, ...]:
    """A cheap identity for a rendered row: its text and styles (two equal keys draw the same cells)."""
    return (row.plain, str(row.style), tuple(row.spans))


class FramePanel(Widget):
    """A panel that shows one Frame. Subclasses define `title_for` and `rows`; `show` is the only setter."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:  # noqa: A002
        """An empty panel; `show` gives it a frame."""
        super().__init__(id=id, classes=classes)
        self.frame: Frame | None = None  # plain attribute: a Frame holds numpy arrays, never a reactive
        self._strips: list[Strip] = []
        self._keys: list[tuple[object, ...]] = []  # what each strip shows, to skip unchanged rows
        # The content size the strips were rendered at. Never name this `_size`: that is Textual's own
        # outer size, and overwriting it made every later repaint cover only the content-sized corner
        # at the widget's origin, leaving the last rows and columns stale on the terminal.
        self._drawn_size = Size(0, 0)

    def show(self, frame: Frame) -> None:
        """Take a new frame: update the title, render the rows and schedule a repaint (inside app.batch_update)."""
        self.frame = frame
        title = self.title_for(frame)
        if title is not None and title != self.border_title:
            self.border_title = title
        self._redraw()

    def _redraw(self, force: bool = False) -> None:
        """Render the current frame at the current size; repaint only the rows that changed."""
        size = self.content_size
        if self.frame is None or not self.display or size.width <= 0 or size.height <= 0:
            self._strips, self._keys = [], []
            return
        rows = self.rows(self.frame, size.width, size.height)
        keys = [row_key(row) for row in rows]
        console = self.app.console
        if force or len(keys) != len(self._keys) or size != self._drawn_size:
            style = self.rich_style
            self._strips = [Strip(row.render(console), size.width).apply_style(style) for row in rows]
            self._keys, self._drawn_size = keys, size
            self.refresh()
            return
        style = None
        changed: list[int] = []
        for y, (row, key) in enumerate(zip(rows, keys, strict=True)):
            if key != self._keys[y]:
                style = style or self.rich_style  # computing the widget style is not free: only when needed
                self._strips[y] = Strip(row.render(console), size.width).apply_style(style)
                self._keys[y] = key
                changed.append(y)
        if changed:  # one region spanning the changed rows: the compositor pays per region, not per row
            self.refresh(Region(0, changed[0], size.width, changed[-1] - changed[0] + 1))

    def on_resize(self, event: events.Resize) -> None:
        """A new size re-renders every row at the new width."""
        self._redraw(force=True)

    def title_for(self, frame: Frame) -> str | None:
        """The border title for `frame` (None: no title)."""
        return None

    def rows(self, frame: Frame, width: int, height: int) -> list[Text]:
        """The panel's content rows for a content box of `width` x `height` cells."""
        raise NotImplementedError

    def render_line(self, y: int) -> Strip:
        """Pure: the y-th pre-rendered row, or a blank one."""
        if 0 <= y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.content_size.width, self.rich_style)
