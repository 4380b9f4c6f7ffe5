"""The metrics a scene's narration and checkpoints may name: each a pure function of the director's state.

Nothing here re-derives physics: step-model metrics call engine.physics.step.StepModel (and its helpers) on
the scene's current configuration and probe; live metrics read the Engine's Snapshot and metrics().
A metric returns a float, or a str for the few whose unit is "text" (e.g. which roofline term wins).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from engine.config import EngineConfig
    from engine.physics.step import StepCost, StepModel
    from engine.serving.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Probe:
    """The step the step-model metrics price: `batch` sequences on `context` cached tokens; a `prompt` prefill."""

    batch: int = 1
    context: int = 0
    prompt: int = 4096


class Stage(Protocol):
    """What a metric may look at: the current config and probe, step models for it, the live engine."""

    config: EngineConfig
    probe: Probe

    def step_model(self, ideal: bool | None = None) -> StepModel:
        """The step model of the current config (ideal=None: as configured)."""
        ...

    def snapshot(self) -> Snapshot:
        """The live engine's latest snapshot."""
        ...

    def engine_metrics(self) -> dict[str, Any]:
        """The live engine's run metrics (Engine.metrics())."""
        ...

    def lane_metrics(self, fast: bool) -> dict[str, Any]:
        """One lane's run metrics (fast lane or normal lane)."""
        ...

    def fleet_metrics(self) -> dict[str, Any]:
        """The metrics of the fleet the scene last ran (engine.fleet.fleet.Fleet.metrics()); KeyError before one ran."""
        ...


@dataclass(frozen=True, slots=True)
class Metric:
    """A named, documented figure; `unit` 'text' marks a string-valued metric."""

    name: str
    unit: str
    doc: str
    fn: Callable[[Stage], float | str]


METRICS: dict[str, Metric] = {}


def metric(name: str, unit: str, doc: str) -> Callable[[Callable[[Stage], Any]], Callable[[Stage], Any]]:
    """Register a metric function under `name`."""
    def deco(fn: Callable[[Stage], Any]) -> Callable[[Stage], Any]:
        METRICS[name] = Metric(name, unit, doc, fn)
        return fn
    return deco


def _reference() -> dict[str, Any]:
    from engine.evidence.claim_rows import reference

    return reference()


def _decode(s: Stage, ideal: bool | None = None) -> StepCost:
    return s.step_model(ideal).decode(s.probe.batch, s.probe.context)


def _prefill(s: Stage, ideal: bool | None = None) -> StepCost:
    return s.step_model(ideal).prefill(s.probe.prompt)


# ---- hardware and memory --------------------------------------------------------------------

@metric("hbm_gb", "GB", "HBM (warehouse) size of one GPU")
def _hbm_gb(s: Stage) -> float:
    return s.step_model().hw.memory_gb


@metric("hbm_gbps", "GB/s", "HBM bandwidth (the conveyor) with the bandwidth knob applied")
def _hbm_gbps(s: Stage) -> float:
    return s.step_model().roof.bandwidth / 1e9


@metric("ssd_gbps", "GB/s", "a fast NVMe SSD's read speed (engine reference figure)")
def _ssd_gbps(s: Stage) -> float:
    return float(_reference()["ssd"]["read_gbps"])


@metric("hbm_vs_ssd", "x", "how many times faster the HBM conveyor is than a fast SSD")
def _hbm_vs_ssd(s: Stage) -> float:
    return _hbm_gbps(s) / _ssd_gbps(s)


@metric("tflops", "TFLOP/s", "dense tensor-core peak at the dtype the matmuls run in, compute knob applied")
def _tflops(s: Stage) -> float:
    return s.step_model().roof.peak_flops / 1e12


@metric("l2_mb", "MB", "L2 cache (the shelf) size")
def _l2_mb(s: Stage) -> float:
    return s.step_model().hw.l2_mb


@metric("sm_count", "SMs", "streaming multiprocessors (workstations)")
def _sm_count(s: Stage) -> float:
    return float(s.step_model().hw.sm_count)


@metric("tray_kb", "KB", "L1/shared memory per SM (one workstation's tray)")
def _tray_kb(s: Stage) -> float:
    return s.step_model().hw.smem_per_sm_kb


@metric("trays_total_mb", "MB", "all trays together: SMs x tray size")
def _trays_total_mb(s: Stage) -> float:
    hw = s.step_model().hw
    return hw.sm_count * hw.smem_per_sm_kb / 1e3


@metric("gpus", "GPUs", "tensor-parallel GPUs the model is spread over")
def _gpus(s: Stage) -> float:
    return float(s.config.tp)


@metric("weights_gb", "GB", "weight bytes per GPU at the current weight dtype")
def _weights_gb(s: Stage) -> float:
    return s.step_model().weight_bytes_per_gpu / 1e9


@metric("params_b", "billion", "total parameters of the current model")
def _params_b(s: Stage) -> float:
    return s.step_model().model.params_total / 1e9


@metric("params_yi", "亿", "total parameters in units of 1e8 (亿), for the Chinese narration")
def _params_yi(s: Stage) -> float:
    return s.step_model().model.params_total / 1e8


@metric("active_params_b", "billion", "parameters one token actually multiplies (MoE: routed experts only)")
def _active_params_b(s: Stage) -> float:
    return s.step_model().model.params_active / 1e9


@metric("weight_bytes_each", "B", "bytes one weight takes at the current weight dtype")
def _weight_bytes_each(s: Stage) -> float:
    from engine.physics.specs import DTYPE_BYTES

    return DTYPE_BYTES[s.step_model().wdtype]


