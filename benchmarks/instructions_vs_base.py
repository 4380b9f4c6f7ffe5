"""Instructions a `tokensim run` executes, this tree against a base tree, counted by valgrind (callgrind).

    python benchmarks/instructions_vs_base.py BASE_TREE [--requests 300] [-- RUN ARGS...]

CPU seconds on a shared 2-core machine move by 10 % from one run to the next with the load; an instruction count
moves less (with PYTHONHASHSEED fixed, ~1 % at a few thousand requests; up to ~5 % between counts of 1,000
requests were seen, as memos keyed by object ids hash differently from run to run): it is the steadier figure for
a change of a few per cent (repeat it, and prefer more requests, below ~5 %), and a good proxy for CPU time in this
interpreter-bound loop. Each tree runs the same `run` arguments twice in a fresh interpreter under callgrind, once
with 1 request and once with --requests N, after one run outside valgrind (bytecode cached for both); the
difference is the run's own work (imports and start-up cancel out). Needs valgrind (Debian's package); about 20 s
a count. A fleet (`-- --replicas 8 --router least-loaded ...`) is counted too, its replicas in the one process
callgrind follows. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
DEFAULT_RUN = ["--rate", "2", "--prompt", "lognormal:1000,0.8", "--output", "lognormal:200,0.8"]

# Builds the simulator from the tree's own parser (a fleet for --replicas, --pd or --autoscale, its replicas in this
# one process: callgrind counts one process) and runs it to the request bound (as speed_vs_base.py's run row).
_WORKER = r"""
import sys
sys.path.insert(0, sys.argv[1])
from tui.cli import build_parser
from tui.commands import run_cmd
from engine.serving.engine import Engine
argv = ["run", *sys.argv[2:]]
args = build_parser(argv).parse_args(argv)
cfg = run_cmd.config_from_args(args)
spec = run_cmd.fleet_spec(args, cfg) if hasattr(run_cmd, "fleet_spec") else None
if spec is None or spec.single:
    e = Engine(cfg)
else:
    from engine.fleet.fleet import Fleet
    e = Fleet(spec, workers=1)
e.run()
e.metrics()
"""


def count(tree: Path, args: list[str]) -> int:
    """Instructions (callgrind's Ir) of one run of `args` on `tree`, start-up included."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c",
                          _WORKER, str(tree), *args], capture_output=True, text=True, env=env, cwd=tree, check=False)
    m = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if out.returncode or m is None:
        raise SystemExit(f"run on {tree} failed:\n{out.stderr.strip()[-2000:]}")
    return int(m.group(1))


def warm(tree: Path, args: list[str]) -> None:
    """One run outside valgrind first, so both counted runs find the tree's bytecode cached: a source file changed
    since its last run (another checkout at work on the same tree) is compiled there, and compiling it inside only
    one of the two counted runs moved their difference by hundreds of millions, even below zero."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
    subprocess.run([sys.executable, "-c", _WORKER, str(tree), *args], capture_output=True, env=env, cwd=tree,
                   check=False)


def main() -> int:
    """Count both trees and print the run's instructions per request and the ratio."""
    argv = sys.argv[1:]
    run_args = argv[argv.index("--") + 1:] if "--" in argv else DEFAULT_RUN
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path, help="the base tree (a checkout of the commit to compare with)")
    ap.add_argument("--requests", type=int, default=300)
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if shutil.which("valgrind") is None:
        print("instructions_vs_base: valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    if not (args.base / "engine").is_dir():
        print(f"instructions_vs_base: {args.base} has no engine/ package", file=sys.stderr)
        return 2
    got = {}
    for name, tree in (("base", args.base.resolve()), ("current", HERE)):
        warm(tree, [*run_args, "--requests", "1"])
        one = count(tree, [*run_args, "--requests", "1"])
        full = count(tree, [*run_args, "--requests", str(args.requests)])
        got[name] = full - one
        print(f"{name:8} {got[name] / 1e6:8,.0f} M instructions, {got[name] / args.requests / 1e3:7,.0f} k a request"
              f"  ({tree})")
    print(f"run {' '.join(run_args)} --requests {args.requests}: current / base = {got['current'] / got['base']:.3f}"
          f" ({got['base'] / got['current']:.2f}x fewer)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
