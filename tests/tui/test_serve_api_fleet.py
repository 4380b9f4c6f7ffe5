"""`serve-api --replicas N`: a fleet behind one address (its router picks), and each replica on its own port with
its own /metrics (an external router's view), driven by the official openai client over loopback."""

from __future__ import annotations

import threading
import urllib.request

from tests.tui.api_server import need, serving


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in {url}/metrics")


def test_fleet_behind_one_address_and_one_port_per_replica():
    need("openai")
    import openai

    gen = "vllm:generation_tokens_total"
    with serving("--time-scale", "10", "--replicas", "2", "--router", "least-loaded",
                 "--replica-ports", "auto") as (base, driver):
        rep = driver.urls[1:]
        door = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
        # Four requests at once through the door: least-loaded puts two on each replica.
        outs: list[int] = []
        ths = [threading.Thread(target=lambda: outs.append(door.completions.create(
            model="generic-14b", prompt="spread me " * 40, max_tokens=20).usage.completion_tokens))
            for _ in range(4)]
        for t in ths:
            t.start()
        for t in ths:
            t.join(30)
        assert outs == [20] * 4
        assert _metric(base, gen) == 80
        assert [_metric(u, gen) for u in rep] == [40, 40]
        # Straight to replica 1's port (streaming): only it serves, its /metrics and the door's count it.
        one = openai.OpenAI(base_url=rep[1] + "/v1", api_key="none", max_retries=0)
        chunks = list(one.chat.completions.create(model="generic-14b", max_tokens=7, stream=True,
                                                  messages=[{"role": "user", "content": "just you"}]))
        assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 7
        assert [_metric(u, gen) for u in rep] == [40, 47] and _metric(base, gen) == 87
        assert _metric(rep[1], "vllm:e2e_request_latency_seconds_count") == 3
        assert _metric(rep[1], "vllm:num_requests_running") == 0 and _metric(base, "vllm:kv_cache_usage_perc") == 0
        driver.live.check()
