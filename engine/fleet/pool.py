"""Mapping a function over jobs: one after another here, or in a local process pool.

Both a plan's grid (engine.fleet.plan) and a pre-dealt fleet's replicas (engine.fleet.fleet) are lists of
independent jobs whose results do not depend on where they run; this is the one place that starts processes
for them, so neither module needs the other.

No worker outlives the map: when the caller stops early (Ctrl+C, SIGTERM, an error, a consumer that stops
reading) every worker is terminated at once rather than left to finish its job, and workers ignore SIGINT,
which a terminal's Ctrl+C sends to the whole process group, so the parent alone says what happened.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from typing import Any


def serial_map(jobs: list[Any], fn: Callable[[Any], Any]) -> Iterator[tuple[int, Any]]:
    """Run `fn` on jobs one after another in this process, yielding (index, result)."""
    for i, job in enumerate(jobs):
        yield i, fn(job)


def _worker_signals() -> None:
    """A worker's signals: SIGINT left to the parent (which stops the pool), SIGTERM the default (the pool's
    terminate ends the worker, instead of a handler inherited from the parent raising inside it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _indexed(task: tuple[int, Callable[[Any], Any], Any]) -> tuple[int, Any]:
    """(index, fn(job)) in a worker."""
    i, fn, job = task
    return i, fn(job)


def pool_map(jobs: list[Any], workers: int, fn: Callable[[Any], Any]) -> Iterator[tuple[int, Any]]:
    """Run `fn` on jobs in a local process pool, yielding (index, result) as they finish (any order); in this
    process when there is one worker or one job."""
    if workers <= 1 or len(jobs) <= 1:
        yield from serial_map(jobs, fn)
        return
    import multiprocessing

    pool = multiprocessing.get_context().Pool(min(workers, len(jobs)), initializer=_worker_signals)
    finished = False
    try:
        yield from pool.imap_unordered(_indexed, [(i, fn, job) for i, job in enumerate(jobs)])
        finished = True
    finally:
        if finished:
            pool.close()
        else:
            pool.terminate()  # stopped early: no worker finishes a job nobody will read
        pool.join()
