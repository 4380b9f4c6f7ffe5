"""The figure references a scene writes: `metric` (now), `metric@mark` (its value at a mark) and `metric/mark`
(now over then). One parser for the schema (which checks them), the director (which fills them) and both
narration placeholders ({metric@mark:.1f}) and checkpoints (metric + vs_mark).
"""

from __future__ import annotations

import string
from dataclasses import dataclass

AT, OVER = "@", "/"


@dataclass(frozen=True, slots=True)
class Ref:
    """A figure reference: `metric` now (sep ''), at `mark` (sep '@'), or now over the mark (sep '/')."""

    metric: str
    sep: str = ""
    mark: str = ""

    @property
    def key(self) -> str:
        """The reference as a scene writes it: 'step_ms', 'step_ms@before', 'step_ms/before'."""
        return f"{self.metric}{self.sep}{self.mark}"


def parse_ref(key: str) -> Ref:
    """'step_ms@before' -> Ref('step_ms', '@', 'before'); '@' wins when a key holds both separators."""
    for sep in (AT, OVER):
        if sep in key:
            metric, _, mark = key.partition(sep)
            return Ref(metric, sep, mark)
    return Ref(key)


def placeholders(text: str) -> list[tuple[str, str, str]]:
    """(field name, format spec, conversion) of each {placeholder} in `text`; ValueError if it will not parse."""
    return [(name, spec or "", conv or "") for _, name, spec, conv in string.Formatter().parse(text)
            if name is not None]


def refs(text: str) -> list[Ref]:
    """The figure references of a narration's placeholders (none when the text will not parse)."""
    try:
        return [parse_ref(name) for name, _, _ in placeholders(text) if name]
    except ValueError:
        return []
