"""serve-api against clients that misbehave, over loopback with bounded counts and times: a streaming client that
never reads its socket, and a flood of connections."""

from __future__ import annotations

import asyncio
import json
import socket
import time

from tests.tui.api_server import metric, need, serving


def _stream_request(max_tokens: int, prompt: str) -> bytes:
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "stream": True}).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


def test_a_client_that_never_reads_stalls_no_one_and_is_aborted():
    """The slow client's buffers fill and its writes wait; another client's tokens keep coming at the engine's
    pace (its mean inter-token gap within 1.5x + 2 ms of the engine's, no gap over 0.3 s), and after
    --send-timeout the slow stream is ended and its request aborted, long before the engine would finish it."""
    need("httpx")
    import httpx

    with serving("--time-scale", "10", "--send-timeout", "1") as (base, driver):
        host, port = base.removeprefix("http://").split(":")
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the buffers fill fast
        slow.connect((host, int(port)))
        slow.sendall(_stream_request(8000, "slow " * 100))  # 8,000 tokens: ~12 s of wall at --time-scale 10
        t0 = time.monotonic()
        stamps: list[float] = []
        with httpx.Client(timeout=30) as c:
            m0 = c.get(base + "/metrics").text
            with c.stream("POST", base + "/v1/completions",
                          json={"prompt": "reader " * 100, "max_tokens": 1500, "stream": True}) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        stamps.append(time.monotonic())
            m1 = c.get(base + "/metrics").text
        deadline = time.monotonic() + 15
        while driver.live.aborted == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        aborted_after = time.monotonic() - t0
        slow.close()
        assert len(stamps) == 1500
        gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
        itl = "tokensim:engine_inter_token_latency_seconds"
        engine_itl = ((metric(m1, itl + "_sum") - metric(m0, itl + "_sum"))
                      / (metric(m1, itl + "_count") - metric(m0, itl + "_count")))
        mean_gap = sum(gaps) / len(gaps)
        assert mean_gap <= engine_itl / 10 * 1.5 + 0.002, (mean_gap, engine_itl / 10)
        assert max(gaps) < 0.3, max(gaps)
        assert driver.live.aborted == 1 and aborted_after < 10, aborted_after  # the engine needed ~12 s
        time.sleep(0.1)
        assert driver.live.running == 0 and driver.live.kv_usage == 0.0 and not driver.streams


def test_a_flood_gets_answers_or_openai_503s_and_the_server_serves_on():
    """300 streams at once against --max-connections 100: each gets its whole answer or OpenAI's 503 JSON (never
    uvicorn's plain text), and afterwards the server answers as before."""
    need("httpx")
    import httpx

    async def flood(base: str) -> list[tuple[int, int | str]]:
        limits = httpx.Limits(max_connections=300, max_keepalive_connections=0)
        async with httpx.AsyncClient(limits=limits, timeout=30) as c:
            async def one() -> tuple[int, int | str]:
                async with c.stream("POST", base + "/v1/completions",
                                    json={"prompt": "flood", "max_tokens": 30, "stream": True}) as r:
                    if r.status_code != 200:
                        return r.status_code, json.loads(await r.aread())["error"]["type"]
                    return 200, sum([1 async for line in r.aiter_lines() if line.startswith("data: {")])

            return await asyncio.gather(*(one() for _ in range(300)))

    with serving("--time-scale", "1", "--max-connections", "100") as (base, driver):
        got = asyncio.run(flood(base))
        ok = [n for code, n in got if code == 200]
        refused = [kind for code, kind in got if code != 200]
        assert ok and all(n == 30 for n in ok)
        assert refused and set(refused) == {"ServiceUnavailableError"}
        assert {code for code, _ in got} == {200, 503}
        assert len(ok) >= 100  # the first hundred were in before any was refused
        with httpx.Client(timeout=10) as c:
            r = c.post(base + "/v1/completions", json={"prompt": "after", "max_tokens": 3})
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
            m = c.get(base + "/metrics").text
        assert metric(m, "tokensim:requests_rejected_total") == len(refused)
        assert metric(m, "vllm:num_requests_running") == 0 and not driver.streams
