"""`tokensim run`: serve a workload headless and report throughput, latency percentiles, KV use and cost."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine import options as O
from engine import vllm_flags
from engine.errors import InputError
from engine.evidence import bands
from engine.files import atomic_output, check_target
from engine.numbers import fixed, json_safe
from engine.physics import energy
from engine.serving.engine import Engine
from engine.serving.tables import KV_BLOCK_TOKENS
from engine.validation import printable_line
from tui.commands import progress
from tui.commands.options import add_options, check_plot_file, console, positive_int, print_json, versioned

if TYPE_CHECKING:
    from engine.fleet.fleet import Fleet
    from tui.commands.run_plot import Series

# A plain run loads only what it uses (issue 26: start-up no slower than before): the fleet when --replicas, --pd
# or --autoscale ask for one, rich.progress only for a terminal, rich.table only for the printed report, the trace
# and bench-result writers and the plots only when asked for.

_PROGRESS_EVERY = 512  # ticks between progress-bar updates
# The options -> EngineConfig (one engine) and FleetSpec (the fleet around it), from the one option table.
config_from_args = O.config_from
fleet_spec = O.setup_from


def check_pool(engine: Engine, asked: int | None, force: bool) -> None:
    """A --kv-blocks what-if larger than memory leaves is refused: the report would show a pool the GPU lacks."""
    sm = engine.step_model
    fits = int(sm.kv_capacity_bytes // (KV_BLOCK_TOKENS * sm.kv_bytes_per_token))
    if asked is not None and asked > fits and not force:
        raise InputError(f"--kv-blocks {asked:,} is more than the {fits:,} blocks {sm.hw.name}'s memory leaves for"
                         f" the KV pool ({fits * KV_BLOCK_TOKENS * sm.kv_bytes_per_token / 1e9:,.1f} GB); give at most"
                         f" {fits:,} (--force to simulate a bigger pool anyway)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Model, workload, scheduler, metric and fleet options (engine.options), and what the run prints."""
    add_options(p, "run")
    p.add_argument("--vllm-args", metavar='"vllm serve ..."', help=vllm_flags.HELP)  # read by tui.cli before parsing
    p.epilog = vllm_flags.EPILOG
    p.add_argument("--workers", type=positive_int, default=None,
                   help="processes a round-robin open-loop fleet runs its replicas on (default: all cores; the"
                        " same numbers as one)")
    p.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr: neither the bar on a terminal nor, in logs, the plain line every 10 s")
    p.add_argument("--explain", action="store_true",
                   help="where TTFT and end-to-end latency went: queueing, prefill, transfer (P/D), decode, preemption,"
                        " recompute and the request path, as the mean and the p50/p90/p99 requests"
                        " (key \"explain\" with --json)")
    p.add_argument("--bench-json", metavar="FILE.json", help="also write the run as vllm bench serve --save-result")
    p.add_argument("--trace-out", metavar="FILE.json", default=None,
                   help="write the run as a Chrome/Perfetto trace: a track per replica, a span per step, a flow per"
                        " request (open it in ui.perfetto.dev)")
    p.add_argument("--plot", action="store_true",
                   help="draw the latency distributions (TTFT, time per output token, end to end) and the KV pool and"
                        " queue over the whole run in the terminal, under the report")
    p.add_argument("--plot-file", metavar="FILE.svg|FILE.html", default=None,
                   help="write the same figures to an SVG image or a self-contained HTML page")


