"""`tokensim calibrate RESULT... -o FILE.toml`: fit the runtime profile's physical constants (sustained bandwidth
and compute fractions, fixed step cost, the request path) to the user's own measured runs; `--runtime-file FILE`
then uses the profile in run, plan, step, replay and the app."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import replace
from pathlib import Path

from rich.table import Table

from engine import options as O
from engine.errors import InputError
from engine.evidence.measured import campaign
from engine.evidence.measured.calibrate import CAMPAIGN_FIT, DEFAULT_FIT, FIT, calibrate, medians, toml_text
from engine.evidence.measured.formats import read_result
from engine.files import write_text_atomic
from engine.physics.calibration import load_runtime
from tui.commands import progress, replay_cmd
from tui.commands.options import console, print_json, versioned


def add_arguments(p: argparse.ArgumentParser) -> None:
    """RESULT..., -o, --name, --fit, --no-cross-validate, then replay's options (run's: the deployment)."""
    p.add_argument("results", metavar="RESULT", nargs="+", help="measured results (any format replay reads)")
    p.add_argument("-o", "--output-file", metavar="FILE.toml", required=True, help="where to write the profile")
    p.add_argument("--name", default="my-cluster", help="the profile's name (default my-cluster)")
    p.add_argument("--fit", default=None,
                   help=f"constants to fit, of {', '.join(FIT)} (default {','.join(DEFAULT_FIT)}; on a vLLM v0.15 "
                        f"campaign table {','.join(CAMPAIGN_FIT)})")
    p.add_argument("--blank", action="store_true",
                   help="start every fitted constant from the search's neutral start (engine.evidence.fit.START), "
                        "not the --runtime profile's value")
    p.add_argument("--no-cross-validate", action="store_true", help="skip leave-one-out (faster)")
    p.add_argument("--folds", default=None, metavar="K",
                   help="cross-validate by K folds of experiments (2-10; each fold fitted on the others) instead of "
                        "leaving one row out; a campaign table is cross-validated only with --folds (each fold is a "
                        "fit of its own: CPU minutes)")
    replay_cmd.add_engine_arguments(p)


def run(args: argparse.Namespace) -> int:
    """Read every file, check them against the flags, fit, write the profile, print its record."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.name):
        raise InputError(f"--name {args.name!r}: letters, digits, '-', '_' and '.' only")
    out = Path(args.output_file)
    folds = _folds(args.folds)
    if out.is_dir() or not out.parent.exists():
        raise InputError(f"-o {out}: not a writable file path")
    tables = [r for r in args.results if args.format is None and campaign.is_campaign(r)]
    records = [read_result(r, args.format) for r in args.results if r not in tables]
    for m in records:
        replay_cmd.check(args, m)
    fit = args.fit or ",".join(CAMPAIGN_FIT if tables else DEFAULT_FIT)
    names = [n.strip() for n in fit.split(",") if n.strip()]
    base = O.config_from(_any_load(args))
    start = load_runtime(base.runtime)
    if args.blank:
        from engine.evidence.fit import START

        start = replace(start, request_overhead_s=0.0, **{n: START[n] for n in names if n in START})
    doing = [f"fitting {', '.join(names)} to {len(records) + len(tables)} result file(s)"]

    def said(line: str) -> None:  # the fit's own progress: shown unless --quiet, and the heartbeat's status
        doing[0] = line
        if not args.quiet:
            _progress(line)
    with progress.heartbeat("calibrate", lambda: doing[0], progress.wanted(args.quiet)):
        res = calibrate(records, base, start, names, not args.no_cross_validate, tables, said, folds)
    write_text_atomic(out, toml_text(args.name, res), "-o", [*args.results, getattr(args, "runtime_file", None)])
    if args.json:
        rt = res["runtime"]
        print_json(versioned({"command": "calibrate", "output_file": str(out), "name": args.name,
                              "constants": {n: getattr(rt, n) for n in (*res["fitted"], "request_overhead_s")},
                              **{k: res[k] for k in ("fitted", "loss", "standard_error", "rows", "fixed_by",
                                                     "held_out")},
                              "median_abs_err_pct": {"fitted": medians(res["rows"]),
                                                     "held_out": medians(res["held_out"])},
                              "band": {k: list(v) for k, v in res["band"].err.items()}}))
        return 0
    _print(args.name, out, res)
    return 0


def _folds(text: str | None) -> int | None:
    """--folds K: a whole number from 2 to 10 (None: not given)."""
    if text is None:
        return None
    if not text.isdigit() or not 2 <= int(text) <= 10:
        raise InputError(f"--folds {text!r}: a whole number from 2 to 10")
    return int(text)


def _progress(line: str) -> None:
    """A fit's progress, on stderr (stdout carries the record, or --json)."""
    print(f"calibrate: {line}", file=sys.stderr, flush=True)


def _any_load(args: argparse.Namespace) -> argparse.Namespace:
    """run's options with a placeholder open loop, so they make a config; each file's own requests replace it."""
    ns = argparse.Namespace(**vars(args))
    ns.rate = 1.0
    return ns


def _print(name: str, out: Path, res: dict) -> None:
    """The constants, the rows that fixed each, and each row's error fitted and held out."""
    con = console()
    rt = res["runtime"]
    con.print(f"[bold]{name}[/] written to {out}: " + ", ".join(
        f"{n} {getattr(rt, n):.4g}" for n in (*res["fitted"], "request_overhead_s")))
    for n, rows in res["fixed_by"].items():
        con.print(f"  {n} fixed by: {', '.join(rows) or 'none'}")
    t = Table(header_style="bold", show_edge=False, title="error % of mean TTFT / ITL / E2E", title_justify="left")
    for c in ("row", "fitted", "held out"):
        t.add_column(c, justify="left" if c == "row" else "right")
    for k, e in res["rows"].items():
        h = (res["held_out"] or {}).get(k)
        t.add_row(k, " ".join(f"{x:+.1f}" for x in e), "-" if h is None else " ".join(f"{x:+.1f}" for x in h))
    con.print(t)
    for what, errs in (("fitted", res["rows"]), ("held out", res["held_out"])):
        m = medians(errs)
        if m is not None:
            con.print(f"median |error| {what} ({len(errs)} rows): TTFT {m[0]:.2f} %, ITL {m[1]:.2f} %, "
                      f"E2E {m[2]:.2f} %")