@metric("ssd_step_ms", "ms", "time to read the weights once from a fast SSD instead of HBM")
def _ssd_step_ms(s: Stage) -> float:
    return s.step_model().weight_bytes_per_gpu / (_ssd_gbps(s) * 1e9) * 1e3


@metric("l2_share_pct", "%", "share of the weights the L2 shelf can hold at once")
def _l2_share_pct(s: Stage) -> float:
    sm = s.step_model()
    return sm.hw.l2_bytes / sm.weight_bytes_per_gpu * 100


@metric("free_after_weights_gb", "GB", "HBM left once the weights are in: memory minus weights")
def _free_after_weights_gb(s: Stage) -> float:
    sm = s.step_model()
    return (sm.hw.memory_bytes - sm.weight_bytes_per_gpu) / 1e9


@metric("reserve_gb", "GB", "HBM held back for activations and scratch")
def _reserve_gb(s: Stage) -> float:
    return s.step_model().reserve_bytes / 1e9


@metric("reserve_pct", "%", "share of HBM held back for activations and scratch")
def _reserve_pct(s: Stage) -> float:
    sm = s.step_model()
    return sm.reserve_bytes / sm.hw.memory_bytes * 100


@metric("kv_pool_gb", "GB", "KV pool: memory minus weights minus the reserve")
def _kv_pool_gb(s: Stage) -> float:
    return s.step_model().kv_capacity_bytes / 1e9


@metric("ridge", "FLOP/B", "the hardware constant: peak FLOP/s / bytes/s at the weights' dtype")
def _ridge(s: Stage) -> float:
    return s.step_model().roof.ridge


@metric("ridge_bf16", "FLOP/B", "peak bf16 FLOP/s / HBM bytes/s of the current GPU (no knobs)")
def _ridge_bf16(s: Stage) -> float:
    return s.step_model().hw.ridge("bf16")


@metric("drain_ms", "ms", "time to read the whole HBM once at peak bandwidth ('a train every N ms')")
def _drain_ms(s: Stage) -> float:
    sm = s.step_model()
    return sm.hw.memory_bytes / sm.roof.bandwidth * 1e3


@metric("drain_ms_calibrated", "ms", "the same at the runtime's calibrated bandwidth efficiency")
def _drain_ms_cal(s: Stage) -> float:
    sm = s.step_model(False)
    return _drain_ms(s) / sm.runtime.bw_eff


# ---- the probe step (probe_batch sequences on probe_context tokens; a probe_prompt prefill) -----

@metric("probe_batch", "sequences", "sequences in the probe decode step")
def _probe_batch(s: Stage) -> float:
    return float(s.probe.batch)


@metric("probe_context", "tokens", "tokens each probe sequence already holds in its KV cache")
def _probe_context(s: Stage) -> float:
    return float(s.probe.context)


@metric("probe_prompt", "tokens", "length of the probe prefill's prompt")
def _probe_prompt(s: Stage) -> float:
    return float(s.probe.prompt)


@metric("step_ms_ideal", "ms", "decode step time of the probe at peak bandwidth and FLOP/s, no overhead")
def _step_ms_ideal(s: Stage) -> float:
    return _decode(s, True).time_s * 1e3


@metric("step_ms_calibrated", "ms", "decode step time of the probe with the calibrated runtime")
def _step_ms_cal(s: Stage) -> float:
    return _decode(s, False).time_s * 1e3


@metric("step_ms", "ms", "decode step time of the probe as configured (ideal or calibrated)")
def _step_ms(s: Stage) -> float:
    return _decode(s).time_s * 1e3


@metric("tok_s_ideal", "tok/s", "one user's ideal decode speed: 1 / ideal step time")
def _tok_s_ideal(s: Stage) -> float:
    return 1e3 / _step_ms_ideal(s)


@metric("tok_s_calibrated", "tok/s", "one user's calibrated decode speed")
def _tok_s_cal(s: Stage) -> float:
    return 1e3 / _step_ms_cal(s)


@metric("batch_tok_s_ideal", "tok/s", "the whole probe batch's ideal decode output per second")
def _batch_tok_s_ideal(s: Stage) -> float:
    return s.probe.batch * _tok_s_ideal(s)


@metric("reading_pace_chars_s", "chars/s", "a comfortable reading pace (engine reference figure)")
def _reading_pace(s: Stage) -> float:
    return float(_reference()["reading"]["chars_per_s"])


@metric("reading_pace_x", "x", "ideal decode speed over a comfortable reading pace")
def _reading_pace_x(s: Stage) -> float:
    return _tok_s_ideal(s) / _reading_pace(s)


@metric("decode_bound", "text", "which roofline term sets the probe decode step's pace: memory or compute")
def _decode_bound(s: Stage) -> str:
    return _decode(s).bound


@metric("decode_ai", "FLOP/B", "arithmetic intensity of the probe decode step")
def _decode_ai(s: Stage) -> float:
    return _decode(s).arithmetic_intensity


@metric("decode_gb", "GB", "HBM bytes one probe decode step moves")
def _decode_gb(s: Stage) -> float:
    return _decode(s).bytes_total / 1e9


@metric("decode_weights_gb", "GB", "weight bytes one probe decode step reads")
def _decode_weights_gb(s: Stage) -> float:
    return _decode(s).bytes["weights"] / 1e9


@metric("decode_kv_gb", "GB", "KV-cache bytes one probe decode step reads")
def _decode_kv_gb(s: Stage) -> float:
    return _decode(s).bytes["kv_read"] / 1e9


@metric("l2_refills", "refills", "times the L2 shelf is filled and emptied in one probe decode step")
def _l2_refills(s: Stage) -> float:
    return _decode(s).l2_refills


