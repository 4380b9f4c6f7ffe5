"""`tokensim plan`: the cheapest deployment that serves a workload within its SLOs, and the Pareto front.

Every point of the search space (GPU x model x tp x replicas or P:D x scheduler knobs x router) is
first checked for fit (weights, heads over tp, one request's KV, the budget), then served through the
engine by a local process pool or by Ray tasks; the same seed gives the same plan either way.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter
from dataclasses import replace
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from engine import budget, vllm_flags
from engine import options as O
from engine.errors import InputError
from engine.evidence import bands
from engine.files import atomic_output
from engine.fleet import plan as pl
from engine.numbers import fixed
from engine.physics.specs import load_hardware, load_model
from engine.traffic.workload import parse_dist
from engine.validation import printable_line
from tui.commands import plan_plot, progress
from tui.commands.options import (
    add_options,
    check_plot_file,
    console,
    nonneg_float,
    positive_float,
    positive_int,
    print_json,
    versioned,
)
from tui.render.scatter import scatter


def percentile(text: str) -> float:
    """argparse type: a percentile strictly between 0 and 100."""
    v = nonneg_float(text)
    if not 0 < v < 100:
        raise argparse.ArgumentTypeError(f"must be between 0 and 100 (exclusive), got {text}")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The workload options of `run`, the search space (lists and ranges), SLOs, budget and where to run."""
    # The options with a search axis (engine.options: Option.axis) take lists here: the grid's axes.
    add_options(p, "plan", groups=O.GROUPS[:-1])
    p.add_argument("--vllm-args", metavar='"vllm serve ..."', help=vllm_flags.HELP)  # read by tui.cli before parsing
    p.epilog = vllm_flags.EPILOG
    axes = [o for o in O.options_for("plan") if o.axis]
    p.conflict_handler = "resolve"
    s = p.add_argument_group("search space (lists: a,b,c; ranges: 1-16)")
    for o in axes:
        shown = o.default if o.default is not None else o.fallback if o.fallback is not None else 1
        words = ", ".join(o.choice_list())  # the router axis lists its choices
        # --replicas stays None when not given: with --autoscale, only the autoscaled layouts are tried then
        default = None if o.name == "replicas" else str(shown)
        s.add_argument(*o.flags, dest=o.name, default=default, help=o.axis.format(choices=words))
    s.add_argument("--pd", nargs="?", const="all", default=None,
                   help="also try prefill/decode splits P:D (e.g. 1:1,1:3), or every split of each replica count"
                        " when given alone")
    s.add_argument("--pd-only", action="store_true", help="only the P:D splits, no colocated replicas")
    s.add_argument("--autoscale", metavar="MIN:MAX,...", default=None,
                   help="also try autoscaled fleets between MIN and MAX replicas (e.g. 1:4,1:6,2:6); each reports the"
                        " GPU-hours it kept on, and the best is the cheapest meeting the SLOs. Without --replicas only"
                        " these are tried")
    s.add_argument("--scale-policy", default="queue",
                   help="autoscaling policies to try with --autoscale (queue, kv; comma-separated; default queue)")
    for name in ("scale_interval", "scale_target", "cold_start_s"):
        o = O.BY_NAME[name]
        s.add_argument(o.flag, dest=name, type=o.parse(), default=o.default, help=o.en + " (with --autoscale)")
    s.add_argument("--kv-link-gbps", type=O.BY_NAME["kv_link_gbps"].parse(), default=None,
                   help=O.BY_NAME["kv_link_gbps"].en)
    g = p.add_argument_group("targets")
    g.add_argument("--slo-percentile", type=percentile, default=90.0,
                   help="the percentile the SLOs apply to (default 90)")
    g.add_argument("--budget-per-hour", type=positive_float, default=None,
                   help="$ per hour the whole deployment may cost (prunes bigger ones)")
    r = p.add_argument_group("where it runs")
    r.add_argument("--workers", type=positive_int, default=None,
                   help=f"local worker processes (default all cores: {os.cpu_count()})")
    r.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="run the grid as Ray tasks: a local Ray instance, or a cluster at HOST:6379 / ray://HOST:10001")
    p.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    p.add_argument("--plot-file", metavar="FILE.svg|FILE.html", default=None,
                   help="also write the Pareto front ($/Mtok against TTFT and TPOT) as an SVG image or an HTML page")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr: neither the bar on a terminal nor, in logs, the plain line every 10 s")


