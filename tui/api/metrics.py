"""GET /metrics: vLLM's metric names and types, from the simulated engine, through prometheus_client.

Gauges and counters are read from the engine when scraped (a collector, so they can never drift from its
state); latency histograms are observed as tokens go out. vLLM's histograms are in wall seconds, stamped when
the driver hands a token to its stream: what a client measures, less the HTTP path (at --time-scale 10 a step
of 20 ms engine time is 2 ms of wall). At a --time-scale other than 1 the engine-clock values are kept too,
under tokensim:engine_time_to_first_token_seconds, tokensim:engine_inter_token_latency_seconds,
tokensim:engine_e2e_request_latency_seconds and tokensim:engine_request_queue_time_seconds.
Names, types and the model_name label follow vLLM's V1 metrics (vllm/v1/metrics/loggers.py,
docs "Production Metrics"); tokensim's own are prefixed tokensim:.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple, Protocol

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# Bucket bounds (seconds), spanning a fast single-GPU answer to a long queue at each latency's scale.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0)
ITL_BUCKETS = (0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
               0.75, 1.0, 2.5, 5.0, 10.0)
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0)


class State(Protocol):
    """What the collector reads: the driver's view of the engine."""

    running: int
    waiting: int
    kv_usage: float
    preemptions: int
    prefix_queries: int
    prefix_hits: int
    prompt_tokens: int
    generation_tokens: int
    lag_s: float
    rejected: int
    aborted: int


class _Collector(Collector):
    """Gauges and counters read from the engine at each scrape."""

    def __init__(self, state: State, model: str) -> None:
        self.state = state
        self.model = model

    def _one(self, fam: GaugeMetricFamily | CounterMetricFamily, v: float) -> Metric:
        fam.add_metric([self.model], v)
        return fam

    def collect(self) -> Iterator[Metric]:
        s, lb = self.state, ["model_name"]
        yield self._one(GaugeMetricFamily("vllm:num_requests_running", "Requests in the running batch.", labels=lb),
                        s.running)
        yield self._one(GaugeMetricFamily("vllm:num_requests_waiting", "Requests waiting (queued or preempted).",
                                          labels=lb), s.waiting)
        yield self._one(GaugeMetricFamily("vllm:kv_cache_usage_perc", "KV-cache usage; 1 means 100 percent.",
                                          labels=lb), s.kv_usage)
        for name, doc, v in (
                ("vllm:prompt_tokens", "Prefill tokens processed.", s.prompt_tokens),
                ("vllm:generation_tokens", "Generation tokens processed.", s.generation_tokens),
                ("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", s.prefix_queries),
                ("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", s.prefix_hits),
                ("vllm:num_preemptions", "Preemptions of running requests.", s.preemptions),
                ("tokensim:requests_rejected", "Requests refused at the door (queue full).", s.rejected),
                ("tokensim:requests_aborted", "Requests dropped because the client went away.", s.aborted)):
            yield self._one(CounterMetricFamily(name, doc, labels=lb), v)
        yield self._one(GaugeMetricFamily("tokensim:engine_lag_seconds",
                                          "Wall seconds the engine clock is behind (0: keeping up).", labels=lb),
                        s.lag_s)


class Hists(NamedTuple):
    """The four latency histograms of one clock: time to first token, between tokens, end to end, queued."""

    ttft: Any
    itl: Any
    e2e: Any
    queue: Any


class Metrics:
    """The registry /metrics exposes, and the histograms the driver observes into: vLLM's names in wall seconds
    (what a client measures), and with `engine_time` (a --time-scale other than 1) the same four in engine
    seconds under tokensim:engine_ names."""

    def __init__(self, state: State, model: str, engine_time: bool = False) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_Collector(state, model))
        self.wall = self._hists("vllm:", "", model)
        self.engine = self._hists("tokensim:engine_", " (engine clock)", model) if engine_time else None

    def _hists(self, prefix: str, clock: str, model: str) -> Hists:
        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Any:
            return Histogram(prefix + name, doc + clock, ["model_name"], buckets=buckets,
                             registry=self.registry).labels(model)

        return Hists(hist("time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS),
                     hist("inter_token_latency_seconds", "Time between consecutive tokens.", ITL_BUCKETS),
                     hist("e2e_request_latency_seconds", "End-to-end request latency.", REQUEST_BUCKETS),
                     hist("request_queue_time_seconds", "Time waiting before first admitted.", REQUEST_BUCKETS))

    def exposition(self) -> bytes:
        """The text exposition format, as prometheus_client writes it."""
        return generate_latest(self.registry)