@metric("sm_busy_pct", "%", "share of the probe decode step the SMs spend computing")
def _sm_busy_pct(s: Stage) -> float:
    return _decode(s).sm_busy * 100


@metric("sm_idle_pct", "%", "share of the probe decode step the SMs wait")
def _sm_idle_pct(s: Stage) -> float:
    return 100 - _sm_busy_pct(s)


@metric("sm_idle_pct_ideal", "%", "the same at peak figures, no overhead")
def _sm_idle_pct_ideal(s: Stage) -> float:
    return 100 - _decode(s, True).sm_busy * 100


@metric("hbm_tb_100_tokens", "TB", "HBM bytes the probe batch moves writing 100 tokens (step model)")
def _hbm_tb_100(s: Stage) -> float:
    sm, p = s.step_model(), s.probe
    return sum(sm.decode(p.batch, p.context + i).bytes_total for i in range(100)) / 1e12


@metric("prefill_ms", "ms", "time to prefill the probe prompt as configured")
def _prefill_ms(s: Stage) -> float:
    return _prefill(s).time_s * 1e3


@metric("prefill_bound", "text", "which roofline term sets the probe prefill's pace")
def _prefill_bound(s: Stage) -> str:
    return _prefill(s).bound


@metric("prefill_ai", "FLOP/B", "arithmetic intensity of the probe prefill")
def _prefill_ai(s: Stage) -> float:
    return _prefill(s).arithmetic_intensity


@metric("prefill_tok_s", "tok/s", "prompt tokens read per second in the probe prefill")
def _prefill_tok_s(s: Stage) -> float:
    return s.probe.prompt / _prefill(s).time_s


@metric("read_vs_write_x", "x", "prompt tokens read per second over tokens written per second (probe)")
def _read_vs_write(s: Stage) -> float:
    return _prefill_tok_s(s) / (s.probe.batch / _decode(s).time_s)


# ---- batching -------------------------------------------------------------------------------

@metric("crossover_batch", "sequences", "smallest decode batch (at the probe context) that turns compute-bound")
def _crossover_batch(s: Stage) -> float:
    from engine.physics.step import crossover_batch

    return float(crossover_batch(s.step_model(), s.probe.context))


@metric("moe_formula_batch", "sequences", "the article's MoE estimate: ridge x total / active params")
def _moe_formula_batch(s: Stage) -> float:
    m = s.step_model().model
    return _ridge(s) * m.params_total / m.params_active


@metric("moe_vs_dense_batch_x", "x", "crossover batch of the current model over the ridge (dense ~1)")
def _moe_vs_dense(s: Stage) -> float:
    return _crossover_batch(s) / _ridge(s)


@metric("moe_crossover_vs_formula", "x", "the engine's crossover batch over the article's MoE formula (1 = agree)")
def _moe_cross_vs_formula(s: Stage) -> float:
    return _crossover_batch(s) / _moe_formula_batch(s)


@metric("experts_per_token", "experts", "routed experts each token visits per layer")
def _experts_per_token(s: Stage) -> float:
    return float(s.step_model().model.experts_per_token)


@metric("experts_touched", "experts", "routed experts per layer the probe decode step reads (expected)")
def _experts_touched(s: Stage) -> float:
    return _decode(s).experts_touched


@metric("experts_total", "experts", "routed experts per layer")
def _experts_total(s: Stage) -> float:
    return float(s.step_model().model.experts)


@metric("cost_per_token_batch1_x", "x", "cost per output token at batch 1 over that at the probe batch")
def _cost_b1_x(s: Stage) -> float:
    sm, p = s.step_model(), s.probe
    one = sm.decode(1, p.context).time_s
    many = sm.decode(p.batch, p.context).time_s / p.batch
    return one / many


# ---- KV cache -------------------------------------------------------------------------------

@metric("kv_bytes_token_layer", "B", "KV bytes one token adds per layer (K and V, all KV heads, KV dtype)")
def _kv_b_tl(s: Stage) -> float:
    return s.step_model().model.kv_bytes_per_token_layer(s.config.kv_dtype)


@metric("kv_kb_token", "KB", "KV bytes one token adds across all layers")
def _kv_kb_t(s: Stage) -> float:
    return s.step_model().model.kv_bytes_per_token(s.config.kv_dtype) / 1e3


@metric("head_dim", "dims", "width of one attention head")
def _head_dim(s: Stage) -> float:
    return float(s.step_model().model.head_dim)


@metric("kv_heads", "heads", "key/value heads per layer (grouped-query attention)")
def _kv_heads(s: Stage) -> float:
    return float(s.step_model().model.kv_heads)


@metric("kv_dtype_bytes", "B", "bytes per cached key or value element at the KV dtype")
def _kv_dtype_bytes(s: Stage) -> float:
    from engine.physics.specs import DTYPE_BYTES

    return DTYPE_BYTES[s.config.kv_dtype]


@metric("layers", "layers", "transformer layers of the current model")
def _layers(s: Stage) -> float:
    return float(s.step_model().model.layers)


@metric("kv_conv_mb_layer", "MB", "one probe-context conversation's KV, one layer only (the article's figure)")
def _kv_conv_mb_layer(s: Stage) -> float:
    return _kv_b_tl(s) * s.probe.context / 1e6


@metric("kv_conv_gb", "GB", "one probe-context conversation's KV across all layers")
def _kv_conv_gb(s: Stage) -> float:
    return _kv_kb_t(s) * 1e3 * s.probe.context / 1e9


