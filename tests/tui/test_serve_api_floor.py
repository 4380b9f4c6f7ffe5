"""`serve-api --floor`: the factory floor draws the engine serving real HTTP clients (Textual's pilot, the server on
the app's own event loop, httpx over loopback)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.tui.api_server import free_port, need


def _floor(*flags: str) -> tuple[Any, Any, Any, str]:
    """A `serve-api --floor` app as the command builds it (at half real time, plus `flags`): the app, its uvicorn
    server, the driver, and the completions URL on a free loopback port."""
    import uvicorn

    from tui.api.floor import ServeFloorApp
    from tui.cli import build_parser
    from tui.commands import serve_api_cmd

    port = free_port()
    words = ["serve-api", "--port", str(port), "--floor", "--time-scale", "0.5", *flags]
    args = build_parser(words).parse_args(words)
    app, driver, _ = serve_api_cmd.build_all(args)
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False))
    floor = ServeFloorApp(server, serve_api_cmd.listen("127.0.0.1", port), serve_api_cmd.floor_subject(args, driver),
                          serve_api_cmd.config_from_args(args))
    floor.animation_level = "none"
    return floor, server, driver, f"http://127.0.0.1:{port}/v1/completions"


async def _started(server: Any) -> bool:
    """Whether the server (on the app's event loop) comes up within 4 s."""
    for _ in range(200):
        if server.started:
            return True
        await asyncio.sleep(0.02)
    return bool(server.started)


async def test_floor_shows_the_http_clients_requests() -> None:
    need("uvicorn")
    import httpx

    from tui.render import users

    floor, server, _, url = _floor()
    async with floor.run_test(size=(120, 40)) as pilot:
        assert await _started(server)
        async with httpx.AsyncClient(timeout=20) as client:
            # At half real time three 40-token answers take ~2 s: they are on the floor while we look.
            sent = [asyncio.create_task(client.post(url, json={"prompt": "p" * 400 * (k + 1), "max_tokens": 40}))
                    for k in range(3)]
            seen = None
            for _ in range(100):
                await pilot.pause(0.05)
                snap = floor.frame.snapshot
                if snap.running == 3 and snap.last_step is not None:
                    seen = floor.frame
                    break
            assert seen is not None, "the floor never showed three requests running"
            rows = [" ".join(t for t, _ in users.row_pieces(seen, y, 100)) for y in range(seen.row_count)]
            assert [r.split()[0] for r in rows] == ["#0", "#1", "#2"]
            assert sorted(seen.snapshot.requests.prompt_len.tolist()) == [100, 200, 300]
            assert "running 3" in users.title(seen)
            done = await asyncio.gather(*sent)
        assert [r.json()["usage"]["completion_tokens"] for r in done] == [40] * 3
        await pilot.pause(0.2)
        assert floor.frame.snapshot.running == 0 and floor.frame.snapshot.done == 3
        assert floor.frame.snapshot.time_s > 0  # the floor's clock is the served engine's, moved by the driver


async def test_floor_of_a_pd_fleet_shows_its_replica_rows() -> None:
    """`--floor --pd 1:1`: the app opens on the fleet overview of the live fleet (a row per replica, the KV copy
    between them), read as the driver moves it; 2 shows the decode replica's floor."""
    need("uvicorn")
    import httpx

    floor, server, driver, url = _floor("--pd", "1:1", "--kv-link-gbps", "1")
    async with floor.run_test(size=(120, 40)) as pilot:
        assert await _started(server) and floor.selected is None and floor.frame.fleet.pd == (1, 1)
        async with httpx.AsyncClient(timeout=20) as client:
            sent = asyncio.create_task(client.post(url, json={"prompt": "p" * 8000, "max_tokens": 60}))
            moving = running = None
            for _ in range(200):
                await pilot.pause(0.02)
                view = floor.frame.fleet
                moving = moving or (view.copies[0] if view.copies else None)  # 2,000 tokens' KV at 1 GB/s: ~0.4 s
                if view.replicas[1].batch == 1:
                    running = view
                    break
            assert moving is not None and (moving.src, moving.tokens) == (0, 1999)
            assert running is not None and [r.role for r in running.replicas] == ["prefill", "decode"]
            assert running.replicas[0].done == 1 and running.replicas[0].batch == 0  # its prompt was read there
            await pilot.press("2")
            decode = driver.live.replicas[1].engine
            assert floor.selected == 1 and floor.playback.engine is decode  # the decode replica's floor
            assert floor.frame.snapshot.tick >= 1 and floor.frame.snapshot.requests.prompt_len.tolist() in ([], [2000])
            done = await sent
        assert done.json()["usage"]["completion_tokens"] == 60
        await pilot.press("0")
        for _ in range(100):  # the next frame (a loaded host may take a while to draw it)
            await pilot.pause(0.02)
            if floor.frame.fleet.done == 1:
                break
        assert floor.selected is None and floor.frame.fleet.done == 1 and not floor.frame.fleet.copies
