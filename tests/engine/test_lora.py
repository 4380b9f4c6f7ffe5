"""Multi-LoRA: what an adapter weighs, what batched LoRA kernels add to a step, and slots in the serving loop."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.errors import InputError
from engine.physics import lora
from engine.physics.batch import Batch
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions
from engine.serving.engine import Engine
from engine.serving.lora_slots import LoraSlots, allowed, summary
from engine.serving.tables import Rows
from engine.traffic.source import RequestSource, load_script

H100 = load_hardware("h100-sxm")
M14 = load_model("generic-14b")


def _sm(slots: int = 4, rank: int = 16, **kw: object) -> StepModel:
    return StepModel(H100, M14, StepOptions(max_loras=slots, max_lora_rank=rank, **kw))


def test_one_adapter_weighs_about_rank_over_hidden_of_the_weights() -> None:
    """A/B of a d x d projection hold r (d + d) elements against d^2: 2r/d of it; the MLP's wider matrices less.
    So an adapter is between r/d and 2r/d of the base weights it attaches to."""
    for rank in (8, 16, 64):
        share = lora.adapter_bytes(M14, rank) / M14.weight_bytes()
        assert rank / M14.hidden < share < 2 * rank / M14.hidden
    assert lora.adapter_bytes(M14, 32) == 2 * lora.adapter_bytes(M14, 16)  # linear in rank


def test_decode_step_reads_each_distinct_adapter_once() -> None:
    """The extra bytes grow by one adapter's A/B per distinct adapter in the batch, whatever the batch size, and
    the step's time rises with them; FLOPs depend on tokens only."""
    sm = _sm()
    b = Batch.of_rows(M14, [1] * 32, [2000] * 32)
    base = sm.price(b)
    parts = [sm.price(b._replace(adapters=a)) for a in (1, 2, 4, 8, 16)]
    per = sm.lora.bytes_per_adapter
    assert parts[1].lora_bytes - parts[0].lora_bytes == pytest.approx(per)
    assert parts[4].lora_bytes - parts[2].lora_bytes == pytest.approx(12 * per)
    times = [base.time] + [p.time for p in parts]
    assert all(x < y for x, y in zip(times, times[1:], strict=False))
    assert parts[0].fl_lora == parts[4].fl_lora == pytest.approx(2 * 32 * 16 * lora.width(M14))
    assert base.lora_bytes == 0.0 and sm.cost(b).bytes.keys() == {"weights", "kv_read", "kv_write", "activations"}
    assert sm.cost(b._replace(adapters=3)).bytes["lora"] == parts[1].lora_bytes + per


def test_slots_come_out_of_the_kv_pool() -> None:
    off = StepModel(H100, M14, StepOptions())
    for slots in (1, 8):
        sm = _sm(slots, 64)
        assert off.kv_capacity_bytes - sm.kv_capacity_bytes == pytest.approx(slots * lora.adapter_bytes(M14, 64))


def test_allowed_takes_the_first_new_adapters_in_order() -> None:
    cand = np.array([5, 0, 7, 5, 9, 3, 7])
    assert allowed(cand, np.array([3]), 2).tolist() == [True, True, True, True, False, True, True]
    assert allowed(cand, np.array([3]), 0).tolist() == [False, True, False, False, False, True, False]


def test_lru_eviction_keeps_running_adapters() -> None:
    s = LoraSlots(2, 1e9, 50.0)
    rows = Rows.new(1)
    for t, ad in enumerate((1, 2)):
        rows.adapter[:] = ad
        s.admitted(rows, np.arange(1, ad + 1), float(t))
    assert sorted(s.slots.tolist()) == [1, 2] and s.loads == 2 and s.evictions == 0
    rows.adapter[:] = 3
    s.admitted(rows, np.array([2, 3]), 5.0)  # adapter 1 is idle: evicted, 2 runs and stays
    assert sorted(s.slots.tolist()) == [2, 3] and s.evictions == 1
    assert s.take_pending() == pytest.approx(3 * 1e9 / 50e9) and s.pending_s == 0.0


