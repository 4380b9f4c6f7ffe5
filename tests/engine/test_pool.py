"""engine.fleet.pool: no worker outlives the map (issue 30, class 8)."""

from __future__ import annotations

import multiprocessing
import os
import time

from engine.fleet.pool import pool_map


def _nap(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_stopping_early_terminates_every_worker_at_once() -> None:
    """Before, the executor waited for every running job (a plan point can take minutes) and Ctrl+C left workers
    running; a map stopped after its first result now ends both 30-second jobs in well under a second."""
    it = pool_map([0.0, 30.0, 30.0], 3, _nap)
    _, pid = next(it)
    assert pid != os.getpid()
    t0 = time.perf_counter()
    it.close()  # what Ctrl+C or SIGTERM in the consumer does to the generator
    assert time.perf_counter() - t0 < 5.0
    assert not multiprocessing.active_children()


def test_a_finished_map_gives_every_result() -> None:
    got = dict(pool_map([0.0, 0.01, 0.02, 0.0], 2, _nap))
    assert sorted(got) == [0, 1, 2, 3] and os.getpid() not in got.values()
