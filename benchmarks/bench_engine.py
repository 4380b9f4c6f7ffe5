"""Engine speed and memory over a long run: ticks/s and resident memory every 100,000 ticks.

    python benchmarks/bench_engine.py [--ticks 1000000] [--users 1000] [--tracemalloc]

Memory must stay flat: per-request rows are dropped when requests finish and every history the
engine keeps is a bounded ring. RSS comes from /proc/self/statm (Linux); --tracemalloc reports the
Python heap instead (much slower). A benchmark, not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.serving.engine import Engine  # noqa: E402
from tui.commands.bench_cmd import bench_config  # noqa: E402


def rss_mb() -> float:
    """Resident set size of this process in MB (NaN where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError):
        return float("nan")


def main() -> int:
    """Run the engine for --ticks ticks and print a row every --every ticks, then a JSON summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=1_000_000)
    ap.add_argument("--every", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--tracemalloc", action="store_true", help="measure the Python heap with tracemalloc")
    args = ap.parse_args()
    if args.tracemalloc:
        tracemalloc.start()
    eng = Engine(bench_config(args.users))
    rows = []
    t0 = time.perf_counter()
    last_t, last_tick = t0, 0
    print(f"{'ticks':>10} {'ticks/s':>9} {'sim s':>10} {'done':>9} {'batch p50':>9} {'RSS MB':>8}"
          + (f" {'heap MB':>8}" if args.tracemalloc else ""), flush=True)
    for i in range(1, args.ticks + 1):
        eng.step()
        if i % args.every == 0 or i == args.ticks:
            now = time.perf_counter()
            rate = (i - last_tick) / (now - last_t)
            last_t, last_tick = now, i
            m = eng.metrics()
            row = {"ticks": i, "ticks_per_s": rate, "sim_time_s": eng.clock, "completed": m["requests_completed"],
                   "batch_p50": m["batch_p50"], "rss_mb": rss_mb()}
            if args.tracemalloc:
                row["heap_mb"] = tracemalloc.get_traced_memory()[0] / 1e6
            rows.append(row)
            print(f"{i:>10,} {rate:>9,.0f} {eng.clock:>10,.1f} {row['completed']:>9,} {row['batch_p50']:>9.0f}"
                  f" {row['rss_mb']:>8.1f}" + (f" {row['heap_mb']:>8.2f}" if args.tracemalloc else ""), flush=True)
    wall = time.perf_counter() - t0
    rss = [r["rss_mb"] for r in rows]
    summary = {"ticks": args.ticks, "users": args.users, "wall_s": wall, "ticks_per_s": args.ticks / wall,
               "rss_mb_first": rss[0], "rss_mb_last": rss[-1], "rss_mb_max": max(rss), "rows": rows}
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
