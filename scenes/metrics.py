"""The metrics a scene's narration and checkpoints may name: each a pure function of the director's state.

Nothing here re-derives physics: step-model metrics call engine.physics.step.StepModel (and its helpers) on
the scene's current configuration and probe; live metrics read the Engine's Snapshot and metrics().
A metric returns a float, or a str for the few whose unit is "text" (e.g. which roofline term wins).

Most metrics are one attribute of one object, scaled: they are rows of FIGURES, grouped by the object they read
(SOURCES). Metrics that divide one metric by another are rows of RATIOS; the rest, each a short formula, are
rows of FORMULAS. All three tables register into METRICS, the one registry the director and the schema read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from engine.evidence.claim_rows import reference
from engine.evidence.validate import predict, qwen_case
from engine.physics.economics import assumptions, batch_that_fits, serving_cost, training_equivalence
from engine.physics.specs import DTYPE_BYTES
from engine.physics.speculative import expected_tokens
from engine.physics.step import context_wall, crossover_batch
from engine.serving.snapshot import KV_BLOCK_TOKENS
from engine.traffic.trace import load_trace
from engine.traffic.workload import parse_dist
from engine.traffic.workload_file import load_workload

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


Fn = Callable[["Stage"], Any]


@dataclass(frozen=True, slots=True)
class Metric:
    """A named, documented figure; `unit` 'text' marks a string-valued metric."""

    name: str
    unit: str
    doc: str
    fn: Callable[[Stage], float | str]


METRICS: dict[str, Metric] = {}


def metric(name: str, unit: str, doc: str) -> Callable[[Fn], Fn]:
    """Register a metric function under `name` (a decorator); a name registered twice is a mistake."""
    def deco(fn: Fn) -> Fn:
        if name in METRICS:
            raise ValueError(f"metric {name!r} registered twice")
        METRICS[name] = Metric(name, unit, doc, fn)
        return fn
    return deco


def value(s: Stage, name: str) -> float:
    """Metric `name`'s value at `s`: how a formula or a ratio names another figure."""
    return METRICS[name].fn(s)  # type: ignore[return-value]


def _decode(s: Stage, ideal: bool | None = None) -> StepCost:
    return s.step_model(ideal).decode(s.probe.batch, s.probe.context)


def _prefill(s: Stage, ideal: bool | None = None) -> StepCost:
    return s.step_model(ideal).prefill(s.probe.prompt)


def _training(s: Stage, calls: bool = False) -> Any:
    """C26's equal-spend figures for the scene's model and probe (batch, context) under the stated assumptions
    of reference.toml's [training] table; `calls` reads the lifetime volume as calls, not tokens."""
    a = assumptions(reference()["training"], calls=calls)
    return training_equivalence(s.step_model(), s.probe.batch, s.probe.context, a)


def _trace(s: Stage) -> Any:
    """The trace the scene replays, at its replay speed (KeyError when the scene replays none)."""
    c = s.config
    if c.trace is None:
        raise KeyError("the scene replays no trace")
    return _load_trace(c.trace, c.trace_speed)


@lru_cache(maxsize=4)
def _load_trace(name: str, speed: float) -> Any:
    """A trace loaded once per (name, speed): the narration asks for its figures on every refresh."""
    return load_trace(name, speed)


def _distinct_prompts_kv_gb(prompt: Any, kv_bytes_per_token: float) -> float:
    """GB of KV cache the distinct prompts of a workload stage's prompt spec hold: groups x users per group x mean
    prompt x bytes per token (the spec read once: each read of it parses the workload file)."""
    return prompt.groups * max(1, prompt.users_per_group or 1) * prompt.tokens.mean * kv_bytes_per_token / 1e9


def _run_block(s: Stage, path: str) -> float:
    """A figure of one of the run's optional blocks (`lora`, `kv_tiers`): NaN when the run has no such block."""
    v = dig(s.engine_metrics(), path, lenient=True)
    return math.nan if v is None else float(v)


def _workload_prompt(s: Stage) -> Any:
    """The first stage's prompt spec of the scene's workload file (KeyError when the scene plays none)."""
    if s.config.workload is None:
        raise KeyError("the scene plays no workload file")
    return load_workload(s.config.workload).stages[0].prompt


# ---- figures: one attribute of one object, scaled ----------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Source:
    """The object a family of figures reads, and what a figure reads when it has none (None) yet."""

    root: Callable[[Stage], Any]
    missing: float = math.nan
    missing_text: str = ""
    lenient: bool = False  # a key the mapping lacks reads as missing (the rolling window before it has one)


# The objects figures read. `run`, `fast`, `normal`, `fleet` and `rolling` are metric dicts, whose None means
# "not measured yet" (NaN); `last` is the step the engine just ran, None (0, "idle") before the first.
SOURCES: dict[str, Source] = {
    "model": Source(lambda s: s.step_model()),
    "config": Source(lambda s: s.config),
    "probe": Source(lambda s: s.probe),
    "decode": Source(_decode),
    "decode_ideal": Source(lambda s: _decode(s, True)),
    "decode_calibrated": Source(lambda s: _decode(s, False)),
    "prefill": Source(_prefill),
    "snapshot": Source(lambda s: s.snapshot()),
    "last": Source(lambda s: s.snapshot().last_step, missing=0.0, missing_text="idle"),
    "rolling": Source(lambda s: s.snapshot().metrics, lenient=True),
    "run": Source(lambda s: s.engine_metrics()),
    "fast": Source(lambda s: s.lane_metrics(True)),
    "normal": Source(lambda s: s.lane_metrics(False)),
    "fleet": Source(lambda s: s.fleet_metrics()),
    "reference": Source(lambda s: reference()),
    "training": Source(_training),
    "training_calls": Source(lambda s: _training(s, calls=True)),
    "trace": Source(_trace),
}

