"""The read-only picture of an Engine that the TUI and the scenes render from."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from engine.physics.specs import Hardware, Model
from engine.physics.step import Roof, StepCost, StepOptions
from engine.serving.tables import KV_BLOCK_TOKENS as KV_BLOCK_TOKENS  # the app's and scenes' name for it


class Phase(IntEnum):
    """Where a request is. Every accepted request is in exactly one of these."""

    QUEUED = 0  # waiting for admission (KV blocks or a batch slot)
    PREFILL = 1  # prompt being read into the KV cache
    THINKING = 2  # generating hidden reasoning tokens
    DECODING = 3  # generating the visible answer
    DONE = 4
    PREEMPTED = 5  # evicted under KV pressure; waits to be recomputed


@dataclass(frozen=True, slots=True)
class RequestView:
    """Per-request arrays (struct of arrays), one entry per live or recently finished request.

    Arrays are copies: the engine never mutates a snapshot after handing it out.
    """

    req_id: np.ndarray  # int64
    user: np.ndarray  # int64, closed-loop user index (-1 in open loop)
    phase: np.ndarray  # int8, Phase values
    prompt_len: np.ndarray  # int64
    prefilled: np.ndarray  # int64, prompt tokens already in the KV cache
    think_len: np.ndarray  # int64, hidden tokens to generate before the answer
    output_len: np.ndarray  # int64, visible tokens to generate
    generated: np.ndarray  # int64, tokens generated so far (think + visible)
    kv_blocks: np.ndarray  # int64, KV blocks held
    fast: np.ndarray  # bool, in the fast lane
    arrival_s: np.ndarray  # float64


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a frame shows, at one tick. Cheap to build; immutable once built."""

    tick: int
    time_s: float
    hardware: Hardware
    model: Model
    opts: StepOptions
    roof: Roof  # peak FLOP/s and HBM bytes/s per GPU, knobs applied (the step model's: never re-derive them)
    scheduler: str
    users: int
    requests: RequestView
    last_step: StepCost | None  # the step that just ran (None before the first)
    batch_size: int
    kv_blocks_used: int
    kv_blocks_total: int
    weights_bytes: float  # per GPU
    kv_capacity_bytes: float  # per GPU
    reserve_bytes: float
    queued: int
    running: int
    preempted: int  # currently waiting after preemption
    done: int
    preemptions_total: int
    # cumulative bytes through each memory level since start: {"hbm": ..., "l2": ..., "smem": ...}
    bytes_moved: dict[str, float]
    metrics: dict[str, float]  # rolling: see Engine.metrics() for keys
    # bounded time series for sparklines, oldest first: {"time_s", "kv_util", "queue", "tok_s_out", ...}
    history: dict[str, tuple[float, ...]] = field(default_factory=dict)
    # A pool held smaller (or larger) than memory allows (--kv-blocks): its bytes per GPU; None: the pool is what
    # memory leaves (kv_capacity_bytes). The warehouse draws the pool the engine runs, not the one memory could hold.
    kv_pool_bytes: float | None = None
    # KV tiers below the GPU (engine.serving.kv_tiers): the share of looked-up blocks each tier supplied so far
    # ("gpu", "host", "disk", "remote"), None without tiers
    kv_tiers: dict[str, float] | None = None
