"""CPU time of StepModel.price alone, this tree against a base tree, over batch records taken from real runs.

    python benchmarks/bench_price.py BASE_TREE [--repeats 5] [--rounds 3]

Records every Batch the step model prices in a few `tokensim run`s (this tree's engine; the records do not depend
on the pricing code), pickles them with each run's (hardware, model, options), then times pricing the whole
recording in fresh interpreters of the base tree and of this one, alternating, CPU time (time.process_time),
median of the repeats; each pass prices with a fresh StepModel, as a run does (nothing remembered between
passes), and reads each record's flops_total and bytes_total, as the serving loop does after every price. Workloads:
  rate1: run --model llama-3.1-8b --rate 1 --requests 500 (quiet decode runs: many k-step run records)
  plan:  run --rate 2 --prompt lognormal:1000,0.8 --output lognormal:200,0.8 --requests 600 (a plan point's shape)
  moe:   run --model qwen3-30b-a3b --users 48 --requests 100
A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from speed_vs_base import worker_json  # (benchmarks/, this script's own folder, is on sys.path)

HERE = Path(__file__).resolve().parent.parent
WORKLOADS = {
    "rate1": ["run", "--model", "llama-3.1-8b", "--rate", "1", "--requests", "500"],
    "plan": ["run", "--rate", "2", "--prompt", "lognormal:1000,0.8", "--output", "lognormal:200,0.8",
             "--requests", "600"],
    "moe": ["run", "--model", "qwen3-30b-a3b", "--users", "48", "--requests", "100"],
}

# Times pricing a recording inside a fresh interpreter whose sys.path starts with the tree under test.
_WORKER = r"""
import json, pickle, sys, time
tree, path, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, tree)
import engine
assert engine.__file__.startswith(tree), engine.__file__
from engine.physics.batch import Batch
from engine.physics.step import StepModel
with open(path, "rb") as f:
    rec = pickle.load(f)
out = {}
for name, (hw, model, opts, rows) in rec.items():
    batches = []
    for fields, same in rows:
        b = Batch(*fields)
        batches.append(b._replace(attn_decode=b.attn_full) if same else b)
    warm = StepModel(hw, model, opts)
    for b in batches[:200]:  # warm-up (code paths, not a step model's memo: each round prices with a fresh one)
        warm.price(b)
    cpu = 0.0
    for _ in range(rounds):
        price = StepModel(hw, model, opts).price
        c0 = time.process_time()
        for b in batches:
            p = price(b)
            p.flops_total, p.bytes_total  # read after every price (Lane.account, steps.jump)
        cpu += time.process_time() - c0
    out[name] = cpu / rounds
print(json.dumps(out))
"""


def record(argv: list[str]) -> tuple[Any, Any, Any, list[tuple[tuple[Any, ...], bool]]]:
    """Run `argv` (a tokensim run command line) on this tree's engine and return (hw, model, opts, rows): every
    batch the engine's step model priced, as (fields, attn_decode-is-attn_full), arrays copied."""
    import numpy as np

    from engine.physics import step
    from engine.serving.engine import Engine
    from tui.cli import build_parser
    from tui.commands.run_cmd import config_from_args

    rows: list[tuple[tuple[Any, ...], bool]] = []
    sms: list[Any] = []
    orig = step.StepModel.price

    def spy(self: Any, b: Any) -> Any:
        sms.append(self)
        rows.append((tuple(np.array(v) if isinstance(v, np.ndarray) else v for v in b),
                     b.attn_decode is b.attn_full))
        return orig(self, b)

    step.StepModel.price = spy  # type: ignore[method-assign]
    try:
        cfg = config_from_args(build_parser(argv).parse_args(argv))
        Engine(cfg).run()
    finally:
        step.StepModel.price = orig  # type: ignore[method-assign]
    sm = sms[0]
    # the engine's main step model only (a what-if model priced elsewhere would need its own record)
    rows = [r for r, s in zip(rows, sms, strict=True) if s is sm]
    return sm.hw, sm.model, sm.opts, rows


def measure(tree: Path, path: str, rounds: int) -> dict[str, float]:
    """CPU seconds per pass over each recording on `tree`, in a fresh interpreter."""
    return worker_json(tree, _WORKER, [path, str(rounds)], "pricing")


def main() -> int:
    """Record the workloads once, then alternate base and current timings and print medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path, help="the base tree (a checkout of the commit to compare with)")
    ap.add_argument("--repeats", type=int, default=5, help="fresh-process measurements per tree (median taken)")
    ap.add_argument("--rounds", type=int, default=3, help="passes over each recording per measurement")
    args = ap.parse_args()
    if not (args.base / "engine").is_dir():  # (as speed_vs_base and instructions_vs_base check theirs)
        print(f"bench_price: {args.base} has no engine/ package; give a checkout of the base commit", file=sys.stderr)
        return 2
    sys.path.insert(0, str(HERE))
    rec = {}
    for name, argv in WORKLOADS.items():
        hw, model, opts, rows = record(argv)
        runs = sum(1 for fields, _ in rows if not isinstance(fields[2], (int, float)))
        print(f"  {name}: {len(rows):,} batch records ({runs:,} of them runs of steps)", flush=True)
        rec[name] = (hw, model, opts, rows)
    trees = {"base": args.base.resolve(), "current": HERE}
    got: dict[str, dict[str, list[float]]] = {w: {t: [] for t in trees} for w in rec}
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "batches.pickle")
        with open(path, "wb") as f:
            pickle.dump(rec, f)
        for i in range(args.repeats):
            for t in (["base", "current"] if i % 2 == 0 else ["current", "base"]):
                for w, s in measure(trees[t], path, args.rounds).items():
                    got[w][t].append(s)
    for w, by in got.items():
        mb, mc = statistics.median(by["base"]), statistics.median(by["current"])
        n = len(rec[w][3])
        print(f"{w:6} base {mb:.3f} s ({mb / n * 1e6:.1f} us/record), current {mc:.3f} s ({mc / n * 1e6:.1f} us/record)"
              f" CPU, medians of {args.repeats}: {mb / mc:.2f}x faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
