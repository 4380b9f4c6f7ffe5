"""Measurements in: readers of benchmark results and traces into one record (Measured), and their registry.

    formats.read_result(path, fmt=None) -> Measured     # detected by shape, or named (formats.formats())

record.py holds the record and its checks (lengths, units, NaN, negatives); formats.py the registry and file
parsing; results.py the benchmark tools' readers; traces.py the trace readers; bench_out.py writes a run in
vllm bench serve's own field names. numpy and stdlib only, like all of engine/.
"""

# No re-exports: `run --bench-json` imports bench_out alone, and every command start-up would otherwise load all
# the readers (formats, results, traces) it never uses.
