"""`tokensim serve-api` with real clients over loopback: the official openai client, raw HTTP for bad input.

The engine's numbers are checked against the engine itself: a request's TTFT and end-to-end time as the client
sees them are the engine's step times (plus a few ms of HTTP), and /metrics counts what was served.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from tests.tui.api_server import metric, need, serving

# A small, fast engine: the default H100 / generic-14b, 10x faster than real time.
ARGS = ("--time-scale", "10")


def _post(url: str, body: bytes | dict, timeout: float = 20.0) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read().decode()


@pytest.fixture(scope="module")
def server():
    need("openai")
    with serving(*ARGS, "--max-model-len", "4096") as s:
        yield s


def test_openai_client_streaming_and_not(server):
    import openai

    base, driver = server
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    models = client.models.list()
    assert [m.id for m in models.data] == ["generic-14b"]
    r = client.completions.create(model="generic-14b", prompt="The quick brown fox " * 50, max_tokens=7)
    assert r.usage.completion_tokens == 7 and r.usage.prompt_tokens == 250  # 1,000 bytes / 4
    assert r.choices[0].finish_reason == "length" and len(r.choices[0].text.split()) == 7
    chunks = list(client.chat.completions.create(
        model="generic-14b", messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        max_tokens=12, stream=True, stream_options={"include_usage": True}))
    words = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(words.split()) == 12
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    # one chunk per token after the role chunk
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 12


def test_tokens_arrive_on_the_engine_clock(server):
    """At --time-scale 10 a 300-token answer takes a tenth of the engine's time for it, and no token comes before
    the engine makes it (a loaded host may make them late, never early)."""
    from engine.config import EngineConfig
    from engine.serving.live import LiveEngine

    base, driver = server
    alone = LiveEngine(EngineConfig(users=0, scheduler="chunked", max_model_len=4096))
    alone.submit(1000, 300, 0.0, prompt_text="x")  # what the server's engine does with this request, by itself
    ems = alone.advance(100.0)
    first_t, mid_t, end_t = ems[0].t, ems[149].t, ems[-1].t
    t0 = time.monotonic()
    req = urllib.request.Request(base + "/v1/completions", headers={"content-type": "application/json"},
                                 data=json.dumps({"prompt": "x" * 4000, "max_tokens": 300, "stream": True}).encode())
    stamps = []
    with urllib.request.urlopen(req, timeout=30) as r:
        for line in r:
            if line.startswith(b"data: {"):
                stamps.append(time.monotonic() - t0)
    assert len(stamps) == 300
    assert stamps[0] >= first_t / 10 * 0.95 and stamps[149] >= mid_t / 10 * 0.95
    assert end_t / 10 * 0.95 <= stamps[-1] < end_t / 10 + 2.0, (stamps[-1], end_t)


def test_bad_input_gets_openai_errors_and_the_server_keeps_serving(server):
    base, _ = server
    url = base + "/v1/completions"
    cases = [
        (b"{not json", 400, None),
        (b"[1, 2]", 400, None),
        (b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, None),  # deep nesting: no RecursionError
        (b'\xff\xfe{"prompt": "x"}', 400, None),  # not UTF-8
        ({"prompt": "x", "max_tokens": 12345678901234567890}, 400, "max_tokens"),  # 20 digits
        ({"prompt": "x", "max_tokens": -3}, 400, "max_tokens"),
        ({"prompt": "x", "max_tokens": "ten"}, 400, "max_tokens"),
        ({"prompt": "x", "max_tokens": 10 ** 12}, 400, "max_tokens"),
        ({"prompt": "x", "max_tokens": 5, "frobnicate": 1}, 400, "frobnicate"),
        ({"prompt": "x", "max_tokens": 5, "n": 2}, 400, "n"),
        ({"prompt": "x " * 9000, "max_tokens": 5}, 400, "prompt"),  # over --max-model-len 4096
        ({"prompt": "x", "max_tokens": 5, "model": "gpt-9"}, 404, "model"),
        ({"prompt": "x", "max_tokens": 5, "stream": "yes"}, 400, "stream"),
        (json.dumps({"prompt": "x" * (10 << 20), "max_tokens": 5}).encode(), 413, None),
    ]
    for body, status, param in cases:
        code, out = _post(url, body)
        assert code == status, (body[:60] if isinstance(body, bytes) else body, out)
        assert out["error"]["code"] == status and out["error"]["message"] and out["error"]["param"] == param
    code, out = _post(base + "/v1/chat/completions", {"messages": "hi", "max_tokens": 3})
    assert code == 400 and out["error"]["param"] == "messages"
    code, out = _post(url, {"prompt": "still here", "max_tokens": 3})
    assert code == 200 and out["usage"]["completion_tokens"] == 3


def test_metrics_have_vllm_names_and_count_what_was_served(server):
    base, driver = server
    _, before = _get(base + "/metrics")
    gen0 = metric(before, "vllm:generation_tokens_total")
    n0 = metric(before, "vllm:e2e_request_latency_seconds_count")
    code, out = _post(base + "/v1/completions", {"prompt": "metrics please", "max_tokens": 9})
    assert code == 200
    _, after = _get(base + "/metrics")
    assert metric(after, "vllm:generation_tokens_total") - gen0 == 9
    assert metric(after, "vllm:e2e_request_latency_seconds_count") - n0 == 1
    # At --time-scale 10, vLLM's names are wall seconds (what the client saw), the engine's under tokensim:
    wall = metric(after, "vllm:e2e_request_latency_seconds_sum") - metric(before, "vllm:e2e_request_latency_seconds_sum")
    eng = (metric(after, "tokensim:engine_e2e_request_latency_seconds_sum")
           - metric(before, "tokensim:engine_e2e_request_latency_seconds_sum"))
    assert eng > 0 and eng / 10 * 0.98 <= wall <= eng / 10 + 0.5, (wall, eng)
    for name, kind in (("vllm:num_requests_running", "gauge"), ("vllm:num_requests_waiting", "gauge"),
                       ("vllm:kv_cache_usage_perc", "gauge"), ("vllm:time_to_first_token_seconds", "histogram"),
                       ("vllm:inter_token_latency_seconds", "histogram"),
                       ("vllm:e2e_request_latency_seconds", "histogram"),
                       ("vllm:request_queue_time_seconds", "histogram"), ("vllm:prompt_tokens", "counter"),
                       ("vllm:generation_tokens", "counter"), ("vllm:prefix_cache_queries", "counter"),
                       ("vllm:prefix_cache_hits", "counter"), ("vllm:num_preemptions", "counter")):
        # (prometheus_client names a counter's TYPE line with or without _total, by version)
        assert f"# TYPE {name} {kind}" in after or f"# TYPE {name}_total {kind}" in after, name
    assert 'model_name="generic-14b"' in after


def test_disconnect_aborts_and_frees_kv(server):
    """A streaming client that hangs up mid-answer: its request leaves the engine and its KV goes back."""
    base, driver = server
    aborted = driver.live.aborted
    host, port = base.removeprefix("http://").split(":")
    body = json.dumps({"prompt": "y" * 8000, "max_tokens": 2000, "stream": True}).encode()
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        got = b""
        while b'"text": " ' not in got:  # until the first token: it is running
            more = s.recv(4096)
            assert more and b'"error"' not in more, got + more
            got += more
        assert driver.live.running >= 1 and driver.live.kv_usage > 0
    deadline = time.monotonic() + 10
    while driver.live.aborted == aborted and time.monotonic() < deadline:
        time.sleep(0.02)
    assert driver.live.aborted == aborted + 1
    time.sleep(0.1)
    assert driver.live.running == 0 and driver.live.kv_usage == 0.0


def test_prefix_cache_hits_for_a_shared_system_prompt(server):
    base, _ = server
    _, before = _get(base + "/metrics")
    system = {"role": "system", "content": "You are a careful assistant. " * 80}
    for q in ("first question", "second question"):
        code, _ = _post(base + "/v1/chat/completions",
                        {"messages": [system, {"role": "user", "content": q}], "max_tokens": 2})
        assert code == 200
    _, after = _get(base + "/metrics")
    hits = metric(after, "vllm:prefix_cache_hits_total") - metric(before, "vllm:prefix_cache_hits_total")
    from tui.api import text

    head = text.estimate("system\n" + system["content"]) + text.CHAT_PER_MESSAGE  # 585 tokens
    assert hits == head // 16 * 16 == 576  # the system message's 36 full blocks, read by the second request


def test_a_growing_chat_hits_every_unchanged_leading_block(server):
    """Three turns of one conversation, each sending the whole history back: each turn finds in the prefix cache
    every full block of the previous turn's prompt up to where they part (the previous prompt ends with the
    reply's opening, where this one has the reply), keyed block by block as vLLM hashes them."""
    from tui.api import text

    base, _ = server
    tokens = text.Tokens(text.estimate, text.estimate_units)
    msgs = [{"role": "system", "content": "You answer questions about the weather."}]
    prompts: list[bytes] = []
    hits: list[float] = []
    for turn in range(3):
        msgs.append({"role": "user", "content": f"Turn {turn}: " + "what about tomorrow and the day after? " * 12})
        _, before = _get(base + "/metrics")
        code, out = _post(base + "/v1/chat/completions", {"messages": msgs, "max_tokens": 40})
        assert code == 200
        _, after = _get(base + "/metrics")
        hits.append(metric(after, "vllm:prefix_cache_hits_total") - metric(before, "vllm:prefix_cache_hits_total"))
        prompts.append(text.chat_prompt(msgs, tokens)[1])
        assert out["usage"]["prompt_tokens"] == len(prompts[-1]) // text.UNIT
        msgs.append({"role": "assistant", "content": out["choices"][0]["message"]["content"]})
    assert hits[0] == 0
    for k in (1, 2):
        a, b = prompts[k - 1], prompts[k]
        same = next(i for i in range(len(a)) if a[i] != b[i]) // text.UNIT  # tokens the two prompts share
        assert hits[k] == same // 16 * 16, (k, hits, same)
        assert hits[k] >= len(a) // text.UNIT - 3 - 16  # all of the previous prompt but its reply opening


