"""Start-up: CPU seconds of `tokensim run --requests 1 --json`, this tree against a base tree, in one run.

    python benchmarks/startup_vs_base.py BASE_TREE [--repeats 11] [--source]

Issue 26's start-up target: a plain run no slower than the build it starts from. Each measurement is a fresh
process (PYTHONPATH = the tree) whose user + system CPU time is read from the OS; base and current alternate and
the order flips every repeat, so the shared machine's load lands on both; the report gives medians and minima.
By default bytecode is cached (under a temporary PYTHONPYCACHEPREFIX, warmed by an unreported first round), as
an installed copy starts; --source compiles every module from source each time (PYTHONDONTWRITEBYTECODE), which
adds the cost of the trees' source sizes. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
ARGS = ["-m", "tui.cli", "run", "--requests", "1", "--json"]


def cpu_of(tree: Path, env: dict[str, str]) -> float:
    """User + system CPU seconds of one `run --requests 1` in a fresh interpreter on `tree`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, *ARGS], cwd=tree, env={**env, "PYTHONPATH": str(tree)},
                   stdout=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> int:
    """Measure both trees, interleaved, and print one line each."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--source", action="store_true", help="no cached bytecode: compile every module each time")
    a = ap.parse_args()
    trees = [a.base.resolve(), HERE]
    with tempfile.TemporaryDirectory(prefix="startup-pyc-") as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if a.source:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = cache  # the trees themselves are left as they are
        cpu: dict[Path, list[float]] = {t: [] for t in trees}
        for i in range(a.repeats + 1):
            for t in trees if i % 2 == 0 else trees[::-1]:
                s = cpu_of(t, env)
                if i:  # round 0 warms the bytecode cache and the file system
                    cpu[t].append(s)
    mode = "compiled from source" if a.source else "bytecode cached"
    for name, t in (("base", trees[0]), ("current", trees[1])):
        print(f"{name:8} {statistics.median(cpu[t]):.3f} CPU s median, {min(cpu[t]):.3f} min"
              f" ({a.repeats} runs, {mode}): {t}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
