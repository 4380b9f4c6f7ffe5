"""One definition for each figure the floor shows in more than one place (issue 17: one truth per figure).

The engine's rolling metrics use the same definitions over their window (engine.serving `_rolling`):
- bandwidth use = HBM bytes moved / (peak bytes/s x time), per GPU, knobs applied;
- MFU = FLOPs done / (peak FLOP/s x time), per GPU.
Here they are taken over the one step the frame shows, and the screen says "this step".
"""

from __future__ import annotations

from tui.frame import Frame


def bandwidth_use(frame: Frame) -> float:
    """The shown step's bytes over what the peak bandwidth could move in its time (0 when idle)."""
    return frame.snapshot.roof.bandwidth_use(frame.step)


def mfu(frame: Frame) -> float:
    """The shown step's FLOPs over what the peak FLOP/s could do in its time (0 when idle)."""
    return frame.snapshot.roof.mfu(frame.step)


def floor_s(frame: Frame) -> float:
    """The shown step's floor (Roof.floor_s): the articles' arithmetic for this very step; the rest of the
    calibrated step time is overhead: sustained rather than peak rates, fixed per-step and per-layer costs,
    tensor-parallel all-reduces. 0 when idle."""
    return frame.snapshot.roof.floor_s(frame.step)


def window(frame: Frame) -> tuple[float, int]:
    """(simulated seconds the rates average over, finished requests the p50 latencies cover)."""
    m = frame.snapshot.metrics
    return float(m.get("window_s", 0.0)), int(m.get("answers", 0))
