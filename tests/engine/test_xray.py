"""Step x-ray: the segments add up to the step time and name what the step waited on."""

from __future__ import annotations

import pytest

from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions
from engine.physics.xray import step_xray


def _sm(ideal: bool, model: str = "generic-14b", **kw: object) -> StepModel:
    return StepModel(load_hardware("h100-sxm"), load_model(model), StepOptions(ideal=ideal, **kw))


@pytest.mark.parametrize("ideal", [True, False])
@pytest.mark.parametrize(("batch", "context", "prompt"), [(1, 0, None), (64, 4000, None), (3, 60000, None),
                                                          (1, 0, 4096), (512, 1000, None)])
def test_segments_add_up_to_the_step_time(ideal: bool, batch: int, context: int, prompt: int | None) -> None:
    sm = _sm(ideal)
    cost = sm.prefill(prompt) if prompt else sm.decode(batch, context)
    x = step_xray(cost, ideal)
    assert sum(v for _, v in x.segments()) == pytest.approx(cost.time_s, rel=1e-12)
    assert min(v for _, v in x.segments()) >= 0 and x.hidden_memory >= 0 and x.hidden_compute >= 0


def test_the_articles_step_is_the_weight_read() -> None:
    # Batch 1, nothing cached, peak figures: 28 GB / 3.35 TB/s = 8.36 ms of weights; the FLOPs hide under it.
    x = step_xray(_sm(True).decode(1, 0), True)
    assert x.weights == pytest.approx(8.36e-3, rel=0.005) and x.compute == 0
    assert 0 < x.kv < 1e-5 * x.time_s  # the one new token's K and V, written
    assert x.overhead == 0 and x.communication == 0 and 0 < x.hidden_compute < x.weights / 100


def test_long_contexts_move_the_time_to_kv_and_prefill_to_compute() -> None:
    sm = _sm(False)
    short, long_ = step_xray(sm.decode(3, 1000), False), step_xray(sm.decode(3, 60000), False)
    assert long_.kv > 10 * short.kv and long_.kv > long_.weights  # 3 x 60K tokens of KV (35 GB, all the pool holds) outweigh 28 GB of weights
    assert long_.weights == pytest.approx(short.weights, rel=0.01)
    pre = step_xray(sm.prefill(4096), False)
    assert pre.compute > 0.8 * pre.time_s and pre.hidden_memory > 0
    assert pre.overhead == pytest.approx(sm.prefill(4096).t_overhead_s) and pre.overhead > 0


def test_tensor_parallel_pays_communication() -> None:
    x = step_xray(StepModel(load_hardware("h100-sxm"), load_model("llama-3.1-70b"), StepOptions(tp=4)).decode(32, 1000),
                  False)
    assert x.communication > 0 and x.weights > x.communication


def test_step_json_carries_the_xray(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from tui.cli import main

    assert main(["step", "--batch", "3", "--context", "60000", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    x = d["xray"]
    assert sum(x[k] for k in ("weights", "kv", "compute", "communication", "overhead")) == pytest.approx(d["time_s"])
    assert x["kv"] > x["weights"] > x["overhead"] > 0
