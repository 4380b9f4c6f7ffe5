"""Fleet replicas serving a dealt share take open-loop stretches (Replica.step_before, engine.serving.open_loop):
every fleet metric and every replica's figures (tables, stats, history, latencies, clocks) come out the same, bit
for bit, with the stretches on and off, for a round-robin fleet (which takes them) and a least-loaded one (which
takes none: each arrival bounds its replicas)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from engine.config import EngineConfig
from engine.fleet.fleet import Fleet
from engine.fleet.spec import FleetSpec
from tests.engine.test_open_loop import stretches
from tests.engine.test_saturated import _state

# Busy replicas (4-10 requests a second each, ~5-15 rows running): the load where the stretches pay.
BASE = EngineConfig(model="llama-3.1-8b", rate=16.0, prompt="uniform:500,1500", output="uniform:100,300",
                    requests=2000, users=0, seed=0, force=True)
VARIANTS: dict[str, dict[str, Any]] = {
    "busy": {},
    "lighter": {"rate": 6.0, "requests": 900, "seed": 2},  # rows around the stretches' minimum: some taken, some not
    "sync scheduling": {"ideal": True},
    "varied lengths": {"prompt": "lognormal:800,0.8", "output": "lognormal:150,0.9", "seed": 3},
    "duration bound": {"duration": 60.0, "requests": None},
    "small pool": {"kv_pool_blocks": 2500},  # preempts now and then: stretches stop short of it
}


def _run(cfg: EngineConfig, router: str, on: bool) -> tuple[list[tuple[str, Any]], int]:
    """The fleet's metrics and each replica's state at the run's end, and the steps stretches took."""
    with stretches(on) as taken:
        f = Fleet(FleetSpec(cfg, replicas=3, router=router), workers=1)
        f.run()
        m = f.metrics()
        out: list[tuple[str, Any]] = [("fleet", repr(m)), ("ticks", f.ticks)]
        for r in f.reps:
            out += [(f"r{r.index}.summary", repr(r.summary(m["sim_time_s"]))), (f"r{r.index}.state", repr(r.state()))]
            out += [(f"r{r.index}.{k}", v) for k, v in _state(r)]
    return out, taken[0]


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("router", ["round-robin", "least-loaded"])
def test_fleet_stretches_match_steps(router: str, name: str) -> None:
    cfg = replace(BASE, **VARIANTS[name])
    off, none = _run(cfg, router, False)
    on, taken = _run(cfg, router, True)
    assert none == 0
    if router == "round-robin":
        assert taken > 1000, f"{name}: stretches took only {taken} steps"
    else:
        assert taken == 0
    assert len(off) == len(on)
    for (k, a), (_, b) in zip(off, on, strict=True):
        assert a == b, f"{router}, {name}: {k} differs with open-loop stretches"