@metric("kv_batch_gb_layer", "GB", "probe-batch users x probe context, one layer only (the article's figure)")
def _kv_batch_gb_layer(s: Stage) -> float:
    return _kv_conv_mb_layer(s) * s.probe.batch / 1e3


@metric("kv_batch_tb", "TB", "probe-batch users x probe context, all layers")
def _kv_batch_tb(s: Stage) -> float:
    return _kv_conv_gb(s) * s.probe.batch / 1e3


@metric("rack_tb", "TB", "HBM of a whole GB200 NVL72 rack (engine reference figure)")
def _rack_tb(s: Stage) -> float:
    return float(_reference()["nvl72"]["memory_gb"]) / 1e3


@metric("context_wall_tokens", "tokens", "context at which one user's KV read equals their share of the weight read")
def _context_wall(s: Stage) -> float:
    from engine.physics.step import context_wall

    return float(context_wall(s.step_model(), s.probe.batch))


@metric("context_wall_article", "tokens", "the article's wall: weight bytes / (ridge x per-layer KV bytes per token)")
def _context_wall_article(s: Stage) -> float:
    return s.step_model().weight_bytes_per_gpu / (_ridge(s) * _kv_b_tl(s))


@metric("kv_share_pct", "%", "share of the probe decode step's bytes that are KV-cache reads")
def _kv_share(s: Stage) -> float:
    c = _decode(s)
    return c.bytes["kv_read"] / c.bytes_total * 100


# ---- live engine (Snapshot and Engine.metrics()) ----------------------------------------------

@metric("sim_time_s", "s", "simulated time on the engine's clock")
def _sim_time(s: Stage) -> float:
    return s.snapshot().time_s


@metric("live_step_ms", "ms", "time of the step the engine just ran")
def _live_step_ms(s: Stage) -> float:
    st = s.snapshot().last_step
    return st.time_s * 1e3 if st is not None else 0.0


@metric("live_bound", "text", "which roofline term set the pace of the step the engine just ran")
def _live_bound(s: Stage) -> str:
    st = s.snapshot().last_step
    return st.bound if st is not None else "idle"


@metric("live_sm_busy_pct", "%", "SM busy share of the step the engine just ran")
def _live_sm_busy(s: Stage) -> float:
    st = s.snapshot().last_step
    return st.sm_busy * 100 if st is not None else 0.0


@metric("live_l2_refills", "refills", "L2 refills in the step the engine just ran")
def _live_l2(s: Stage) -> float:
    st = s.snapshot().last_step
    return st.l2_refills if st is not None else 0.0


@metric("batch_size", "sequences", "sequences in the step the engine just ran")
def _batch_size(s: Stage) -> float:
    return float(s.snapshot().batch_size)


@metric("users", "users", "closed-loop users in the workload")
def _users(s: Stage) -> float:
    return float(s.snapshot().users)


@metric("hbm_tb_moved", "TB", "HBM bytes the engine has moved since the start")
def _hbm_tb_moved(s: Stage) -> float:
    return s.snapshot().bytes_moved.get("hbm", 0.0) / 1e12


@metric("queue_len", "requests", "requests waiting (queued or preempted)")
def _queue_len(s: Stage) -> float:
    snap = s.snapshot()
    return float(snap.queued + snap.preempted)


@metric("running", "requests", "requests running (prefill, thinking or decoding)")
def _running(s: Stage) -> float:
    return float(s.snapshot().running)


@metric("done", "requests", "requests finished")
def _done(s: Stage) -> float:
    return float(s.snapshot().done)


@metric("preemptions", "preemptions", "requests evicted under KV pressure since the start")
def _preemptions(s: Stage) -> float:
    return float(s.snapshot().preemptions_total)


@metric("kv_util_pct", "%", "share of the KV pool's blocks in use")
def _kv_util(s: Stage) -> float:
    snap = s.snapshot()
    return 100.0 * snap.kv_blocks_used / snap.kv_blocks_total if snap.kv_blocks_total else 0.0


@metric("kv_used_gb", "GB", "KV bytes held by running requests")
def _kv_used_gb(s: Stage) -> float:
    snap = s.snapshot()
    return snap.kv_capacity_bytes * snap.kv_blocks_used / snap.kv_blocks_total / 1e9 if snap.kv_blocks_total else 0.0


@metric("kv_gb_per_running", "GB", "KV bytes held per running request")
def _kv_per_running(s: Stage) -> float:
    snap = s.snapshot()
    return _kv_used_gb(s) / snap.running if snap.running else 0.0


@metric("weights_gb_per_running", "GB", "weight bytes per step shared out over the running requests")
def _weights_per_running(s: Stage) -> float:
    snap = s.snapshot()
    return snap.weights_bytes / 1e9 / snap.running if snap.running else 0.0


def _num(v: Any) -> float:
    """A metric value as a float (None, i.e. not measured yet, becomes NaN)."""
    return float("nan") if v is None else float(v)


def _run(s: Stage, key: str, pct: str | None = None) -> float:
    v = s.engine_metrics()[key]
    return _num(v[pct] if pct else v)


@metric("tok_s_out", "tok/s", "output tokens per second over the recent ticks (all users)")
def _tok_s_out(s: Stage) -> float:
    return _num(s.snapshot().metrics.get("tok_s_out"))


@metric("tok_s_per_user", "tok/s", "one decoding user's speed over the recent ticks")
def _tok_s_per_user(s: Stage) -> float:
    return _num(s.snapshot().metrics.get("tok_s_per_user"))


@metric("bw_util_pct", "%", "share of peak HBM bandwidth used over the recent ticks")
def _bw_util(s: Stage) -> float:
    return 100 * _num(s.snapshot().metrics.get("bw_util"))


