"""CPU milliseconds per frame, this tree against a base tree, measured by one script in one run.

    python benchmarks/frame_vs_base.py BASE_TREE [--users 1000 10000] [--frames 300] [--repeats 3] [--json]

Every measurement is a fresh process whose sys.path starts with the tree under test, so the app, the
widgets and the engine are that tree's; the measuring code is always this tree's tui/render_bench.py
(loaded by path), so both trees are timed the same way: CPU time per frame at 120x40, the engine's
stepping between frames untimed. Base and current alternate and the order flips every repeat, so the
shared machine's noise lands on both; the report gives the median over repeats of each figure, and the
load average before and after. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
KEYS = ("frame_ms_p50", "frame_ms_p99", "frame_ms_mean", "publish_ms_p50")

# Runs in a fresh interpreter: the tree under test first on sys.path, this tree's bench loaded by file path.
_WORKER = r"""
import importlib.util, json, sys
tree, bench, users, frames = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, tree)
import tui
assert tui.__file__.startswith(tree), tui.__file__
spec = importlib.util.spec_from_file_location("_frame_bench", bench)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
print(json.dumps(mod.render_bench(users, frames=frames)))
"""


def measure(tree: Path, users: int, frames: int) -> dict[str, Any]:
    """One fresh process: `tree`'s app timed by this tree's render_bench."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", _WORKER, str(tree), str(HERE / "tui" / "render_bench.py"),
                          str(users), str(frames)], capture_output=True, text=True, env=env, cwd=tree, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(base: Path, users: list[int], frames: int, repeats: int) -> dict[str, Any]:
    """Median figures per tree and crowd over `repeats` alternating runs."""
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    load = [os.getloadavg()[0]]
    for rep in range(repeats):
        order = [("base", base), ("current", HERE)]
        for name, tree in order if rep % 2 == 0 else order[::-1]:
            for n in users:
                runs.setdefault((name, n), []).append(measure(tree, n, frames))
    load.append(os.getloadavg()[0])
    out: dict[str, Any] = {"frames": frames, "repeats": repeats, "load_avg_before_after": load, "rows": []}
    for n in users:
        row: dict[str, Any] = {"users": n, "config": runs[("current", n)][0]["config"]}
        for name in ("base", "current"):
            row[name] = {k: round(statistics.median(r[k] for r in runs[(name, n)]), 3) for k in KEYS}
        out["rows"].append(row)
    return out


def main() -> int:
    """Parse, measure, print."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base", type=Path)
    p.add_argument("--users", type=int, nargs="+", default=[1000, 10_000])
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    res = compare(args.base.resolve(), args.users, args.frames, args.repeats)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"{res['frames']} frames, median of {res['repeats']} runs each; load average"
          f" {res['load_avg_before_after'][0]:.1f} -> {res['load_avg_before_after'][1]:.1f}")
    for row in res["rows"]:
        print(row["config"])
        for name in ("base", "current"):
            r = row[name]
            print(f"  {name:8s} CPU ms per frame p50 {r['frame_ms_p50']:6.2f}  p99 {r['frame_ms_p99']:6.2f}"
                  f"  mean {r['frame_ms_mean']:6.2f}  publish p50 {r['publish_ms_p50']:5.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
