"""#kvqueue: KV pool use and queue length over time."""

from __future__ import annotations

from rich.text import Text

from tui.frame import Frame
from tui.i18n import t
from tui.render import kvqueue
from tui.widgets.panel import FramePanel


class KvQueue(FramePanel):
    """The KV pool and queue sparklines."""

    def title_for(self, frame: Frame) -> str:
        """The panel's border title in the frame's language; with KV tiers, their hit shares after it."""
        hits = kvqueue.tier_hits(frame)
        return f"{t(frame.lang, 'kvqueue')} · {hits}" if hits else t(frame.lang, "kvqueue")

    def rows(self, frame: Frame, width: int, height: int) -> list[Text]:
        """The panel's rows, from its pure renderer."""
        return kvqueue.render(frame, width, height)