# (name, unit, source, dotted path in it, scale, doc). A path step reads a key of a mapping, else an attribute;
# scale is '' (as read), '*k' or '/k'. A text metric comes back as read; every other one as a float.
FIGURES: tuple[tuple[str, str, str, str, str, str], ...] = (
    # hardware and memory
    ("hbm_gb", "GB", "model", "hw.memory_gb", "", "HBM (warehouse) size of one GPU"),
    ("hbm_gbps", "GB/s", "model", "roof.bandwidth", "/1e9",
     "HBM bandwidth (the conveyor) with the bandwidth knob applied"),
    ("ssd_gbps", "GB/s", "reference", "ssd.read_gbps", "", "a fast NVMe SSD's read speed (engine reference figure)"),
    ("tflops", "TFLOP/s", "model", "roof.peak_flops", "/1e12",
     "dense tensor-core peak at the dtype the matmuls run in, compute knob applied"),
    ("l2_mb", "MB", "model", "hw.l2_mb", "", "L2 cache (the shelf) size"),
    ("sm_count", "SMs", "model", "hw.sm_count", "", "streaming multiprocessors (workstations)"),
    ("tray_kb", "KB", "model", "hw.smem_per_sm_kb", "", "L1/shared memory per SM (one workstation's tray)"),
    ("gpus", "GPUs", "config", "tp", "", "tensor-parallel GPUs the model is spread over"),
    ("weights_gb", "GB", "model", "weight_bytes_per_gpu", "/1e9", "weight bytes per GPU at the current weight dtype"),
    ("params_b", "billion", "model", "model.params_total", "/1e9", "total parameters of the current model"),
    ("params_yi", "亿", "model", "model.params_total", "/1e8",
     "total parameters in units of 1e8 (亿), for the Chinese narration"),
    ("active_params_b", "billion", "model", "model.params_active", "/1e9",
     "parameters one token actually multiplies (MoE: routed experts only)"),
    ("reserve_gb", "GB", "model", "reserve_bytes", "/1e9", "HBM held back for activations and scratch"),
    ("kv_pool_gb", "GB", "model", "kv_capacity_bytes", "/1e9", "KV pool: memory minus weights minus the reserve"),
    ("ridge", "FLOP/B", "model", "roof.ridge", "",
     "the hardware constant: peak FLOP/s / bytes/s at the weights' dtype"),
    # the probe step (probe_batch sequences on probe_context tokens; a probe_prompt prefill)
    ("probe_batch", "sequences", "probe", "batch", "", "sequences in the probe decode step"),
    ("probe_context", "tokens", "probe", "context", "", "tokens each probe sequence already holds in its KV cache"),
    ("probe_prompt", "tokens", "probe", "prompt", "", "length of the probe prefill's prompt"),
    ("step_ms_ideal", "ms", "decode_ideal", "time_s", "*1e3",
     "decode step time of the probe at peak bandwidth and FLOP/s, no overhead"),
    ("step_ms_calibrated", "ms", "decode_calibrated", "time_s", "*1e3",
     "decode step time of the probe with the calibrated runtime"),
    ("step_ms", "ms", "decode", "time_s", "*1e3", "decode step time of the probe as configured (ideal or calibrated)"),
    ("reading_pace_chars_s", "chars/s", "reference", "reading.chars_per_s", "",
     "a comfortable reading pace (engine reference figure)"),
    ("decode_bound", "text", "decode", "bound", "",
     "which roofline term sets the probe decode step's pace: memory or compute"),
    ("decode_ai", "FLOP/B", "decode", "arithmetic_intensity", "", "arithmetic intensity of the probe decode step"),
    ("decode_gb", "GB", "decode", "bytes_total", "/1e9", "HBM bytes one probe decode step moves"),
    ("decode_weights_gb", "GB", "decode", "bytes.weights", "/1e9", "weight bytes one probe decode step reads"),
    ("decode_kv_gb", "GB", "decode", "bytes.kv_read", "/1e9", "KV-cache bytes one probe decode step reads"),
    ("l2_refills", "refills", "decode", "l2_refills", "",
     "times the L2 shelf is filled and emptied in one probe decode step"),
    ("sm_busy_pct", "%", "decode", "sm_busy", "*100", "share of the probe decode step the SMs spend computing"),
    ("prefill_ms", "ms", "prefill", "time_s", "*1e3", "time to prefill the probe prompt as configured"),
    ("prefill_bound", "text", "prefill", "bound", "", "which roofline term sets the probe prefill's pace"),
    ("prefill_ai", "FLOP/B", "prefill", "arithmetic_intensity", "", "arithmetic intensity of the probe prefill"),
    # batching, MoE, KV cache
    ("experts_per_token", "experts", "model", "model.experts_per_token", "",
     "routed experts each token visits per layer"),
    ("experts_touched", "experts", "decode", "experts_touched", "",
     "routed experts per layer the probe decode step reads (expected)"),
    ("experts_total", "experts", "model", "model.experts", "", "routed experts per layer"),
    ("head_dim", "dims", "model", "model.head_dim", "", "width of one attention head"),
    ("kv_heads", "heads", "model", "model.kv_heads", "", "key/value heads per layer (grouped-query attention)"),
    ("layers", "layers", "model", "model.layers", "", "transformer layers of the current model"),
    ("rack_tb", "TB", "reference", "nvl72.memory_gb", "/1e3",
     "HBM of a whole GB200 NVL72 rack (engine reference figure)"),
    # live engine: the snapshot, the step it just ran, its rolling window
    ("sim_time_s", "s", "snapshot", "time_s", "", "simulated time on the engine's clock"),
    ("live_step_ms", "ms", "last", "time_s", "*1e3", "time of the step the engine just ran"),
    ("live_bound", "text", "last", "bound", "", "which roofline term set the pace of the step the engine just ran"),
    ("live_sm_busy_pct", "%", "last", "sm_busy", "*100", "SM busy share of the step the engine just ran"),
    ("live_l2_refills", "refills", "last", "l2_refills", "", "L2 refills in the step the engine just ran"),
    ("batch_size", "sequences", "snapshot", "batch_size", "", "sequences in the step the engine just ran"),
    ("users", "users", "snapshot", "users", "", "closed-loop users in the workload"),
    ("running", "requests", "snapshot", "running", "", "requests running (prefill, thinking or decoding)"),
    ("done", "requests", "snapshot", "done", "", "requests finished"),
    ("preemptions", "preemptions", "snapshot", "preemptions_total", "",
     "requests evicted under KV pressure since the start"),
    ("tok_s_out", "tok/s", "rolling", "tok_s_out", "", "output tokens per second over the recent ticks (all users)"),
    ("tok_s_per_user", "tok/s", "rolling", "tok_s_per_user", "", "one decoding user's speed over the recent ticks"),
    ("bw_util_pct", "%", "rolling", "bw_util", "*100", "share of peak HBM bandwidth used over the recent ticks"),
    ("mfu_pct", "%", "rolling", "mfu", "*100", "model FLOPs utilisation over the recent ticks"),
    ("cost_out_now_per_mtok", "$/Mtok", "rolling", "cost_per_mtok_out", "",
     "cost of a million output tokens over the recent ticks"),
    ("cost_in_now_per_mtok", "$/Mtok", "rolling", "cost_per_mtok_in", "",
     "cost of a million input tokens over the recent ticks"),
    # the run so far (Engine.metrics())
    ("requests_completed", "requests", "run", "requests_completed", "", "answers finished since the start"),
    ("output_tokens", "tokens", "run", "output_tokens", "",
     "tokens generated since the start (hidden thinking included)"),
    ("ttft_p50_s", "s", "run", "ttft_s.p50", "", "median time to the first visible token"),
    ("ttft_p50_ms", "ms", "run", "ttft_s.p50", "*1e3", "median time to the first visible token, in milliseconds"),
    ("ttft_p99_s", "s", "run", "ttft_s.p99", "", "99th-percentile time to the first visible token"),
    ("ttft_raw_p50_s", "s", "run", "ttft_raw_s.p50", "", "median time to the first generated token, hidden or not"),
    ("tpot_ms", "ms", "run", "tpot_s.p50", "*1e3", "median time per output token"),
    ("e2e_p50_s", "s", "run", "e2e_s.p50", "", "median end-to-end latency of an answer"),
    ("queue_delay_p50_s", "s", "run", "queue_delay_s.p50", "", "median time a request waited before admission"),
    ("queue_delay_p90_s", "s", "run", "queue_delay_s.p90", "",
     "90th-percentile time a request waited before admission"),
    ("queue_delay_p99_s", "s", "run", "queue_delay_s.p99", "",
     "99th-percentile time a request waited before admission"),
    ("cost_in_per_mtok", "$/Mtok", "run", "cost_per_mtok_in", "",
     "cost of a million input tokens (prefill time charged to input)"),
    ("cost_out_per_mtok", "$/Mtok", "run", "cost_per_mtok_out", "",
     "cost of a million output tokens (decode time charged to output)"),
    ("price_per_hour", "$/h", "run", "price_per_hour", "", "GPU rental price per hour the costs use"),
    ("prefix_hit_pct", "%", "run", "prefix_cache_hit_rate", "*100",
     "prompt tokens read from the prefix cache over all prompt tokens"),
    ("input_tokens", "tokens", "run", "input_tokens", "",
     "prompt tokens served since the start (cached ones included)"),
    ("cost_cached_in_per_mtok", "$/Mtok", "run", "cost_per_mtok_cached_in", "",
     "cost of a million prompt tokens read from the prefix cache"),
    ("spec_tokens_per_step", "tokens", "run", "spec_tokens_per_step", "",
     "tokens each running sequence emitted per step, as the engine ran them"),
    ("kv_peak_pct", "%", "run", "kv_util_peak", "*100",
     "the KV pool's fullest moment since the start, as a share of its blocks"),
    # the fast lane and the normal lane
    # A user's speed is 1 / their median time per output token over the lane's last answers: a window of whole
    # answers, so it holds still while the floor runs on (the rolling tick window swings with closed-loop
    # cohorts' prefills, 1.6-2.5x in scene 12, and a checkpoint read at one instant disagreed with the screen).
    ("fast_tpot_ms", "ms", "fast", "tpot_s.p50", "*1e3", "a fast-lane user's median time per output token"),
    ("normal_tpot_ms", "ms", "normal", "tpot_s.p50", "*1e3", "a normal-lane user's median time per output token"),
    ("fast_cost_out_per_mtok", "$/Mtok", "fast", "cost_per_mtok_out", "", "fast lane's cost per million output tokens"),
    ("normal_cost_out_per_mtok", "$/Mtok", "normal", "cost_per_mtok_out", "",
     "normal lane's cost per million output tokens"),
    ("fast_batch", "sequences", "fast", "batch", "", "mean batch the fast lane runs at"),
    ("normal_batch", "sequences", "normal", "batch", "", "mean batch the normal lane runs at"),
    ("fast_max_batch", "sequences", "config", "fast_max_batch", "", "batch cap of the fast lane"),
    # token economics (C26)
    ("serve_gpu_ms_per_tok", "GPU-ms", "training", "serve_gpu_s_per_token", "*1e3",
     "GPU-milliseconds one served token costs: decode step x GPUs / batch"),
    ("serve_mfu_pct", "%", "training", "serve_mfu", "*100", "the probe decode step's model FLOPs utilisation"),
    ("train_gpu_ms_per_tok", "GPU-ms", "training", "train_gpu_s_per_token", "*1e3",
     "GPU-milliseconds one training token costs: 6 x active params / (peak x MFU)"),
    ("train_mfu_pct", "%", "reference", "training.train_mfu", "*100",
     "the stated training MFU (reference.toml [training])"),
    ("lifetime_tokens_t", "trillion", "reference", "training.served", "/1e12",
     "the stated lifetime served tokens, in trillions"),
    ("tokens_per_call", "tokens", "reference", "training.tokens_per_call", "",
     "output tokens per call in the 'calls' reading of the lifetime volume"),
    ("train_tokens_t", "trillion", "training", "train_tokens", "/1e12",
     "training tokens that cost as much as the lifetime of serving, in trillions"),
    ("train_tokens_per_param", "tokens", "training", "tokens_per_param", "",
     "those training tokens per active parameter"),
    ("chinchilla_x", "x", "training", "chinchilla_x", "", "training tokens per active parameter over Chinchilla's ~20"),
    ("chinchilla_x_calls", "x", "training_calls", "chinchilla_x", "",
     "the same, reading the lifetime volume as calls x tokens per call"),
    ("chinchilla_x_total", "x", "training", "chinchilla_x_total", "",
     "training tokens per total parameter over Chinchilla's ~20"),
    ("kv_fit_batch", "sequences", "training", "max_batch_fits", "",
     "the largest batch whose KV cache fits the pool at the probe context"),
    # speculative decoding, a trace, the scene's traffic
    ("spec_tokens", "tokens", "config", "spec_tokens", "",
     "draft tokens proposed per step (0: speculative decoding off)"),
    ("spec_accept_pct", "%", "config", "spec_accept", "*100", "chance each draft token is accepted"),
    ("trace_minutes", "min", "trace", "duration", "/60",
     "minutes from the trace's first arrival to its last, at the replay speed"),
    ("trace_speed", "x", "config", "trace_speed", "", "how many times faster than recorded the trace is replayed"),
    ("rate_req_s", "req/s", "config", "rate", "", "open-loop arrival rate of the scene's traffic (Poisson)"),
    # a fleet (the scene's `run_fleet` action: engine.fleet.fleet on the scene's traffic)
    ("fleet_requests", "requests", "fleet", "requests_completed", "", "answers the fleet finished"),
    ("fleet_ttft_p50_s", "s", "fleet", "ttft_s.p50", "", "the fleet's median time to the first visible token"),
    ("fleet_ttft_p90_s", "s", "fleet", "ttft_s.p90", "", "the fleet's 90th-percentile time to the first visible token"),
    ("fleet_ttft_p99_s", "s", "fleet", "ttft_s.p99", "", "the fleet's 99th-percentile time to the first visible token"),
    ("fleet_tpot_p50_ms", "ms", "fleet", "tpot_s.p50", "*1e3", "the fleet's median time per output token"),
    ("fleet_tpot_p99_ms", "ms", "fleet", "tpot_s.p99", "*1e3", "the fleet's 99th-percentile time per output token"),
    ("fleet_queue_delay_p90_s", "s", "fleet", "queue_delay_s.p90", "",
     "the fleet's 90th-percentile wait before admission"),
    ("fleet_preemptions", "preemptions", "fleet", "preemptions", "",
     "requests evicted under KV pressure, every replica"),
)


