"""A simulated run written as `vllm bench serve --save-result` writes a measured one, in its own field names,
so tools that read those results read tokensim's predictions (and engine.evidence.measured reads them back).

Per request: input_lens, output_lens, ttfts (s), itls (the gaps between tokens after the first, s), start_times
(s), e2els (s), errors; and the run's totals and summary means in vLLM's names. The engine keeps each request's
mean gap, not every gap, so a request's itls list is its mean gap repeated (output tokens - 1) times: the mean
and the per-request TPOT are exact, the spread within one request is not modelled.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import InputError
from engine.files import write_text_atomic


def result(lat: np.ndarray, times: np.ndarray, model_id: str, rate: float | None) -> dict[str, Any]:
    """The save-result dict for finished requests (engine.serving.accounting L and T rows), in arrival order."""
    from engine.serving.accounting import L, T

    order = np.argsort(times[:, T.ARRIVAL], kind="stable")
    lat, times = lat[order], times[order]
    start = times[:, T.ARRIVAL]
    ttft, e2e, tpot = lat[:, L.TTFT], lat[:, L.E2E], lat[:, L.TPOT]
    inp, out = times[:, T.PROMPT].astype(np.int64), times[:, T.OUTPUT].astype(np.int64)
    itls = [[float(g)] * int(max(o - 1, 0)) if np.isfinite(g) else [] for g, o in zip(tpot, out, strict=True)]
    flat = np.repeat(np.nan_to_num(tpot), np.maximum(out - 1, 0))
    n = int(start.size)
    duration = float(times[:, T.DONE].max() - start.min()) if n else 0.0

    def ms(x: np.ndarray, q: float | None = None) -> float | None:
        x = x[np.isfinite(x)]
        return None if not x.size else float(1e3 * (x.mean() if q is None else np.percentile(x, q)))

    out_d: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y%m%d-%H%M%S"), "backend": "tokensim", "endpoint_type": "simulated",
        "label": None, "model_id": model_id, "tokenizer_id": model_id, "num_prompts": n, "request_rate": rate,
        "burstiness": 1.0, "max_concurrency": None, "duration": duration, "completed": n, "failed": 0,
        "total_input_tokens": int(inp.sum()), "total_output_tokens": int(out.sum()),
        "request_throughput": n / duration if duration else 0.0,
        "output_throughput": float(out.sum()) / duration if duration else 0.0,
        "total_token_throughput": float(inp.sum() + out.sum()) / duration if duration else 0.0,
        "input_lens": inp.tolist(), "output_lens": out.tolist(), "ttfts": ttft.tolist(), "itls": itls,
        "start_times": start.tolist(), "e2els": e2e.tolist(), "errors": [""] * n}
    for name, x in (("ttft", ttft), ("tpot", tpot), ("itl", flat), ("e2el", e2e)):
        out_d |= {f"mean_{name}_ms": ms(x), f"median_{name}_ms": ms(x, 50), f"p99_{name}_ms": ms(x, 99)}
    return out_d


def write(path: str | Path, res: dict[str, Any], inputs: Sequence[str | None] = ()) -> None:
    """Write the result as JSON, whole or not at all, never over one of the run's `inputs` (engine.files)."""
    try:
        text = json.dumps(res, allow_nan=False) + "\n"
    except ValueError as e:
        raise InputError(f"--bench-json {path}: cannot write it ({e})") from None
    write_text_atomic(path, text, "--bench-json", inputs)


def from_sim(sim: Any) -> dict[str, Any]:
    """The save-result dict of an Engine's or a Fleet's finished requests (the last LATENCY_SAMPLES of them)."""
    from engine.evidence.measured.compare import finished

    lat, times = finished(sim)
    return result(lat, times, sim.step_model.model.name, sim.config.rate or None)
