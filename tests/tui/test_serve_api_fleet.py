"""`serve-api --replicas N`: a fleet behind one address (its router picks), and each replica on its own port with
its own /metrics (an external router's view), driven by the official openai client over loopback."""

from __future__ import annotations

from tests.tui.api_server import metric_at, need, serving


def test_fleet_behind_one_address_and_one_port_per_replica():
    need("openai")
    import openai

    gen = "vllm:generation_tokens_total"
    with serving("--time-scale", "10", "--replicas", "2", "--replica-ports", "auto") as (base, driver):
        rep = driver.urls[1:]
        door = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
        # Four requests through the door: round-robin puts two on each replica.
        outs = [door.completions.create(model="generic-14b", prompt="spread me " * 40, max_tokens=20)
                for _ in range(4)]
        assert [o.usage.completion_tokens for o in outs] == [20] * 4
        assert metric_at(base, gen) == 80
        assert [metric_at(u, gen) for u in rep] == [40, 40]
        # Straight to replica 1's port (streaming): only it serves, its /metrics and the door's count it.
        one = openai.OpenAI(base_url=rep[1] + "/v1", api_key="none", max_retries=0)
        chunks = list(one.chat.completions.create(model="generic-14b", max_tokens=7, stream=True,
                                                  messages=[{"role": "user", "content": "just you"}]))
        assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 7
        assert [metric_at(u, gen) for u in rep] == [40, 47] and metric_at(base, gen) == 87
        assert metric_at(rep[1], "vllm:e2e_request_latency_seconds_count") == 3
        assert metric_at(rep[1], "vllm:num_requests_running") == 0 and metric_at(base, "vllm:kv_cache_usage_perc") == 0
        driver.live.check()


def test_least_loaded_door_sends_a_request_to_the_idle_replica():
    """A long stream on replica 0, a short request done on replica 1, then another stream: least-loaded sends it
    to replica 1 (idle) where round-robin's turn would have put it beside the first on replica 0."""
    need("httpx")
    import httpx

    with serving("--time-scale", "1", "--replicas", "2", "--router", "least-loaded") as (base, driver):
        url = base + "/v1/completions"
        with httpx.Client(timeout=20) as c:
            streams = []
            for k in range(2):
                if k:
                    assert c.post(url, json={"prompt": "short", "max_tokens": 2}).status_code == 200
                cm = c.stream("POST", url, json={"prompt": "overlap " * 30, "max_tokens": 400, "stream": True})
                lines = cm.__enter__().iter_lines()  # (kept: a dropped iterator would close the stream)
                next(lines)  # its first token: it is running
                streams.append((cm, lines))
            assert [e.running for e in driver.live.replicas] == [1, 1]
            for cm, _ in streams:
                cm.__exit__(None, None, None)  # hang up: the requests are aborted
