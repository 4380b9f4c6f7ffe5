"""The base of every floor panel: holds the latest Frame and draws it with the Line API.

`show(frame)` renders the panel's rows once (through a pure renderer in tui/render) into Strips and
repaints only the rows that changed; `render_line` only indexes them. Going straight from Rich
segments to Strips skips Textual's Content conversion, and skipping unchanged rows skips most of the
compositor's work: together they are most of a frame's cost at 30 frames a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.filter import LineFilter
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from tui.frame import Frame


def row_key(row: Text) -> tuple[object, ...]:
    """A cheap identity for a rendered row: its text and styles (two equal keys draw the same cells)."""
    return (row.plain, str(row.style), tuple(row.spans))


# The mixin is typed as a Widget but is a plain class at run time: Textual follows a widget's first DOMNode
# base for its default CSS, so a Widget subclass listed first would hide the ScrollView's from the users list.
if TYPE_CHECKING:
    _Mixin = Widget
else:
    _Mixin = object


class PaintedLines(_Mixin):
    """Mixin for the floor's widgets: hand the compositor the same lines again while nothing marked them dirty.

    Every frame the compositor asks each widget under the screen's changed area for its lines, and Textual
    rebuilds them from its line cache (colours, title, filters) even when none changed; keeping them saved
    0.3-1.4 ms of the 3-4 ms of compositing a frame at 1,000 users in the render bench. Textual's own line
    cache trusts `_set_dirty` to say when lines change (a repaint, a new size or style, a new title all go
    through it), so this keeps what it painted until then, for the same crop and line filters."""

    _painted: tuple[Region, tuple[LineFilter, ...], list[Strip]] | None = None

    def _set_dirty(self, *regions: Region) -> None:
        """Some lines are about to change: forget what was painted (Textual's hook, textual pinned)."""
        self._painted = None
        super()._set_dirty(*regions)

    def render_lines(self, crop: Region) -> list[Strip]:
        """The lines Textual would paint, or the ones it painted last when nothing has changed since."""
        filters = tuple(self.get_line_filters())
        hit = self._painted
        if hit is not None and hit[0] == crop and hit[1] == filters:
            return hit[2]
        strips = super().render_lines(crop)
        self._painted = (crop, filters, strips)
        return strips


class FramePanel(PaintedLines, Widget):
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
        self._title: str | None = None  # the title last set (reading border_title back renders it to markup)
        self._inputs: tuple[object, ...] | None = None  # what the strips were rendered from (see `inputs`)

    def show(self, frame: Frame) -> None:
        """Take a new frame: update the title, render the rows and schedule a repaint (inside app.batch_update)."""
        self.frame = frame
        title = self.title_for(frame)
        if title is not None and title != self._title:
            self._retitle(title)
        self._redraw()

    def _retitle(self, title: str) -> None:
        """Show a new border title, repainting only the top border row.

        Setting `border_title` repaints every row; the metrics title runs with the clock, so that redrew all
        its rows to change one, most frames. After the first title this stores it as Textual's setter does
        (widget._BorderTitle, textual pinned) and marks only the top row dirty: the content offset is the
        border and padding above the first content row, so the region below is the widget's row 0."""
        first = self._title is None
        self._title = title
        if first:
            self.border_title = title
            return
        self._border_title = self.render_str(title).expand_tabs(4).split()[0]
        top = self.content_offset
        self.refresh(Region(-top.x, -top.y, self.outer_size.width, 1))

    def _strip(self, row: Text, width: int, style: Style) -> Strip:
        """A row as a Strip on the widget's base style: the styled segments straight into one Strip (a Strip
        carries seven caches, so making a plain one and then a styled copy costs twice)."""
        return Strip(Segment.apply_style(row.render(self.app.console), style), width)

    def _redraw(self, force: bool = False) -> None:
        """Render the current frame at the current size; repaint only the rows that changed."""
        size = self.content_size
        if self.frame is None or not self.display or size.width <= 0 or size.height <= 0:
            self._strips, self._keys, self._inputs = [], [], None
            return
        inputs = self.inputs(self.frame, size.width, size.height)
        if not force and inputs is not None and inputs == self._inputs and size == self._drawn_size:
            return  # the rows would come out the same: skip rendering them at all
        self._inputs = inputs
        rows = self.rows(self.frame, size.width, size.height)
        keys = [row_key(row) for row in rows]
        if force or len(keys) != len(self._keys) or size != self._drawn_size:
            style = self.rich_style
            self._strips = [self._strip(row, size.width, style) for row in rows]
            self._keys, self._drawn_size = keys, size
            self.refresh()
            return
        style = None
        changed: list[int] = []
        for y, (row, key) in enumerate(zip(rows, keys, strict=True)):
            if key != self._keys[y]:
                style = style or self.rich_style  # computing the widget style is not free: only when needed
                self._strips[y] = self._strip(row, size.width, style)
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

    def inputs(self, frame: Frame, width: int, height: int) -> tuple[object, ...] | None:
        """All that `rows` reads from `frame` at this size, for panels that change less often than frames come:
        when two frames in a row give equal inputs (==) at the same size, the second is not rendered. None (the
        default): render every frame. tests/tui/test_frame_paint.py checks equal inputs draw equal rows."""
        return None

    def render_line(self, y: int) -> Strip:
        """Pure: the y-th pre-rendered row, or a blank one."""
        if 0 <= y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.content_size.width, self.rich_style)
