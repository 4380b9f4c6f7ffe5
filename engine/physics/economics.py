"""Token economics (C26): what a lifetime of serving says about how long a model was trained.

When a GPU-hour can go to training or to serving, a lab that expects to serve S tokens in a model's
lifetime spends about as much on each. Serving cost per token comes from the step model (a decode step at
a realistic batch: its time x GPUs / batch); training cost per token is 6 x active params at a stated
MFU. Equal spend gives the training tokens; divided by Chinchilla's ~20 tokens per parameter, the row.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from engine.errors import InputError
from engine.physics.specs import Hardware, Model, load_hardware, load_model
from engine.physics.step import StepModel, StepOptions

# Training FLOPs per token per active parameter: forward 2N, backward 4N (Kaplan et al. 2020; Chinchilla's C = 6ND).
TRAIN_FLOPS_PER_PARAM = 6.0


@dataclass(frozen=True, slots=True)
class Assumptions:
    """What C26 takes as given: the lifetime volume, the training MFU and dtype, Chinchilla's ratio."""

    served: float  # lifetime served (output) tokens
    train_mfu: float = 0.40
    train_dtype: str = "bf16"
    chinchilla: float = 20.0  # compute-optimal training tokens per parameter


@dataclass(frozen=True, slots=True)
class TrainingEquivalence:
    """Equal spend on serving and training, priced by the step model. Times are GPU-seconds."""

    model: str
    hardware: str
    gpus: int
    batch: int
    context: int
    params_active: float
    params_total: float
    serve_step_s: float  # one decode step at `batch`, `context`
    serve_gpu_s_per_token: float
    serve_mfu: float  # the decode step's FLOPs over (time x peak at its compute dtype)
    train_gpu_s_per_token: float
    served: float
    train_tokens: float
    tokens_per_param: float  # training tokens per active parameter
    chinchilla_x: float  # tokens_per_param / Chinchilla's ~20
    chinchilla_x_total: float  # the same against total params (MoE: Chinchilla's law is for dense models)
    kv_fits: bool  # the batch's KV cache fits the replica's KV pool
    max_batch_fits: int  # the largest batch whose KV cache fits at this context

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return asdict(self)


def serving_cost(sm: StepModel, batch: int, context: int) -> tuple[float, float, float]:
    """(step seconds, GPU-seconds per generated token, MFU) of one decode step at `batch` on `context` cached
    tokens, as the step model prices it; every GPU of the tensor-parallel group is busy for the whole step."""
    if batch < 1 or context < 0:
        raise InputError(f"serving batch must be >= 1 and context >= 0, got batch {batch}, context {context}")
    c = sm.decode(batch, context)
    return c.time_s, c.time_s * sm.opts.tp / batch, c.flops_total / (c.time_s * sm.roof.peak_flops)


def solo_cost_per_mtok_out(sm: StepModel, context: float, dollars_per_s: float) -> float:
    """Dollars per million output tokens if one sequence decoded alone on `context` cached tokens: each token pays
    a whole step (the whole weight read) by itself. Beside a batch's own $/Mtok out it is what batching saves, on
    the same step model and context. `dollars_per_s` is the price of the step's GPU group."""
    return sm.decode(1, max(0, round(context))).time_s * dollars_per_s * 1e6


