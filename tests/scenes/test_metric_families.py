"""scenes.metrics as tables: every row of every family registers one metric, and for a fixed engine state each
table-driven figure equals the figure the one-function-per-metric module computed (its expressions, written out
here against the engine's own objects, independent of the tables' paths and scales)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from engine.config import EngineConfig
from engine.evidence.claim_rows import reference
from engine.physics.step import StepModel
from engine.serving.engine import Engine
from scenes import metrics as M

FLEET = {"requests_completed": 7, "preemptions": 3, "replicas": [{"role": "prefill", "queue_peak": 2}],
         "ttft_s": {"p50": 0.25, "p90": 0.5, "p99": 0.75}, "tpot_s": {"p50": 0.012, "p99": 0.02},
         "queue_delay_s": {"p90": 0.125}}


class _Stage:
    """A Stage over a live engine with a fast lane, ran a fixed number of ticks; a made-up fleet result."""

    def __init__(self) -> None:
        self.config = EngineConfig(users=12, fast_share=0.25, fast_max_batch=2, prompt="300", output="40", seed=3,
                                   spec_tokens=2, spec_accept=0.5, rate=0.0)
        self.probe = M.Probe(batch=8, context=2048, prompt=1024)
        self.engine = Engine(self.config)
        for _ in range(400):
            self.engine.step()

    def step_model(self, ideal: bool | None = None) -> StepModel:
        sm = self.engine.step_model
        return sm if ideal is None or ideal == sm.opts.ideal else sm.with_options(ideal=ideal)

    def snapshot(self) -> Any:
        return self.engine.snapshot()

    def engine_metrics(self) -> dict[str, Any]:
        return self.engine.metrics()

    def lane_metrics(self, fast: bool) -> dict[str, Any]:
        return self.engine.metrics(fast=fast)

    def fleet_metrics(self) -> dict[str, Any]:
        return FLEET


@pytest.fixture(scope="module")
def st() -> _Stage:
    return _Stage()


def num(v: Any) -> float:
    """How the module read every engine metric: None (not measured yet) is NaN."""
    return float("nan") if v is None else float(v)


def _old(s: _Stage) -> dict[str, Any]:
    """The table-driven figures as the module computed them one function each."""
    sm, p, c, snap = s.step_model(), s.probe, s.config, s.snapshot()
    dec, dec_i, dec_c, pre = sm.decode(p.batch, p.context), s.step_model(True).decode(p.batch, p.context), \
        s.step_model(False).decode(p.batch, p.context), sm.prefill(p.prompt)
    run, fast, normal, roll, ref = s.engine_metrics(), s.lane_metrics(True), s.lane_metrics(False), snap.metrics, \
        reference()
    last = snap.last_step
    return {
        "hbm_gb": sm.hw.memory_gb, "hbm_gbps": sm.roof.bandwidth / 1e9, "ssd_gbps": float(ref["ssd"]["read_gbps"]),
        "tflops": sm.roof.peak_flops / 1e12, "l2_mb": sm.hw.l2_mb, "sm_count": float(sm.hw.sm_count),
        "tray_kb": sm.hw.smem_per_sm_kb, "gpus": float(c.tp), "weights_gb": sm.weight_bytes_per_gpu / 1e9,
        "params_b": sm.model.params_total / 1e9, "params_yi": sm.model.params_total / 1e8,
        "active_params_b": sm.model.params_active / 1e9, "reserve_gb": sm.reserve_bytes / 1e9,
        "kv_pool_gb": sm.kv_capacity_bytes / 1e9, "ridge": sm.roof.ridge, "probe_batch": 8.0, "probe_context": 2048.0,
        "probe_prompt": 1024.0, "step_ms_ideal": dec_i.time_s * 1e3, "step_ms_calibrated": dec_c.time_s * 1e3,
        "step_ms": dec.time_s * 1e3, "reading_pace_chars_s": float(ref["reading"]["chars_per_s"]),
        "decode_bound": dec.bound, "decode_ai": dec.arithmetic_intensity, "decode_gb": dec.bytes_total / 1e9,
        "decode_weights_gb": dec.bytes["weights"] / 1e9, "decode_kv_gb": dec.bytes["kv_read"] / 1e9,
        "l2_refills": dec.l2_refills, "sm_busy_pct": dec.sm_busy * 100, "prefill_ms": pre.time_s * 1e3,
        "prefill_bound": pre.bound, "prefill_ai": pre.arithmetic_intensity,
        "experts_per_token": float(sm.model.experts_per_token), "experts_touched": dec.experts_touched,
        "experts_total": float(sm.model.experts), "head_dim": float(sm.model.head_dim),
        "kv_heads": float(sm.model.kv_heads), "layers": float(sm.model.layers),
        "rack_tb": float(ref["nvl72"]["memory_gb"]) / 1e3, "sim_time_s": snap.time_s,
        "live_step_ms": last.time_s * 1e3, "live_bound": last.bound, "live_sm_busy_pct": last.sm_busy * 100,
        "live_l2_refills": last.l2_refills, "batch_size": float(snap.batch_size), "users": float(snap.users),
        "running": float(snap.running), "done": float(snap.done), "preemptions": float(snap.preemptions_total),
        "tok_s_out": num(roll.get("tok_s_out")), "tok_s_per_user": num(roll.get("tok_s_per_user")),
        "bw_util_pct": 100 * num(roll.get("bw_util")), "mfu_pct": 100 * num(roll.get("mfu")),
        "cost_out_now_per_mtok": num(roll.get("cost_per_mtok_out")),
        "cost_in_now_per_mtok": num(roll.get("cost_per_mtok_in")),
        "requests_completed": num(run["requests_completed"]), "output_tokens": num(run["output_tokens"]),
        "ttft_p50_s": num(run["ttft_s"]["p50"]), "ttft_p50_ms": num(run["ttft_s"]["p50"]) * 1e3,
        "ttft_p99_s": num(run["ttft_s"]["p99"]), "ttft_raw_p50_s": num(run["ttft_raw_s"]["p50"]),
        "tpot_ms": num(run["tpot_s"]["p50"]) * 1e3, "e2e_p50_s": num(run["e2e_s"]["p50"]),
        "queue_delay_p50_s": num(run["queue_delay_s"]["p50"]), "queue_delay_p90_s": num(run["queue_delay_s"]["p90"]),
        "queue_delay_p99_s": num(run["queue_delay_s"]["p99"]), "cost_in_per_mtok": num(run["cost_per_mtok_in"]),
        "cost_out_per_mtok": num(run["cost_per_mtok_out"]), "price_per_hour": num(run["price_per_hour"]),
        "prefix_hit_pct": 100 * num(run["prefix_cache_hit_rate"]), "input_tokens": num(run["input_tokens"]),
        "cost_cached_in_per_mtok": num(run["cost_per_mtok_cached_in"]),
        "spec_tokens_per_step": num(run["spec_tokens_per_step"]), "kv_peak_pct": 100 * num(run["kv_util_peak"]),
        "fast_tpot_ms": num(fast["tpot_s"]["p50"]) * 1e3, "normal_tpot_ms": num(normal["tpot_s"]["p50"]) * 1e3,
        "fast_cost_out_per_mtok": num(fast["cost_per_mtok_out"]),
        "normal_cost_out_per_mtok": num(normal["cost_per_mtok_out"]), "fast_batch": num(fast["batch"]),
        "normal_batch": num(normal["batch"]), "fast_max_batch": 2.0,
        "train_mfu_pct": float(ref["training"]["train_mfu"]) * 100,
        "lifetime_tokens_t": float(ref["training"]["served"]) / 1e12,
        "tokens_per_call": float(ref["training"]["tokens_per_call"]), "spec_tokens": 2.0, "spec_accept_pct": 50.0,
        "trace_speed": 1.0, "rate_req_s": 0.0, "fleet_requests": 7.0, "fleet_ttft_p50_s": 0.25,
        "fleet_ttft_p90_s": 0.5, "fleet_ttft_p99_s": 0.75, "fleet_tpot_p50_ms": 0.012 * 1e3,
        "fleet_tpot_p99_ms": 0.02 * 1e3, "fleet_queue_delay_p90_s": 0.125, "fleet_preemptions": 3.0,
    }


def test_every_row_registers_one_metric_and_names_what_exists() -> None:
    names = [r[0] for r in M.FIGURES] + [r[0] for r in M.RATIOS] + [r[0] for r in M.FORMULAS]
    assert len(names) == len(set(names)) == len(M.METRICS) and set(names) == set(M.METRICS)
    assert {r[2] for r in M.FIGURES} <= set(M.SOURCES)
    assert {n for r in M.RATIOS for n in r[1:3]} <= set(M.METRICS)
    with pytest.raises(ValueError, match="twice"):
        M.metric("ridge", "x", "again")(lambda s: 0.0)
    with pytest.raises(ValueError):
        M.scaler("x3")


def test_table_figures_match_the_one_function_per_metric_values(st: _Stage) -> None:
    assert st.snapshot().last_step is not None and st.engine_metrics()["requests_completed"] > 0
    old = _old(st)
    table = {r[0] for r in M.FIGURES if r[2] not in ("training", "training_calls", "trace")}
    assert table <= set(old)  # every plain figure has its old expression here
    for name, want in old.items():
        got = M.METRICS[name].fn(st)
        assert type(got) is type(want), name
        assert got == want or (isinstance(want, float) and math.isnan(want) and math.isnan(got)), name


def test_ratios_divide_the_figures_they_name(st: _Stage) -> None:
    old = _old(st)
    assert M.METRICS["hbm_vs_ssd"].fn(st) == old["hbm_gbps"] / old["ssd_gbps"]
    assert M.METRICS["fast_speedup_x"].fn(st) == old["normal_tpot_ms"] / old["fast_tpot_ms"]
    assert M.METRICS["fast_tok_s_per_user"].fn(st) == pytest.approx(1e3 / old["fast_tpot_ms"])
    assert M.METRICS["cost_ratio_out_in"].fn(st) == old["cost_out_per_mtok"] / old["cost_in_per_mtok"]
    assert M.METRICS["fast_speedup_x"].fn(st) > 1  # the fast lane is the faster one per user


def test_missing_sources_read_as_the_module_read_them(st: _Stage) -> None:
    with pytest.raises(KeyError):
        M.METRICS["trace_minutes"].fn(st)  # the scene replays no trace
    with pytest.raises(KeyError):
        M.METRICS["fleet_kv_copy_ms"].fn(st)  # the fleet ran colocated
    assert M.dig({"a": None}, "a.b") is None and M.dig({}, "a", lenient=True) is None