def dig(obj: Any, path: str, lenient: bool = False) -> Any:
    """`obj` followed along a dotted path: a mapping's key (KeyError when absent, None when `lenient`), else an
    attribute; None once a step reads None."""
    for part in path.split("."):
        if obj is None:
            return None
        if isinstance(obj, Mapping):
            obj = obj.get(part) if lenient else obj[part]
        else:
            obj = getattr(obj, part)
    return obj


def scaler(scale: str) -> Callable[[float], float]:
    """'' -> as read; '*1e3' -> times 1e3; '/1e9' -> over 1e9 (the order of operations of the figure it names)."""
    if not scale:
        return lambda v: v
    k = float(scale[1:])
    if scale[0] == "*":
        return lambda v: v * k
    if scale[0] == "/":
        return lambda v: v / k
    raise ValueError(f"scale {scale!r}: '', '*k' or '/k'")


def figure(source: str, path: str, scale: str = "", text: bool = False) -> Fn:
    """A metric function reading `path` from SOURCES[source], scaled (a float), or as read when `text`."""
    src, sc = SOURCES[source], scaler(scale)

    def fn(s: Stage) -> float | str:
        v = dig(src.root(s), path, src.lenient)
        if v is None:
            return src.missing_text if text else src.missing
        return v if text else sc(float(v))
    return fn


