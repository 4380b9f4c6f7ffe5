"""Readers of benchmark tools' per-request results: vllm bench serve, GuideLLM, AIPerf, inference-perf.

Each reads the fields its tool documents (tests/data/results/README.md cites where each is defined), checks
their unit the way the file allows (a unit named per value, epoch timestamps by their size, per-request values
against the file's own summary means) and drops the requests the file marks as failed, counting them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine import validation as V
from engine.errors import InputError
from engine.evidence.measured.doc import Doc
from engine.evidence.measured.record import Measured, check_mean, epoch_seconds, make, unit_scale


def _lists(d: dict[str, Any], keys: tuple[str, ...], where: str) -> dict[str, list[Any]]:
    """Per-request lists of one length (InputError naming the field that differs)."""
    out: dict[str, list[Any]] = {}
    for k in keys:
        if not isinstance(d.get(k), list):
            raise V.fail(where, k, "a list (one entry per request)", d.get(k))
        out[k] = d[k]
    n = {k: len(v) for k, v in out.items()}
    if len(set(n.values())) > 1:
        raise InputError(f"{where}: per-request fields of unequal length: "
                         f"{', '.join(f'{k} {v}' for k, v in n.items())}")
    return out


def _mean_gap(gaps: Any, where: str, j: int) -> float:
    """A request's mean inter-token gap from its list of gaps (NaN for none: one output token)."""
    if not isinstance(gaps, list):
        raise V.fail(where, f"itls[{j}]", "a list of seconds", gaps)
    return float(np.mean(np.asarray(gaps, dtype=np.float64))) if gaps else float("nan")


class VllmBench:
    """`vllm bench serve --save-result` (vllm/benchmarks/serve.py): per request input_lens, output_lens, ttfts
    (s), itls (a list of gaps per request, s), start_times (s, perf_counter), and the run's settings."""

    name = "vllm-bench"
    title = "vllm bench serve --save-result JSON"
    NEED = ("input_lens", "output_lens", "ttfts", "itls")
    SETTINGS = ("model_id", "tokenizer_id", "backend", "endpoint_type", "date", "num_prompts", "request_rate",
                "burstiness", "max_concurrency")

    def detect(self, doc: Doc) -> bool:
        return doc.kind == "json" and set(self.NEED) <= doc.keys()

    def read(self, doc: Doc) -> Measured:
        d, w = doc.data, doc.label
        if not isinstance(d, dict):
            raise InputError(f"{w}: expected one JSON object (vllm bench serve --save-result)")
        if "start_times" not in d:
            raise InputError(f"{w}: no start_times: when each request was sent is not in the file (vLLM's save-result"
                             " writes it); its arrivals cannot be replayed")
        keys = self.NEED + ("start_times",) + tuple(k for k in ("errors", "e2els") if isinstance(d.get(k), list))
        c = _lists(d, keys, w)
        failed = np.array([bool(e) for e in c.get("errors", [""] * len(c["ttfts"]))], dtype=bool)
        failed |= np.asarray(c["output_lens"], dtype=object) == 0
        ok = np.flatnonzero(~failed)
        pick = {k: [v[j] for j in ok] for k, v in c.items()}
        ttft = np.asarray(pick["ttfts"], dtype=np.float64)
        gaps = pick["itls"]
        itl = np.array([_mean_gap(g, w, j) for j, g in enumerate(gaps)])
        flat = np.array([x for g in gaps for x in g], dtype=np.float64)
        e2e = pick["e2els"] if "e2els" in pick else ttft + np.array([float(np.sum(g)) for g in gaps])
        settings = {k: d[k] for k in self.SETTINGS if k in d}
        if "model_id" in d:
            settings["model"] = d["model_id"]
        m = make(w, self.name, pick["start_times"], pick["input_lens"], pick["output_lens"], ttft=ttft, itl=itl,
                 e2e=e2e, settings=settings, dropped=int(failed.sum()),
                 names={"start": "start_times", "prompt": "input_lens", "output": "output_lens", "ttft": "ttfts",
                        "itl": "itls", "e2e": "e2els"})
        check_mean(m.ttft, d.get("mean_ttft_ms"), w, "ttfts", "mean_ttft_ms")  # after make: NaN, negatives first
        check_mean(flat, d.get("mean_itl_ms"), w, "itls", "mean_itl_ms")
        return m


