"""`tokensim bench`: how fast the engine simulates and how fast the app renders a frame.

A benchmark, not a test: it reports figures and asserts nothing. The engine figures are ticks and simulated
seconds per wall second for 1,000 closed-loop users on qwen2.5-14b / h100-sxm at a batch cap of 256, run
headless (quiet decode steps priced together, as `tokensim run` does): once with fixed lengths, where most
ticks are quiet, and once with varied lengths (the same means), where answers end at scattered ticks. The
trace row replays a request trace at its own speed on one H100 (qwen2.5-14b, prefix caching on): the bundled
azure-conv-sample by default, or --trace FILE (the issue's target: the whole Azure conversation trace, 19,366
requests over an hour, in under 10 s of wall time).
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from dataclasses import replace
from typing import Any

from rich.table import Table

from engine.config import EngineConfig
from engine.serving.engine import Engine
from engine.validation import MAX_SECONDS
from tui.commands.options import console, positive_float, positive_int, print_json

BENCH_USERS = 1000
WARMUP_TICKS = 3000  # fill the batch before timing: the first ticks are one big prefill wave
VARIED = {"prompt": "uniform:256,768", "output": "uniform:128,384"}  # the fixed 512 / 256, spread out
# The open-loop rows: issue 26's `run --rate 10 --requests 10000` and `--rate 1 --requests 2000`.
OPEN_MODEL = "llama-3.1-8b"
OPEN_REQUESTS = 10_000


def bench_config(users: int = BENCH_USERS) -> EngineConfig:
    """1,000 users who never pause, short enough requests that 256 of them fit the KV pool at once."""
    return EngineConfig(hardware="h100-sxm", model="qwen2.5-14b", users=users, prompt="512", output="256",
                        scheduler="continuous", max_batch=256, seed=0)


# The render section's JSON keys as a person reads them: (label, unit; "%" shows a fraction as a percentage).
RENDER_LABELS: dict[str, tuple[str, str]] = {
    "frame_ms_p50": ("frame CPU time, median", " ms"), "frame_ms_p99": ("frame CPU time, 99th percentile", " ms"),
    "frame_ms_mean": ("frame CPU time, mean", " ms"), "publish_ms_p50": ("publishing a frame, median", " ms"),
    "wall_ms_p50": ("frame wall time, median", " ms"), "wall_ms_p99": ("frame wall time, 99th percentile", " ms"),
    "config": ("configuration", ""),
    "cpu_share_at_30fps": ("one core used drawing at 30 fps", "%"),
    "cpu_share_with_engine_at_30fps": ("one core used drawing and simulating at 30 fps", "%"),
    "frames": ("frames timed", ""), "users": ("users on screen", ""), "streaming": ("answers streaming", ""),
    "size": ("terminal size", ""),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """--ticks, --users, --fleet, --trace, --frames, --json."""
    p.add_argument("--ticks", type=positive_int, default=20_000, help="engine ticks to time (default 20,000)")
    p.add_argument("--users", type=positive_int, default=BENCH_USERS, help=f"closed-loop users (default {BENCH_USERS})")
    p.add_argument("--fleet", action="store_true",
                   help="also time a simulated day of a 10,000-user service on 8 replicas, and a 1,000-point plan"
                        " (minutes)")
    p.add_argument("--fleet-hours", type=positive_float, default=24.0, help="simulated hours of the fleet row")
    p.add_argument("--plan-configs", type=positive_int, default=1000, help="configurations of the plan row")
    p.add_argument("--trace", default="azure-conv-sample",
                   help="trace to replay for the trace row (default: the bundled azure-conv-sample)")
    p.add_argument("--frames", type=positive_int, default=300, help="frames to time in each render row (default 300)")
    p.add_argument("--open-requests", type=positive_int, default=OPEN_REQUESTS,
                   help=f"requests of the busy open-loop run row (default {OPEN_REQUESTS:,}; the quiet row runs a"
                        " fifth of them)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def engine_bench(ticks: int = 20_000, users: int = BENCH_USERS, varied: bool = False) -> dict[str, Any]:
    """Time `ticks` headless engine ticks after a warm-up; report ticks/s and simulated tokens and seconds per
    wall second (and per CPU second). `varied`: prompt and output lengths drawn from VARIED instead of fixed."""
    cfg = bench_config(users)
    if varied:
        cfg = replace(cfg, **VARIED)
    # A bound far away lets run() go tick-limited; it never binds (force: run()'s own max_ticks bounds it).
    eng = Engine(replace(cfg, duration=MAX_SECONDS, force=True))
    for _ in range(WARMUP_TICKS):
        eng.step()
    m0 = eng.metrics()
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    done = eng.run(max_ticks=ticks)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    m1 = eng.metrics()
    out_tok = m1["output_tokens"] - m0["output_tokens"]
    in_tok = m1["input_tokens"] - m0["input_tokens"]
    return {
        "ticks_per_s": done / wall,
        "sim_tokens_per_s": out_tok / wall,  # output tokens simulated per wall-clock second
        "sim_input_tokens_per_s": in_tok / wall,
        "users": users,
        "batch_p50": m1["batch_p50"],
        "us_per_tick": wall / done * 1e6,
        "ticks": done,
        "wall_s": wall,
        "sim_s_per_wall_s": (m1["sim_time_s"] - m0["sim_time_s"]) / wall,
        # CPU too: on a shared machine it, not the wall, says what an idle core would take (issue 26's figures)
        "cpu_s": cpu, "sim_s_per_cpu_s": (m1["sim_time_s"] - m0["sim_time_s"]) / cpu if cpu > 0 else 0.0,
        "model": cfg.model, "hardware": cfg.hardware, "prompt": cfg.prompt, "output": cfg.output,
        "max_batch": cfg.max_batch, "scheduler": cfg.scheduler,
    }


def open_loop_bench(rate: float, requests: int) -> dict[str, Any]:
    """`tokensim run --model llama-3.1-8b --rate R --requests N` as the CLI builds it: CPU and wall seconds of
    building the engine and running it to its bound, and simulated seconds per CPU second (the shared machine's
    steadier figure)."""
    from tui.cli import build_parser  # (the CLI's parser imports every command: only when this row runs)
    from tui.commands.run_cmd import config_from_args

    argv = ["run", "--model", OPEN_MODEL, "--rate", f"{rate:g}", "--requests", str(requests)]
    cfg = config_from_args(build_parser(argv).parse_args(argv))
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    eng = Engine(cfg)
    eng.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    sim = eng.metrics()["sim_time_s"]
    return {"command": "tokensim " + " ".join(argv), "requests": requests, "sim_time_s": sim, "cpu_s": cpu,
            "wall_s": wall, "sim_s_per_cpu_s": sim / cpu, "sim_s_per_wall_s": sim / wall}


def startup_bench(repeats: int = 3) -> dict[str, Any]:
    """CPU seconds of `tokensim run --requests 1` in a fresh interpreter (imports, parse, one request, the
    report): the median of `repeats` runs, from the children's resource usage."""
    import resource
    import statistics
    import subprocess
    import sys

    cpus = []
    for _ in range(repeats):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-m", "tui.cli", "run", "--requests", "1", "--json"], check=True,
                       capture_output=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    return {"command": "tokensim run --requests 1 --json", "cpu_s": statistics.median(cpus), "repeats": repeats}


