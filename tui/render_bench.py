"""The renderer's speed: CPU milliseconds per frame with many users streaming, measured headless.

A frame here is what the live app does 30 times a second minus the engine's own work: build the
Frame from the latest snapshot, hand it to every widget, lay out and composite the screen and write
it to the (headless) driver. Engine stepping and snapshotting run between frames, untimed: the
engine's figures are `tokensim bench`'s other keys. Frame times are CPU time of this process
(time.process_time), not wall time: on a shared machine wall time mostly measures the neighbours.
A benchmark, not a test: nothing asserts on time.

    python -m tui.render_bench [--users 1000 10000] [--frames 300] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from engine.config import EngineConfig

FPS = 30
SIZE = (120, 40)
USERS = (1000, 10_000)  # the two crowds `tokensim bench` reports


def bench_config(users: int) -> EngineConfig:
    """generic-14b on an H100 SXM with `users` people chatting: prompts and answers short enough, and the
    batch cap high enough, that every user is in the batch and streaming (1,000 fill a third of the KV pool)."""
    return EngineConfig(hardware="h100-sxm", model="generic-14b", users=users, prompt="uniform:20,100",
                        output="uniform:100,300", think_time="exp:2", max_batch=max(256, users), seed=0)


def describe(users: int, size: tuple[int, int] = SIZE) -> str:
    """The configuration a figure was measured on, in one line."""
    c = bench_config(users)
    return (f"{c.model} / {c.hardware}, {users:,} users, prompt {c.prompt}, output {c.output}, think {c.think_time},"
            f" max batch {c.max_batch}, speed x1, {size[0]}x{size[1]}")


def percentile(sorted_ms: list[float], q: float) -> float:
    """The q-th quantile of an ascending list, nearest rank (the p99 of 300 frames is the 4th slowest)."""
    return sorted_ms[min(len(sorted_ms) - 1, int(round(q * (len(sorted_ms) - 1))))]


def render_bench(users: int = 1000, size: tuple[int, int] = SIZE, frames: int = 300,
                 warmup_s: float = 2.0) -> dict[str, Any]:
    """CPU ms per frame at `size` with `users` users: p50, p99, mean, wall p50, and the CPU share of a 30 fps loop."""
    return asyncio.run(_bench(users, size, frames, warmup_s))


async def _bench(users: int, size: tuple[int, int], frames: int, warmup_s: float) -> dict[str, Any]:
    """The benchmark proper, inside one headless app."""
    from tui.app import TokensimApp

    app = TokensimApp(bench_config(users), lang="en", autoplay=False)
    cpu_ms: list[float] = []
    wall_ms: list[float] = []
    publish: list[float] = []  # of which: building the frame and rendering the rows (the rest is compositing)
    engine_cpu = 0.0
    async with app.run_test(size=size) as pilot:
        app.advance_time(warmup_s)  # past the first prefills: every answer is streaming
        await pilot.pause()
        screen = app.screen
        widgets = [v for v in app._panels if v.display]  # hidden ones never post an Update
        for _ in range(frames):
            c_eng = time.process_time()
            # engine work (not part of the frame time), as live play does it: fast steps replayed time-dilated
            app.playback.advance(app.speed / FPS, speed=app.speed)
            c0, t0 = time.process_time(), time.perf_counter()
            engine_cpu += c0 - c_eng
            app._publish()
            c_pub = time.process_time()
            # What the next idle + update timer would do: mark the refreshed widgets dirty, then composite
            # the screen and write it to the driver (done synchronously here so only rendering is timed).
            screen._dirty_widgets.update(widgets)
            screen._on_timer_update()
            c1, t1 = time.process_time(), time.perf_counter()
            cpu_ms.append((c1 - c0) * 1e3)
            wall_ms.append((t1 - t0) * 1e3)
            publish.append((c_pub - c0) * 1e3)
        streaming = int((app.frame.snapshot.requests.phase == 3).sum())
        await pilot.pause()
    cpu = sum(cpu_ms) / 1e3
    cpu_ms.sort()
    wall_ms.sort()
    return {
        "frame_ms_p50": round(statistics.median(cpu_ms), 3),  # CPU time
        "frame_ms_p99": round(percentile(cpu_ms, 0.99), 3),
        "frame_ms_mean": round(statistics.fmean(cpu_ms), 3),
        "publish_ms_p50": round(statistics.median(publish), 3),
        "wall_ms_p50": round(statistics.median(wall_ms), 3),
        "wall_ms_p99": round(percentile(wall_ms, 0.99), 3),
        # Share of one core a 30 fps loop spends rendering.
        "cpu_share_at_30fps": round(cpu / max(1, frames) * FPS, 3),
        # The same with the engine's stepping and snapshots included: the whole app at real-time speed.
        "cpu_share_with_engine_at_30fps": round((cpu + engine_cpu) / max(1, frames) * FPS, 3),
        "frames": frames,
        "users": users,
        "streaming": streaming,
        "size": list(size),
        "config": describe(users, size),
    }


def main(argv: list[str] | None = None) -> int:
    """Measure each crowd in turn and print its figures (a table, or --json)."""
    p = argparse.ArgumentParser(prog="python -m tui.render_bench", description=__doc__.splitlines()[0])
    p.add_argument("--users", type=int, nargs="+", default=list(USERS))
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    results = [render_bench(n, frames=args.frames) for n in args.users]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for r in results:
        print(f"{r['config']}; {r['frames']} frames, {r['streaming']:,} streaming")
        print(f"  CPU ms per frame: p50 {r['frame_ms_p50']:.2f}  p99 {r['frame_ms_p99']:.2f}"
              f"  mean {r['frame_ms_mean']:.2f}  (publish p50 {r['publish_ms_p50']:.2f};"
              f" wall p50 {r['wall_ms_p50']:.2f}, p99 {r['wall_ms_p99']:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