@metric("mfu_pct", "%", "model FLOPs utilisation over the recent ticks")
def _mfu(s: Stage) -> float:
    return 100 * _num(s.snapshot().metrics.get("mfu"))


@metric("requests_completed", "requests", "answers finished since the start")
def _completed(s: Stage) -> float:
    return _run(s, "requests_completed")


@metric("output_tokens", "tokens", "tokens generated since the start (hidden thinking included)")
def _output_tokens(s: Stage) -> float:
    return _run(s, "output_tokens")


@metric("ttft_p50_s", "s", "median time to the first visible token")
def _ttft(s: Stage) -> float:
    return _run(s, "ttft_s", "p50")


@metric("ttft_raw_p50_s", "s", "median time to the first generated token, hidden or not")
def _ttft_raw(s: Stage) -> float:
    return _run(s, "ttft_raw_s", "p50")


@metric("ttft_visible_minus_raw_s", "s", "how much later the first visible token comes than the first token")
def _ttft_gap(s: Stage) -> float:
    return _ttft(s) - _ttft_raw(s)


@metric("tpot_ms", "ms", "median time per output token")
def _tpot(s: Stage) -> float:
    return _run(s, "tpot_s", "p50") * 1e3


@metric("e2e_p50_s", "s", "median end-to-end latency of an answer")
def _e2e(s: Stage) -> float:
    return _run(s, "e2e_s", "p50")


@metric("queue_delay_p50_s", "s", "median time a request waited before admission")
def _qd50(s: Stage) -> float:
    return _run(s, "queue_delay_s", "p50")


@metric("queue_delay_p90_s", "s", "90th-percentile time a request waited before admission")
def _qd90(s: Stage) -> float:
    return _run(s, "queue_delay_s", "p90")


@metric("cost_in_per_mtok", "$/Mtok", "cost of a million input tokens (prefill time charged to input)")
def _cost_in(s: Stage) -> float:
    return _run(s, "cost_per_mtok_in")


@metric("cost_out_per_mtok", "$/Mtok", "cost of a million output tokens (decode time charged to output)")
def _cost_out(s: Stage) -> float:
    return _run(s, "cost_per_mtok_out")


@metric("cost_ratio_out_in", "x", "output over input cost per token")
def _cost_ratio(s: Stage) -> float:
    return _cost_out(s) / _cost_in(s)


@metric("price_per_hour", "$/h", "GPU rental price per hour the costs use")
def _price(s: Stage) -> float:
    return _run(s, "price_per_hour")


@metric("fast_tok_s_per_user", "tok/s", "a fast-lane user's speed")
def _fast_speed(s: Stage) -> float:
    return _num(s.lane_metrics(True)["tok_s_per_user"])


@metric("normal_tok_s_per_user", "tok/s", "a normal-lane user's speed")
def _normal_speed(s: Stage) -> float:
    return _num(s.lane_metrics(False)["tok_s_per_user"])


@metric("fast_speedup_x", "x", "fast-lane speed over normal-lane speed per user")
def _fast_speedup(s: Stage) -> float:
    return _fast_speed(s) / _normal_speed(s)


@metric("fast_cost_out_per_mtok", "$/Mtok", "fast lane's cost per million output tokens")
def _fast_cost(s: Stage) -> float:
    return _num(s.lane_metrics(True)["cost_per_mtok_out"])


@metric("normal_cost_out_per_mtok", "$/Mtok", "normal lane's cost per million output tokens")
def _normal_cost(s: Stage) -> float:
    return _num(s.lane_metrics(False)["cost_per_mtok_out"])


@metric("fast_price_x", "x", "fast lane's cost per output token over the normal lane's")
def _fast_price(s: Stage) -> float:
    return _fast_cost(s) / _normal_cost(s)


@metric("fast_batch", "sequences", "mean batch the fast lane runs at")
def _fast_batch(s: Stage) -> float:
    return _num(s.lane_metrics(True)["batch"])


@metric("normal_batch", "sequences", "mean batch the normal lane runs at")
def _normal_batch(s: Stage) -> float:
    return _num(s.lane_metrics(False)["batch"])


@metric("cost_out_now_per_mtok", "$/Mtok", "cost of a million output tokens over the recent ticks")
def _cost_out_now(s: Stage) -> float:
    return _num(s.snapshot().metrics.get("cost_per_mtok_out"))


@metric("cost_in_now_per_mtok", "$/Mtok", "cost of a million input tokens over the recent ticks")
def _cost_in_now(s: Stage) -> float:
    return _num(s.snapshot().metrics.get("cost_per_mtok_in"))


@metric("measured_e2e_s", "s", "Qwen's published A100 time for 2,048 tokens at batch 1 (this model, runtime, GPUs)")
def _measured_e2e(s: Stage) -> float:
    from engine.evidence.validate import qwen_case

    c = s.config
    try:
        case = qwen_case(c.model, c.tp, c.runtime)
    except KeyError:
        return float("nan")
    return case.osl / case.measured


@metric("e2e_vs_measured", "x", "the engine's median answer time over the published one")
def _e2e_vs_measured(s: Stage) -> float:
    return _e2e(s) / _measured_e2e(s)


@metric("cost_ratio_now", "x", "output over input cost per token over the recent ticks")
def _cost_ratio_now(s: Stage) -> float:
    return _cost_out_now(s) / _cost_in_now(s)


@metric("hidden_share_pct", "%", "share of generated tokens that were hidden thinking")
def _hidden_share(s: Stage) -> float:
    out = _run(s, "output_tokens")
    return 100 * (1 - _run(s, "visible_tokens") / out) if out else 0.0