class GuideLLM:
    """GuideLLM's `benchmarks.json` (guidellm/benchmark/benchmark.py, GenerativeTextResponseStats): per benchmark
    (a stage), requests.successful with prompt_tokens, output_tokens and epoch start_time, first_token_time,
    last_token_time, end_time."""

    name = "guidellm"
    title = "GuideLLM benchmarks.json"
    TIMES = ("start_time", "first_token_time", "last_token_time", "end_time")

    def detect(self, doc: Doc) -> bool:
        b = doc.data.get("benchmarks") if doc.kind == "json" and isinstance(doc.data, dict) else None
        return isinstance(b, list) and bool(b) and isinstance(b[0], dict) and "requests" in b[0]

    def read(self, doc: Doc) -> Measured:
        w = doc.label
        rows: list[dict[str, Any]] = []
        stage: list[int] = []
        dropped = 0
        for s, b in enumerate(doc.data["benchmarks"]):
            req = b.get("requests") if isinstance(b, dict) else None
            if not isinstance(req, dict) or not isinstance(req.get("successful"), list):
                raise V.fail(w, f"benchmarks[{s}].requests.successful", "a list of requests", req)
            rows += req["successful"]
            stage += [s] * len(req["successful"])
            dropped += sum(len(req.get(k) or []) for k in ("errored", "incomplete"))
        if not rows:
            raise InputError(f"{w}: no successful requests in any benchmark")
        col = {k: self._column(rows, k, w) for k in ("prompt_tokens", "output_tokens", *self.TIMES)}
        t = {k: epoch_seconds(np.asarray(col[k], dtype=np.float64), w, k) for k in self.TIMES}
        out = np.asarray(col["output_tokens"], dtype=np.float64)
        itl = np.where(out > 1, (t["last_token_time"] - t["first_token_time"]) / np.maximum(out - 1, 1), np.nan)
        ttft = t["first_token_time"] - t["start_time"]
        if all("time_to_first_token_ms" in r for r in rows):
            check_mean(ttft, float(np.mean([r["time_to_first_token_ms"] for r in rows])), w, "first_token_time",
                       "time_to_first_token_ms")
        worker = doc.data["benchmarks"][0].get("worker") or {}
        settings = {"model": worker.get("backend_model")} if isinstance(worker, dict) and "backend_model" in worker \
            else {}
        settings["benchmarks"] = len(doc.data["benchmarks"])
        return make(w, self.name, t["start_time"], col["prompt_tokens"], col["output_tokens"], ttft=ttft, itl=itl,
                    e2e=t["end_time"] - t["start_time"], stage=stage, settings=settings, dropped=dropped,
                    names={"start": "start_time", "ttft": "first_token_time", "itl": "last_token_time",
                           "e2e": "end_time", "prompt": "prompt_tokens", "output": "output_tokens"})

    @staticmethod
    def _column(rows: list[dict[str, Any]], key: str, where: str) -> list[Any]:
        """One field of every request (InputError naming the first request without it)."""
        for j, r in enumerate(rows):
            if not isinstance(r, dict) or r.get(key) is None:
                raise V.fail(where, f"requests[{j}].{key}", "present", None, got=False)
        return [r[key] for r in rows]


