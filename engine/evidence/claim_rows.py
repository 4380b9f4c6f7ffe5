"""The claims' ids, titles and row shape (CLAIMS.md), shared by every module that computes a claim.

engine.evidence.claims (physics), engine.evidence.claims_loop (the serving loop) and engine.evidence.validate (C24)
each build rows with
`row`; engine.evidence.claims gathers them. Scenes check their checkpoints' claim ids against CLAIM_IDS.
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from typing import Any

Row = dict[str, Any]

# One line each, for the table (the full wording is in CLAIMS.md).
TITLES: dict[str, str] = {
    "C01": "14B dense model in 16-bit weights = 28 GB",
    "C02": "batch-1 decode floor on H100: 8.4 ms, ~119 tok/s",
    "C03": "writing ~100 tokens reads ~2.8 TB",
    "C04": "one token needs ~560 L2 shelf-loads",
    "C05": "each SM's tray is ~256 KB",
    "C06": "weights leave ~52 of 80 GB for KV and scratch",
    "C07": "HBM is hundreds of times faster than an SSD",
    "C08": "compute x2: decode unchanged, long prefill ~2x faster",
    "C09": "prefill is compute-bound, decode bandwidth-bound",
    "C10": "119 tok/s is 5-6x a reading pace of 20 chars/s",
    "C11": "Rubin reads its 288 GB once in ~15-20 ms",
    "C12": "peak FLOP/s per byte/s is ~300 across generations",
    "C13": "dense bf16 decode needs batch ~300 to stop being bandwidth-bound",
    "C14": "without batching a token costs ~1000x more",
    "C15": "MoE saturating batch grows by total/active (DeepSeek-V3 ~5,400)",
    "C16": "KV per token 2 KB; 200K tokens 400 MB; 1,000 users 400 GB",
    "C17": "KV cache is not amortised by batching",
    "C18": "the context wall near ~200K tokens",
    "C19": "in decode the compute units mostly wait (90 % idle)",
    "C20": "output tokens cost ~5x input tokens",
    "C21": "fast mode: ~6x price for ~2.5x speed",
    "C22": "a busy server means queueing once the KV pool is full",
    "C23": "hidden thinking tokens delay the first visible token",
    "C24": "published A100 speeds: small model < 1 min, 72B ~2 min for 2,048 tokens",
    "C25": "a bigger model or a longer conversation each add time per token",
    "C26": "equal spend on serving and training: ~100x Chinchilla's tokens per param",
}
CLAIM_IDS = tuple(TITLES)


@cache
def reference() -> dict[str, Any]:
    """Reference figures (SSD speed, rack memory, reading pace) with their sources."""
    return tomllib.loads(resources.files("engine").joinpath("presets", "reference.toml").read_text("utf-8"))


def row(cid: str, article: float | None, simulated: float, unit: str, agrees: bool, note: str = "",
        article_text: str = "", simulated_text: str = "", exact: float | None = None) -> Row:
    """One claims row; the *_text fields say the figures the way a person would (article None: it gives none)."""
    default_article = "-" if article is None else f"{article:g} {unit}"
    return {"id": cid, "claim": TITLES[cid], "article": article, "simulated": simulated, "unit": unit,
            "agrees": bool(agrees), "note": note, "article_text": article_text or default_article,
            "simulated_text": simulated_text or f"{simulated:,.3g} {unit}", "exact": exact, "pending": False}


def pending(cid: str, why: str) -> Row:
    """A claim the engine cannot compute yet (its module is missing)."""
    r = row(cid, float("nan"), float("nan"), "", False, why, "-", "pending")
    r.update(article=None, simulated=None, agrees=None, pending=True)
    return r