@metric("fast_max_batch", "sequences", "batch cap of the fast lane")
def _fast_max_batch(s: Stage) -> float:
    return float(s.config.fast_max_batch)


@metric("fast_users", "users", "users in the fast lane")
def _fast_users(s: Stage) -> float:
    snap = s.snapshot()
    r = snap.requests
    live = r.phase != 4  # Phase.DONE
    return float(len(set(r.user[live & r.fast].tolist())))


@metric("qwen72b_2gpu_measured_s", "s", "Qwen's published time for 2,048 tokens from Qwen2.5-72B on two A100s (vLLM)")
def _q72_measured(s: Stage) -> float:
    from engine.evidence.validate import qwen_case

    c = qwen_case("qwen2.5-72b", 2)
    return c.osl / c.measured


@metric("qwen72b_2gpu_predicted_s", "s", "the step model's time for the same request (tokensim validate's row)")
def _q72_predicted(s: Stage) -> float:
    from engine.evidence.validate import predict, qwen_case

    c = qwen_case("qwen2.5-72b", 2)
    return c.osl / predict(c)


# ---- token economics (C26) ------------------------------------------------------------------

def _training(s: Stage, calls: bool = False) -> Any:
    """C26's equal-spend figures for the scene's model and probe (batch, context) under the stated assumptions
    of reference.toml's [training] table; `calls` reads the lifetime volume as calls, not tokens."""
    from engine.physics.economics import assumptions, training_equivalence

    a = assumptions(_reference()["training"], calls=calls)
    return training_equivalence(s.step_model(), s.probe.batch, s.probe.context, a)


@metric("serve_gpu_ms_per_tok", "GPU-ms", "GPU-milliseconds one served token costs: decode step x GPUs / batch")
def _serve_gpu_ms(s: Stage) -> float:
    return _training(s).serve_gpu_s_per_token * 1e3


@metric("serve_mfu_pct", "%", "the probe decode step's model FLOPs utilisation")
def _serve_mfu(s: Stage) -> float:
    return _training(s).serve_mfu * 100


@metric("train_gpu_ms_per_tok", "GPU-ms", "GPU-milliseconds one training token costs: 6 x active params / (peak x MFU)")
def _train_gpu_ms(s: Stage) -> float:
    return _training(s).train_gpu_s_per_token * 1e3


@metric("train_mfu_pct", "%", "the stated training MFU (reference.toml [training])")
def _train_mfu(s: Stage) -> float:
    return float(_reference()["training"]["train_mfu"]) * 100


@metric("lifetime_tokens_t", "trillion", "the stated lifetime served tokens, in trillions")
def _lifetime(s: Stage) -> float:
    return float(_reference()["training"]["served"]) / 1e12


@metric("tokens_per_call", "tokens", "output tokens per call in the 'calls' reading of the lifetime volume")
def _per_call(s: Stage) -> float:
    return float(_reference()["training"]["tokens_per_call"])


@metric("train_tokens_t", "trillion", "training tokens that cost as much as the lifetime of serving, in trillions")
def _train_tokens(s: Stage) -> float:
    return _training(s).train_tokens / 1e12


@metric("train_tokens_per_param", "tokens", "those training tokens per active parameter")
def _train_per_param(s: Stage) -> float:
    return _training(s).tokens_per_param


@metric("chinchilla_x", "x", "training tokens per active parameter over Chinchilla's ~20")
def _chinchilla_x(s: Stage) -> float:
    return _training(s).chinchilla_x


@metric("chinchilla_x_calls", "x", "the same, reading the lifetime volume as calls x tokens per call")
def _chinchilla_x_calls(s: Stage) -> float:
    return _training(s, calls=True).chinchilla_x


@metric("chinchilla_x_total", "x", "training tokens per total parameter over Chinchilla's ~20")
def _chinchilla_x_total(s: Stage) -> float:
    return _training(s).chinchilla_x_total


@metric("kv_fit_batch", "sequences", "the largest batch whose KV cache fits the pool at the probe context")
def _kv_fit_batch(s: Stage) -> float:
    return float(_training(s).max_batch_fits)


@metric("serve_vs_train_x", "x", "GPU-seconds per served token over GPU-seconds per training token")
def _serve_vs_train(s: Stage) -> float:
    t = _training(s)
    return t.serve_gpu_s_per_token / t.train_gpu_s_per_token


# ---- what a price list says (the closing scene) ----------------------------------------------

@metric("fit_batch", "sequences", "the probe batch, capped at what the KV pool holds at the probe context")
def _fit_batch(s: Stage) -> float:
    from engine.physics.economics import batch_that_fits

    return float(max(1, min(s.probe.batch, batch_that_fits(s.step_model(), s.probe.context))))


@metric("fit_gpu_ms_per_tok", "GPU-ms", "GPU-ms per output token at the probe context and the batch that fits")
def _fit_gpu_ms(s: Stage) -> float:
    from engine.physics.economics import serving_cost

    return serving_cost(s.step_model(), int(_fit_batch(s)), s.probe.context)[1] * 1e3


@metric("prefill_gpu_ms_per_tok", "GPU-ms", "GPU-milliseconds per prompt token of the probe prompt's prefill")
def _prefill_gpu_ms(s: Stage) -> float:
    sm = s.step_model()
    return _prefill(s).time_s * sm.opts.tp / s.probe.prompt * 1e3


# ---- the floor's own figures (issue 17: one truth per figure) ---------------------------------

@metric("live_mfu_pct", "%", "the step the engine just ran: its FLOPs over the peak's in its time (the SM grid's MFU)")
def _live_mfu(s: Stage) -> float:
    snap = s.snapshot()
    return 100 * snap.roof.mfu(snap.last_step)  # the SM grid's own figure (tui.render.figures.mfu)