def trace_bench(trace: str = "azure-conv-sample") -> dict[str, Any]:
    """Replay a trace at real speed on one H100 from start to end: wall and CPU seconds, requests, simulated time."""
    cfg = EngineConfig(hardware="h100-sxm", model="qwen2.5-14b", trace=trace, seed=0)
    eng = Engine(cfg)
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    eng.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    m = eng.metrics()
    return {"trace": trace, "requests": m["requests_completed"], "sim_time_s": m["sim_time_s"], "wall_s": wall,
            "cpu_s": cpu, "sim_s_per_wall_s": m["sim_time_s"] / wall, "ticks": m["ticks"],
            "model": cfg.model, "hardware": cfg.hardware}


def render_bench(frames: int = 300) -> dict[str, dict[str, Any]]:
    """The app's CPU cost per frame at 120x40 with 1,000 and with 10,000 users (JSON keys "render", "render_10000")."""
    from tui import render_bench as rb  # runs the app (Textual): only when benchmarking

    return {"render" if n == rb.USERS[0] else f"render_{n}": rb.render_bench(n, frames=frames) for n in rb.USERS}


def collect(ticks: int, users: int, trace: str = "azure-conv-sample", frames: int = 300,
            open_requests: int = OPEN_REQUESTS) -> dict[str, Any]:
    """Every section of the benchmark: the engine rows, the open-loop runs ("run_rate_10", "run_rate_1"), start-up,
    the trace replay, the frame rows ("render", "render_10000")."""
    out: dict[str, Any] = {"engine": engine_bench(ticks, users), "engine_varied": engine_bench(ticks, users, True),
                           "run_rate_10": open_loop_bench(10.0, open_requests),
                           "run_rate_1": open_loop_bench(1.0, max(1, open_requests // 5)),
                           "startup": startup_bench(), "trace": trace_bench(trace)}
    out.update(render_bench(frames))
    return out


def run(args: argparse.Namespace) -> int:
    """Run the benchmark sections and print them."""
    res = collect(args.ticks, args.users, args.trace, args.frames, args.open_requests)
    if args.fleet:
        from tui.commands.fleet_bench import fleet_day, plan_grid

        # The day as `tokensim run` serves it by default: round-robin deals the requests out first, so the replicas
        # run on every core (the same JSON as one process); least-loaded and kv-aware read the replicas and stay
        # serial (benchmarks/bench_fleet.py --routers times those).
        res["fleet_day"] = fleet_day(args.fleet_hours, router="round-robin", workers=os.cpu_count() or 1)
        res["plan_grid"] = plan_grid(args.plan_configs)
    if args.json:
        print_json(res)
        return 0
    e = res["engine"]
    t = Table(title="tokensim bench", show_header=False, show_edge=False)
    t.add_column("")
    t.add_column("", justify="right")
    t.add_row("engine", f"{e['model']} / {e['hardware']}, {e['users']:,} users, prompt {e['prompt']},"
              f" output {e['output']}, max batch {e['max_batch']}")
    t.add_row("ticks/s", f"{e['ticks_per_s']:,.0f} ({e['us_per_tick']:.1f} µs a tick, batch p50 {e['batch_p50']:.0f})")
    t.add_row("simulated tokens/s", f"{e['sim_tokens_per_s']:,.0f} out, {e['sim_input_tokens_per_s']:,.0f} in")
    t.add_row("simulated s per wall s", f"{e['sim_s_per_wall_s']:,.0f} ({e['sim_s_per_cpu_s']:,.0f} per CPU s)")
    ev = res["engine_varied"]
    t.add_row("engine, varied lengths", f"prompt {ev['prompt']}, output {ev['output']} (answers end at scattered"
              " ticks)")
    t.add_row("ticks/s, varied lengths", f"{ev['ticks_per_s']:,.0f} ({ev['us_per_tick']:.1f} µs a tick)")
    t.add_row("simulated s per wall s, varied lengths",
              f"{ev['sim_s_per_wall_s']:,.0f} ({ev['sim_s_per_cpu_s']:,.0f} per CPU s)")
    for key in ("run_rate_10", "run_rate_1"):
        o = res[key]
        t.add_row(o["command"], f"{o['sim_s_per_cpu_s']:,.0f} sim s per CPU s ({o['sim_time_s']:,.0f} s simulated in"
                  f" {o['cpu_s']:.2f} CPU s, {o['wall_s']:.2f} s wall)")
    t.add_row("start-up", f"{res['startup']['command']}: {res['startup']['cpu_s']:.2f} CPU s (median)")
    if "fleet_day" in res:
        f, g = res["fleet_day"], res["plan_grid"]
        t.add_row("fleet", f"{f['sim_s'] / 3600:g} h of {f['users']:,} users ({f['rate']:.2f} req/s) on"
                  f" {f['replicas']} replicas, {f['router']} on {f['workers']} processes: {f['wall_s']:,.1f} s"
                  f" ({f['cpu_s']:,.1f} CPU s;"
                  f" {f['requests']:,} requests, {f['sim_s_per_wall_s']:,.0f} sim s per wall s)")
        t.add_row("plan", f"{g['configs']:,} configurations of {g['sim_minutes']:g} simulated minutes on"
                  f" {g['workers']} workers: {g['wall_s']:,.1f} s ({g['s_per_config']:.2f} s each,"
                  f" {g['cpu_s_per_config']:.2f} CPU s each)")
    tr = res["trace"]
    t.add_row("trace replay", f"{tr['trace']}: {tr['requests']:,} requests, {tr['sim_time_s']:,.0f} s simulated in"
              f" {tr['wall_s']:.2f} s wall ({tr['cpu_s']:.2f} s CPU), {tr['model']} / {tr['hardware']}")
    for section in (k for k in res if k.startswith("render")):
        for k, v in res[section].items():
            label, unit = RENDER_LABELS.get(k, (k.replace("_", " "), ""))
            shown = f"{100 * v:,.1f} %" if unit == "%" else f"{v:,.2f}{unit}" if isinstance(v, float) else (
                "x".join(map(str, v)) if isinstance(v, list) else f"{v:,}" if isinstance(v, int) else str(v))
            t.add_row(f"{section.replace('_', ' ')}: {label}", shown)
    console().print(t)
    return 0