def space_from_args(args: argparse.Namespace) -> pl.Space:
    """The search space the flags describe (one-line InputError for malformed lists or unknown names)."""
    hardware = pl.parse_names(args.hardware, "--hardware")
    models = pl.parse_names(args.model, "--model")
    for h in hardware:
        load_hardware(h)
    for m in models:
        load_model(m)
    scale = _scale_axis(args)
    replicas = pl.parse_ints(args.replicas or "1", "--replicas")
    pd = pl.parse_pd_list(args.pd, replicas) if args.pd is not None else ()
    if args.pd_only and not pd:
        raise InputError("--pd-only needs --pd splits (or --pd alone with --replicas 2 or more)")
    if args.pd == "all" and not pd:
        raise InputError("--pd alone splits each replica count into prefill and decode: give --replicas 2 or more")
    return pl.Space(hardware=hardware, model=models, tp=pl.parse_ints(args.tp, "--tp"), replicas=replicas, pd=pd,
                    pd_only=args.pd_only or bool(scale and args.replicas is None), scale=scale,
                    max_num_seqs=pl.parse_ints(args.max_batch, "--max-num-seqs"),
                    max_num_batched_tokens=pl.parse_ints(args.max_batched_tokens, "--max-num-batched-tokens"),
                    router=pl.parse_routers(args.router), ep=pl.parse_ints(args.ep, "--ep"),
                    pp=pl.parse_ints(args.pp, "--pipeline-parallel-size"))


def _scale_axis(args: argparse.Namespace) -> tuple[Any, ...]:
    """The autoscaled layouts --autoscale and --scale-policy ask for; the scaling knobs need --autoscale."""
    if args.autoscale is None:
        for name in ("scale_interval", "scale_target", "cold_start_s"):
            if getattr(args, name) != O.BY_NAME[name].default:
                raise InputError(f"{O.BY_NAME[name].flag} does nothing without --autoscale MIN:MAX,...")
        if args.scale_policy != "queue":
            raise InputError("--scale-policy does nothing without --autoscale MIN:MAX,...")
        return ()
    return pl.parse_scale_list(args.autoscale, args.scale_policy, args.scale_interval, args.scale_target,
                               args.cold_start_s)


def base_from_args(args: argparse.Namespace, space: pl.Space) -> Any:
    """The workload and runtime every point shares. An open loop with --duration is served by request count
    (rate x duration) and drained, so an overloaded deployment shows its backlog in TTFT instead of leaving
    unfinished requests out of the percentiles."""
    ns = argparse.Namespace(**vars(args))
    ns.hardware, ns.model, ns.tp, ns.ep, ns.pp = space.hardware[0], space.model[0], space.tp[0], space.ep[0], \
        space.pp[0]
    for name in ("autoscale", "scale_policy", "scale_interval", "scale_target", "cold_start_s"):
        delattr(ns, name)  # the grid's, not the base configuration's
    ns.max_batch, ns.max_batched_tokens = space.max_num_seqs[0], space.max_num_batched_tokens[0]
    base = O.config_from(ns)
    for spec, what, lo in ((base.prompt, "--prompt", 1), (base.output, "--output", 1), (base.think, "--think", 0),
                           (base.think_time, "--think-time", 0)):
        parse_dist(spec, what, lo)
    if base.fast_share > 0:
        raise InputError("plan sizes replicas and P/D splits; leave out --fast-share")
    if base.rate > 0 and base.duration is not None and args.requests is None:
        base = replace(base, requests=max(1, math.ceil(base.rate * base.duration)), duration=None)
    return base


def mapper_for(args: argparse.Namespace) -> tuple[Any, str]:
    """The grid mapper the flags ask for, and its name for the report."""
    if args.ray is not None:
        from engine.fleet.plan_ray import check_address, ray_map

        address = None if args.ray == "local" else args.ray
        if address is not None:
            check_address(address)  # before any simulation: a dead address fails fast
        return (lambda jobs: ray_map(jobs, address, num_cpus=args.workers)), f"ray ({args.ray})"
    workers = args.workers or os.cpu_count() or 1
    return (lambda jobs: pl.pool_map(jobs, workers)), f"local pool ({workers} workers)"


