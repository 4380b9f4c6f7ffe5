"""The claims that need the serving loop (C13, C14, C17, C18, C20, C21, C22, C23, C25), found by running it.

Each function runs the Engine (or, for the context wall, sweeps the step model the engine prices with)
until the crossover the claim is about, and returns one claims row: id, claim, article, simulated,
unit, agrees, note (plus the display texts engine.evidence.claims uses). `LOOP_CLAIMS` maps id -> function;
engine.evidence.claims merges it into `tokensim claims`. Each runs in well under 2 s of CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.config import MAX_BATCHED_TOKENS, EngineConfig
from engine.evidence.claim_rows import Row, row
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepCost, StepModel, StepOptions, context_wall, crossover_batch
from engine.search import first_true
from engine.serving.engine import Engine


def _cfg(**kw: Any) -> EngineConfig:
    """The articles' setting (generic-14b on an H100 SXM) with overrides."""
    base: dict[str, Any] = {"hardware": "h100-sxm", "model": "generic-14b", "seed": 0}
    base.update(kw)
    return EngineConfig(**base)


def _served(**kw: Any) -> Engine:
    """An engine run to its --requests bound."""
    e = Engine(_cfg(**kw))
    e.run()
    return e


def _full_decode_step(batch: int, context: int = 1, **kw: Any) -> StepCost:
    """Run `batch` users with `context`-token prompts until the engine takes a decode step at full batch."""
    e = Engine(_cfg(users=batch, max_batch=batch, prompt=str(context), output="4", requests=batch,
                    max_batched_tokens=max(MAX_BATCHED_TOKENS, batch * context), **kw))
    while True:
        r = e.step()
        if r.cost is not None and r.cost.seqs == batch and r.cost.tokens == batch:
            return r.cost
        if e.finished:
            raise RuntimeError(f"no full-batch decode step at batch {batch}")


def engine_crossover_batch(ideal: bool, model: str = "generic-14b", limit: int = 4096) -> int:
    """Smallest batch whose decode step the engine prices compute-bound (bisection over engine runs)."""
    def compute_bound(b: int) -> bool:
        """The engine's full-batch decode step at b is compute-bound."""
        return _full_decode_step(b, model=model, ideal=ideal, kv_pool_blocks=1 << 20).bound == "compute"

    return first_true(compute_bound, 1, limit)


def c13() -> Row:
    """C13: the saturating batch B*, from engine runs at growing batch (ideal and calibrated)."""
    ideal = engine_crossover_batch(True)
    calib = engine_crossover_batch(False)
    ridge = load_hardware("h100-sxm").ridge("bf16")
    rt = Engine(_cfg(users=1, requests=1)).step_model.runtime
    return row("C13", 300, ideal, "sequences", abs(ideal - 300) <= 0.25 * 300,
                f"ideal B* = ridge {ridge:.0f} plus the KV and activation bytes each sequence adds; the calibrated"
                f" runtime ({rt.name}) reaches {rt.flops_eff:.0%} of peak FLOP/s but {rt.bw_eff:.0%} of bandwidth, so"
                f" decode turns compute-bound sooner, at {calib}",
                simulated_text=f"{ideal} ideal, {calib} calibrated", exact=calib)


def c14() -> Row:
    """C14: $/Mtok out at batch 1 over $/Mtok out at the calibrated B*, both from engine runs."""
    sat = engine_crossover_batch(False)
    one = _served(users=1, max_batch=1, prompt="100", output="200", requests=3).metrics()
    full = _served(users=sat, max_batch=sat, prompt="100", output="200", requests=2 * sat).metrics()
    ratio = one["cost_per_mtok_out"] / full["cost_per_mtok_out"]
    return row("C14", 1000, ratio, "x", abs(ratio - 1000) <= 0.5 * 1000,
                f"batch 1 pays the whole weight read per token (${one['cost_per_mtok_out']:.2f}/Mtok out); at the"
                f" saturating batch {sat} the read is shared (${full['cost_per_mtok_out']:.3f}/Mtok). The step barely"
                " slows up to B*, so the ratio is at most about B*, a few hundred: the article's 1000x overstates it",
                simulated_text=f"{ratio:,.0f}x (batch 1 vs {sat})")