def batch_that_fits(sm: StepModel, context: int) -> int:
    """How many sequences of `context` cached tokens the KV pool holds (sliding-window layers cap at their window)."""
    per_seq = sm.kv_bytes_for(np.array([max(context, 1)]))
    return int(max(sm.kv_capacity_bytes, 0) // per_seq)


def train_gpu_s_per_token(sm: StepModel, a: Assumptions) -> float:
    """GPU-seconds one training token costs: 6 x active params / (peak at the training dtype x MFU)."""
    if not 0 < a.train_mfu <= 1:
        raise InputError(f"training MFU must be in (0, 1], got {a.train_mfu}")
    peak = sm.hw.peak_flops(a.train_dtype) * sm.opts.compute_mult
    return TRAIN_FLOPS_PER_PARAM * sm.model.params_active / (peak * a.train_mfu)


def training_equivalence(sm: StepModel, batch: int, context: int, a: Assumptions) -> TrainingEquivalence:
    """Equal spend: training tokens = served x (GPU-s per served token / GPU-s per training token)."""
    if a.served <= 0 or a.chinchilla <= 0:
        raise InputError("served tokens and Chinchilla's tokens per parameter must be > 0")
    step_s, serve, mfu = serving_cost(sm, batch, context)
    train = train_gpu_s_per_token(sm, a)
    tokens = a.served * serve / train
    per_param = tokens / sm.model.params_active
    fits = batch_that_fits(sm, context)
    return TrainingEquivalence(
        model=sm.model.name, hardware=sm.hw.name, gpus=sm.opts.tp, batch=batch, context=context,
        params_active=sm.model.params_active, params_total=sm.model.params_total, serve_step_s=step_s,
        serve_gpu_s_per_token=serve, serve_mfu=mfu, train_gpu_s_per_token=train, served=a.served,
        train_tokens=tokens, tokens_per_param=per_param, chinchilla_x=per_param / a.chinchilla,
        chinchilla_x_total=tokens / sm.model.params_total / a.chinchilla, kv_fits=batch <= fits,
        max_batch_fits=fits)


def assumptions(ref: dict[str, Any], calls: bool = False) -> Assumptions:
    """reference.toml's [training] assumptions; `calls` reads the lifetime figure as calls x tokens_per_call."""
    served = float(ref["served"]) * (float(ref["tokens_per_call"]) if calls else 1.0)
    return Assumptions(served=served, train_mfu=float(ref["train_mfu"]), train_dtype=ref["train_dtype"],
                       chinchilla=float(ref["chinchilla_tokens_per_param"]))


def stated(ref: dict[str, Any]) -> tuple[StepModel, int, int, Assumptions]:
    """The step model, batch, context and assumptions of reference.toml's [training] table."""
    sm = StepModel(load_hardware(ref["hardware"]), load_model(ref["model"]), StepOptions(tp=int(ref["tp"])))
    return sm, int(ref["serving_batch"]), int(ref["serving_context"]), assumptions(ref)


# The sensitivity table's models, by active params (each on the smallest replica that holds its batch).
SENSITIVITY_MODELS: tuple[str, ...] = ("qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "llama-3.1-70b",
                                       "llama-3.1-405b")
SENSITIVITY_VOLUMES: tuple[float, ...] = (1e13, 1e14, 1e15)
SENSITIVITY_BATCHES: tuple[int, ...] = (32, 128, 256, 512)


def sensitivity(ref: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """C26's ratio to Chinchilla as one assumption moves at a time: lifetime volume (both readings of the
    article's figure), active params (other models on the same GPU kind) and the serving batch."""
    sm, batch, ctx, a = stated(ref)
    vols = [{"reading": "tokens", "served": v, **_brief(training_equivalence(sm, batch, ctx, replace(a, served=v)))}
            for v in SENSITIVITY_VOLUMES]
    calls = assumptions(ref, calls=True)
    vols.append({"reading": f"calls x {ref['tokens_per_call']:g} tokens", "served": calls.served,
                 **_brief(training_equivalence(sm, batch, ctx, calls))})
    models = []
    for name in SENSITIVITY_MODELS:
        other = replica(sm.hw, load_model(name), batch, ctx)
        models.append({"model": name, "gpus": other.opts.tp, **_brief(training_equivalence(other, batch, ctx, a))})
    batches = [{"batch": b, **_brief(training_equivalence(sm, b, ctx, a))} for b in SENSITIVITY_BATCHES]
    return {"volume": vols, "model": models, "batch": batches}


def replica(hw: Hardware, model: Model, batch: int, context: int, most: int = 16) -> StepModel:
    """The smallest tensor-parallel group (1, 2, 4, ... GPUs) whose KV pool holds `batch` sequences of `context`
    tokens (the largest group tried if none does): how a model would be deployed for that batch."""
    tp = 1
    while True:
        try:
            sm = StepModel(hw, model, StepOptions(tp=tp))
        except InputError:  # tp does not split the heads evenly
            sm = None
        if sm is not None and sm.kv_capacity_bytes >= batch * sm.kv_bytes_per_token * max(context, 1):
            return sm
        if tp * 2 > most:
            return sm if sm is not None else StepModel(hw, model, StepOptions(tp=1))
        tp *= 2


def _brief(t: TrainingEquivalence) -> dict[str, Any]:
    """The columns a sensitivity row shows."""
    return {"params_active": t.params_active, "serve_gpu_s_per_token": t.serve_gpu_s_per_token,
            "serve_mfu": t.serve_mfu, "train_tokens": t.train_tokens, "chinchilla_x": t.chinchilla_x,
            "kv_fits": t.kv_fits}