def run(args: argparse.Namespace) -> int:
    """Prune, simulate every remaining point, and report the best one, the front and what was infeasible."""
    t0 = time.perf_counter()
    check_plot_file(args.plot_file, [args.model, args.hardware, getattr(args, "workload", None),
                                     getattr(args, "trace", None)])  # refused now, not after the grid ran
    space = space_from_args(args)
    base = base_from_args(args, space)
    slo = pl.Slo(ttft=args.slo_ttft, tpot=args.slo_tpot, percentile=args.slo_percentile)
    points = space.points()
    mapper, backend = mapper_for(args)
    pruned = []
    keep = []
    beyond: list[tuple[pl.Point, str]] = []  # points that fit but provably miss the SLOs
    work: dict[pl.Point, float] = {}  # each point's estimated simulated steps (engine.budget)
    # A floor on the grid's work before an engine is built per point (16,384 points take minutes to check): the
    # replicas of every point within the budget (engine.budget.REPLICA_STEPS each).
    cap = args.budget_per_hour
    fleets = sum(pt.replicas for pt in points if cap is None or pl.cost_per_hour(pt, base) <= cap + 1e-9)
    budget.check_plan(fleets * budget.REPLICA_STEPS, len(points), base.force)
    seen = lambda: f"checking configurations: {len(keep) + len(beyond) + len(pruned):,} of {len(points):,}"  # noqa: E731
    with progress.heartbeat("plan", seen, progress.wanted(args.quiet)):  # a grid of thousands takes minutes
        for pt in points:
            why = pl.prune(pt, base, args.budget_per_hour, work)
            if why is None and (miss := pl.beyond_slo(pt, base, slo)) is not None:
                beyond.append((pt, miss))
            elif why is None:
                keep.append(pt)
            else:
                pruned.append({"config": pt.as_dict(), "why": why})
    if not keep and beyond:
        # Nothing can meet the SLOs: simulate them after all, so the report can say which target binds and how
        # near the nearest point comes.
        keep, beyond = [pt for pt, _ in beyond], []
    if not keep:
        _refuse(args, pl.summarize([], pruned, slo), _nothing_fits(pruned, points, base, args.budget_per_hour))
    pruned += [{"config": pt.as_dict(), "why": why} for pt, why in beyond]
    budget.check_plan(sum(work[pt] for pt in keep), len(keep), base.force)  # the grid's work, not its size
    jobs: list[pl.Job] = [(pt, base, slo, args.kv_link_gbps) for pt in keep]
    # On Ray, one wave: each call of its mapper starts a Ray instance (see pl.run_grid's share).
    results, stopped = _run_jobs(jobs, mapper, show=sys.stderr.isatty() and not args.quiet, quiet=args.quiet,
                                 share=args.ray is None)
    out = pl.summarize(results, pruned, slo)
    bands.annotate_plan(out, [r.as_dict() for r in results], None if base.ideal else base.runtime, base.weight_dtype)
    if stopped is not None:  # a partial report: what finished before the signal, and how much that is
        out["stopped"] = {"by": stopped[0], "finished": len(results), "of": len(jobs)}
    out["pruned_slo"] = len(beyond)  # of the pruned: points that fit but provably miss the SLOs
    out["wall_s"] = time.perf_counter() - t0
    out["backend"] = backend
    out["workload"] = {"users": base.users, "rate": base.rate, "prompt": base.prompt, "output": base.output,
                       "think": base.think, "requests": base.requests, "duration": base.duration, "seed": base.seed,
                       "workload_file": base.workload, "trace": base.trace}
    if stopped is None and out["best"] is None and (slo.ttft is not None or slo.tpot is not None):
        _refuse(args, out, pl.binding_line(out["binding"], slo))
    rows = [r.as_dict() for r in results]
    if args.plot_file:
        with atomic_output(args.plot_file, "--plot-file") as f:
            f.write(plan_plot.file_text(args.plot_file, out, rows, slo.key))
    if args.json:
        print_json(versioned(out))
    else:
        _print(out, rows, slo)
    if stopped is not None:
        sys.stdout.flush()
        sys.stderr.write(f"tokensim: stopped ({stopped[0]}) after {len(results)} of {len(jobs)} configurations;"
                         f" every worker stopped, the report covers the {len(results)} that finished\n")
        return stopped[1]
    return 0


