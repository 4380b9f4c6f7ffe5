"""Readers of request traces (arrivals and lengths, no latencies): Mooncake JSON lines and BurstGPT CSV.

Mooncake goes through the `--trace` path's own reader (engine.traffic.trace), so `run --trace` and `replay`
read its milliseconds and its hash ids alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.errors import InputError
from engine.evidence.measured.doc import Doc
from engine.evidence.measured.record import Measured, make


class Mooncake:
    """Mooncake's trace (github.com/kvcache-ai/Mooncake, FAST25-release/traces): JSON lines of timestamp (ms),
    input_length, output_length and hash_ids (one id per 512-token block; shared ids, a shared prefix)."""

    name = "mooncake"
    title = "Mooncake trace JSON lines"

    def detect(self, doc: Doc) -> bool:
        return doc.kind == "jsonl" and {"timestamp", "input_length", "output_length"} <= doc.keys()

    def read(self, doc: Doc) -> Measured:
        from engine.traffic.trace import MOONCAKE_BLOCK_TOKENS, load_trace

        t = load_trace(doc.label)
        return make(doc.label, self.name, t.arrival, t.prompt, t.output, prefix=t.prefix, prefix_len=t.prefix_len,
                    settings={"block_tokens": MOONCAKE_BLOCK_TOKENS})


class BurstGPT:
    """BurstGPT's CSV (github.com/HPMLL/BurstGPT, README): Timestamp (s from the trace's start), Model, Request
    tokens, Response tokens, Total tokens, Log Type; a row with 0 response tokens is a failed request."""

    name = "burstgpt"
    title = "BurstGPT CSV"
    NEED = ("Timestamp", "Request tokens", "Response tokens")

    def detect(self, doc: Doc) -> bool:
        return doc.kind == "csv" and set(self.NEED) <= doc.keys()

    def read(self, doc: Doc) -> Measured:
        rows: list[dict[str, Any]] = doc.data
        if not rows:
            raise InputError(f"{doc.label}: no requests in the file")
        try:
            resp = np.array([float(r["Response tokens"]) for r in rows])
        except (TypeError, ValueError):
            resp = None
        if resp is None or not np.isfinite(resp).all():
            raise InputError(f"{doc.label}: field 'Response tokens' must be numbers")
        ok = [r for r, n in zip(rows, resp, strict=True) if n > 0]
        models = sorted({str(r.get("Model", "")) for r in ok} - {""})
        return make(doc.label, self.name, [r["Timestamp"] for r in ok], [r["Request tokens"] for r in ok],
                    [r["Response tokens"] for r in ok], settings={"models": models}, dropped=len(rows) - len(ok),
                    names={"start": "Timestamp", "prompt": "Request tokens", "output": "Response tokens"})
