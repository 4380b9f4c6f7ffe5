"""Simulated seconds per wall second, this tree against a base tree, measured in one run.

    python benchmarks/speed_vs_base.py BASE_TREE [--repeats 3] [--ticks 20000] [--requests 2000] [--rate 1] [--json]

BASE_TREE is a checkout of the commit to compare with (e.g. `git archive 149a209 | tar -x -C /tmp/base`).
Two workloads, the speed targets of issue 12:
  bench: `tokensim bench`'s engine row (1,000 closed-loop users, qwen2.5-14b / h100-sxm, prompt 512, output
         256, continuous, max batch 256), timed by each tree's own engine_bench() after its warm-up;
  run:   `tokensim run --model llama-3.1-8b --rate 1 --requests 2000`, building the engine from the tree's
         own parser and timing construction plus run() to the bound (`--rate 10 --requests 10000`: issue 26's
         busy open loop).
Each measurement is a fresh process (PYTHONPATH = the tree). Base and current alternate, and the order
flips every repeat, so the shared machine's noise lands on both; the report gives the median of the
repeats in simulated seconds per wall second and per CPU second of the process (on a loaded machine the
CPU figure is the steadier one), with the load average before and after. A benchmark, not a test: it
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
RUN_ARGS = ["run", "--model", "llama-3.1-8b", "--rate", "1"]

# Runs inside a fresh interpreter whose sys.path starts with the tree under test; prints one JSON line.
_WORKER = r"""
import gc, inspect, json, sys, time
tree, what, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, tree)
import engine
assert engine.__file__.startswith(tree), engine.__file__
from engine.serving.engine import Engine
if what == "bench":
    # tokensim bench's engine row as each tree times it: its bench_config, its warm-up, then `n` ticks the way its
    # own bench runs them (run(max_ticks) where the tree has it, quiet ticks skipped; else step() by step()).
    from dataclasses import replace
    from tui.commands import bench_cmd as B
    cfg = B.bench_config()
    src = inspect.getsource(B.engine_bench)
    if "MAX_SECONDS" in src:
        from engine.validation import MAX_SECONDS
        cfg = replace(cfg, duration=MAX_SECONDS, force=True)
    e = Engine(cfg)
    for _ in range(B.WARMUP_TICKS):
        e.step()
    sim0 = e.clock
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    if "run(max_ticks" in src:
        e.run(max_ticks=n)
    else:
        for _ in range(n):
            e.step()
else:
    from tui.cli import build_parser
    from tui.commands.run_cmd import config_from_args
    argv = json.loads(sys.argv[4]) + ["--requests", str(n)]
    cfg = config_from_args(build_parser(argv).parse_args(argv))
    sim0 = 0.0
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    e = Engine(cfg)
    e.run()
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
sim = e.metrics()["sim_time_s"] - sim0
print(json.dumps({"wall": sim / wall, "cpu": sim / cpu, "wall_s": wall, "sim_s": sim}))
"""

def measure(tree: Path, what: str, n: int, rate: float = 1.0) -> dict[str, Any]:
    """One measurement of `what` ("bench" or "run", at `rate` req/s) on `tree`, in a fresh interpreter."""
    run_args = [*RUN_ARGS[:-1], f"{rate:g}"]
    return worker_json(tree, _WORKER, [what, str(n), json.dumps(run_args)], what)


def worker_json(tree: Path, code: str, args: list[str], what: str) -> Any:
    """Run `code` in a fresh interpreter on `tree` (its argv: the tree, then `args`; the tree first on the path)
    and read the JSON of the last line it prints; a failed run ends this script with `what` and its stderr.
    (bench_price.py measures with it too.)"""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", code, str(tree), *args], capture_output=True, text=True, env=env,
                         cwd=tree, check=False)
    if out.returncode:
        raise SystemExit(f"{what} on {tree} failed:\n{out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    """Interleave base and current measurements, then print medians, ratios and the load average."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path, help="the base tree (a checkout of the commit to compare with)")
    ap.add_argument("--repeats", type=int, default=3, help="measurements per tree and workload (median taken)")
    ap.add_argument("--ticks", type=int, default=20_000, help="bench: engine ticks timed (bench's default)")
    ap.add_argument("--requests", type=int, default=2000, help="run: requests served")
    ap.add_argument("--rate", type=float, default=1.0, help="run: the open loop's arrival rate (req/s)")
    ap.add_argument("--only", choices=["bench", "run"], help="measure one workload")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    args = ap.parse_args()
    base = args.base.resolve()
    if not (base / "engine").is_dir():
        print(f"speed_vs_base: {base} has no engine/ package; give a checkout of the base commit", file=sys.stderr)
        return 2
    trees = {"base": base, "current": HERE}
    work = {"bench": args.ticks, "run": args.requests}
    if args.only:
        work = {args.only: work[args.only]}
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    got: dict[str, dict[str, dict[str, list[float]]]] = {
        w: {name: {"wall": [], "cpu": []} for name in trees} for w in work}
    for i in range(args.repeats):
        order = ["base", "current"] if i % 2 == 0 else ["current", "base"]
        for w, n in work.items():
            for name in order:
                r = measure(trees[name], w, n, args.rate)
                got[w][name]["wall"].append(r["wall"])
                got[w][name]["cpu"].append(r["cpu"])
                if not args.json:
                    print(f"  repeat {i + 1} {w:5} {name:7} {r['wall']:8,.0f} sim s / wall s, {r['cpu']:8,.0f} / CPU s"
                          f"  ({r['sim_s']:,.0f} sim s in {r['wall_s']:.2f} s wall; load {os.getloadavg()[0]:.2f})",
                          flush=True)
    load1 = os.getloadavg()
    res: dict[str, Any] = {"repeats": args.repeats, "load_before": load0, "load_after": load1,
                           "cpus": os.cpu_count(), "wall_s": time.perf_counter() - t0, "workloads": {}}
    for w, by in got.items():
        row: dict[str, Any] = {"size": work[w]}
        for clock in ("wall", "cpu"):
            mb, mc = statistics.median(by["base"][clock]), statistics.median(by["current"][clock])
            row[clock] = {"base": mb, "current": mc, "ratio": mc / mb, "base_all": by["base"][clock],
                          "current_all": by["current"][clock]}
        res["workloads"][w] = row
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"load average (1, 5, 15 min) before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f},"
          f" after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; {res['cpus']} CPUs")
    for w, r in res["workloads"].items():
        what = f"{r['size']:,} ticks" if w == "bench" else f"{r['size']:,} requests at {args.rate:g}/s"
        for clock, per in (("wall", "wall s"), ("cpu", "CPU s")):
            c = r[clock]
            print(f"{w:5} ({what}): base {c['base']:,.0f}, current {c['current']:,.0f} sim s per {per}"
                  f" (medians of {args.repeats}) = {c['ratio']:.2f}x")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
