"""Measurements in: readers of benchmark results and traces into one record (Measured), and their registry.

    read_result(path, fmt=None) -> Measured     # detected by shape, or named (formats().keys())

record.py holds the record and its checks (lengths, units, NaN, negatives); formats.py the registry and file
parsing; results.py the benchmark tools' readers; traces.py the trace readers; bench_out.py writes a run in
vllm bench serve's own field names. numpy and stdlib only, like all of engine/.
"""

from engine.evidence.measured.formats import Doc, Format, formats, read_result
from engine.evidence.measured.record import Measured

__all__ = ["Doc", "Format", "Measured", "formats", "read_result"]
