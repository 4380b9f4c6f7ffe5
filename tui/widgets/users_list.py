"""#users: every user's phase, streaming answer and KV blocks; Line API, so 10,000 rows cost what 20 do."""

from __future__ import annotations

from functools import cache

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.frame import Frame
from tui.render import users
from tui.render.users import Pieces
from tui.widgets.panel import PaintedLines

_Key = tuple[tuple[str, str], ...]


@cache
def _style(spec: str) -> Style:
    """A parsed Rich style, once per style string."""
    return Style.parse(spec) if spec else Style.null()


def _strip(pieces: Pieces, width: int, base: Style) -> Strip:
    """Pieces straight to a Strip (no Rich Text in between), on the widget's base style."""
    return Strip([Segment(text, base + _style(style)) for text, style in pieces], width)


class UsersList(PaintedLines, ScrollView):
    """A virtual list: only the rows on screen are ever rendered, and only changed ones repainted."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:  # noqa: A002
        """An empty list; `show` gives it a frame."""
        super().__init__(id=id, classes=classes)
        self.frame: Frame | None = None
        # list row -> (key, strip) for the rows on screen in the current frame, at width _width
        self._rows: dict[int, tuple[_Key, Strip]] = {}
        self._width = 0
        self._title: str | None = None  # the title last set (reading border_title back renders it to markup)

    def show(self, frame: Frame) -> None:
        """Take a new frame: size the virtual canvas, re-render the visible rows, repaint those that changed."""
        self.frame = frame
        title = users.title(frame)
        if title != self._title:
            self.border_title = self._title = title
        region = self.scrollable_content_region
        size = Size(region.width, frame.row_count)
        if size != self.virtual_size:
            self.virtual_size = size
        if not self.display or region.width <= 0:
            return
        top = int(self.scroll_offset.y)
        width = region.width
        fresh: dict[int, tuple[_Key, Strip]] = {}
        base: Style | None = None
        changed: list[int] = []
        for y in range(region.height):
            pieces = users.row_pieces(frame, top + y, width)
            key = tuple(pieces)
            old = self._rows.get(top + y) if width == self._width else None
            if old is not None and old[0] == key:
                fresh[top + y] = old
                continue
            base = base or self.rich_style
            fresh[top + y] = (key, _strip(pieces, width, base))
            changed.append(y)
        self._rows, self._width = fresh, width
        if changed:  # one region spanning the changed rows: the compositor pays per region, not per row
            self.refresh(Region(0, changed[0], width, changed[-1] - changed[0] + 1))

    def render_line(self, y: int) -> Strip:
        """Row `y` of the viewport: list row y + scroll offset, from the current frame."""
        width = self.scrollable_content_region.width
        if self.frame is None:
            return Strip.blank(width, self.rich_style)
        index = int(self.scroll_offset.y) + y
        hit = self._rows.get(index) if width == self._width else None
        if hit is not None:
            return hit[1]
        # Scrolled or resized since the last frame: render this row now (pure: nothing is stored).
        return _strip(users.row_pieces(self.frame, index, width), width, self.rich_style)
