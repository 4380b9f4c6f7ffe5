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
    st, peak = frame.step, frame.snapshot.roof.bandwidth
    if st is None or st.tokens <= 0 or st.time_s <= 0 or peak <= 0:
        return 0.0
    return min(1.0, st.bytes_total / st.time_s / peak)


def mfu(frame: Frame) -> float:
    """The shown step's FLOPs over what the peak FLOP/s could do in its time (0 when idle)."""
    st, peak = frame.step, frame.snapshot.roof.peak_flops
    if st is None or st.tokens <= 0 or st.time_s <= 0 or peak <= 0:
        return 0.0
    return min(1.0, st.flops_total / st.time_s / peak)


def floor_s(frame: Frame) -> float:
    """The shown step's floor: its bytes at peak bandwidth or its FLOPs at peak FLOP/s, whichever is longer.

    This is the articles' arithmetic (the step model's --ideal roofline) for this very step; the rest of
    the calibrated step time is overhead: sustained rather than peak rates, fixed per-step and per-layer
    costs, tensor-parallel all-reduces. 0 when idle.
    """
    st, r = frame.step, frame.snapshot.roof
    if st is None or st.tokens <= 0 or r.bandwidth <= 0 or r.peak_flops <= 0:
        return 0.0
    return min(st.time_s, max(st.bytes_total / r.bandwidth, st.flops_total / r.peak_flops))


def window(frame: Frame) -> tuple[float, int]:
    """(simulated seconds the rates average over, finished requests the p50 latencies cover)."""
    m = frame.snapshot.metrics
    return float(m.get("window_s", 0.0)), int(m.get("answers", 0))