def c17() -> Row:
    """C17: users whose whole history fits the pool before the first one waits (bisection on runs)."""
    prompt, output = 8000, 500
    probe = Engine(_cfg(users=1, prompt=str(prompt), output=str(output), requests=1))
    blocks = probe.kv_blocks_total
    per_user = -(-(prompt + output) // 16)  # blocks one user's history needs at the end of its answer
    fit = blocks // per_user

    def run(n: int) -> dict[str, Any]:
        # One question per user, all at once; no token budget, so only the KV pool can make anyone wait.
        """Metrics of n users asking once each, all at t=0."""
        return _served(users=n, max_batch=1024, max_batched_tokens=1 << 24, prompt=str(prompt), output=str(output),
                       requests=n).metrics()

    def waits(n: int) -> bool:
        """Somebody waited for KV blocks (queued or preempted)."""
        m = run(n)
        return bool(m["preemptions"] or (m["queue_delay_s"]["p99"] or 0.0) > 0)

    most = first_true(waits, 1, 4 * fit + 4) - 1  # the fewest users at which someone waits for KV blocks, less one
    m = run(most)
    sm = probe.step_model
    gb_each = m["kv_peak_bytes"] / most / 1e9
    return row("C17", None, most, "users", most == fit,
                f"each user's {prompt + output:,}-token history holds {gb_each:.2f} GB of KV whatever the batch"
                f" (the weights are shared, the KV is not): the {blocks * 16 * sm.kv_bytes_per_token / 1e9:.0f} GB"
                f" pool holds {most} such users and user {most + 1} waits",
                article_text="KV per user, not shared",
                simulated_text=f"{most} users fit, {gb_each:.2f} GB each")


def c18() -> Row:
    # Article: L* = weight bytes / (B* x KV bytes per token) = 100 GB / (300 x 2 KB).
    """C18: context at which a user's KV read passes their share of the weight read at B*, per model."""
    article = 100e9 / (300 * 2e3)
    h = load_hardware("h100-sxm")
    rows = []
    for name, kv, tp in (("generic-14b", "fp8", 1), ("generic-14b", "bf16", 1), ("llama-3.1-70b", "fp8", 2),
                         ("deepseek-v3", "fp8", 8)):
        sm = StepModel(h, load_model(name), StepOptions(ideal=True, kv_dtype=kv, tp=tp))
        b = crossover_batch(sm)  # B* per model at context 0 (C13 finds the same by running the engine)
        rows.append((name, kv, b, context_wall(sm, b), context_wall(sm, 1)))
    g = rows[0]
    per_tok = StepModel(h, load_model("generic-14b"), StepOptions(kv_dtype="fp8")).kv_bytes_per_token
    others = "; ".join(f"{n} ({kv} KV) {L:,} at B* {b}" for n, kv, b, L, _ in rows[1:])
    return row("C18", article, g[3], "tokens", abs(g[3] - article) <= 0.3 * article,
                f"the article's 2 KB is one layer's KV: all {load_model('generic-14b').layers} layers of generic-14b"
                f" hold {per_tok / 1e3:.0f} KB a token, so at B* = {g[2]} the wall is at {g[3]:,} tokens"
                f" (alone at batch 1: {g[4]:,}); {others}",
                article_text=f"{article:,.0f} tokens",
                simulated_text=f"{g[3]:,} tokens (generic-14b, fp8 KV, B* {g[2]})")


def _cost_at(batch: int) -> tuple[float, float]:
    """$/Mtok in and out from a run of `batch` users at max batch `batch`."""
    m = _served(users=batch, max_batch=batch, prompt="1000", output="200", requests=2 * batch).metrics()
    return m["cost_per_mtok_in"], m["cost_per_mtok_out"]


def c20() -> Row:
    """C20: output/input cost ratio from runs, and the batch where it falls to 5x."""
    ratio = {}

    def r(b: int) -> float:
        """Output/input cost ratio at batch b (cached)."""
        if b not in ratio:
            i, o = _cost_at(b)
            ratio[b] = (o / i, i, o)
        return ratio[b][0]

    b5 = first_true(lambda b: r(b) <= 5, 1, 512)  # the ratio falls as the batch grows: where it reaches 5
    r1, r5 = r(1), r(b5)
    _, i5, o5 = ratio[b5]
    price = load_hardware("h100-sxm").price_per_hour
    return row("C20", 5, r5, "x", r1 > 1 and 4 <= r5 <= 6 and b5 < 512,
                f"at ${price:g}/GPU-hour, 1,000-token prompts and 200-token answers: decode costs {r1:,.0f}x prefill"
                f" per token at batch 1, falling with the batch to 5x at batch {b5}"
                f" (${i5:.3f} in, ${o5:.3f} out per Mtok); a prefill shares each weight read over the whole prompt",
                simulated_text=f"5x at batch {b5} ({r1:,.0f}x at batch 1)", exact=float(b5))


def c21() -> Row:
    """C21: the fast lane's cost and per-user speed over the normal lane's (scene 12's setting)."""
    e = Engine(_cfg(users=50, fast_share=0.10, fast_max_batch=5, prompt="3000", output="1000", max_batch=1024))
    e.advance(40.0)
    f, n = e.metrics(fast=True), e.metrics(fast=False)
    price = f["cost_per_mtok_out"] / n["cost_per_mtok_out"]
    # A user's speed as scene 12 reads it (fast_speedup_x): one over each lane's median time per output token over
    # its answers so far, not the speeds over the last ticks, which swing with the batch at that moment.
    speed = n["tpot_s"]["p50"] / f["tpot_s"]["p50"]
    ok = abs(price - 6) <= 0.25 * 6 and abs(speed - 2.5) <= 0.25 * 2.5
    return row("C21", 6, price, "x price", ok,
                f"a dedicated lane at batch {f['batch']:.0f} vs the normal lane's {n['batch']:.0f} (50 users,"
                f" 3,000-token prompts, 1,000-token answers): {speed:.1f}x the speed per user for {price:.1f}x the"
                " cost per output token; the exact figures depend on how full the normal batch runs",
                article_text="6x price for 2.5x speed", simulated_text=f"{price:.1f}x price for {speed:.1f}x speed")


def c22() -> Row:
    # Long conversations and no token budget, so the KV pool is the only reason to wait.
    """C22: p90 queue delay against users, zero until the KV pool is full, then climbing."""
    prompt, output = 4000, 400
    pts = []
    for n in (16, 32, 48, 64, 96, 128):
        m = _served(users=n, max_batch=1024, max_batched_tokens=1 << 24, prompt=str(prompt), output=str(output),
                    requests=3 * n).metrics()
        pts.append((n, m["queue_delay_s"]["p90"] or 0.0))
    fit = Engine(_cfg(users=1, requests=1)).kv_blocks_total // -(-(prompt + output) // 16)
    delays = [d for _, d in pts]
    rising = all(b >= a for a, b in zip(delays, delays[1:], strict=False))
    quiet = all(d == 0 for n, d in pts if n <= fit)
    busy = all(d > 0 for n, d in pts if n > fit)
    txt = ", ".join(f"{n}: {d:.1f} s" for n, d in pts)
    return row("C22", None, delays[-1], "s queue delay (p90)", rising and quiet and busy,
                f"{prompt:,}-token prompts, {output}-token answers: the pool holds {fit} conversations; up to that"
                f" nobody waits, past it requests wait for blocks and the p90 queue delay climbs with users ({txt})",
                article_text="queueing once the KV pool is full",
                simulated_text=f"p90 wait {delays[0]:.1f} s at {pts[0][0]} users -> {delays[-1]:.1f} s at {pts[-1][0]}")


def c23() -> Row:
    """C23: visible TTFT minus raw TTFT with 500 hidden tokens, against 500 x TPOT."""
    think = 500
    m = _served(users=8, max_batch=64, prompt="1000", think=str(think), output="200", requests=16).metrics()
    vis, raw, tpot = m["ttft_s"]["p50"], m["ttft_raw_s"]["p50"], m["tpot_s"]["p50"]
    gap = vis - raw
    return row("C23", None, gap, "s later", vis > raw and abs(gap - think * tpot) <= 0.2 * think * tpot,
                f"{think} hidden tokens at {tpot * 1e3:.1f} ms each come before the answer: the first visible token at"
                f" {vis:.2f} s, the first token of any kind at {raw:.3f} s",
                article_text="first visible token comes later",
                simulated_text=f"TTFT {vis:.2f} s visible vs {raw:.3f} s raw")


def _tpot_ms(model: str, context: int) -> float:
    """Median time per output token (ms) of one user alone at this prompt length."""
    m = _served(users=1, max_batch=1, model=model, prompt=str(context), output="32", requests=1).metrics()
    return m["tpot_s"]["p50"] * 1e3


def c25() -> Row:
    """C25: batch-1 time per token against model size and against context length."""
    sizes = [(name, _tpot_ms(name, 1000)) for name in ("qwen2.5-7b", "generic-14b", "qwen2.5-32b")]
    ctxs = [(c, _tpot_ms("generic-14b", c)) for c in (1000, 32_000, 128_000)]
    grows = all(b[1] > a[1] for a, b in zip(sizes, sizes[1:], strict=False)) and \
        all(b[1] > a[1] for a, b in zip(ctxs, ctxs[1:], strict=False))
    sm = StepModel(load_hardware("h100-sxm"), load_model("generic-14b"))
    kv_ms = (ctxs[-1][0] - ctxs[0][0]) * sm.kv_bytes_per_token / sm.sustained_bandwidth * 1e3
    added = ctxs[-1][1] - ctxs[0][1]
    return row("C25", None, added, "ms per token", grows and abs(added - kv_ms) <= 0.15 * kv_ms,
                "batch-1 time per token, 1K-token context: " + ", ".join(f"{n} {t:.1f} ms" for n, t in sizes)
                + "; generic-14b at " + ", ".join(f"{c // 1000}K {t:.1f} ms" for c, t in ctxs)
                + f": the extra is the KV read ({kv_ms:.1f} ms for 127K tokens at the calibrated bandwidth)",
                article_text="model size and context each add time",
                simulated_text=f"+{added:.1f} ms/token from 1K to 128K context; {sizes[0][1]:.1f} -> {sizes[-1][1]:.1f}"
                               " ms from 7B to 32B")


LOOP_CLAIMS: dict[str, Callable[[], Row]] = {
    "C13": c13, "C14": c14, "C17": c17, "C18": c18, "C20": c20, "C21": c21, "C22": c22, "C23": c23, "C25": c25,
}