for _name, _unit, _src, _path, _scale, _doc in FIGURES:
    metric(_name, _unit, _doc)(figure(_src, _path, _scale, text=_unit == "text"))


# ---- ratios: one metric over another ----------------------------------------------------------------------

RATIOS: tuple[tuple[str, str, str, str], ...] = (  # (name, numerator, denominator, doc); unit 'x'
    ("hbm_vs_ssd", "hbm_gbps", "ssd_gbps", "how many times faster the HBM conveyor is than a fast SSD"),
    ("reading_pace_x", "tok_s_ideal", "reading_pace_chars_s", "ideal decode speed over a comfortable reading pace"),
    ("moe_vs_dense_batch_x", "crossover_batch", "ridge",
     "crossover batch of the current model over the ridge (dense ~1)"),
    ("moe_crossover_vs_formula", "crossover_batch", "moe_formula_batch",
     "the engine's crossover batch over the article's MoE formula (1 = agree)"),
    ("cost_ratio_out_in", "cost_out_per_mtok", "cost_in_per_mtok", "output over input cost per token"),
    ("fast_speedup_x", "normal_tpot_ms", "fast_tpot_ms",
     "fast-lane speed over normal-lane speed per user (normal over fast median time per output token)"),
    ("fast_price_x", "fast_cost_out_per_mtok", "normal_cost_out_per_mtok",
     "fast lane's cost per output token over the normal lane's"),
    ("e2e_vs_measured", "e2e_p50_s", "measured_e2e_s", "the engine's median answer time over the published one"),
    ("cost_ratio_now", "cost_out_now_per_mtok", "cost_in_now_per_mtok",
     "output over input cost per token over the recent ticks"),
    ("cached_vs_fresh_in_x", "cost_cached_in_per_mtok", "cost_in_per_mtok",
     "cost of a cached prompt token over a computed one"),
    ("trace_burst_x", "trace_peak_rate", "trace_rate",
     "the busiest 5 seconds' arrival rate over the trace's mean rate"),
)