def test_zipf_adapters_in_the_request_rows() -> None:
    """Requests carry adapters 1..N, the first the most used (Zipf); LoRA off leaves every row on the base model
    and the lengths as they were (the adapters come from a stream of their own)."""
    cfg = EngineConfig(rate=200.0, requests=4000, lora_adapters=20, max_loras=4, max_lora_rank=8, seed=3)
    r = RequestSource.for_config(cfg, 100_000).draw(30.0)
    assert r is not None and r.adapter.min() >= 1 and r.adapter.max() <= 20
    counts = np.bincount(r.adapter, minlength=21)[1:]
    assert counts[0] > counts[1] > counts[4] > counts[19] > 0
    assert counts[0] / len(r) == pytest.approx(lora.zipf_cdf(20)[0], abs=0.02)
    off = RequestSource.for_config(replace(cfg, lora_adapters=0, max_loras=0, max_lora_rank=0), 100_000).draw(30.0)
    assert off is not None and not off.adapter.any()
    assert (off.prompt == r.prompt).all() and (off.arrival == r.arrival).all()


def _lora_run(slots: int) -> tuple[float, dict[str, float]]:
    cfg = EngineConfig(rate=20.0, requests=200, prompt="uniform:200,600", output="uniform:50,150", seed=1,
                       lora_adapters=100, max_loras=slots, max_lora_rank=16, debug=True)
    e = Engine(cfg)
    e.run()
    m = e.metrics()
    s = summary([e.lanes[0].lora], 100, 16, e.step_model.lora.bytes_per_adapter)
    return m["ttft_s"]["mean"], s


def test_few_slots_make_requests_wait_and_raise_ttft() -> None:
    """100 adapters, Zipf: with 4 slots a batch holds at most 4 of them, the rest wait their turn; with 32 far
    fewer wait, and each step reads more adapters."""
    ttft4, s4 = _lora_run(4)
    ttft32, s32 = _lora_run(32)
    assert s4["adapters_per_step"] <= 4 < s32["adapters_per_step"]
    assert s4["slot_waits"] > s32["slot_waits"] and s4["slot_wait_mean_s"] > 0
    assert ttft4 > 2 * ttft32
    assert s4["loads"] >= 4 and s4["evictions"] == s4["loads"] - 4
    assert 0 < s4["lora_bytes_share"] < s32["lora_bytes_share"] < 0.5


def test_lora_checks() -> None:
    with pytest.raises(InputError, match="one of vLLM's"):
        lora.check(M14, 10, 2, 12)
    with pytest.raises(InputError, match="between 1 and"):
        lora.check(M14, 4, 8, 16)
    with pytest.raises(InputError, match="without --lora-adapters"):
        lora.check(M14, 0, 2, 16)
    with pytest.raises(InputError, match="not modelled"):
        lora.check(replace(M14, experts=8, experts_per_token=2, expert_intermediate=1024), 4, 2, 16)


def test_xray_has_a_lora_segment_and_still_adds_up() -> None:
    from engine.physics.xray import step_xray

    for ideal in (False, True):
        sm = _sm(8, 64, ideal=ideal)
        b = Batch.of_rows(M14, [1] * 16, [1500] * 16)._replace(adapters=8)
        x = step_xray(sm.cost(b), ideal)
        assert x.lora > 0 and "lora" in x.as_dict()
        assert sum(s for _, s in x.segments()) == pytest.approx(x.time_s, rel=1e-12)
        assert "lora" not in step_xray(sm.cost(b._replace(adapters=0)), ideal).as_dict()


def test_a_workload_file_names_the_adapter_of_a_stage(tmp_path: Path) -> None:
    """`adapter = 2` in a stage's [stage.prompt]: every request of that stage uses it; the other stage's requests
    draw theirs (Zipf). Naming an adapter beyond --lora-adapters is one line."""
    f = tmp_path / "w.toml"
    f.write_text("[[stage]]\nrate = 50\nduration = 10\n[stage.prompt]\ntokens = 300\nadapter = 2\n"
                 "[[stage]]\nrate = 50\nduration = 10\n[prompt]\ntokens = 300\n[output]\ntokens = 20\n",
                 encoding="utf-8")
    cfg = EngineConfig(users=0, workload=str(f), lora_adapters=8, max_loras=2, max_lora_rank=16)
    src = RequestSource.for_config(cfg, 100_000, load_script(cfg))
    r = src.draw(20.0)
    assert r is not None
    first = r.stage == 0
    assert first.any() and (~first).any()
    assert (r.adapter[first] == 2).all() and len(np.unique(r.adapter[~first])) > 2
    with pytest.raises(InputError, match="names adapter 2"):
        load_script(replace(cfg, lora_adapters=1, max_loras=1))
