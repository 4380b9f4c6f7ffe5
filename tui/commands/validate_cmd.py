"""`tokensim validate`: every row of the shipped measured speed tables, predicted beside measured."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from engine.errors import InputError
from engine.evidence.replay import TABLE as SERVING_TABLE
from engine.evidence.replay import TABLE_TITLE as SERVING_TITLE
from engine.evidence.validate import TABLE_FILES, TABLE_TITLES, report, subset_stats
from engine.numbers import fixed
from engine.physics.calibration import load_runtime
from tui.commands.options import console, print_json

# The fidelity targets (median / max absolute percent error), shown beside the figures.
TARGETS = {"qwen25 vllm BF16 median": 8.0, "qwen25 median": 15.0, "trtllm median": 20.0, "row max": 35.0}
# Issue 15's targets on the vLLM v0.15 campaign (median over experiments of |err| of the whole-run mean).
SERVING_TARGETS = {"e2e": 8.0, "itl": 8.0, "ttft": 20.0}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """--table, --runtime-override, --json."""
    p.add_argument("--table", default=None, metavar="NAME",
                   help=f"one table only: {', '.join([*TABLE_FILES, SERVING_TABLE])} (default: all)")
    p.add_argument("--runtime-override", default=None, metavar="NAME",
                   help="price every row with this runtime profile instead of the row's own framework's")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    """Print (or dump as JSON) the validation report; bad names raise InputError (one line, exit 2)."""
    if args.runtime_override is not None:
        load_runtime(args.runtime_override)  # an unknown name is an InputError (one line, exit 2)
    if args.table is not None and not args.table.strip():  # an empty name is a mistake, not "every table"
        raise InputError(f"--table needs a name: one of {', '.join([*TABLE_FILES, SERVING_TABLE])}"
                         " (leave --table out for every table)")
    out = report([args.table] if args.table is not None else None, args.runtime_override)
    if args.json:
        print_json(out)
        return 0
    for t in out["tables"]:
        if t["name"] == SERVING_TABLE:
            _print_serving(t, args.runtime_override)
        else:
            _print_table(t, args.runtime_override)
    return 0


def _coverage_line(t: dict[str, Any]) -> str:
    """How many rows fall inside their profile's 80 % error band, held in (the fit's rows) and held out."""
    c = t.get("coverage")
    if c is None:
        return f"{t['name']}: no error band recorded for its profiles"

    def part(x: dict[str, Any]) -> str:
        return f"{x['inside']}/{x['n']} ({fixed(x['fraction'], 100, 0, ' %')})"

    lo, hi = c["expected"]
    out = (f"{t['name']}: inside the 80 % error band ({c['metric']}): held in {part(c['held_in'])}, expected "
           f"{100 * lo:.0f}-{100 * hi:.0f} %")
    return out + (f"; held out {part(c['held_out'])}" if c["held_out"] else "")


def _print_serving(t: dict[str, Any], override: str | None) -> None:
    """The vLLM v0.15 campaign: per experiment the measured and predicted means, then the median errors."""
    con = console()
    title = SERVING_TITLE + (f" · priced as {override}" if override else "")
    tab = Table(title=title, header_style="bold", show_edge=False, pad_edge=False)
    for c in ("exp", "model", "tp", "workload", "req/s"):
        tab.add_column(c, no_wrap=True)
    for k in ("TTFT ms", "ITL ms", "E2E s"):
        tab.add_column(f"{k} meas→pred", justify="right", no_wrap=True)
    for r in t["rows"]:
        cells = [str(r["exp_id"])[:8], r["sim"]["model"], str(r["tp"]), r["workload"], r["stage_rates_rps"]]
        for k, scale in (("ttft", 1.0), ("itl", 1.0), ("e2e", 1e-3)):
            m = r[k]
            cells.append(f"{m['measured_ms'] * scale:.1f}→{m['predicted_ms'] * scale:.1f} "
                         f"[{_err_style(m['err_pct'])}]{m['err_pct']:+.0f}%[/]")
        if r["sim"]["saturated"]:
            cells[3] += " [red]saturated[/]"
        tab.add_row(*cells)
    con.print(tab)
    parts = [f"{k.upper()} {fixed(t[f'{k}_median_abs_err_pct'], unit=' %')} (≤ {v:g})"
             for k, v in SERVING_TARGETS.items()]
    con.print(f"{t['name']}: median |err| over {len(t['rows'])} experiments: " + ", ".join(parts)
              + f"; saturated: {t['saturated']}")
    for r in t["unrepresented"]:
        con.print(f"not replayed: {r['exp_id']} {r['model']}: {r['reason']}")
    con.print(_coverage_line(t), highlight=False)
    con.print()


def _err_style(e: float) -> str:
    """Colour of an error: green within 15 %, yellow within 35 % (the per-row target), red beyond."""
    a = abs(e)
    return "green" if a <= 15 else ("yellow" if a <= 35 else "red")


def _print_table(t: dict[str, Any], override: str | None) -> None:
    """One measured table: its rows, the error statistics, the held-out split, the unrepresented rows."""
    con = console()
    qwen = t["name"] == "qwen25"
    title = TABLE_TITLES[t["name"]] + (f" · every row priced as {override}" if override else "")
    tab = Table(title=title, header_style="bold", show_edge=False)
    cols = (["model", "framework", "quant", "GPUs", "input"] if qwen
            else ["model", "GPU", "parallel", "prec.", "isl/osl", "batch/GPU"])
    for c in cols:
        tab.add_column(c, no_wrap=True)
    for c in ("measured", "predicted", "err", "split"):
        tab.add_column(c, justify="right", no_wrap=True)
    tab.add_column("step model (profile, parallel, dtypes, notes)", style="dim")
    for r in t["rows"]:
        sim = r["sim"]
        if qwen:
            lead = [r["model"].replace("-Instruct", ""), r["framework"], r["quant"], r["gpus"], r["input_len"]]
        else:
            lead = [r["model"], r["gpu"], r["parallel"], r["precision"], f"{r['isl']}/{r['osl']}",
                    str(sim["batch_per_gpu"])]
        cond = f"{sim['runtime']} {'ep' if sim['ep'] > 1 else 'tp'}{max(sim['ep'], sim['tp'])}"
        cond += f" w {sim['weight_dtype']}" + (f"/{sim['expert_dtype']}" if sim["expert_dtype"] else "")
        cond += f" kv {sim['kv_dtype']}"
        if r["sim_notes"]:
            cond += " · " + "; ".join(r["sim_notes"])
        e = r["err_pct"]
        tab.add_row(*lead, f"{r['measured']:,.2f}", f"{r['predicted']:,.2f}", f"[{_err_style(e)}]{e:+.1f} %[/]",
                    r["split"], cond)
    con.print(tab)
    s = Table(title=f"{t['name']}: |predicted - measured| / measured", header_style="bold", show_edge=False)
    for c in ("rows", "n", "median |err|", "max |err|", "issue target (median)"):
        s.add_column(c, justify="right" if c != "rows" else "left")
    test = [r for r in t["rows"] if r["split"] == "test"]
    lines: list[tuple[str, int, dict[str, float | None], str]] = [
        ("all represented", len(t["rows"]), {"median_abs_err_pct": t["median_abs_err_pct"],
                                             "max_abs_err_pct": t["max_abs_err_pct"]},
         fixed(TARGETS["qwen25 median" if qwen else "trtllm median"], unit=" %")),
        ("held-out (test split, never fitted)", len(test), t["heldout"], "-"),
    ]
    if qwen:
        for label, match, target in (("vLLM BF16", {"framework": "vllm", "quant": "BF16"}, "qwen25 vllm BF16 median"),
                                     ("vLLM", {"framework": "vllm"}, ""),
                                     ("transformers", {"framework": "transformers"}, "")):
            n = sum(1 for r in t["rows"] if all(r[k] == v for k, v in match.items()))
            goal = fixed(TARGETS[target], unit=" %") if target else "-"
            lines.append((label, n, subset_stats(t["rows"], **match), goal))
    for label, n, st, target in lines:
        s.add_row(label, str(n), fixed(st["median_abs_err_pct"], unit=" %"),
                  fixed(st["max_abs_err_pct"], unit=" %"), target)
    con.print(s)
    over = sum(1 for r in t["rows"] if abs(r["err_pct"]) > TARGETS["row max"])
    con.print(f"rows worse than {TARGETS['row max']:.0f} % (the issue's per-row target): {over}")
    if t["unrepresented"]:
        u = Table(title=f"{t['name']}: rows the step model cannot represent", header_style="bold", show_edge=False)
        u.add_column("row")
        u.add_column("reason")
        for r in t["unrepresented"]:
            u.add_row(" · ".join(str(r.get(k, "")) for k in ("model", "framework", "gpu", "quant", "precision")
                                 if r.get(k)), r["reason"])
        con.print(u)
    else:
        con.print(f"every row of {t['name']} is represented (none left out)")
    con.print(_coverage_line(t), highlight=False)
    con.print()
