"""`tokensim run --json` byte for byte, this tree against a base tree, on twenty varied configurations.

    python benchmarks/same_json.py BASE_TREE [--only N ...]

A speed change to the serving loop must not move a single figure: this runs each configuration below in a
fresh process per tree (PYTHONPATH = the tree) and compares stdout bytes. Paths in the configurations are
relative to each tree. A check for refactors, not a test (it runs for a minute or two); exit code 1 on any
difference, with the first differing line. The report's top-level "schema_version" line is left out of the
comparison: it versions the report's shape, not a figure, and bases before it have none; so is the top-level
"interval" (the error bars of engine/evidence/bands.py, new fields beside unchanged figures): both outputs are then
parsed and re-printed with the same dumper, key order and every number's repr kept, so any other change shows.

`--rel-tol KEY=TOL` (repeatable) lets the numbers at KEY (a dotted path suffix such as `itl_s.mean`, matched at
any depth) differ from the base's by a relative TOL; each such difference is counted and printed, and every other
byte must still match. For a documented change of accumulation (issue 26: the ITL mean summed exactly, so its
last digits moved once), never for a speed change.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
_ADDED = "interval"  # keys a tree may add that a base lacks (see the docstring)
_VERSION = re.compile(rb'^  "schema_version": \d+,\n', re.MULTILINE)  # tui.commands.options.SCHEMA_VERSION's line

CONFIGS: list[list[str]] = [
    # closed loop, continuous (the defaults)
    ["--users", "64", "--requests", "400"],
    # `tokensim bench`'s engine configuration, to a request bound
    ["--model", "qwen2.5-14b", "--users", "1000", "--prompt", "512", "--output", "256", "--max-batch", "256",
     "--requests", "2500"],
    # open loop, chunked prefill
    ["--rate", "6", "--requests", "300", "--scheduler", "chunked", "--max-batched-tokens", "2048"],
    # static batching
    ["--users", "32", "--requests", "200", "--scheduler", "static"],
    # KV pressure: preemptions and recompute, with the latency split
    ["--users", "200", "--kv-blocks", "3000", "--requests", "600", "--explain"],
    # hidden thinking and think time
    ["--users", "64", "--think", "uniform:50,300", "--think-time", "2", "--requests", "300"],
    # MoE
    ["--model", "qwen3-30b-a3b", "--users", "48", "--requests", "250"],
    # a trace
    ["--trace", "engine/presets/traces/azure-conv-sample.csv", "--requests", "300"],
    # speculative decoding
    ["--users", "32", "--spec-tokens", "3", "--spec-accept", "0.7", "--requests", "200"],
    # a workload file (stages, shared prefix) with prefix caching
    ["--workload", "scenes/workloads/shared-system-prompt.toml", "--prefix-caching", "on", "--requests", "150"],
    # a fast lane, an SLO, open loop with varied lengths
    ["--users", "64", "--fast-share", "0.25", "--slo-ttft", "0.5", "--requests", "300"],
    ["--rate", "20", "--prompt", "lognormal:800,0.8", "--output", "exp:200", "--requests", "500", "--seed", "3"],
    # lengths clipped to the context (prompt, hidden thinking and answer pulled down)
    ["--users", "32", "--prompt", "uniform:100,4000", "--output", "uniform:100,2000", "--think", "300",
     "--max-model-len", "2048", "--requests", "300"],
    # a fleet
    ["--users", "96", "--replicas", "2", "--router", "least-loaded", "--requests", "300"],
    # a fleet on a workload file's stages, with the latency split (bases before ea73ca2 split its TTFT with a 0 s
    # request path: this one differs from them in "path" and the split's total only)
    ["--workload", "scenes/workloads/shared-system-prompt.toml", "--replicas", "2", "--router", "prefix-aware",
     "--prefix-caching", "on", "--requests", "150", "--explain"],
    # prefill/decode disaggregation
    ["--users", "96", "--pd", "1:2", "--requests", "300"],
    # open-loop fleets on the fast loops: round-robin dealt ahead (past PARALLEL_MIN_REQUESTS, so in a process
    # pool with --workers 2), kv-aware and least-loaded on the lazy loop
    ["--rate", "40", "--prompt", "lognormal:600,0.8", "--output", "exp:150", "--replicas", "3", "--router",
     "round-robin", "--requests", "6000", "--workers", "2"],
    ["--rate", "12", "--prompt", "lognormal:1000,0.8", "--output", "lognormal:200,0.8", "--replicas", "3",
     "--router", "kv-aware", "--requests", "800"],
    ["--rate", "12", "--prompt", "lognormal:1000,0.8", "--output", "lognormal:200,0.8", "--replicas", "4",
     "--router", "least-loaded", "--kv-blocks", "4000", "--requests", "800"],
    # a closed-loop round-robin fleet (the event-ordered loop)
    ["--users", "64", "--replicas", "3", "--router", "round-robin", "--requests", "300"],
]


def _tolerate(mine: Any, base: Any, tols: dict[str, float], path: str, seen: list[str]) -> Any:
    """`mine` with each number at a tolerated path replaced by the base's when within its relative tolerance
    (so the re-printed texts compare equal there); the paths replaced are added to `seen`."""
    if isinstance(mine, dict) and isinstance(base, dict):
        return {k: _tolerate(v, base.get(k), tols, f"{path}.{k}", seen) if k in base else v for k, v in mine.items()}
    if isinstance(mine, list) and isinstance(base, list) and len(mine) == len(base):
        return [_tolerate(x, y, tols, f"{path}[{i}]", seen) for i, (x, y) in enumerate(zip(mine, base, strict=True))]
    nums = (int, float)
    if isinstance(mine, nums) and isinstance(base, nums) and mine != base and not isinstance(mine, bool):
        tol = next((t for k, t in tols.items() if path.endswith("." + k) or re.sub(r"\[\d+\]", "", path).endswith(
            "." + k)), None)
        if tol is not None and abs(mine - base) <= tol * max(abs(mine), abs(base)):
            seen.append(f"{path[1:]}: {mine!r} vs {base!r}")
            return base
    return mine


def _dump(d: Any) -> bytes:
    """The re-printed report (the same dumper for both trees)."""
    return (json.dumps(d, indent=2, ensure_ascii=False) + "\n").encode()


def run(tree: Path, args: list[str]) -> bytes:
    """stdout of `tokensim run ARGS --json` in `tree` (raises with stderr on failure)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    p = subprocess.run([sys.executable, "-m", "tui.cli", "run", *args, "--json"], cwd=tree, env=env,
                       capture_output=True, check=False)
    if p.returncode:
        raise SystemExit(f"{tree}: run {' '.join(args)} exited {p.returncode}: {p.stderr.decode()[-400:]}")
    out = _VERSION.sub(b"", p.stdout, count=1)
    if b'\n  "interval": ' not in out:
        return out
    d = json.loads(out)
    d.pop(_ADDED, None)
    return _dump(d)