def ratio(num: str, den: str) -> Fn:
    """A metric function: metric `num` over metric `den`."""
    return lambda s: value(s, num) / value(s, den)


for _name, _num_name, _den_name, _doc in RATIOS:
    metric(_name, "x", _doc)(ratio(_num_name, _den_name))


# ---- formulas: figures that combine several reads -----------------------------------------------------------

def _measured_e2e(s: Stage) -> float:
    """Qwen's published A100 time for 2,048 tokens at batch 1 for the scene's model, runtime and GPUs (NaN when
    the table has no such row)."""
    c = s.config
    try:
        case = qwen_case(c.model, c.tp, c.runtime)
    except KeyError:
        return float("nan")
    return case.osl / case.measured


def _fast_users(s: Stage) -> float:
    """Distinct users with a live (not done) request in the fast lane."""
    r = s.snapshot().requests
    live = r.phase != 4  # Phase.DONE
    return float(len(set(r.user[live & r.fast].tolist())))


def _cost_in_all(s: Stage) -> float:
    """$/Mtok over every prompt token: computed ones at the input price, cached ones at the cached price."""
    m = s.engine_metrics()
    inp = _num(m["input_tokens"])
    cached = _num(m["cached_input_tokens"])
    fresh = _num(m["cost_per_mtok_in"]) * (inp - cached) if inp > cached else 0.0
    return (fresh + (_num(m["cost_per_mtok_cached_in"]) * cached if cached else 0.0)) / inp if inp else float("nan")


def _trace_peak_rate(s: Stage) -> float:
    """Arrivals in the trace's busiest 5-second window, per second."""
    tr = _trace(s)
    # For each arrival, how many arrive in the 5 s from it: the busiest window starts at an arrival.
    ends = np.searchsorted(tr.arrival, tr.arrival + 5.0, side="left")
    return float((ends - np.arange(len(tr))).max()) / 5.0


def _fleet_pd(s: Stage, key: str, what: str) -> float:
    """A P/D-only fleet figure (KeyError naming `what` when the fleet ran colocated)."""
    m = s.fleet_metrics()
    if key not in m:
        raise KeyError(f"the fleet ran without P/D: no {what}")
    return _num(m[key]["p50"]) * 1e3 if what == "KV copies" else _num(m[key])


def _num(v: Any) -> float:
    """A metric value as a float (None, i.e. not measured yet, becomes NaN)."""
    return float("nan") if v is None else float(v)


def _per(part: float, whole: float) -> float:
    """part / whole, 0 when there is no whole (an empty pool, nothing running)."""
    return part / whole if whole else 0.0


def _sm(s: Stage) -> StepModel:
    return s.step_model()


def _snap(s: Stage) -> Snapshot:
    return s.snapshot()


def _replicas(s: Stage) -> list[dict[str, Any]]:
    return s.fleet_metrics()["replicas"]


_Q72 = ("qwen2.5-72b", 2)  # Qwen's published row for Qwen2.5-72B on two A100s (vLLM)