class AIPerf:
    """AIPerf's `profile_export.jsonl` (docs/tutorials/working-with-profile-exports.md): one record per request,
    metadata.request_start_ns, and metrics each as {value, unit}."""

    name = "aiperf"
    title = "AIPerf profile_export.jsonl"
    METRICS = {"prompt": "input_sequence_length", "output": "output_sequence_length", "ttft": "time_to_first_token",
               "itl": "inter_token_latency", "e2e": "request_latency"}

    def detect(self, doc: Doc) -> bool:
        return doc.kind == "jsonl" and {"metadata", "metrics"} <= doc.keys()

    def read(self, doc: Doc) -> Measured:
        w = doc.label
        cols: dict[str, list[float]] = {k: [] for k in ("start", *self.METRICS)}
        dropped = 0
        for n, r in enumerate(doc.data, 1):
            m, meta = r.get("metrics"), r.get("metadata")
            if r.get("error") or not isinstance(m, dict) or self.METRICS["ttft"] not in m:
                dropped += 1
                continue
            if not isinstance(meta, dict) or meta.get("request_start_ns") is None:
                raise V.fail(f"{w}:{n}", "metadata.request_start_ns", "present", None, got=False)
            cols["start"].append(float(meta["request_start_ns"]) * 1e-9)
            for k, name in self.METRICS.items():
                cols[k].append(self._value(m, name, f"{w}:{n}", k in ("prompt", "output")))
        return make(w, self.name, cols["start"], cols["prompt"], cols["output"], ttft=cols["ttft"], itl=cols["itl"],
                    e2e=cols["e2e"], dropped=dropped, names={"start": "request_start_ns", **self.METRICS})

    @staticmethod
    def _value(m: dict[str, Any], name: str, where: str, tokens: bool) -> float:
        """A metric's value in seconds (tokens as they are); NaN for an absent inter-token latency (one token)."""
        v = m.get(name)
        if v is None and name == "inter_token_latency":
            return float("nan")
        if not isinstance(v, dict) or "value" not in v:
            raise V.fail(where, f"metrics.{name}", "an object with value and unit", v)
        if tokens:
            return v["value"]
        return V.number(v["value"], f"metrics.{name}.value", where) * unit_scale(v.get("unit"), where,
                                                                                  f"metrics.{name}.unit")


class InferencePerf:
    """inference-perf's `per_request_lifecycle_metrics.json` (inference_perf/reportgen): a list of requests with
    start_time, end_time (s) and info.input_tokens, info.output_tokens, info.output_token_times (s)."""

    name = "inference-perf"
    title = "inference-perf per_request_lifecycle_metrics.json"

    def detect(self, doc: Doc) -> bool:
        return doc.kind == "json" and isinstance(doc.data, list) and {"start_time", "end_time", "info"} <= doc.keys()

    def read(self, doc: Doc) -> Measured:
        w = doc.label
        cols: dict[str, list[float]] = {k: [] for k in ("start", "prompt", "output", "ttft", "itl", "e2e")}
        dropped = 0
        for j, r in enumerate(doc.data):
            info = r.get("info") if isinstance(r, dict) else None
            if r.get("error") or not isinstance(info, dict):
                dropped += 1
                continue
            times = info.get("output_token_times")
            if not isinstance(times, list) or not times:
                raise V.fail(w, f"[{j}].info.output_token_times", "a list of token times (s)", times)
            t0 = V.number(r.get("start_time"), f"[{j}].start_time", w, lo=None)
            tk = np.asarray(times, dtype=np.float64)
            cols["start"].append(t0)
            cols["prompt"].append(info.get("input_tokens"))
            cols["output"].append(info.get("output_tokens"))
            cols["ttft"].append(float(tk[0]) - t0)
            cols["itl"].append(float(tk[-1] - tk[0]) / (tk.size - 1) if tk.size > 1 else float("nan"))
            cols["e2e"].append(V.number(r.get("end_time"), f"[{j}].end_time", w, lo=None) - t0)
        return make(w, self.name, cols["start"], cols["prompt"], cols["output"], ttft=cols["ttft"], itl=cols["itl"],
                    e2e=cols["e2e"], dropped=dropped,
                    names={"start": "start_time", "prompt": "info.input_tokens", "output": "info.output_tokens",
                           "ttft": "info.output_token_times[0] - start_time", "itl": "info.output_token_times",
                           "e2e": "end_time - start_time"})
