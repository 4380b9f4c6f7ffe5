"""Mapping a function over jobs: one after another here, or in a local process pool.

Both a plan's grid (engine.fleet.plan) and a pre-dealt fleet's replicas (engine.fleet.fleet) are lists of
independent jobs whose results do not depend on where they run; this is the one place that starts processes
for them, so neither module needs the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


def serial_map(jobs: list[Any], fn: Callable[[Any], Any]) -> Iterator[tuple[int, Any]]:
    """Run `fn` on jobs one after another in this process, yielding (index, result)."""
    for i, job in enumerate(jobs):
        yield i, fn(job)


def pool_map(jobs: list[Any], workers: int, fn: Callable[[Any], Any]) -> Iterator[tuple[int, Any]]:
    """Run `fn` on jobs in a local process pool, yielding (index, result) as they finish (any order); in this
    process when there is one worker or one job."""
    if workers <= 1 or len(jobs) <= 1:
        yield from serial_map(jobs, fn)
        return
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as ex:
        futs = {ex.submit(fn, job): i for i, job in enumerate(jobs)}
        try:
            for f in as_completed(futs):
                yield futs[f], f.result()
        finally:
            for f in futs:
                f.cancel()
