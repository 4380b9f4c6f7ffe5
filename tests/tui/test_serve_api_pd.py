"""`serve-api --pd 1:1`: prefill/decode disaggregation behind one address, driven by the official openai client over
loopback; its times are the engine's (a LiveFleet with the same split, alone), its ports count each side."""

from __future__ import annotations

import time

from tests.tui.api_server import metric_at, need, serving

SCALE = 2.0  # engine seconds per wall second
LINK = "2"  # GB/s per GPU: a 1,000-token prompt's KV (~200 kB a token) takes tens of ms to cross


def _alone(pd: bool, output: int) -> list[float]:
    """The engine times of one 1,000-token prompt's tokens, served alone: P/D 1:1 on the test's link, or one
    colocated engine."""
    from engine.config import EngineConfig
    from engine.fleet.live import LiveFleet

    cfg = EngineConfig(users=0, scheduler="chunked")
    f = LiveFleet(cfg, 2, pd=(1, 1), kv_link_gbps=float(LINK)) if pd else LiveFleet(cfg, 1)
    f.submit(1000, output, 0.0, prompt_text="x")
    return [e.t for e in f.advance(100.0)]


def test_openai_client_streams_through_prefill_then_decode():
    need("openai")
    import openai

    n = 120
    pd = _alone(True, n)
    colocated = _alone(False, n)
    # The first token comes after the prefill, the KV copy and a decode step: later than on one engine.
    assert len(pd) == n and pd[0] > colocated[0] + 0.01
    with serving("--time-scale", str(SCALE), "--pd", "1:1", "--kv-link-gbps", LINK,
                 "--replica-ports", "auto") as (base, driver):
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
        t0 = time.monotonic()
        stamps, usage = [], None
        for c in client.completions.create(model="generic-14b", prompt="x" * 4000, max_tokens=n, stream=True,
                                           stream_options={"include_usage": True}):
            if c.choices and c.choices[0].text:
                stamps.append(time.monotonic() - t0)
            usage = c.usage or usage
        assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (1000, n)
        assert len(stamps) == n
        # TTFT: never before the engine's (prefill + copy + first decode step); the HTTP path adds a few ms.
        assert pd[0] / SCALE * 0.95 <= stamps[0] < pd[0] / SCALE + 0.5, (stamps[0], pd[0])
        # The rest come at the decode replica's pace.
        span, want = stamps[-1] - stamps[0], (pd[-1] - pd[0]) / SCALE
        assert want * 0.95 <= span < want + 0.5, (span, want)
        prefill, decode = driver.urls[1:]
        gen, prompt = "vllm:generation_tokens_total", "vllm:prompt_tokens_total"
        assert (metric_at(base, prompt), metric_at(base, gen)) == (1000, n)
        assert (metric_at(prefill, prompt), metric_at(prefill, gen)) == (1000, 0)  # the prompt was read there
        assert (metric_at(decode, prompt), metric_at(decode, gen)) == (0, n)  # the answer was written there
        assert metric_at(decode, "vllm:e2e_request_latency_seconds_count") == 1
        assert metric_at(base, "vllm:kv_cache_usage_perc") == 0
        driver.live.check()


def test_pd_options_that_contradict_or_do_nothing_are_refused():
    import pytest

    from engine.errors import InputError
    from tui.cli import build_parser
    from tui.commands.serve_api_cmd import fleet_shape

    def shape(*argv: str):
        words = ["serve-api", *argv]
        args = build_parser(words).parse_args(words)
        return fleet_shape(args), args.replicas

    assert shape("--pd", "2:3") == ((2, 3), 5)
    assert shape("--pd", "2:3", "--replicas", "5", "--router", "least-loaded") == ((2, 3), 5)
    assert shape() == (None, 1)
    for argv, says in [(("--pd", "2:3", "--replicas", "4"), "--replicas is 4"), (("--kv-link-gbps", "5"), "--pd"),
                       (("--pd", "0:2"), "no prefill"), (("--pd", "1:2", "--router", "least-loaded"), "P of 2"),
                       (("--pd", "x"), "P:D")]:
        with pytest.raises(InputError, match=says):
            shape(*argv)
