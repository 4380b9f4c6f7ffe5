"""#users: every user's phase, streaming answer and KV blocks; Line API, so 10,000 rows cost what 20 do."""

from __future__ import annotations

from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.frame import Frame
from tui.render import users
from tui.widgets.panel import row_key


class UsersList(ScrollView):
    """A virtual list: only the rows on screen are ever rendered, and only changed ones repainted."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id, classes=classes)
        self.frame: Frame | None = None
        # list row -> (key, strip) for the rows on screen in the current frame, at width _width
        self._rows: dict[int, tuple[tuple[object, ...], Strip]] = {}
        self._width = 0

    def show(self, frame: Frame) -> None:
        """Take a new frame: size the virtual canvas, re-render the visible rows, repaint those that changed."""
        self.frame = frame
        title = users.title(frame)
        if title != self.border_title:
            self.border_title = title
        region = self.scrollable_content_region
        size = Size(region.width, frame.row_count)
        if size != self.virtual_size:
            self.virtual_size = size
        if not self.display or region.width <= 0:
            return
        top = int(self.scroll_offset.y)
        width = region.width
        fresh: dict[int, tuple[tuple[object, ...], Strip]] = {}
        console, style = self.app.console, None
        changed: list[int] = []
        for y in range(region.height):
            row = users.row(frame, top + y, width)
            key = row_key(row)
            old = self._rows.get(top + y) if width == self._width else None
            if old is not None and old[0] == key:
                fresh[top + y] = old
                continue
            style = style or self.rich_style
            fresh[top + y] = (key, Strip(row.render(console), width).apply_style(style))
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
        return Strip(users.row(self.frame, index, width).render(self.app.console), width).apply_style(self.rich_style)