def _load_words(w: dict[str, Any]) -> str:
    """What every point serves, for the report's header: a workload file or trace by its name (before, a workload
    file read '0 req/s ... None requests'), else users or rate with the lengths; the bound when there is one."""
    src = w.get("workload_file") or w.get("trace")
    if src:
        load = f"{'workload' if w.get('workload_file') else 'trace'} {escape(printable_line(str(src)))}"
    else:
        users = f"{w['users']} users" if w["users"] else f"{w['rate']:g} req/s"
        load = f"{users} · prompt {escape(str(w['prompt']))} · output {escape(str(w['output']))}"
    if w["requests"] is not None:
        load += f" · {w['requests']} requests"
    elif w["duration"] is not None:
        load += f" · {w['duration']:g} s"
    return load


def _refuse(args: argparse.Namespace, out: dict[str, Any], reason: str) -> None:
    """Nothing is feasible: the one line on stderr and exit 2, and with --json the report with that reason on
    stdout too, so a JSON reader gets an answer instead of an empty stdout."""
    if args.json:
        print_json(versioned({**out, "reason": reason}))
    raise InputError(reason)


def _nothing_fits(pruned: list[dict[str, Any]], points: list[pl.Point], base: Any, budget: float | None) -> str:
    """One line when every point was pruned: what the budget would need, or the commonest reason."""
    if budget is not None:
        fits = [pt for pt in points if pl.prune(pt, base, None) is None]
        if fits:
            cost, pt = min(((pl.cost_per_hour(pt, base), pt) for pt in fits), key=lambda c: c[0])
            return (f"--budget-per-hour {budget:g} allows none of the {len(points)} configurations: the cheapest that"
                    f" fits, {pt.replicas} x {pt.hardware} tp{pt.tp} ({pt.gpus} GPUs), costs ${cost:,.2f}/h")
    why, n = Counter(p["why"] for p in pruned).most_common(1)[0]
    return f"none of the {len(points)} configurations fits ({n} of them because: {why})"