@metric("live_unused_pct", "%", "the share of the peak FLOPs the step the engine just ran left unused")
def _live_unused(s: Stage) -> float:
    return 100 - _live_mfu(s)


# ---- prefix caching --------------------------------------------------------------------------

@metric("prefix_hit_pct", "%", "prompt tokens read from the prefix cache over all prompt tokens")
def _prefix_hit(s: Stage) -> float:
    return 100 * _run(s, "prefix_cache_hit_rate")


def _workload_prompt(s: Stage) -> Any:
    """The first stage's prompt spec of the scene's workload file (KeyError when the scene plays none)."""
    from engine.traffic.workload_file import load_workload

    if s.config.workload is None:
        raise KeyError("the scene plays no workload file")
    return load_workload(s.config.workload).stages[0].prompt


@metric("workload_prompt_tokens", "tokens", "mean prompt length of the scene's workload file (first stage)")
def _wl_prompt(s: Stage) -> float:
    return float(_workload_prompt(s).tokens.mean)


@metric("shared_prefix_tokens", "tokens", "of it, the leading tokens every request of a group shares (first stage)")
def _wl_shared(s: Stage) -> float:
    return float(_workload_prompt(s).shared_prefix)


@metric("kv_block_tokens", "tokens", "tokens one KV block holds (the pool's and the prefix cache's unit)")
def _kv_block_tokens(s: Stage) -> float:
    from engine.serving.snapshot import KV_BLOCK_TOKENS

    return float(KV_BLOCK_TOKENS)


@metric("input_tokens", "tokens", "prompt tokens served since the start (cached ones included)")
def _input_tokens(s: Stage) -> float:
    return _run(s, "input_tokens")


@metric("cost_cached_in_per_mtok", "$/Mtok", "cost of a million prompt tokens read from the prefix cache")
def _cost_cached_in(s: Stage) -> float:
    return _run(s, "cost_per_mtok_cached_in")


@metric("cached_vs_fresh_in_x", "x", "cost of a cached prompt token over a computed one")
def _cached_vs_fresh(s: Stage) -> float:
    return _cost_cached_in(s) / _cost_in(s)


@metric("cost_in_all_per_mtok", "$/Mtok", "cost of a million prompt tokens, computed and cached together")
def _cost_in_all(s: Stage) -> float:
    m = s.engine_metrics()
    inp = _num(m["input_tokens"])
    cached = _num(m["cached_input_tokens"])
    fresh = _num(m["cost_per_mtok_in"]) * (inp - cached) if inp > cached else 0.0
    return (fresh + (_num(m["cost_per_mtok_cached_in"]) * cached if cached else 0.0)) / inp if inp else float("nan")


@metric("ttft_p50_ms", "ms", "median time to the first visible token, in milliseconds")
def _ttft_ms(s: Stage) -> float:
    return _ttft(s) * 1e3


# ---- speculative decoding --------------------------------------------------------------------

@metric("spec_tokens", "tokens", "draft tokens proposed per step (0: speculative decoding off)")
def _spec_tokens(s: Stage) -> float:
    return float(s.config.spec_tokens)


@metric("spec_accept_pct", "%", "chance each draft token is accepted")
def _spec_accept(s: Stage) -> float:
    return 100 * s.config.spec_accept


@metric("spec_expected_tokens", "tokens", "tokens a sequence should emit per verify step: (1 - A^(K+1)) / (1 - A)")
def _spec_expected(s: Stage) -> float:
    from engine.physics.speculative import expected_tokens

    return expected_tokens(s.config.spec_tokens, s.config.spec_accept)


@metric("spec_tokens_per_step", "tokens", "tokens each running sequence emitted per step, as the engine ran them")
def _spec_per_step(s: Stage) -> float:
    return _run(s, "spec_tokens_per_step")


# ---- a real trace ----------------------------------------------------------------------------

def _trace(s: Stage) -> Any:
    """The trace the scene replays, at its replay speed (KeyError when the scene replays none)."""
    c = s.config
    if c.trace is None:
        raise KeyError("the scene replays no trace")
    return _load_trace(c.trace, c.trace_speed)


@lru_cache(maxsize=4)
def _load_trace(name: str, speed: float) -> Any:
    """A trace loaded once per (name, speed): the narration asks for its figures on every refresh."""
    from engine.traffic.trace import load_trace

    return load_trace(name, speed)


@metric("trace_requests", "requests", "requests in the replayed trace")
def _trace_requests(s: Stage) -> float:
    return float(len(_trace(s)))


@metric("trace_minutes", "min", "minutes from the trace's first arrival to its last, at the replay speed")
def _trace_minutes(s: Stage) -> float:
    return _trace(s).duration / 60


@metric("trace_rate", "req/s", "the trace's mean arrival rate at the replay speed")
def _trace_rate(s: Stage) -> float:
    tr = _trace(s)
    return len(tr) / tr.duration if tr.duration else float("nan")


@metric("trace_peak_rate", "req/s", "arrivals in the trace's busiest 5-second window (at the replay speed), per second")
def _trace_peak_rate(s: Stage) -> float:
    import numpy as np

    tr = _trace(s)
    # For each arrival, how many arrive in the 5 s from it: the busiest window starts at an arrival.
    ends = np.searchsorted(tr.arrival, tr.arrival + 5.0, side="left")
    return float((ends - np.arange(len(tr))).max()) / 5.0


@metric("trace_burst_x", "x", "the busiest 5 seconds' arrival rate over the trace's mean rate")
def _trace_burst(s: Stage) -> float:
    return _trace_peak_rate(s) / _trace_rate(s)


