"""Where each finished request's TTFT and E2E went: the parts add up to the whole, per request and on average,
preemption and recompute show where they happen, and a single request's split is the arithmetic of its steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.fleet.fleet import KV_LINK_LATENCY_S, Fleet, FleetSpec
from engine.serving.accounting import PARTS, L, lanes_split
from engine.serving.engine import Engine

PRESSED = EngineConfig(users=120, requests=400, prompt="uniform:300,2000", output="uniform:50,400",
                       think="uniform:0,150", kv_pool_blocks=1200, debug=True, seed=3)


def _check_sums(e: Engine) -> None:
    """Every request's parts sum to its TTFT and E2E from the latency ring (the figures run reports)."""
    s = e.latency_split()
    lat = np.concatenate([ln.stats.lat.last() for ln in e.lanes])
    assert len(s.ids) == len(lat) > 0
    np.testing.assert_allclose(s.ttft.sum(axis=1), lat[:, L.TTFT], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(s.e2e.sum(axis=1), lat[:, L.E2E], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(s.ttft[:, PARTS.index("queue")], lat[:, L.QUEUE], atol=1e-12)
    assert (s.ttft > -1e-9).all() and (s.e2e > -1e-9).all(), "a part went negative"
    assert (s.e2e >= s.ttft - 1e-9).all(), "a TTFT part is larger than the same E2E part"


def test_parts_sum_to_each_request_under_preemption_and_thinking() -> None:
    e = Engine(PRESSED)
    e.run()
    m = e.metrics()
    assert m["preemptions"] > 20 and m["recomputed_tokens"] > 0
    _check_sums(e)
    s = e.latency_split()
    pre, rec = PARTS.index("preempted"), PARTS.index("recompute")
    # Requests evicted while thinking (before their first visible token) carry it in their TTFT.
    assert (s.ttft[:, pre] > 0).sum() > 0 and (s.ttft[:, rec] > 0).sum() > 0
    assert (s.e2e[:, pre] > 0).sum() >= (s.ttft[:, pre] > 0).sum()
    assert s.e2e[:, rec].sum() > 0


def test_mean_split_sums_to_the_reported_means() -> None:
    e = Engine(PRESSED)
    e.run()
    m, x = e.metrics(), e.explain()
    assert x["parts"] == list(PARTS) and x["requests"] == m["latency_samples"]
    for key in ("ttft_s", "e2e_s"):
        mean = x[key]["mean"]
        assert sum(mean[p] for p in PARTS) == pytest.approx(mean["total"], rel=1e-12)
        assert mean["total"] == pytest.approx(m[key]["mean"], rel=1e-9)
        # The p-th request is a real one whose own latency is the p-th percentile (to one rank).
        for q in ("p50", "p90", "p99"):
            r = x[key][q]
            assert sum(r[p] for p in PARTS) == pytest.approx(r["total"], rel=1e-12)
        assert x[key]["p50"]["total"] <= x[key]["p90"]["total"] <= x[key]["p99"]["total"]
        assert x[key]["p99"]["total"] == pytest.approx(m[key]["p99"], rel=0.05)


def test_no_pressure_no_preemption_parts() -> None:
    e = Engine(EngineConfig(users=8, requests=40, prompt="500", output="50", debug=True))
    e.run()
    _check_sums(e)
    s = e.latency_split()
    for p in ("preempted", "recompute"):
        assert not s.e2e[:, PARTS.index(p)].any()


def test_one_request_is_its_steps() -> None:
    """One user, --ideal: no queue, prefill is the first step's time, decode the rest; path is 0 under --ideal."""
    e = Engine(EngineConfig(users=1, requests=1, prompt="1000", output="20", ideal=True, scheduler="continuous"))
    steps = []
    while not e.finished:
        r = e.step()
        if r.cost is not None:
            steps.append(r.dt)
    s = e.latency_split()
    q, pf, xfer, dec, pre, rec, path = s.e2e[0]
    assert q == 0 and xfer == 0 and pre == 0 and rec == 0 and path == 0
    assert pf == pytest.approx(steps[0], rel=1e-12)
    assert dec == pytest.approx(sum(steps[1:]), rel=1e-12)
    assert s.ttft[0].sum() == pytest.approx(steps[0], rel=1e-12)


@pytest.mark.parametrize("pd", [None, (1, 1)])
def test_fleet_split_sums(pd: tuple[int, int] | None) -> None:
    cfg = EngineConfig(users=24, requests=120, prompt="uniform:200,1200", output="uniform:20,120", seed=1)
    f = Fleet(FleetSpec(cfg, replicas=2, router="least-loaded", pd=pd))
    f.run()
    m, x = f.metrics(), f.explain()
    assert x["requests"] == m["latency_samples"] > 0
    for key in ("ttft_s", "e2e_s"):
        assert x[key]["mean"]["total"] == pytest.approx(m[key]["mean"], rel=1e-9)
    xfer = np.concatenate([lanes_split([r.lane]).ttft[:, PARTS.index("transfer")] for r in f.back])
    if pd is None:
        assert not xfer.any()
    else:
        # Every answer's KV crossed the link: at least the copy's fixed latency, and the copies' own timings.
        assert (xfer >= KV_LINK_LATENCY_S - 1e-12).all()
        assert xfer.min() >= min(f.transfer_s) - 1e-12
        assert (np.concatenate([lanes_split([r.lane]).ttft[:, PARTS.index("prefill")] for r in f.back]) > 0).all()


def test_staged_fleet_split_keeps_the_request_path() -> None:
    # A workload file's stages make each replica count per-stage latencies (count_stages): its fresh totals
    # must still carry the request path, or the split's "path" part is 0 while TTFT and E2E include it.
    w = Path(__file__).resolve().parents[2] / "scenes" / "workloads" / "shared-system-prompt.toml"
    f = Fleet(FleetSpec(EngineConfig(users=0, workload=str(w), requests=120), replicas=2, router="least-loaded"))
    f.run()
    for r in f.back:
        ln = r.lane
        path = ln.sm.runtime.request_overhead_s
        assert path > 0 and ln.stats.path_s == path
        s = lanes_split([ln])
        lat = ln.stats.lat.last()
        assert len(lat) > 0
        np.testing.assert_allclose(s.ttft[:, PARTS.index("path")], path, rtol=1e-12)
        np.testing.assert_allclose(s.ttft.sum(axis=1), lat[:, L.TTFT], rtol=1e-9, atol=1e-9)
