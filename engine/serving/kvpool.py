"""The KV pool of one lane: blocks of 16 tokens, counted (the requests' `blocks` column says who holds what).

Every block is private to the request holding it. Prefix caching plugs in here: shared blocks with a
refcount and an LRU of free-but-cached blocks, with `take`/`give` becoming allocate/release.
"""

from __future__ import annotations


class KVPool:
    """Block accounting of one GPU group's KV cache: capacity, blocks in use, the peak in use."""

    __slots__ = ("total", "used", "peak")

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self.peak = 0

    @property
    def free(self) -> int:
        """Blocks no request holds."""
        return self.total - self.used

    @property
    def util(self) -> float:
        """Fraction of the pool in use (0 for an empty pool)."""
        return self.used / self.total if self.total else 0.0

    def take(self, blocks: int) -> None:
        """Hand `blocks` to requests (the caller checked they fit) and track the peak."""
        self.used += blocks
        if self.used > self.peak:
            self.peak = self.used

    def give(self, blocks: int) -> None:
        """Blocks back from requests that finished or were evicted."""
        self.used -= blocks
