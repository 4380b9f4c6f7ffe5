"""serve-api under load: N concurrent streams, whether the engine clock keeps up, and memory over a soak.

    python benchmarks/serve_api_load.py [--streams 1000] [--soak 600] [--time-scale 1]

Starts `tokensim serve-api` (this tree) on a free loopback port, opens N streaming completions at once (each
500 prompt tokens, 200 answer tokens), and keeps N in flight for --soak seconds (a finished stream is
replaced). Every second it reads /metrics (tokensim:engine_lag_seconds, running, waiting) and the server's
resident memory (/proc). Reports streams finished, tokens received, the worst lag, and RSS at the start and
end of the soak. A benchmark, not a test: on a shared 2-core host the client's own CPU competes with the
server's. Needs the api and api-test extras (httpx comes with openai).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent.parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _gauge(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return float("nan")


async def _one(client: httpx.AsyncClient, url: str, stats: dict[str, int]) -> None:
    """One streaming request to its end; counts its tokens."""
    body = {"prompt": "x" * 2000, "max_tokens": 200, "stream": True}
    async with client.stream("POST", url, json=body) as r:
        if r.status_code != 200:
            stats["errors"] += 1
            stats[f"status_{r.status_code}"] = stats.get(f"status_{r.status_code}", 0) + 1
            return
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                stats["tokens"] += 1
    stats["done"] += 1


async def _keep(client: httpx.AsyncClient, url: str, stats: dict[str, int], until: float) -> None:
    """One client slot: request after request until the soak ends."""
    while time.monotonic() < until:
        try:
            await _one(client, url, stats)
        except httpx.HTTPError as e:
            stats["errors"] += 1
            kind = "error_" + type(e).__name__
            stats[kind] = stats.get(kind, 0) + 1


async def _watch(base: str, pid: int, until: float, samples: list[tuple[float, float, float, float]]) -> None:
    # A new connection per scrape: with 1,000 streams the client's own loop can pause past the server's
    # keep-alive, and a reused connection would race its close.
    async with httpx.AsyncClient(timeout=10, limits=httpx.Limits(max_keepalive_connections=0)) as c:
        t0 = time.monotonic()
        while time.monotonic() < until:
            try:
                m = (await c.get(base + "/metrics")).text
            except httpx.HTTPError:
                await asyncio.sleep(1.0)
                continue
            samples.append((time.monotonic() - t0, _gauge(m, "tokensim:engine_lag_seconds"),
                            _gauge(m, "vllm:num_requests_running"), _rss_mb(pid)))
            await asyncio.sleep(1.0)


async def _load(base: str, pid: int, streams: int, soak: float) -> dict[str, object]:
    stats = {"done": 0, "tokens": 0, "errors": 0}
    samples: list[tuple[float, float, float, float]] = []
    until = time.monotonic() + soak
    limits = httpx.Limits(max_connections=streams + 10, max_keepalive_connections=streams + 10)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(120.0)) as client:
        url = base + "/v1/completions"
        await asyncio.gather(_watch(base, pid, until, samples),
                             *(_keep(client, url, stats, until) for _ in range(streams)))
    lags = sorted(s[1] for s in samples)
    return {"streams": streams, "soak_s": soak, **stats, "max_lag_s": lags[-1],
            "median_lag_s": lags[len(lags) // 2], "p99_lag_s": lags[min(len(lags) - 1, int(0.99 * len(lags)))],
            "max_running": max(s[2] for s in samples), "rss_mb_first": samples[1][3] if len(samples) > 1 else None,
            "rss_mb_last": samples[-1][3]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--soak", type=float, default=60.0, help="seconds of load (default 60; the issue's soak is 600)")
    ap.add_argument("--time-scale", type=float, default=1.0)
    a = ap.parse_args()
    port = _port()
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    srv = subprocess.Popen([sys.executable, "-m", "tui.cli", "serve-api", "--port", str(port), "--log-level", "warning",
                            "--max-num-seqs", str(max(256, a.streams)), "--time-scale", str(a.time_scale)],
                           env=env, cwd=HERE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                httpx.get(base + "/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        out = asyncio.run(_load(base, srv.pid, a.streams, a.soak))
    finally:
        srv.terminate()
        _, err = srv.communicate(timeout=20)
    out["lag_log_lines"] = sum(1 for line in err.splitlines() if "behind the wall" in line)
    out["slow_client_drops"] = sum(1 for line in err.splitlines() if "read nothing" in line)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
