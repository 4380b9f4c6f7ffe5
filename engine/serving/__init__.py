"""The serving loop: a tick-based engine that schedules requests onto GPUs and prices every step.

    tables      request tables, one numpy array per field (struct of arrays, no object per request)
    prefix_cache a lane's KV pool (BlockPool): private, shared and cached blocks (prefix caching), host offload
    scheduler   the batching policies (static, continuous, chunked) behind one interface
    arrivals    closed-loop users, Poisson arrivals, a workload file's stages or a trace; the shared budget
    lane        one GPU group: its tables, pool, arrivals and clock; one step per tick
    steps       the step kinds (decode, join, speculative verify, mixed) and the quiet-run jump, in a registry
    admission   which waiting requests join the batch, with which chunk (prefix-cache hits first)
    keying      prefix-cache block keys: filling, releasing, loading back from host memory
    accounting  what a lane counted, and the run / rolling metrics as typed records
    engine      the Engine facade: builds lanes from an EngineConfig, steps them on one clock, reads out

Every history kept is bounded: finished requests' latencies go to rings and their rows are dropped.
"""

from engine.config import SCHEDULERS, EngineConfig
from engine.errors import InputError
from engine.serving.accounting import HISTORY_POINTS, LATENCY_SAMPLES, RECENT_DONE, ROLLING_SAMPLES
from engine.serving.engine import SNAPSHOT_QUEUE_ROWS, Engine
from engine.serving.lane import IDLE_TICK_S, TickResult
from engine.serving.snapshot import KV_BLOCK_TOKENS, Phase, RequestView, Snapshot

__all__ = [
    "HISTORY_POINTS", "IDLE_TICK_S", "KV_BLOCK_TOKENS", "LATENCY_SAMPLES", "RECENT_DONE", "ROLLING_SAMPLES",
    "SCHEDULERS", "SNAPSHOT_QUEUE_ROWS", "Engine", "EngineConfig", "InputError", "Phase", "RequestView", "Snapshot",
    "TickResult",
]