# (name, unit, doc, formula). A formula names other metrics through `value`.
FORMULAS: tuple[tuple[str, str, str, Fn], ...] = (
    # the fast lane and the normal lane: a user's speed over the lane's last answers (see fast_tpot_ms)
    ("fast_tok_s_per_user", "tok/s", "a fast-lane user's speed: 1 / median time per output token",
     lambda s: 1e3 / value(s, "fast_tpot_ms")),
    ("normal_tok_s_per_user", "tok/s", "a normal-lane user's speed: 1 / median time per output token",
     lambda s: 1e3 / value(s, "normal_tpot_ms")),
    # hardware and memory
    ("trays_total_mb", "MB", "all trays together: SMs x tray size",
     lambda s: _sm(s).hw.sm_count * _sm(s).hw.smem_per_sm_kb / 1e3),
    ("weight_bytes_each", "B", "bytes one weight takes at the current weight dtype",
     lambda s: DTYPE_BYTES[_sm(s).wdtype]),
    ("ssd_step_ms", "ms", "time to read the weights once from a fast SSD instead of HBM",
     lambda s: _sm(s).weight_bytes_per_gpu / (value(s, "ssd_gbps") * 1e9) * 1e3),
    ("l2_share_pct", "%", "share of the weights the L2 shelf can hold at once",
     lambda s: _sm(s).hw.l2_bytes / _sm(s).weight_bytes_per_gpu * 100),
    ("free_after_weights_gb", "GB", "HBM left once the weights are in: memory minus weights",
     lambda s: (_sm(s).hw.memory_bytes - _sm(s).weight_bytes_per_gpu) / 1e9),
    ("reserve_pct", "%", "share of HBM held back for activations and scratch",
     lambda s: _sm(s).reserve_bytes / _sm(s).hw.memory_bytes * 100),
    ("ridge_bf16", "FLOP/B", "peak bf16 FLOP/s / HBM bytes/s of the current GPU (no knobs)",
     lambda s: _sm(s).hw.ridge("bf16")),
    ("drain_ms", "ms", "time to read the whole HBM once at peak bandwidth ('a train every N ms')",
     lambda s: _sm(s).hw.memory_bytes / _sm(s).roof.bandwidth * 1e3),
    ("drain_ms_calibrated", "ms", "the same at the runtime's calibrated bandwidth efficiency",
     lambda s: value(s, "drain_ms") / s.step_model(False).runtime.bw_eff),
    # the probe step
    ("tok_s_ideal", "tok/s", "one user's ideal decode speed: 1 / ideal step time",
     lambda s: 1e3 / value(s, "step_ms_ideal")),
    ("tok_s_calibrated", "tok/s", "one user's calibrated decode speed", lambda s: 1e3 / value(s, "step_ms_calibrated")),
    ("batch_tok_s_ideal", "tok/s", "the whole probe batch's ideal decode output per second",
     lambda s: s.probe.batch * value(s, "tok_s_ideal")),
    ("sm_idle_pct", "%", "share of the probe decode step the SMs wait", lambda s: 100 - value(s, "sm_busy_pct")),
    ("sm_idle_pct_ideal", "%", "the same at peak figures, no overhead", lambda s: 100 - _decode(s, True).sm_busy * 100),
    ("hbm_tb_100_tokens", "TB", "HBM bytes the probe batch moves writing 100 tokens (step model)",
     lambda s: sum(_sm(s).decode(s.probe.batch, s.probe.context + i).bytes_total for i in range(100)) / 1e12),
    ("prefill_tok_s", "tok/s", "prompt tokens read per second in the probe prefill",
     lambda s: s.probe.prompt / _prefill(s).time_s),
    ("read_vs_write_x", "x", "prompt tokens read per second over tokens written per second (probe)",
     lambda s: value(s, "prefill_tok_s") / (s.probe.batch / _decode(s).time_s)),
    # batching
    ("crossover_batch", "sequences", "smallest decode batch (at the probe context) that turns compute-bound",
     lambda s: float(crossover_batch(_sm(s), s.probe.context))),
    ("moe_formula_batch", "sequences", "the article's MoE estimate: ridge x total / active params",
     lambda s: value(s, "ridge") * _sm(s).model.params_total / _sm(s).model.params_active),
    ("ep_ranks", "ranks", "expert-parallel ranks (vLLM's --data-parallel-size with --enable-expert-parallel; 1: none)",
     lambda s: float(s.config.ep)),
    ("ep_deployment_batch", "sequences", "sequences the whole expert-parallel deployment holds when every rank is at"
     " its crossover batch: crossover_batch (one rank's) x ranks", lambda s: value(s, "crossover_batch") * s.config.ep),
    ("cost_per_token_crossover_x", "x", "GPU time per output token at batch 1 over that at the crossover batch (the"
     " saving a full batch buys)", lambda s: _sm(s).decode(1, s.probe.context).time_s
     / (_sm(s).decode(int(value(s, "crossover_batch")), s.probe.context).time_s / value(s, "crossover_batch"))),
    ("cost_per_token_batch1_x", "x", "cost per output token at batch 1 over that at the probe batch",
     lambda s: _sm(s).decode(1, s.probe.context).time_s
     / (_sm(s).decode(s.probe.batch, s.probe.context).time_s / s.probe.batch)),
    # KV cache
    ("kv_bytes_token_layer", "B", "KV bytes one token adds per layer (K and V, all KV heads, KV dtype)",
     lambda s: _sm(s).model.kv_bytes_per_token_layer(s.config.kv_dtype)),
    ("kv_kb_token", "KB", "KV bytes one token adds across all layers",
     lambda s: _sm(s).model.kv_bytes_per_token(s.config.kv_dtype) / 1e3),
    ("kv_dtype_bytes", "B", "bytes per cached key or value element at the KV dtype",
     lambda s: DTYPE_BYTES[s.config.kv_dtype]),
    ("kv_conv_mb_layer", "MB", "one probe-context conversation's KV, one layer only (the article's figure)",
     lambda s: value(s, "kv_bytes_token_layer") * s.probe.context / 1e6),
    ("kv_conv_gb", "GB", "one probe-context conversation's KV across all layers",
     lambda s: value(s, "kv_kb_token") * 1e3 * s.probe.context / 1e9),
    ("kv_batch_gb_layer", "GB", "probe-batch users x probe context, one layer only (the article's figure)",
     lambda s: value(s, "kv_conv_mb_layer") * s.probe.batch / 1e3),
    ("kv_batch_tb", "TB", "probe-batch users x probe context, all layers",
     lambda s: value(s, "kv_conv_gb") * s.probe.batch / 1e3),
    ("context_wall_tokens", "tokens", "context at which one user's KV read equals their share of the weight read",
     lambda s: float(context_wall(_sm(s), s.probe.batch))),
    ("context_wall_article", "tokens", "the article's wall: weight bytes / (ridge x per-layer KV bytes per token)",
     lambda s: _sm(s).weight_bytes_per_gpu / (value(s, "ridge") * value(s, "kv_bytes_token_layer"))),
    ("kv_share_pct", "%", "share of the probe decode step's bytes that are KV-cache reads",
     lambda s: _decode(s).bytes["kv_read"] / _decode(s).bytes_total * 100),
    # live engine
    ("hbm_tb_moved", "TB", "HBM bytes the engine has moved since the start",
     lambda s: _snap(s).bytes_moved.get("hbm", 0.0) / 1e12),
    ("queue_len", "requests", "requests waiting (queued or preempted)",
     lambda s: float(_snap(s).queued + _snap(s).preempted)),
    ("kv_util_pct", "%", "share of the KV pool's blocks in use",
     lambda s: _per(100.0 * _snap(s).kv_blocks_used, _snap(s).kv_blocks_total)),
    ("kv_used_gb", "GB", "KV bytes held by running requests",
     lambda s: _per(_snap(s).kv_capacity_bytes * _snap(s).kv_blocks_used, _snap(s).kv_blocks_total) / 1e9),
    ("kv_gb_per_running", "GB", "KV bytes held per running request",
     lambda s: _per(value(s, "kv_used_gb"), _snap(s).running)),
    ("weights_gb_per_running", "GB", "weight bytes per step shared out over the running requests",
     lambda s: _per(_snap(s).weights_bytes / 1e9, _snap(s).running)),
    ("ttft_visible_minus_raw_s", "s", "how much later the first visible token comes than the first token",
     lambda s: value(s, "ttft_p50_s") - value(s, "ttft_raw_p50_s")),
    ("measured_e2e_s", "s", "Qwen's published A100 time for 2,048 tokens at batch 1 (this model, runtime, GPUs)",
     _measured_e2e),
    ("hidden_share_pct", "%", "share of generated tokens that were hidden thinking",
     lambda s: 100 * (1 - _num(s.engine_metrics()["visible_tokens"]) / value(s, "output_tokens"))
     if value(s, "output_tokens") else 0.0),
    ("fast_users", "users", "users in the fast lane", _fast_users),
    ("qwen72b_2gpu_measured_s", "s", "Qwen's published time for 2,048 tokens from Qwen2.5-72B on two A100s (vLLM)",
     lambda s: qwen_case(*_Q72).osl / qwen_case(*_Q72).measured),
    ("qwen72b_2gpu_predicted_s", "s", "the step model's time for the same request (tokensim validate's row)",
     lambda s: qwen_case(*_Q72).osl / predict(qwen_case(*_Q72))),
    # token economics (C26) and what a price list says
    ("serve_vs_train_x", "x", "GPU-seconds per served token over GPU-seconds per training token",
     lambda s: _training(s).serve_gpu_s_per_token / _training(s).train_gpu_s_per_token),
    ("fit_batch", "sequences", "the probe batch, capped at what the KV pool holds at the probe context",
     lambda s: float(max(1, min(s.probe.batch, batch_that_fits(_sm(s), s.probe.context))))),
    ("fit_gpu_ms_per_tok", "GPU-ms", "GPU-ms per output token at the probe context and the batch that fits",
     lambda s: serving_cost(_sm(s), int(value(s, "fit_batch")), s.probe.context)[1] * 1e3),
    ("prefill_gpu_ms_per_tok", "GPU-ms", "GPU-milliseconds per prompt token of the probe prompt's prefill",
     lambda s: _prefill(s).time_s * _sm(s).opts.tp / s.probe.prompt * 1e3),
    # the floor's own figures (issue 17: one truth per figure): the SM grid's MFU (tui.render.figures.mfu)
    ("live_mfu_pct", "%", "the step the engine just ran: its FLOPs over the peak's in its time (the SM grid's MFU)",
     lambda s: 100 * _snap(s).roof.mfu(_snap(s).last_step)),
    ("live_unused_pct", "%", "the share of the peak FLOPs the step the engine just ran left unused",
     lambda s: 100 - value(s, "live_mfu_pct")),
    # prefix caching
    ("workload_prompt_tokens", "tokens", "mean prompt length of the scene's workload file (first stage)",
     lambda s: float(_workload_prompt(s).tokens.mean)),
    ("shared_prefix_tokens", "tokens", "of it, the leading tokens every request of a group shares (first stage)",
     lambda s: float(_workload_prompt(s).shared_prefix)),
    ("workload_kv_gb", "GB", "KV cache of every distinct prompt the workload's first stage sends (groups x users per"
     " group x mean prompt x bytes per token): what a cache must hold for every repeat to hit",
     lambda s: _distinct_prompts_kv_gb(_workload_prompt(s), _sm(s).kv_bytes_per_token)),
    # multi-LoRA (engine.physics.lora, engine.serving.lora_slots) and KV tiers (engine.serving.kv_tiers): the
    # run's `lora` and `kv_tiers` blocks, NaN (not yet measured) while the engine runs without them
    ("lora_adapters", "adapters", "LoRA adapters the requests choose from", lambda s: _run_block(s, "lora.adapters")),
    ("lora_slots", "slots", "adapters one batch may hold (vLLM's --max-loras)", lambda s: _run_block(s, "lora.slots")),
    ("lora_per_step", "adapters", "distinct adapters in a step, on average",
     lambda s: _run_block(s, "lora.adapters_per_step")),
    ("lora_slot_waits", "requests", "requests that waited for an adapter slot",
     lambda s: _run_block(s, "lora.slot_waits")),
    ("lora_slot_wait_s", "s", "mean wait for an adapter slot", lambda s: _run_block(s, "lora.slot_wait_mean_s")),
    ("lora_bytes_pct", "%", "adapter bytes as a share of all bytes moved",
     lambda s: 100 * _run_block(s, "lora.lora_bytes_share")),
    ("kv_hit_host_pct", "%", "blocks looked up that were found in host memory",
     lambda s: 100 * _run_block(s, "kv_tiers.hit_rate.host")),
    ("kv_hit_disk_pct", "%", "blocks looked up that were found on disk",
     lambda s: 100 * _run_block(s, "kv_tiers.hit_rate.disk")),
    ("kv_pool_blocks", "blocks", "KV blocks in the live engine's pool", lambda s: float(_snap(s).kv_blocks_total)),
    ("kv_pool_held_gb", "GB", "the live engine's KV pool in GB (blocks x tokens per block x bytes per token)",
     lambda s: _snap(s).kv_blocks_total * KV_BLOCK_TOKENS * _sm(s).kv_bytes_per_token / 1e9),
    ("kv_block_tokens", "tokens", "tokens one KV block holds (the pool's and the prefix cache's unit)",
     lambda s: float(KV_BLOCK_TOKENS)),
    ("cost_in_all_per_mtok", "$/Mtok", "cost of a million prompt tokens, computed and cached together", _cost_in_all),
    # speculative decoding, a trace
    ("spec_expected_tokens", "tokens", "tokens a sequence should emit per verify step: (1 - A^(K+1)) / (1 - A)",
     lambda s: expected_tokens(s.config.spec_tokens, s.config.spec_accept)),
    ("trace_requests", "requests", "requests in the replayed trace", lambda s: float(len(_trace(s)))),
    ("trace_rate", "req/s", "the trace's mean arrival rate at the replay speed",
     lambda s: len(_trace(s)) / _trace(s).duration if _trace(s).duration else float("nan")),
    ("trace_peak_rate", "req/s",
     "arrivals in the trace's busiest 5-second window (at the replay speed), per second", _trace_peak_rate),
    # a fleet
    ("fleet_replicas", "replicas", "replicas in the fleet the scene last ran", lambda s: float(len(_replicas(s)))),
    ("fleet_prefill_replicas", "replicas", "of them, replicas that only read prompts (P/D; 0 when colocated)",
     lambda s: float(sum(r["role"] == "prefill" for r in _replicas(s)))),
    ("fleet_decode_replicas", "replicas", "of them, replicas that write answers (all of them when colocated)",
     lambda s: float(sum(r["role"] != "prefill" for r in _replicas(s)))),
    ("fleet_tpot_spread_x", "x", "the fleet's p99 time per output token over its median: 1 is perfectly steady",
     lambda s: _num(s.fleet_metrics()["tpot_s"]["p99"]) / _num(s.fleet_metrics()["tpot_s"]["p50"])),
    ("fleet_queue_peak_max", "requests", "the longest queue any replica had",
     lambda s: float(max(r["queue_peak"] for r in _replicas(s)))),
    ("fleet_queue_peak_min", "requests", "the longest queue of the replica whose queue stayed shortest",
     lambda s: float(min(r["queue_peak"] for r in _replicas(s)))),
    ("fleet_kv_copy_ms", "ms", "P/D: median time to copy a prompt's KV from a prefill to a decode replica",
     lambda s: _fleet_pd(s, "kv_transfer_s", "KV copies")),
    ("fleet_kv_link_gbps", "GB/s", "P/D: the link each prefill replica copies KV over",
     lambda s: _fleet_pd(s, "kv_link_gbps", "KV link")),
    # the scene's traffic
    ("prompt_mean_tokens", "tokens", "mean prompt length of the scene's traffic (--prompt)",
     lambda s: parse_dist(s.config.prompt, "prompt", 1).mean),
    ("output_mean_tokens", "tokens", "mean answer length of the scene's traffic (--output)",
     lambda s: parse_dist(s.config.output, "output", 1).mean),
)

for _name, _unit, _doc, _fn in FORMULAS:
    metric(_name, _unit, _doc)(_fn)