def main() -> int:
    """Compare every configuration; print one line each; 1 if any differs."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("--only", type=int, nargs="*", help="configuration numbers to run (default all)")
    ap.add_argument("--rel-tol", action="append", default=[], metavar="KEY=TOL",
                    help="numbers at KEY (a dotted path suffix, e.g. itl_s.mean) may differ by relative TOL")
    a = ap.parse_args()
    tols = {k: float(v) for k, _, v in (x.partition("=") for x in a.rel_tol)}
    bad = 0
    for i, args in enumerate(CONFIGS):
        if a.only and i not in a.only:
            continue
        mine, base = run(HERE, args), run(a.base.resolve(), args)
        seen: list[str] = []
        if tols and mine != base:
            mine, base = _dump(_tolerate(json.loads(mine), json.loads(base), tols, "", seen)), _dump(json.loads(base))
        same = mine == base
        bad += not same
        word = "same" if not seen else f"same but {len(seen)} tolerated"
        print(f"{i:2d} {word if same else 'DIFFERS'} ({len(mine)} bytes)  {' '.join(args)}", flush=True)
        for x in seen[:4]:
            print(f"   tolerated {x}")
        if not same:
            print_first_difference(mine, base)
    return 1 if bad else 0


def print_first_difference(mine: str, base: str) -> None:
    """The first line where two outputs differ, both sides cut to 160 characters (plan_same_json.py uses it too)."""
    for x, y in zip(mine.splitlines(), base.splitlines(), strict=False):
        if x != y:
            print(f"   this: {x[:160]!r}\n   base: {y[:160]!r}")
            return


if __name__ == "__main__":
    sys.exit(main())
