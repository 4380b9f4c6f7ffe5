"""Hand-built engine Snapshots for the pure renderer tests (no serving engine needed)."""

from __future__ import annotations

import numpy as np

from engine.physics.batch import Batch
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions
from engine.serving.snapshot import KV_BLOCK_TOKENS, Phase, RequestView, Snapshot


def make_snapshot(users: int = 6, *, hardware: str = "h100-sxm", model: str = "generic-14b", tick: int = 100,
                  phases: list[int] | None = None, kv_full: bool = False, opts: StepOptions | None = None,
                  history: int = 50, open_loop: bool = False) -> Snapshot:
    """A plausible mid-run snapshot: `users` closed-loop users cycling through every phase."""
    hw, m = load_hardware(hardware), load_model(model)
    sm = StepModel(hw, m, opts or StepOptions())
    n = users
    ph = np.array(phases if phases is not None else [(Phase.DECODING, Phase.PREFILL, Phase.THINKING, Phase.DECODING,
                                                     Phase.QUEUED, Phase.DONE)[i % 6] for i in range(n)], dtype=np.int8)
    prompt = np.full(n, 1000, dtype=np.int64)
    prefilled = np.where(ph == Phase.QUEUED, 0, np.where(ph == Phase.PREFILL, 400, 1000)).astype(np.int64)
    think = np.where(np.arange(n) % 3 == 2, 100, 0).astype(np.int64)
    output = np.full(n, 200, dtype=np.int64)
    gen = np.select([ph == Phase.DECODING, ph == Phase.THINKING, ph == Phase.DONE],
                    [think + 20 + np.arange(n) % 50, 40, think + 200], 0).astype(np.int64)
    ctx = prefilled + gen
    blocks = np.where((ph == Phase.QUEUED) | (ph == Phase.DONE), 0, -(-ctx // KV_BLOCK_TOKENS)).astype(np.int64)
    running = (ph == Phase.DECODING) | (ph == Phase.THINKING) | (ph == Phase.PREFILL)
    new = np.where(ph == Phase.PREFILL, 600, 1)[running]
    cost = sm.cost(Batch.of_rows(sm.model, new, ctx[running])) if running.any() else None
    total_blocks = int(sm.kv_capacity_bytes // (sm.kv_bytes_per_token * KV_BLOCK_TOKENS))
    used = total_blocks if kv_full else int(blocks.sum())
    req = RequestView(
        req_id=np.arange(n, dtype=np.int64) + 1000, user=np.full(n, -1) if open_loop else np.arange(n, dtype=np.int64),
        phase=ph, prompt_len=prompt, prefilled=prefilled, think_len=think, output_len=output, generated=gen,
        kv_blocks=blocks, fast=np.zeros(n, dtype=bool), arrival_s=np.linspace(0, 1, n))
    hist_t = tuple(i * 0.01 for i in range(history))
    return Snapshot(
        tick=tick, time_s=1.204, hardware=hw, model=m, opts=sm.opts, roof=sm.roof, scheduler="continuous", users=0 if open_loop else n,
        requests=req, last_step=cost, batch_size=int(running.sum()), kv_blocks_used=used,
        kv_blocks_total=total_blocks, weights_bytes=sm.weight_bytes_per_gpu, kv_capacity_bytes=sm.kv_capacity_bytes,
        reserve_bytes=sm.reserve_bytes, queued=int((ph == Phase.QUEUED).sum()), running=int(running.sum()),
        preempted=int((ph == Phase.PREEMPTED).sum()), done=int((ph == Phase.DONE).sum()), preemptions_total=0,
        bytes_moved={"hbm": 2.8e12, "l2": 2.8e12, "smem": 3e12},
        metrics={"tok_s_out": 465.0, "tok_s_per_user": 116.2, "ttft_p50": 0.041, "tpot_p50": 0.0086, "mfu": 0.009,
                 "bw_util": 0.92, "cost_per_mtok_in": 0.21, "cost_per_mtok_out": 5.7},
        history={"time_s": hist_t, "kv_util": tuple(min(1.0, i / history) for i in range(history)),
                 "queue": tuple(float(max(0, i - history // 2)) for i in range(history))},
    )