def _run_jobs(jobs: list[pl.Job], mapper: Any, show: bool, quiet: bool = False,
              share: bool = True) -> tuple[list[pl.PointResult], tuple[str, int] | None]:
    """Run the grid, with a progress bar on stderr when it is a terminal (else, for logs, a plain line every few
    seconds: tui.commands.progress; neither with --quiet): every result in grid order, and None; or,
    stopped by Ctrl+C or SIGTERM once some points had finished, those results and (the signal, its exit code). The
    mapper's workers are stopped on the way out (engine.fleet.pool); nothing finished is thrown away."""
    from tui.cli import Terminated

    done: dict[int, pl.PointResult] = {}
    try:
        if not show:
            where = lambda: f"{len(done):,} of {len(jobs):,} configurations simulated"  # noqa: E731
            with progress.heartbeat("plan", where, progress.wanted(quiet)):
                return pl.run_grid(jobs, mapper, done.__setitem__, share), None
        with Progress(TextColumn("[bold]planning"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TimeRemainingColumn(), console=console(stderr=True), transient=True) as bar:
            task = bar.add_task("", total=len(jobs))

            def seen(i: int, r: pl.PointResult) -> None:
                done[i] = r
                bar.advance(task)
            return pl.run_grid(jobs, mapper, seen, share), None
    except (KeyboardInterrupt, Terminated) as e:
        if not done:
            raise
        how = ("Ctrl+C", 130) if isinstance(e, KeyboardInterrupt) else ("SIGTERM", 143)
        return [done[i] for i in sorted(done)], how


def _print(out: dict[str, Any], results: list[dict[str, Any]], slo: pl.Slo) -> None:
    """The Rich report: the best deployment, the Pareto front as a table and a plot, and what was left out."""
    con = console()
    k = slo.key
    targets = " and ".join(f"{k} {n} <= {v:g} s" for n, v in (("TTFT", slo.ttft), ("TPOT", slo.tpot)) if v)
    con.print(f"[bold]plan[/] · {_load_words(out['workload'])} · {targets or 'no SLO'}")
    con.print(f"{out['evaluated']} configurations simulated, {out['pruned']} pruned before simulating"
              f" ({out['pruned_slo']} of them provably miss the SLOs),"
              f" {out['feasible']} meet the SLOs · {out['backend']} · {out['wall_s']:.1f} s")
    b = out["best"]
    if b is not None:
        split = f" split {b['pd']}" if b["pd"] else ""
        scaled = f", {b['gpu_hours']:.3g} GPU-hours" if b.get("autoscale") else ""
        con.print(f"[bold green]best:[/] {_reps(b)} x {b['hardware']} tp{b['tp']}{split} ({b['gpus']} GPUs,"
                  f" {b['router']}, max_num_seqs {b['max_num_seqs']}{scaled})"
                  f" for [bold]${b['cost_per_hour']:,.2f}/h[/]:"
                  f" {k} TTFT {fixed(b['ttft_s'], 1e3)} ms, TPOT {fixed(b['tpot_s'], 1e3)} ms,"
                  f" goodput {fixed(b['goodput_rps'], 1, 2)} req/s over the whole run, drain included"
                  f" ({b['slo_met']:.0%} of answers met the SLOs; {fixed(b['goodput_per_dollar'], 1, 0)} per $)")
    t = Table(title="Pareto front: $/Mtok against TTFT and TPOT", title_justify="left", header_style="bold",
              show_edge=False)
    for col in ("GPU", "model", "tp", "replicas", "P:D", "router", "seqs", "$/h", "$/Mtok", f"TTFT {k} ms",
                f"TPOT {k} ms", "goodput req/s", "meets SLO"):
        t.add_column(col, justify="left" if col in ("GPU", "model", "router") else "right")
    bad = {_key(r["config"]) for r in out["infeasible"]}
    for r in out["pareto"]:
        t.add_row(r["hardware"], r["model"], str(r["tp"]), _reps(r), r["pd"] or "-", r["router"],
                  str(r["max_num_seqs"]), f"{r['cost_per_hour']:,.2f}", fixed(r["usd_per_mtok"], 1, 3),
                  fixed(r["ttft_s"], 1e3), fixed(r["tpot_s"], 1e3, 2), fixed(r["goodput_rps"], 1, 2),
                  ("no" if _key(r) in bad else "yes") + ("?" if (r["interval"] or {}).get("slo_flips") else ""))
    con.print(t)
    if out["slo_flips"]:
        which = ", ".join(f"{c['replicas']} x {c['hardware']} tp{c['tp']}" for c in out["slo_flips"][:4])
        con.print(f"?: the SLO verdict flips inside the 80 % interval for {len(out['slo_flips'])} configurations "
                  f"({which}); {(b or out['pareto'][0])['interval']['note']}")
    marks = plan_plot.marked(out, results, "ttft_s")
    for row in scatter(marks, xlabel=f"$/Mtok (log) · {plan_plot.MARKS}",
                       ylabel=f"TTFT {k} s (log)"):
        con.print(row, highlight=False, markup=False)
    reasons = Counter(_short(p["why"]) for p in out["infeasible"] if "config" in p and _key(p["config"]) not in
                      {_key(r["config"]) for r in results})
    for why, n in reasons.most_common(5):
        con.print(f"pruned {n}: {why}", highlight=False)


_key = plan_plot.key


def _reps(c: dict[str, Any]) -> str:
    """A point's replicas: the count, or 'MIN:MAX policy' when it autoscales (the mean $/h then follows the GPUs on)."""
    return f"{c['autoscale']} {c['scale_policy']}" if c.get("autoscale") else str(c["replicas"])


def _short(why: str) -> str:
    """A pruning reason without its per-point numbers' tail (so equal reasons group)."""
    return why.split(";")[0]
