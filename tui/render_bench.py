"""The renderer's speed: milliseconds per frame with many users streaming, measured headless.

A frame here is what the live app does 30 times a second minus the engine's own work: build the
Frame from the latest snapshot, hand it to every widget, lay out and composite the screen and write
it to the (headless) driver. Engine stepping and snapshotting run between frames, untimed: the
engine's figures are `tokensim bench`'s other keys. A benchmark, not a test: nothing asserts on time.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from engine.config import EngineConfig

FPS = 30


def bench_config(users: int) -> EngineConfig:
    """generic-14b on an H100 SXM with `users` people chatting: prompts and answers short enough, and the
    batch cap high enough, that every user is in the batch and streaming (1,000 fill a third of the KV pool)."""
    return EngineConfig(hardware="h100-sxm", model="generic-14b", users=users, prompt="uniform:20,100",
                        output="uniform:100,300", think_time="exp:2", max_batch=max(256, users), seed=0)


def render_bench(users: int = 1000, size: tuple[int, int] = (120, 40), frames: int = 200,
                 warmup_s: float = 2.0) -> dict[str, Any]:
    """Frame times (ms) at `size` with `users` users: p50, p99, mean, and the CPU share a 30 fps loop would use."""
    return asyncio.run(_bench(users, size, frames, warmup_s))


async def _bench(users: int, size: tuple[int, int], frames: int, warmup_s: float) -> dict[str, Any]:
    """The benchmark proper, inside one headless app."""
    from tui.app import TokensimApp

    app = TokensimApp(bench_config(users), lang="en", autoplay=False)
    times: list[float] = []
    engine_cpu = 0.0
    publish: list[float] = []  # of which: building the frame and rendering the rows (the rest is compositing)
    cpu = 0.0
    async with app.run_test(size=size) as pilot:
        app.advance_time(warmup_s)  # past the first prefills: every answer is streaming
        await pilot.pause()
        screen = app.screen
        widgets = [v for v in app._panels if v.display]  # hidden ones never post an Update
        for _ in range(frames):
            c_eng = time.process_time()
            # engine work (not part of the frame time), as live play does it: fast steps replayed time-dilated
            app.playback.advance(app.speed / FPS, speed=app.speed)
            engine_cpu += time.process_time() - c_eng
            c0, t0 = time.process_time(), time.perf_counter()
            app._publish()
            t_pub = time.perf_counter()
            # What the next idle + update timer would do: mark the refreshed widgets dirty, then composite
            # the screen and write it to the driver (done synchronously here so only rendering is timed).
            screen._dirty_widgets.update(widgets)
            screen._on_timer_update()
            t1 = time.perf_counter()
            times.append((t1 - t0) * 1e3)
            publish.append((t_pub - t0) * 1e3)
            cpu += time.process_time() - c0
        streaming = int((app.frame.snapshot.requests.phase == 3).sum())
        await pilot.pause()
    times.sort()
    p99 = times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))]
    mean = statistics.fmean(times)
    return {
        "frame_ms_p50": round(statistics.median(times), 3),
        "frame_ms_p99": round(p99, 3),
        "frame_ms_mean": round(mean, 3),
        "publish_ms_p50": round(statistics.median(publish), 3),
        # Share of one core a 30 fps loop spends rendering (CPU time, not wall time).
        "cpu_share_at_30fps": round(cpu / max(1, frames) * FPS, 3),
        # The same with the engine's stepping and snapshots included: the whole app at real-time speed.
        "cpu_share_with_engine_at_30fps": round((cpu + engine_cpu) / max(1, frames) * FPS, 3),
        "frames": frames,
        "users": users,
        "streaming": streaming,
        "size": list(size),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(render_bench(), indent=2))
