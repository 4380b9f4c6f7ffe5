"""The lazy loop's shortcuts read what a fresh read would: kept routing snapshots, the fewest steps to a finish."""

from __future__ import annotations

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.fleet.fleet import Fleet, FleetSpec
from engine.fleet.lazy import LazyLoop
from engine.fleet.replica import Replica
from engine.fleet.routers import RoutingSnapshot

# Open loop on the lazy loop; a small KV pool so requests queue and get preempted (P and Q are not empty).
TIGHT = EngineConfig(rate=12, users=0, requests=400, prompt="lognormal:1000,0.8", output="lognormal:200,0.8",
                     kv_pool_blocks=1500)


@pytest.mark.parametrize("router", ["least-loaded", "kv-aware"])
def test_kept_snapshots_are_the_replicas_read_afresh(router: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A replica's snapshot is kept until it steps or takes a request: at every arrival each one the router is
    # given must be what reading the replica now gives.
    original = LazyLoop.snapshots
    seen = [0]

    def checked(self: LazyLoop, reps: list[Replica], row: object) -> list[RoutingSnapshot]:
        got = original(self, reps, row)  # type: ignore[arg-type]
        wanted = "wanted_blocks" in self.router.reads
        assert got == [r.routing(wanted, None) for r in reps]
        seen[0] += 1
        return got

    monkeypatch.setattr(LazyLoop, "snapshots", checked)
    f = Fleet(FleetSpec(TIGHT, replicas=4, router=router))
    assert f.loop == "lazy"
    f.run()
    assert seen[0] >= 400 and f.metrics()["requests_completed"] == 400


def _fewest_left(r: Replica) -> int:
    """steps_to_finish by its definition: the least (total - gen) over running, preempted then queued requests,
    a table's 0 giving way to the next one's figure, as numpy computes it on each whole table."""
    ln = r.lane
    m = 0
    for t in (ln.R, ln.P, ln.Q):
        if t.size:
            left = int(np.min(t.col("total") - t.col("gen")))
            m = left if not m else min(m, left)
    return m


def test_steps_to_finish_is_the_least_tokens_left_over_every_table(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its running batch is read as a Python min over a list (a few rows: cheaper than numpy's), and the queue
    # and the preempted only when some request waits: after every step it must give the definition's figure,
    # through batches, queues and preemptions.
    original = Replica.step_before
    tables = {"R": 0, "P": 0, "Q": 0}

    def checked(self: Replica, limit: float, max_steps: int) -> int:
        k = original(self, limit, max_steps)
        assert self.steps_to_finish() == _fewest_left(self)
        for name in tables:
            tables[name] += getattr(self.lane, name).size > 0
        return k

    monkeypatch.setattr(Replica, "step_before", checked)
    f = Fleet(FleetSpec(TIGHT, replicas=2, router="least-loaded"))
    f.run()
    assert f.metrics()["preemptions"] > 0
    assert all(v > 0 for v in tables.values()), tables
