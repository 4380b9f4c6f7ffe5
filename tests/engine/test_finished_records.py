"""Finished requests' records (latencies, times, the snapshot's recent rows, SLO counts) are derived in batches;
reading them after every tick (one request's worth at a time) or only at the end gives the same records."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import engine.serving.accounting as acc
from engine.config import EngineConfig
from engine.serving.engine import Engine

CONFIGS: dict[str, dict[str, Any]] = {
    "closed": dict(users=40, requests=300, output="uniform:5,120", slo_ttft=0.2, slo_tpot=0.02),
    "preempting": dict(users=32, kv_pool_blocks=300, prompt="uniform:50,400", output="uniform:50,500",
                       requests=150, slo_tpot=0.03),
    "output-1": dict(users=50, output="uniform:1,3", requests=200, slo_ttft=0.1),
}


def _records(e: Engine) -> tuple[np.ndarray, ...]:
    st = e.lanes[0].stats
    return st.lat.last(), st.times.last(), st.recent.last(), np.array([st.slo_ok, st.slo_ok_tokens])


@pytest.mark.parametrize("batch", [23, 150])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_batched_records_equal_records_read_every_tick(name: str, batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Small rings, so the records wrap and a derivation spans many ticks and a ring's end; a batch of 150 is more
    # than the snapshot keeps (RECENT_DONE) and more than the latency ring holds.
    monkeypatch.setattr(acc, "LATENCY_SAMPLES", 97)
    monkeypatch.setattr(acc, "FINISH_BATCH", batch)
    cfg = EngineConfig(seed=5, debug=True, **CONFIGS[name])
    every = Engine(cfg)
    while not every.finished:
        every.step()
        _records(every)  # derives whatever finished this tick
    once = Engine(cfg)
    while not once.finished:
        once.step()  # the same ticks, records read only at the end
    assert once.metrics()["requests_completed"] == cfg.requests
    a, b = _records(every), _records(once)
    assert len(a[0]) == 97 and len(a[2]) == acc.RECENT_DONE
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert every.metrics() == once.metrics()
