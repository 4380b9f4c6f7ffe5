"""The step model is the only source of peak FLOP/s, bandwidth and the ridge: every reader shows the same roof.

gpt-oss keeps its routed experts in mxfp4 and the rest in bf16, so the matmuls' rate differs from the weights'
dtype rate; readers that re-derived the peak from the weights' dtype disagreed with the engine exactly there.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.config import EngineConfig
from engine.physics.step import StepModel
from engine.serving.engine import Engine
from scenes.metrics import METRICS, Probe
from tui.frame import build_frame
from tui.render import roofline, traffic, warehouse

CASES = [("b200", "gpt-oss-20b"), ("b200", "gpt-oss-120b"), ("h100-sxm", "qwen3-30b-a3b"), ("h100-sxm", "generic-14b")]


class _Stage:
    """The least a scene metric looks at: a config, a probe and the engine's step model."""

    def __init__(self, config: EngineConfig, sm: StepModel) -> None:
        self.config, self.probe, self._sm = config, Probe(), sm

    def step_model(self, ideal: bool | None = None) -> StepModel:
        return self._sm


@pytest.mark.parametrize(("hardware", "model"), CASES)
def test_every_reader_shows_the_step_models_roof(hardware: str, model: str) -> None:
    cfg = EngineConfig(hardware=hardware, model=model, users=2, prompt="64", output="16", compute_mult=2.0,
                       bandwidth_mult=1.5)
    e = Engine(cfg)
    sm = e.step_model
    roof = sm.roof
    if "gpt-oss" in model and hardware == "b200":  # the case the readers used to get wrong
        assert roof.peak_flops != sm.hw.peak_flops(sm.wdtype) * cfg.compute_mult
    assert roof.bandwidth == pytest.approx(sm.hw.bandwidth * 1.5, rel=1e-12)
    # The app, before any step and after some.
    idle = build_frame(e.snapshot(), step=None)
    flops = nbytes = 0.0
    for _ in range(30):
        r = e.step()
        if r.cost is not None:
            flops += r.cost.flops_total
            nbytes += r.cost.bytes_total
            assert r.cost.ridge == roof.ridge
    busy = build_frame(e.snapshot())
    for frame in (idle, busy):
        assert roofline.roof(frame) == (roof.peak_flops, roof.bandwidth)
    assert traffic.density(busy) == pytest.approx(min(1.0, traffic.rate(busy) / roof.bandwidth), rel=1e-12)
    assert warehouse.bandwidth_gauge(busy, 60).plain.startswith(f"bandwidth {roof.bandwidth / 1e12:.3g} TB/s")
    # The engine's own MFU and bandwidth use divide by the same peaks.
    m: dict[str, Any] = e.metrics()
    sim = m["sim_time_s"]
    assert m["mfu"] * roof.peak_flops * sim == pytest.approx(flops, rel=1e-9)
    assert m["bw_util"] * roof.bandwidth * sim == pytest.approx(nbytes, rel=1e-9)
    # The scenes' figures.
    st = _Stage(e.config, sm)
    assert METRICS["tflops"].fn(st) == pytest.approx(roof.peak_flops / 1e12, rel=1e-12)
    assert METRICS["hbm_gbps"].fn(st) == pytest.approx(roof.bandwidth / 1e9, rel=1e-12)
    assert METRICS["ridge"].fn(st) == pytest.approx(roof.ridge, rel=1e-12)
    assert METRICS["drain_ms"].fn(st) == pytest.approx(sm.hw.memory_bytes / roof.bandwidth * 1e3, rel=1e-12)
