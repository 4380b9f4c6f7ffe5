"""Energy (engine.physics.energy): board power from what a step keeps busy, a run's joules per token."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from engine.errors import InputError
from engine.physics import energy
from engine.physics.specs import hardware_from_mapping, load_hardware, load_model
from engine.physics.step import StepModel, StepOptions


def _sm(ideal: bool = False) -> StepModel:
    return StepModel(load_hardware("h100-sxm"), load_model("generic-14b"), StepOptions(ideal=ideal))


def test_decode_at_batch_one_spends_most_of_its_energy_moving_weights() -> None:
    """The claim: at batch 1 the weights' bytes dominate the step, so their traffic dominates its joules; at a
    large batch the KV cache and the FLOPs take over, so the weights' share falls."""
    sm = _sm()
    one = energy.step_energy(sm, sm.decode(1, 1000))
    big = energy.step_energy(sm, sm.decode(256, 4000))
    assert one.weights_share > 0.5
    assert big.weights_share < one.weights_share / 2
    # per sequence, the big batch costs far less energy: the weights are read once for all of them
    assert big.total_j / 256 < one.total_j / 20


def test_step_energy_is_idle_power_plus_joules_per_byte_and_per_flop() -> None:
    """Under --ideal a decode step runs at full bandwidth: its power is idle + the memory share of the range plus
    its FLOPs at their price; a compute-bound prefill draws close to the board limit."""
    sm = _sm(ideal=True)
    p = energy.Power.of(sm.hw)
    st = sm.decode(1, 1000)
    e = energy.step_energy(sm, st)
    span = p.max_w - p.idle_w
    assert e.idle_j == pytest.approx(p.idle_w * st.time_s)
    assert e.memory_j == pytest.approx(span * energy.MEMORY_SHARE * st.bytes_total / sm.roof.bandwidth)
    assert e.compute_j == pytest.approx(span * (1 - energy.MEMORY_SHARE) * st.flops_total / sm.roof.peak_flops)
    pre = sm.prefill(8000)
    watts = energy.step_energy(sm, pre).total_j / pre.time_s
    assert watts > 0.6 * p.max_w
    assert watts > e.total_j / st.time_s + 0.25 * span
    assert watts <= p.max_w + 1e-9


def test_run_energy_follows_utilisation_and_price() -> None:
    """A run's average power is idle plus the range weighted by its bandwidth use and MFU; the bill scales with
    the price per kWh; tokens per MW is output tok/s over the power drawn."""
    sm = _sm()
    m = {"bw_util": 0.6, "mfu": 0.3, "sim_time_s": 100.0, "output_tokens": 50_000, "throughput_out_tok_s": 500.0}
    r = energy.run_energy(m, sm, gpus=2, tp=2, price_per_kwh=0.1, price_per_gpu_hour=2.0)
    w = 70 + 630 * (0.6 / 3 + 0.3 * 2 / 3)
    assert r["power_w_per_gpu"] == pytest.approx(w)
    assert r["kw_per_replica"] == pytest.approx(2 * w / 1000)
    assert r["joules_per_output_token"] == pytest.approx(w * 2 * 100 / 50_000)
    assert r["output_tok_s_per_mw"] == pytest.approx(500 / (2 * w / 1e6))
    assert r["energy_share_of_cost"] == pytest.approx(w / 1000 * 0.1 / 2.0)
    r2 = energy.run_energy(m, sm, gpus=2, tp=2, price_per_kwh=0.2, price_per_gpu_hour=2.0)
    assert r2["energy_cost_per_mtok_out"] == pytest.approx(2 * r["energy_cost_per_mtok_out"])


@pytest.mark.parametrize("extra", [{"idle_power_w": 50}, {"max_power_w": 400}, {"idle_power_w": 500, "max_power_w": 400}])
def test_power_figures_come_in_pairs_idle_below_max(extra: dict[str, float]) -> None:
    base = {"name": "x", "memory_gb": 80, "memory_bandwidth_gbps": 3000, "l2_mb": 50, "sm_count": 100,
            "smem_per_sm_kb": 200, "interconnect_gbps": 900, "price_per_hour": 2.0, "tflops": {"bf16": 900}}
    hardware_from_mapping(base, "t")  # neither: fine, energy just cannot be reported
    with pytest.raises(InputError, match="idle_power_w and max_power_w"):
        hardware_from_mapping({**base, **extra}, "t")


def test_a_part_without_power_figures_is_one_clear_error() -> None:
    sm = _sm()
    bare = replace(sm.hw, idle_power_w=None, max_power_w=None)
    with pytest.raises(InputError, match="no idle_power_w"):
        energy.Power.of(bare)


def test_run_energy_json_and_bad_price(capsys: pytest.CaptureFixture[str]) -> None:
    """`run --energy --json` adds the block; more users share the weights' reads, so joules per token fall."""
    from tui.cli import main

    def jpt(users: int) -> float:
        assert main(["run", "--users", str(users), "--requests", str(4 * users), "--output", "64", "--prompt", "256",
                     "--energy", "--json"]) == 0
        return json.loads(capsys.readouterr().out)["energy"]["joules_per_output_token"]

    assert jpt(16) < jpt(1) / 4
    with pytest.raises(SystemExit) as bad:
        main(["run", "--users", "1", "--requests", "2", "--energy", "--price-per-kwh", "-1"])
    assert bad.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--price-per-kwh" in err[0]


def test_gpus_switched_off_draw_no_idle_power() -> None:
    """With an autoscaler, the same work on GPUs on for half the run saves exactly their idle joules."""
    sm = _sm()
    m = {"bw_util": 0.2, "mfu": 0.1, "sim_time_s": 3600.0, "output_tokens": 1e6, "throughput_out_tok_s": 1e6 / 3600}
    full = energy.run_energy(m, sm, gpus=4, tp=1, price_per_kwh=0.1, price_per_gpu_hour=2.0)
    half = energy.run_energy(m, sm, gpus=4, tp=1, price_per_kwh=0.1, price_per_gpu_hour=2.0, gpu_s_on=2 * 3600.0)
    saved_kwh = 70.0 * 2 * 3600.0 / energy.J_PER_KWH
    assert full["energy_kwh"] - half["energy_kwh"] == pytest.approx(saved_kwh)
    assert half["power_w_per_gpu"] > full["power_w_per_gpu"]  # the work is shared by fewer GPU-hours
    assert half["output_tok_s_per_mw"] > full["output_tok_s_per_mw"]
