"""`tokensim replay RESULT`: run a measured benchmark's arrivals and lengths on a deployment and compare
predicted with measured TTFT, ITL and end-to-end latency (mean, p50, p90, p99), per stage where it has stages."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.table import Table

from engine import options as O
from engine.errors import InputError
from engine.evidence.measured import bench_out
from engine.evidence.measured.compare import METRICS, STATS, compare, finished, write_trace
from engine.evidence.measured.formats import formats, read_result
from engine.evidence.measured.record import Measured
from engine.evidence.replay import model_preset
from engine.numbers import fixed, json_safe
from engine.serving.accounting import T
from tui.commands import progress, run_cmd
from tui.commands.options import console, print_json, versioned

# run's workload options: a replay's requests are the file's, so these would contradict it.
_WORKLOAD = (("--users", "users"), ("--rate", "rate"), ("--trace", "trace"), ("--workload", "workload"),
             ("--requests", "requests"), ("--duration", "duration"), ("--think-time", "think_time"),
             ("--explain", "explain"), ("--trace-out", "trace_out"))
_LABELS = {"ttft": "TTFT", "itl": "ITL", "e2e": "end to end"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """RESULT and --format, then run's own options (model, GPU, tp, engine flags, fleet, --json)."""
    p.add_argument("result", metavar="RESULT",
                   help="a benchmark result or trace: vllm bench serve --save-result JSON, GuideLLM benchmarks.json,"
                        " AIPerf profile_export.jsonl, inference-perf per_request_lifecycle_metrics.json, a Mooncake"
                        " trace or BurstGPT CSV (detected by shape)")
    add_engine_arguments(p)


def add_engine_arguments(p: argparse.ArgumentParser) -> None:
    """--format, then run's own options (the deployment), with replay's defaults (calibrate shares them)."""
    p.add_argument("--format", choices=sorted(formats()), default=None, help="the RESULT's format, if not detected")
    run_cmd.add_arguments(p)
    # None: the model the file names. Chunked prefill: what vLLM's V1 engine always does (run keeps its own default).
    p.set_defaults(model=None, scheduler="chunked")


def check(args: argparse.Namespace, m: Measured) -> None:
    """Options that contradict the file (its requests, its model) are one InputError each."""
    for flag, key in _WORKLOAD:
        if getattr(args, key, None) not in (None, False):
            raise InputError(f"{flag} contradicts RESULT: replay sends the file's own requests at its own times")
    if args.prompt != O.DEFAULT_PROMPT or args.output != O.DEFAULT_OUTPUT or args.think != "0":
        raise InputError("--prompt, --output and --think contradict RESULT: replay uses the file's own lengths")
    named = m.settings.get("model")
    preset = model_preset(str(named)) if named else None
    if args.model is None:
        if preset is None:
            raise InputError(f"{m.path}: " + (f"no model preset for {named}" if named else "the file names no model")
                             + "; give --model")
        args.model = preset
    elif preset is not None and args.model != preset:
        raise InputError(f"--model {args.model} contradicts RESULT, which ran {named} ({preset}); drop --model or"
                         " give the model the file ran")


def run(args: argparse.Namespace) -> int:
    """Read RESULT, check it against the flags, replay it on the deployment and print the comparison."""
    run_cmd.check_outputs(args)
    m = read_result(args.result, args.format)
    check(args, m)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "measured-trace.csv"
        write_trace(m, path)
        args.trace, args.trace_speed = str(path), 1.0
        sim = run_cmd.build(args)
        run_cmd.check_pool(sim, args.kv_blocks, args.force)
        run_cmd.run_engine(sim, show_progress=sys.stderr.isatty() and not args.quiet,
                           log_progress=progress.wanted(args.quiet), command="replay")
    lat, times = finished(sim)
    sm = sim.step_model
    out: dict[str, Any] = {
        "command": "replay", "result": str(args.result), "format": m.format,
        "measured": m.measured, "dropped": m.dropped, "settings": m.settings,
        "deployment": {"model": sm.model.name, "hardware": sm.hw.name, "tp": sim.config.tp,
                       "runtime": sim.config.runtime, "scheduler": sim.config.scheduler},
        **compare(m, lat, times[:, T.ARRIVAL])}
    out = json_safe(out)
    if args.bench_json:  # the prediction, in vllm bench serve's own field names
        bench_out.write(args.bench_json, bench_out.from_sim(sim), [args.result, *run_cmd.run_inputs(args)])
    if args.json:
        print_json(versioned(out))
    else:
        _print(out)
    return 0


def _table(title: str, r: dict[str, Any]) -> Table:
    """Rows: each metric's mean and percentiles; columns: measured, predicted, error."""
    t = Table(header_style="bold", show_edge=False, title=title, title_justify="left")
    for c in ("", "measured", "predicted", "error"):
        t.add_column(c, justify="left" if not c else "right")
    for k in METRICS:
        for s in STATS:
            e = r[k]["err_pct"][s]
            t.add_row(f"{_LABELS[k]} {s}", fixed(r[k]["measured_s"][s], 1e3, 1, " ms"),
                      fixed(r[k]["predicted_s"][s], 1e3, 1, " ms"), "-" if e is None else f"{e:+.0f} %")
    return t


def _print(r: dict[str, Any]) -> None:
    """The Rich report: what was read, the deployment, the whole run's table and each stage's."""
    con = console()
    d = r["deployment"]
    dropped = f" ({r['dropped']:,} failed requests left out)" if r["dropped"] else ""
    con.print(f"[bold]{r['result']}[/] ({r['format']}): {r['requests']['measured']:,} requests{dropped}")
    con.print(f"replayed on [bold]{d['model']}[/] on [bold]{d['hardware']}[/] x{d['tp']} · {d['scheduler']}:"
              f" {r['requests']['predicted']:,} finished")
    if not r["measured"]:
        con.print("note: a trace has no measured latencies; only the predictions are shown")
    con.print(_table("predicted vs measured", r))
    for s in r.get("stages", []):
        con.print(_table(f"stage {s['stage'] + 1} ({s['requests']:,} requests)", s))