def build(args: argparse.Namespace) -> Engine | Fleet:
    """One engine, or a fleet when --replicas or --pd asks for more than one replica."""
    cfg = config_from_args(args)
    spec = fleet_spec(args, cfg)
    O.check_fleet_options(args, spec)
    replicas = spec.replicas
    engine = _simulator(spec)
    gpus = engine.gpus if _is_fleet(engine) else cfg.group_gpus
    if args.budget_per_hour is not None:
        price = cfg.price_per_hour if cfg.price_per_hour is not None else engine.step_model.hw.price_per_hour
        if price * gpus > args.budget_per_hour + 1e-9:
            most = int(args.budget_per_hour // (price * cfg.group_gpus)) if price else replicas
            raise InputError(f"{replicas} replica(s) of tp{cfg.tp} {engine.step_model.hw.name} ({gpus} GPUs) cost"
                             f" ${price * gpus:,.2f}/h, over --budget-per-hour {args.budget_per_hour:g}:"
                             f" it allows at most {most} replica(s)")
    return engine


def _simulator(spec: Any) -> Engine | Fleet:
    """The spec's simulator (engine.fleet.fleet.engine_for), importing the fleet only when it is one."""
    if spec.single:
        return Engine(spec.config)
    from engine.fleet.fleet import engine_for

    return engine_for(spec)


def _is_fleet(engine: Engine | Fleet) -> bool:
    """A fleet (engine.fleet.fleet.Fleet), told without importing it: anything _simulator builds but an Engine."""
    return not isinstance(engine, Engine)


def run_engine(engine: Engine | Fleet, show_progress: bool, log_progress: bool = False, command: str = "run",
               series: Series | None = None) -> int:
    """Run to the config's bound, with a progress bar on stderr when it is a terminal (show_progress), or a plain
    line every few seconds for logs (log_progress: tui.commands.progress); returns ticks run. With a `series`, the
    run goes in chunks and the KV pool and queue are read after each (run_plot)."""
    if not show_progress:
        with progress.heartbeat(command, lambda: _where(engine), log_progress):
            return engine.run() if series is None else _chunks(engine, series, lambda: None)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    cfg = engine.config
    limit, duration = getattr(engine, "bounds", (cfg.requests, cfg.duration))  # a fleet runs its config's bounds
    by_time = duration is not None
    total = duration if by_time else float(limit or 1)
    with Progress(TextColumn("[bold]serving"), BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console(stderr=True), transient=True) as bar:
        task = bar.add_task("", total=total)

        def show() -> None:
            done = engine.clock if by_time else float(engine.requests_completed)
            bar.update(task, completed=min(done, total),
                       description=f"sim {engine.clock:,.1f} s · tick {engine.tick:,}")
        return _chunks(engine, series, show)


def _chunks(engine: Engine | Fleet, series: Series | None, after: Callable[[], None]) -> int:
    """Run to the bound in chunks (a plot's sampling interval with a `series`, else the progress bar's), reading
    the series and calling `after` between them; returns ticks run."""
    every = _PROGRESS_EVERY
    if series is not None:
        from tui.commands import run_plot

        every = run_plot.chunk(engine)
    ticks = 0
    while not engine.finished:
        ticks += engine.run(max_ticks=every)
        if series is not None:
            run_plot.sample(engine, series)
        after()
    return ticks


def _where(engine: Engine | Fleet) -> str:
    """A run's progress in words, for the plain progress line."""
    return (f"simulated {engine.clock:,.1f} s, {engine.requests_completed:,} requests finished,"
            f" tick {engine.tick:,}")


def report(engine: Engine | Fleet) -> dict[str, Any]:
    """The run's JSON: configuration, then the metrics (non-finite numbers become null)."""
    cfg = engine.config
    sm = engine.step_model
    m = engine.metrics()
    out: dict[str, Any] = {
        "hardware": sm.hw.name, "model": sm.model.name, "tp": cfg.tp, "weight_dtype": sm.wdtype,
        "kv_dtype": cfg.kv_dtype, "ideal": cfg.ideal, "runtime": None if cfg.ideal else cfg.runtime,
        "scheduler": cfg.scheduler, "max_batch": cfg.max_batch, "max_batched_tokens": cfg.max_batched_tokens,
        "fast_share": cfg.fast_share, "users": cfg.users, "rate": cfg.rate, "prompt": cfg.prompt,
        "output": cfg.output, "think": cfg.think, "think_time": cfg.think_time, "requests": cfg.requests,
        "duration": cfg.duration, "seed": cfg.seed, "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "max_model_len": sm.model.max_context, "workload": cfg.workload, "trace": cfg.trace,
        "trace_speed": cfg.trace_speed if cfg.trace else None,
        "prefix_caching": getattr(engine, "prefix_caching", None), "spec_tokens": cfg.spec_tokens,
        "spec_accept": cfg.spec_accept if cfg.spec_tokens else None,
        "spec_draft": cfg.spec_draft if cfg.spec_tokens else None, "kv_offload_gb": cfg.kv_offload_gb,
    }
    out.update(m)
    # What the totals leave out: requests accepted but not finished when the run stopped.
    unfinished = m["requests_accepted"] - m["requests_completed"]
    queued = int(m["queue"])
    out["requests_unfinished"] = unfinished
    out["queue_end"] = queued
    out["running_end"] = unfinished - queued
    served_rate = m["requests_completed"] / m["sim_time_s"] if m["sim_time_s"] else 0.0
    out["finished_req_s"] = served_rate
    # Open loop: arrivals outrun capacity when the queue is left holding more than one batch of requests
    # and fewer finish per second than arrive (a closed loop cannot: its users wait for their answers). A workload
    # file or a trace offers what it sent over the run (before, such runs were never flagged).
    out["overloaded"] = bool(queued > cfg.max_batch and served_rate < 0.9 * offered_rate(cfg, m))
    out["percentiles_cover"] = "finished requests only"
    if cfg.energy:
        out["energy"] = energy_of(engine, m)
    if cfg.fast_share > 0:
        out["fast_lane"] = {k: m2 for k, m2 in engine.metrics(fast=True).items() if k != "rolling"}
        out["normal_lane"] = {k: m2 for k, m2 in engine.metrics(fast=False).items() if k != "rolling"}
    out["interval"] = bands.for_run(out, sm, out["runtime"])  # error bars from the profile's residuals
    return json_safe(out)


def tier_line(kt: dict[str, Any]) -> str:
    """The kv_tiers block in one line: the share of looked-up blocks each tier supplied, and what was read back."""
    hits = " · ".join(f"{name} {100 * v:.0f} %" for name, v in kt["hit_rate"].items())
    read = ", ".join(f"{kt[n]['bytes_read'] / 1e9:,.2f} GB from {n}" for n in ("host", "disk", "remote")
                     if n in kt and kt[n]["bytes_read"])
    return f"hits {hits} ({kt['policy']}){'; read ' + read if read else ''}"


def offered_rate(cfg: Any, m: dict[str, Any]) -> float:
    """Requests per second the run offered: --rate, or for a workload file or trace the requests it sent over the
    simulated time (0 for closed-loop --users)."""
    if cfg.rate > 0:
        return float(cfg.rate)
    scripted = cfg.workload is not None or cfg.trace is not None
    return m["requests_accepted"] / m["sim_time_s"] if scripted and m["sim_time_s"] else 0.0


def energy_of(engine: Engine | Fleet, m: dict[str, Any]) -> dict[str, Any]:
    """The run's energy (engine.physics.energy) from its metrics: every GPU of every lane or replica."""
    cfg = engine.config
    gpus = m["gpus"] if _is_fleet(engine) else m["lanes"] * cfg.group_gpus
    scaled = m.get("autoscale")
    on = scaled["gpu_hours"] * 3600.0 if scaled else None  # an autoscaler switched some GPUs off for a while
    return energy.run_energy(m, engine.step_model, gpus, cfg.group_gpus, cfg.price_per_kwh, m["price_per_hour"], on)


def run_inputs(args: argparse.Namespace) -> list[str | None]:
    """The files this run reads, which no output of it may overwrite."""
    return [getattr(args, k, None) for k in ("trace", "workload", "model", "hardware", "runtime_file")]


def check_outputs(args: argparse.Namespace) -> None:
    """--trace-out and --bench-json before the run: each a file name, not an input, and not both the same file
    (the bench file would be written, then replaced by the trace)."""
    trace, bench = getattr(args, "trace_out", None), getattr(args, "bench_json", None)
    if trace is not None:
        check_target(trace, "--trace-out", run_inputs(args))
    if bench is not None:
        check_target(bench, "--bench-json", [*run_inputs(args), getattr(args, "result", None)])
    if trace and bench and Path(trace).resolve() == Path(bench).resolve():
        raise InputError(f"--trace-out and --bench-json both name {printable_line(trace)}: give each its own file")


def run(args: argparse.Namespace) -> int:
    """Build the engine, run it to its bound, print JSON or the Rich report (and the trace, when asked)."""
    check_outputs(args)
    check_plot(args)
    engine = build(args)
    if _is_fleet(engine) and not args.trace_out:  # a trace records each replica's steps in this process
        engine.workers = args.workers or os.cpu_count() or 1
    check_pool(engine, args.kv_blocks, args.force)
    with contextlib.ExitStack() as stack:  # the trace is renamed into place only if the run ends well
        f = stack.enter_context(atomic_output(args.trace_out, "--trace-out", run_inputs(args))) \
            if args.trace_out else None
        rec = None
        if f is not None:
            from engine.serving import trace_out

            rec = trace_out.record(engine)
        series = None
        if args.plot or args.plot_file:
            from tui.commands import run_plot

            series = run_plot.Series()
        run_engine(engine, show_progress=sys.stderr.isatty() and not args.quiet,
                   log_progress=progress.wanted(args.quiet), series=series)
        out = report(engine)
        if series is not None and args.plot_file:
            with atomic_output(args.plot_file, "--plot-file", run_inputs(args)) as pf:
                pf.write(run_plot.file_text(args.plot_file, out, engine.latencies(), series))
        if args.bench_json:
            from engine.evidence.measured import bench_out

            bench_out.write(args.bench_json, bench_out.from_sim(engine), run_inputs(args))
        if args.explain:
            out["explain"] = json_safe(engine.explain())
        if f is not None and rec is not None:
            trace_out.write(rec, f, {k: out[k] for k in ("hardware", "model", "tp", "scheduler", "seed")})
    if args.json:
        print_json(versioned(out))
        return 0
    _print(out)
    if args.plot and series is not None:
        for row in run_plot.text(out, engine.latencies(), series):
            console().print(row, highlight=False, markup=False)
    return 0


def check_plot(args: argparse.Namespace) -> None:
    """--plot draws in the terminal, so it cannot share stdout with --json; --plot-file names .svg or .html and is
    not one of the run's inputs (refused now, not after a long run)."""
    if args.plot and args.json:
        raise InputError("--plot draws in the terminal and --json prints JSON there; with --json write the figures"
                         " with --plot-file FILE.svg or FILE.html")
    check_plot_file(args.plot_file, run_inputs(args))


def _print(r: dict[str, Any]) -> None:
    """The Rich report: workload, throughput, latency percentiles, KV pool, utilisation and cost."""
    from rich.table import Table

    con = console()
    loop = f"{r['users']} users (closed loop)" if r["users"] else f"{r['rate']:g} req/s (open loop)"
    lengths = f" · prompt {r['prompt']} · output {r['output']}"
    if r.get("workload") or r.get("trace"):
        loop = f"workload {r['workload']}" if r.get("workload") else f"trace {r['trace']} x{r['trace_speed']:g}"
        lengths = ""
    tp = f" x{r['tp']}" if r["tp"] > 1 else ""
    think = f" · think {r['think']}" if r["think"] != "0" else ""
    con.print(f"[bold]{r['model']}[/] on [bold]{r['hardware']}[/]{tp} · {r['scheduler']} (max batch {r['max_batch']})"
              f" · {loop}{lengths}{think}")
    con.print(f"{r['requests_completed']:,} requests finished in {r['sim_time_s']:,.2f} s simulated"
              f" ({r['ticks']:,} ticks) · {r['input_tokens']:,} tokens in · {r['output_tokens']:,} tokens out")
    if r["requests_unfinished"]:
        con.print(f"{r['requests_unfinished']:,} requests unfinished when the run stopped: {r['queue_end']:,} waiting"
                  f" in the queue, {r['running_end']:,} part-way through")
    if r["overloaded"]:
        offered = r["rate"] or r["requests_accepted"] / r["sim_time_s"]
        con.print(f"[bold yellow]warning:[/] arrivals outrun capacity: {offered:,.3g} req/s arrive,"
                  f" {r['finished_req_s']:,.1f} req/s finish; the queue grows for as long as the run lasts and"
                  " latency with it. Lower the rate or add capacity (--tp, --max-batch, --kv-dtype fp8)")
    t = Table(header_style="bold", show_edge=False, title="latency", title_justify="left")
    t.add_column("")
    for p in ("p50", "p90", "p99"):
        t.add_column(p, justify="right")
    rows = (("TTFT (first visible token)", "ttft_s", 1e3, "ms"), ("TTFT (first token, any kind)", "ttft_raw_s", 1e3,
            "ms"), ("TPOT", "tpot_s", 1e3, "ms"), ("end to end", "e2e_s", 1.0, "s"),
            ("queue delay", "queue_delay_s", 1e3, "ms"))
    for label, key, scale, unit in rows:
        t.add_row(label, *(fixed(r[key].get(p), scale, 1, f" {unit}") for p in ("p50", "p90", "p99")))
    con.print(t)
    con.print(f"error bars (80 %): {r['interval']['note'] if r['interval'] else 'none (no calibration record)'}")
    s = Table(header_style="bold", show_edge=False, show_header=False)
    s.add_column("")
    s.add_column("", justify="right")
    s.add_row("throughput in / out",
              f"{fixed(r['throughput_in_tok_s'], 1, 0)} / {fixed(r['throughput_out_tok_s'], 1, 0)} tok/s")
    s.add_row("batch (median)", fixed(r["batch_p50"], 1, 0))
    s.add_row("KV pool", f"{r['kv_capacity_bytes'] / 1e9:,.1f} GB ({r['kv_blocks_total']:,} blocks of 16 tokens);"
              f" peak {r['kv_peak_bytes'] / 1e9:,.1f} GB ({100 * r['kv_util_peak']:.0f} %)")
    s.add_row("preemptions", f"{r['preemptions']:,} ({r['recomputed_tokens']:,} tokens recomputed)")
    s.add_row("MFU / bandwidth used", f"{fixed(r['mfu'], 100, 1)} % / {fixed(r['bw_util'], 100, 1)} %")
    s.add_row("$/Mtok in / out", f"${fixed(r['cost_per_mtok_in'], 1, 3)} / ${fixed(r['cost_per_mtok_out'], 1, 3)}"
              f" at ${r['price_per_hour']:g}/GPU-hour")
    if r.get("prefix_cache_hit_rate") is not None:
        ci = r["cost_per_mtok_cached_in"]
        s.add_row("prefix cache", f"{fixed(r['prefix_cache_hit_rate'], 100, 1)} % of prompt tokens reused"
                  f" ({r['cached_input_tokens']:,}); cached input ${'-' if ci is None else format(ci, '.2g')}/Mtok")
    if r.get("kv_offloaded_blocks"):
        s.add_row("KV offload", f"{r['kv_offloaded_blocks']:,} blocks to host memory, {r['kv_loaded_blocks']:,} back"
                  f" on a hit ({r['kv_offload_gb']:g} GB)")
    if r.get("kv_tiers"):
        s.add_row("KV tiers", tier_line(r["kv_tiers"]))
    if r.get("lora"):
        lo = r["lora"]
        s.add_row("multi-LoRA", f"{lo['adapters']:,} adapters, {lo['slots']} slots (rank {lo['rank']}):"
                  f" {fixed(lo['adapters_per_step'], 1, 1)} per step, {lo['loads']:,} loads,"
                  f" {lo['slot_waits']:,} requests waited {fixed(lo['slot_wait_mean_s'], 1000, 0)} ms for a slot,"
                  f" {fixed(lo['lora_bytes_share'], 100, 1)} % of bytes")
    if r.get("spec_tokens_per_step") is not None:
        s.add_row("speculative decoding", f"{fixed(r['spec_tokens_per_step'], 1, 2)} tokens per sequence per step")
    if r.get("goodput_req_s") is not None:
        s.add_row("goodput (within SLO)", f"{fixed(r['goodput_req_s'], 1, 2)} req/s, {fixed(r['goodput_tok_s'], 1, 0)}"
                  f" tok/s ({fixed(r['slo_attainment'], 100, 0)} % of requests)")
    if r.get("fast_lane"):
        f, n = r["fast_lane"], r["normal_lane"]
        s.add_row("fast lane vs normal", f"{fixed(f['tok_s_per_user'], 1, 0)} vs {fixed(n['tok_s_per_user'], 1, 0)}"
                  f" tok/s per user; ${fixed(f['cost_per_mtok_out'], 1, 2)} vs ${fixed(n['cost_per_mtok_out'], 1, 2)}"
                  " per Mtok out")
    con.print(s)
    if r.get("replicas"):
        _print_fleet(con, r)
    if r.get("stages") and len(r["stages"]) > 1:
        g = Table(header_style="bold", show_edge=False, title="stages", title_justify="left")
        for h in ("stage", "from", "load", "done", "TTFT p50", "TTFT p99", "ITL p50", "e2e p50"):
            g.add_column(h, justify="right")
        for x in r["stages"]:
            load = f"{x['rate']:g} req/s" if x["rate"] is not None else f"{x['users']} users"
            g.add_row(str(x["stage"] + 1), f"{x['start_s']:g} s", load, f"{x['requests_completed']:,}",
                      fixed(x["ttft_s"]["p50"], 1e3, 1, " ms"), fixed(x["ttft_s"]["p99"], 1e3, 1, " ms"),
                      fixed(x["itl_s"]["p50"], 1e3, 1, " ms"), fixed(x["e2e_s"]["p50"], 1, 2, " s"))
        con.print(g)
    if r["requests_unfinished"]:
        con.print(f"note: {r['requests_unfinished']:,} requests were still queued or running when the run ended")
    if r["clipped_requests"]:
        con.print(f"[yellow]note:[/] {r['clipped_requests']:,} sampled requests were clipped to fit the model's context"
                  " or the KV pool")
    which = (f"the last {r['latency_samples']:,} of the {r['requests_completed']:,} finished requests"
             if r["latency_samples"] < r["requests_completed"] else f"the {r['latency_samples']:,} finished requests")
    left = f"; the {r['requests_unfinished']:,} unfinished ones are not in them" if r["requests_unfinished"] else ""
    con.print(f"note: latency percentiles cover {which}{left}")
    if r.get("explain"):
        _print_explain(con, r["explain"])


def _print_explain(con: Any, x: dict[str, Any]) -> None:
    """Where TTFT and end-to-end latency went: one row per part, for the mean and the p50/p90/p99 requests."""
    from rich.table import Table

    for key, label, scale, digits, unit in (("ttft_s", "TTFT", 1e3, 1, " ms"), ("e2e_s", "end to end", 1.0, 2, " s")):
        s = x[key]
        if s["mean"] is None:
            continue
        cols = [c for c in ("mean", "p50", "p90", "p99") if s[c] is not None]
        t = Table(header_style="bold", show_edge=False, title=f"where {label} went", title_justify="left")
        t.add_column("")
        for c in cols:
            t.add_column(c if c == "mean" else f"{c} (#{s[c]['request']})", justify="right")
        for part in (*x["parts"], "total"):
            t.add_row(part, *(fixed(s[c][part], scale, digits, unit) for c in cols))
        con.print(t)
    _print_slowest(con, x.get("per_request"))


def _print_slowest(con: Any, pr: dict[str, Any] | None, n: int = 5) -> None:
    """The `n` slowest requests end to end, each with its own parts (explain's per_request rows)."""
    from rich.table import Table

    if not pr or not pr["rows"]:
        return
    cols = pr["columns"]
    t = Table(header_style="bold", show_edge=False, title=f"slowest requests (of {len(pr['rows']):,}; all in"
              " --json's explain.per_request)", title_justify="left")
    for c in cols:
        t.add_column(c, justify="right")
    for r in sorted(pr["rows"], key=lambda r: -r[-1])[:n]:
        t.add_row(f"#{r[0]}", *(fixed(v, 1.0, 2, " s") for v in r[1:]))
    con.print(t)


def _print_fleet(con: Any, r: dict[str, Any]) -> None:
    """One row per replica: role, answers, KV peak, busy share, queue peak; the P/D copies' cost."""
    from rich.table import Table

    t = Table(header_style="bold", show_edge=False, title=f"{len(r['replicas'])} replicas · router {r['router']}"
              f" · {r['gpus']} GPUs at ${r['cost_per_hour']:,.2f}/h", title_justify="left")
    for c in ("replica", "role", "requests", "KV peak GB", "busy", "queue peak"):
        t.add_column(c, justify="left" if c == "role" else "right")
    for i, s in enumerate(r["replicas"]):
        t.add_row(str(i), s["role"], f"{s['requests_completed']:,}", f"{s['kv_peak_bytes'] / 1e9:,.1f}",
                  f"{100 * s['busy']:.0f} %", f"{s['queue_peak']:,}")
    con.print(t)
    if r.get("pd"):
        ks = r["kv_transfer_s"]
        con.print(f"P/D {r['pd']}: {r['kv_transfers']:,} KV copies over {r['kv_link_gbps']:g} GB/s per GPU, each"
                  f" {fixed(ks['p50'], 1e3, 2, ' ms')} (p50) / {fixed(ks['p99'], 1e3, 2, ' ms')} (p99)")
