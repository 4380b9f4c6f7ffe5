"""Bisection over whole numbers: the one search every crossover in the project uses (B*, the context wall,
the users a KV pool holds, the batch where output costs 5x input)."""

from __future__ import annotations

from collections.abc import Callable


def first_true(pred: Callable[[int], bool], lo: int, hi: int) -> int:
    """Smallest n in [lo, hi] with pred(n), for a pred that turns from false to true once as n grows.

    Returns hi when pred(hi) is false (it never turns), after checking hi alone: a search that never
    crosses costs one call instead of log2(hi - lo) of them.
    """
    if not pred(hi):
        return hi
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
