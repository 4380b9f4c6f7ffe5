"""The serving loop: a tick-based engine that schedules requests onto GPUs and prices every step.

    tables      request tables, one numpy array per field (struct of arrays, no object per request)
    prefix_cache a lane's KV pool (BlockPool): private, shared and cached blocks (prefix caching), host offload
    scheduler   the batching policies (static, continuous, chunked) behind one interface
    lane        one GPU group: its tables, pool, arrivals and clock; one step per tick
    steps       the step kinds (decode, join, speculative verify, mixed) and the quiet-run jump, in a registry
    admission   which waiting requests join the batch, with which chunk (prefix-cache hits first)
    keying      prefix-cache block keys: filling, releasing, loading back from host memory
    accounting  what a lane counted, and the run / rolling metrics as typed records
    engine      the Engine facade: builds lanes from an EngineConfig, steps them on one clock, reads out

Every history kept is bounded: finished requests' latencies go to rings and their rows are dropped.
"""

# No re-exports: importing any serving module runs this file, so an import here would tie every module that
# reads, say, the prefix cache's constants to the whole engine (a circle through engine.traffic).