def test_waiting_cap_answers_503():
    need("openai")
    with serving("--time-scale", "1", "--max-num-seqs", "1", "--max-waiting", "1") as (base, driver):
        import threading

        codes: list[int] = []
        ths = [threading.Thread(target=lambda: codes.append(_post(base + "/v1/completions",
                                                                  {"prompt": "z", "max_tokens": 40})[0]))
               for _ in range(4)]
        for t in ths:
            t.start()
            time.sleep(0.05)
        for t in ths:
            t.join(30)
        assert sorted(codes) == [200, 200, 503, 503], codes
        _, m = _get(base + "/metrics")
        assert metric(m, "tokensim:requests_rejected_total") == 2


async def test_driver_memory_is_flat_over_waves_of_requests():
    """A small soak without HTTP: waves of 150 streams through the driver (engine 200x faster than the wall).
    Once the engine's bounded histories have filled (two waves), three more leave nothing behind: no stream,
    no request, traced memory within 512 KB (it moves by ~150 KB wave to wave, up and down)."""
    need("prometheus_client")
    import asyncio
    import tracemalloc

    from engine.config import EngineConfig
    from engine.serving.live import LiveEngine
    from tui.api.driver import Driver

    d = Driver(LiveEngine(EngineConfig(users=0, scheduler="chunked", max_batch=512)), 200.0, "m")
    task = asyncio.create_task(d.run())

    async def wave() -> None:
        streams = [d.submit(300, 10, prompt_text=str(i)) for i in range(150)]
        for s in streams:
            while not s.done:
                s.event.clear()
                await s.event.wait()

    tracemalloc.start()
    try:
        for _ in range(2):
            await asyncio.wait_for(wave(), 60)
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(3):
            await asyncio.wait_for(wave(), 60)
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
        task.cancel()
    assert not d.streams and d.live.running == 0 and d.live.waiting == 0
    assert d.generation_tokens == 5 * 150 * 10
    assert grown < 512 * 1024, grown


@pytest.mark.parametrize("argv, says", [(["--output", "nope"], "--output"), (["--time-scale", "0"], "--time-scale"),
                                        (["--max-num-seqs", "-4"], "--max-num-seqs"), (["--model", "nope-9b"], "nope-9b")])
def test_bad_options_are_one_line_and_exit_2(argv, says):
    need("uvicorn")
    import subprocess
    import sys

    from tests.tui.api_server import free_port

    p = subprocess.run([sys.executable, "-m", "tui.cli", "serve-api", "--port", str(free_port()), *argv],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
