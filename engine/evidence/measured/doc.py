"""A parsed result or trace file, and the interface every format implements (the registry is formats.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from engine.evidence.measured.record import Measured


@dataclass(frozen=True, slots=True)
class Doc:
    """A parsed file: `kind` json (one value), jsonl (a list of objects) or csv (a list of rows, keys as written)."""

    label: str
    kind: str
    data: Any

    def keys(self) -> set[str]:
        """The top-level keys of a JSON object, or the keys of the first record of a list (JSON lines, CSV)."""
        if isinstance(self.data, dict):
            return set(self.data)
        if isinstance(self.data, list) and self.data and isinstance(self.data[0], dict):
            return set(self.data[0])
        return set()


class Format(Protocol):
    """One file format: `detect` looks only at the Doc's shape; `read` checks it and returns the record."""

    name: str
    title: str

    def detect(self, doc: Doc) -> bool: ...

    def read(self, doc: Doc) -> Measured: ...
