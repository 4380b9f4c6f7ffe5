"""`tokensim bench --fleet`: how fast a fleet simulates and how fast `plan` sweeps a grid.

Two rows, each a benchmark (figures, no assertion): a simulated day of a 10,000-user service on 8
replicas, and a plan over 1,000 configurations of a 10-minute workload on the local process pool.
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any

from engine.config import EngineConfig
from engine.fleet import plan as pl
from engine.fleet.fleet import Fleet, FleetSpec

DAY_S = 86_400.0
SERVICE_USERS = 10_000
ASKS_PER_USER_HOUR = 1.0  # each user sends about one request an hour: 10,000 users are 2.8 requests/s
LENGTHS = {"prompt": "lognormal:1000,0.8", "output": "lognormal:200,0.8"}


def service_config(hours: float = 24.0) -> EngineConfig:
    """The 10,000-user service as an open loop (its users' requests pooled into one Poisson stream). Forced past
    the step budget: a day is ~6e7 estimated steps over 8 replicas, and timing it is the row's point."""
    return EngineConfig(hardware="h100-sxm", model="generic-14b", users=0,
                        rate=SERVICE_USERS * ASKS_PER_USER_HOUR / 3600.0, duration=hours * 3600.0, force=True,
                        **LENGTHS)


def fleet_day(hours: float = 24.0, replicas: int = 8, router: str = "least-loaded",
              workers: int = 1) -> dict[str, Any]:
    """Wall time of `hours` simulated hours of the service on `replicas` replicas behind `router` (round-robin
    runs its replicas on `workers` processes)."""
    cfg = service_config(hours)
    t0, c0, k0 = time.perf_counter(), time.process_time(), _children_cpu()
    f = Fleet(FleetSpec(cfg, replicas=replicas, router=router), workers=workers)
    f.run()
    m = f.metrics()
    wall = time.perf_counter() - t0
    # CPU seconds too: on a shared machine they, not the wall, say what an idle core would take.
    return {"sim_s": m["sim_time_s"], "wall_s": wall, "cpu_s": time.process_time() - c0 + _children_cpu() - k0,
            "workers": workers,
            "requests": m["requests_completed"], "replicas": replicas,
            "router": router, "steps": f.ticks, "sim_s_per_wall_s": m["sim_time_s"] / wall, "rate": cfg.rate,
            "users": SERVICE_USERS, "ttft_p99_s": m["ttft_s"]["p99"]}


def grid_space(configs: int) -> pl.Space:
    """A realistic search space of about `configs` points: GPUs x tp x replicas x batch caps x routers."""
    full = pl.Space(hardware=("h100-sxm", "a100-80g", "l40s", "h200", "b200"), model=("generic-14b",),
                    tp=(1, 2, 4, 8), replicas=tuple(range(1, 10)), max_num_seqs=(64, 256),
                    router=("round-robin", "least-loaded", "kv-aware"))
    if configs >= 1000:
        return full
    # Smaller runs keep the shape: fewer GPUs and replica counts.
    return pl.Space(hardware=("h100-sxm",), model=("generic-14b",), tp=(1, 2), replicas=tuple(range(1, 3)),
                    max_num_seqs=(64, 256), router=("round-robin",))


def plan_grid(configs: int = 1000, minutes: float = 10.0, workers: int | None = None,
              every: int = 1) -> dict[str, Any]:
    """Wall and CPU time of a plan over the grid (pruning, every simulation on the local pool, the summary);
    `every` > 1 plans every n-th point of the grid only (a sample with the grid's mix, for a loaded machine)."""
    base = EngineConfig(users=0, rate=2.0, requests=int(2.0 * minutes * 60), **LENGTHS)
    slo = pl.Slo(ttft=0.5, tpot=0.05)
    workers = workers or os.cpu_count() or 1
    t0, c0, k0 = time.perf_counter(), time.process_time(), _children_cpu()
    points = grid_space(configs).points()[:configs][::every]
    keep = [p for p in points if pl.prune(p, base) is None and pl.beyond_slo(p, base, slo) is None]
    results = pl.run_grid([(p, base, slo, None) for p in keep], lambda jobs: pl.pool_map(jobs, workers))
    out = pl.summarize(results, [], slo)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0 + _children_cpu() - k0
    return {"configs": len(points), "simulated": len(results), "pruned": len(points) - len(keep),
            "workers": workers, "wall_s": wall, "cpu_s": cpu,
            "cpu_s_per_config": cpu / max(1, len(points)),
            "s_per_config": wall / max(1, len(points)), "sim_minutes": minutes, "requests_each": base.requests,
            "best": None if out["best"] is None else {k: out["best"][k] for k in ("hardware", "tp", "replicas",
                                                                                   "cost_per_hour")}}


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (the pool's workers, once the pool has shut down)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime
