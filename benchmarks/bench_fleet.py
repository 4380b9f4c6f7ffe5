"""Fleet and plan speed: medians of repeated runs of `tokensim bench --fleet`'s two rows, in CPU seconds.

    python benchmarks/bench_fleet.py [--hours 24] [--routers round-robin,least-loaded,kv-aware] [--repeats 3]
                                     [--plan-configs 1000] [--plan-every 1] [--workers 2] [--fleet-workers 2]
                                     [--json]

Row 1: a simulated day (or --hours) of a 10,000-user service (2.8 requests/s, lognormal lengths) on 8 replicas
of generic-14b / H100, per router. Row 2: `plan` over the 1,000-configuration grid of a 10-minute workload
(every --plan-every-th point, so a loaded machine can sample the grid's mix) on the local pool. CPU seconds,
not wall: the development machine is shared, and CPU seconds are what two idle cores would take (divide the
plan's by the worker count for its wall time there). A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tui.commands.fleet_bench import fleet_day, plan_grid  # noqa: E402


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    """The median of one figure over repeated runs."""
    return statistics.median(r[key] for r in runs)


def main() -> int:
    """Run each row --repeats times and print the medians (and every run with --json)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--routers", default="round-robin,least-loaded,kv-aware")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--plan-configs", type=int, default=1000)
    ap.add_argument("--plan-every", type=int, default=1)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--fleet-workers", type=int, default=os.cpu_count() or 1,
                    help="processes a round-robin fleet runs its replicas on (1: serial)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out: dict[str, Any] = {"load_before": os.getloadavg()[0], "fleet": {}, "plan": None}
    for router in (r for r in a.routers.split(",") if r):
        runs = [fleet_day(a.hours, router=router, workers=a.fleet_workers) for _ in range(a.repeats)]
        out["fleet"][router] = {"runs": runs, "cpu_s_median": median_of(runs, "cpu_s"),
                                "cpu_s_per_sim_day": median_of(runs, "cpu_s") * 24.0 / a.hours,
                                "wall_s_median": median_of(runs, "wall_s")}
        print(f"fleet {router}: {a.hours:g} h in {out['fleet'][router]['cpu_s_median']:.1f} CPU s (median of"
              f" {a.repeats}; a day: {out['fleet'][router]['cpu_s_per_sim_day']:.0f} CPU s;"
              f" wall {out['fleet'][router]['wall_s_median']:.1f} s)", file=sys.stderr)
    if a.plan_configs:
        runs = [plan_grid(a.plan_configs, workers=a.workers, every=a.plan_every) for _ in range(a.repeats)]
        per = median_of(runs, "cpu_s_per_config")  # CPU s per configuration of the sample (the grid's mix)
        out["plan"] = {"runs": runs, "cpu_s_per_config": per, "cpu_s_for_1000": per * 1000,
                       "wall_s_for_1000_on_idle_workers": per * 1000 / a.workers}
        print(f"plan: {per:.3f} CPU s per configuration, 1,000 in {per * 1000:.0f} CPU s"
              f" ({per * 1000 / a.workers:.0f} s on {a.workers} idle cores)", file=sys.stderr)
    out["load_after"] = os.getloadavg()[0]
    if a.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
