"""`tokensim plan` byte for byte, this tree against a base tree: the JSON report and the Rich table of small grids.

    python benchmarks/plan_same_json.py BASE_TREE [--only N ...] [--table]

A change to how plan runs its grid (which points it simulates, in what order, on which workers) must not move a
single figure of the report. This runs each grid below (about 20-30 points each, a few seconds) in a fresh process
per tree (PYTHONPATH = the tree) and compares stdout bytes. Left out of the comparison: the report's wall seconds
(the JSON's top-level "wall_s", the table's "· 12.3 s" on its second line) and the JSON's "schema_version" line
(it versions the report's shape). With --table the Rich report is compared too, at a fixed width. Exit code 1 on
any difference, with the first differing line. A check for plan's refactors, not a test.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from same_json import print_first_difference  # (benchmarks/, this script's own folder, is on sys.path)

HERE = Path(__file__).resolve().parent.parent
_VERSION = re.compile(rb'^  "schema_version": \d+,\n', re.MULTILINE)
_WALL_JSON = re.compile(rb'^  "wall_s": [0-9.e+-]+,\n', re.MULTILINE)
# "· 12.3 s" ending the table's second line (a UTF-8 middle dot; Rich may wrap the line before the "s")
_WALL_TABLE = re.compile(rb" \xc2\xb7 [0-9.]+ ?\n?s *\n")

LENGTHS = ["--prompt", "lognormal:1000,0.8", "--output", "lognormal:200,0.8"]
GRIDS: list[list[str]] = [
    # the bench grid's shape (tui/commands/fleet_bench.py grid_space): GPUs x tp x replicas x batch caps x routers
    ["--hardware", "h100-sxm,l40s", "--tp", "1,2", "--replicas", "1,3", "--max-num-seqs", "64,256", "--router",
     "round-robin,least-loaded,kv-aware", "--rate", "2", "--requests", "300", *LENGTHS, "--slo-ttft", "0.5",
     "--slo-tpot", "0.05"],
    # replicas a light load never reaches (least-loaded and kv-aware fill the lowest idle replica first), every router
    ["--hardware", "b200", "--tp", "4", "--replicas", "1-8", "--router", "all", "--rate", "1", "--requests", "200",
     *LENGTHS, "--slo-ttft", "0.3"],
    # prunes (weights over memory, heads over tp, the budget), P:D splits and autoscaling beside plain replicas
    ["--model", "qwen2.5-72b", "--hardware", "l40s,h100-sxm", "--tp", "1,2,4", "--replicas", "2,4", "--pd", "1:1,1:3",
     "--autoscale", "1:3", "--router", "least-loaded", "--rate", "3", "--requests", "200", *LENGTHS,
     "--slo-tpot", "0.08", "--budget-per-hour", "60"],
    # nothing meets the SLOs (the binding report), with energy figures
    ["--hardware", "a100-80g,h200", "--tp", "1,2", "--replicas", "1,2", "--router", "round-robin,kv-aware",
     "--rate", "4", "--requests", "200", *LENGTHS, "--slo-ttft", "0.02", "--energy"],
]


def run(tree: Path, args: list[str], table: bool) -> tuple[int, bytes]:
    """(exit code, stdout less the wall seconds) of `tokensim plan ARGS` in `tree`, with --json unless `table`."""
    env = dict(os.environ, PYTHONPATH=str(tree), COLUMNS="250", TERM="dumb")
    cmd = [sys.executable, "-m", "tui.cli", "plan", *args, "--workers", "1", "--quiet", *([] if table else ["--json"])]
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, check=False)
    if p.returncode not in (0, 2):  # 2: nothing met the SLOs (the report is still printed with --json)
        raise SystemExit(f"{tree}: plan {' '.join(args)} exited {p.returncode}: {p.stderr.decode()[-400:]}")
    out = _WALL_TABLE.sub(b"\n", p.stdout, count=1) if table else \
        _WALL_JSON.sub(b"", _VERSION.sub(b"", p.stdout, count=1), count=1)
    return p.returncode, out + (p.stderr if p.returncode else b"")


def main() -> int:
    """Compare every grid (JSON, and with --table the Rich report); one line each; 1 if any differs."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("--only", type=int, nargs="*", help="grid numbers to run (default all)")
    ap.add_argument("--table", action="store_true", help="also compare the Rich report")
    a = ap.parse_args()
    bad = 0
    for i, args in enumerate(GRIDS):
        if a.only and i not in a.only:
            continue
        for table in (False, True) if a.table else (False,):
            (rc, mine), (rc_base, base) = run(HERE, args, table), run(a.base.resolve(), args, table)
            same = mine == base and rc == rc_base
            bad += not same
            what = "table" if table else "json"
            print(f"{i:2d} {what:5s} {'same' if same else 'DIFFERS'} ({len(mine)} bytes, exit {rc})  {' '.join(args)}",
                  flush=True)
            if not same:
                print_first_difference(mine, base)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