@metric("trace_speed", "x", "how many times faster than recorded the trace is replayed")
def _trace_speed(s: Stage) -> float:
    return float(s.config.trace_speed)


@metric("kv_peak_pct", "%", "the KV pool's fullest moment since the start, as a share of its blocks")
def _kv_peak(s: Stage) -> float:
    return 100 * _run(s, "kv_util_peak")


@metric("ttft_p99_s", "s", "99th-percentile time to the first visible token")
def _ttft99(s: Stage) -> float:
    return _run(s, "ttft_s", "p99")


@metric("queue_delay_p99_s", "s", "99th-percentile time a request waited before admission")
def _qd99(s: Stage) -> float:
    return _run(s, "queue_delay_s", "p99")


# ---- a fleet (the scene's `run_fleet` action: engine.fleet.fleet on the scene's traffic) -------------

def _fleet(s: Stage, key: str, pct: str | None = None) -> float:
    v = s.fleet_metrics()[key]
    return _num(v[pct] if pct else v)


@metric("fleet_replicas", "replicas", "replicas in the fleet the scene last ran")
def _fleet_replicas(s: Stage) -> float:
    return float(len(s.fleet_metrics()["replicas"]))


@metric("fleet_prefill_replicas", "replicas", "of them, replicas that only read prompts (P/D; 0 when colocated)")
def _fleet_prefill(s: Stage) -> float:
    return float(sum(r["role"] == "prefill" for r in s.fleet_metrics()["replicas"]))


@metric("fleet_decode_replicas", "replicas", "of them, replicas that write answers (all of them when colocated)")
def _fleet_decode(s: Stage) -> float:
    return float(sum(r["role"] != "prefill" for r in s.fleet_metrics()["replicas"]))


# The fleet's run figures read straight from its metrics: (name, unit, key, percentile, scale, doc).
_FLEET_FIGURES = (
    ("fleet_requests", "requests", "requests_completed", None, 1.0, "answers the fleet finished"),
    ("fleet_ttft_p50_s", "s", "ttft_s", "p50", 1.0, "the fleet's median time to the first visible token"),
    ("fleet_ttft_p90_s", "s", "ttft_s", "p90", 1.0, "the fleet's 90th-percentile time to the first visible token"),
    ("fleet_ttft_p99_s", "s", "ttft_s", "p99", 1.0, "the fleet's 99th-percentile time to the first visible token"),
    ("fleet_tpot_p50_ms", "ms", "tpot_s", "p50", 1e3, "the fleet's median time per output token"),
    ("fleet_tpot_p99_ms", "ms", "tpot_s", "p99", 1e3, "the fleet's 99th-percentile time per output token"),
    ("fleet_queue_delay_p90_s", "s", "queue_delay_s", "p90", 1.0, "the fleet's 90th-percentile wait before admission"),
    ("fleet_preemptions", "preemptions", "preemptions", None, 1.0, "requests evicted under KV pressure, every replica"),
)


def _fleet_figure(key: str, pct: str | None, scale: float) -> Callable[[Stage], float]:
    """A metric function reading one of the fleet's figures."""
    return lambda s: _fleet(s, key, pct) * scale


for _name, _unit, _key, _pct, _scale, _doc in _FLEET_FIGURES:
    metric(_name, _unit, _doc)(_fleet_figure(_key, _pct, _scale))


@metric("fleet_tpot_spread_x", "x", "the fleet's p99 time per output token over its median: 1 is perfectly steady")
def _fleet_tpot_spread(s: Stage) -> float:
    return _fleet(s, "tpot_s", "p99") / _fleet(s, "tpot_s", "p50")


@metric("fleet_queue_peak_max", "requests", "the longest queue any replica had")
def _fleet_qmax(s: Stage) -> float:
    return float(max(r["queue_peak"] for r in s.fleet_metrics()["replicas"]))


@metric("fleet_queue_peak_min", "requests", "the longest queue of the replica whose queue stayed shortest")
def _fleet_qmin(s: Stage) -> float:
    return float(min(r["queue_peak"] for r in s.fleet_metrics()["replicas"]))


@metric("fleet_kv_copy_ms", "ms", "P/D: median time to copy a prompt's KV from a prefill to a decode replica")
def _fleet_copy(s: Stage) -> float:
    m = s.fleet_metrics()
    if "kv_transfer_s" not in m:
        raise KeyError("the fleet ran without P/D: no KV copies")
    return _num(m["kv_transfer_s"]["p50"]) * 1e3


@metric("fleet_kv_link_gbps", "GB/s", "P/D: the link each prefill replica copies KV over")
def _fleet_link(s: Stage) -> float:
    m = s.fleet_metrics()
    if "kv_link_gbps" not in m:
        raise KeyError("the fleet ran without P/D: no KV link")
    return _num(m["kv_link_gbps"])


# ---- the scene's traffic -----------------------------------------------------------------------

@metric("rate_req_s", "req/s", "open-loop arrival rate of the scene's traffic (Poisson)")
def _rate(s: Stage) -> float:
    return float(s.config.rate)


@metric("prompt_mean_tokens", "tokens", "mean prompt length of the scene's traffic (--prompt)")
def _prompt_mean(s: Stage) -> float:
    from engine.traffic.workload import parse_dist

    return parse_dist(s.config.prompt, "prompt", 1).mean


@metric("output_mean_tokens", "tokens", "mean answer length of the scene's traffic (--output)")
def _output_mean(s: Stage) -> float:
    from engine.traffic.workload import parse_dist

    return parse_dist(s.config.output, "output", 1).mean
