"""Picker rows for the shipped presets, and why a choice does not fit with the rest (and the change that fixes it).

Whether a choice fits is whatever the engine's own validation says (an Engine is built for it, ~1 ms);
the reason is read from the physics (heads over tp, weights over memory), and the fix is the nearest
single change (tp, weight dtype, KV dtype) that the same validation accepts. Pure: no Textual.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from engine.config import EngineConfig
from engine.errors import InputError
from engine.physics.specs import (
    DTYPE_BYTES,
    KV_DTYPES,
    WEIGHT_DTYPES,
    hardware_names,
    load_hardware,
    load_model,
    model_names,
)
from engine.physics.step import StepModel, StepOptions
from engine.serving.engine import Engine
from engine.traffic.workload import parse_dist
from tui.i18n import t

# Tensor-parallel degrees a fix may propose: powers of two, as GPUs come in NVLink groups of 2, 4, 8
# (and racks of 72); the engine accepts any degree that splits the heads, a deployment rarely runs tp 6.
FIX_TPS = tuple(2**i for i in range(7))
ALTERNATIVES = 3  # fitting tp degrees named besides the fix


@dataclass(frozen=True, slots=True)
class Fit:
    """Whether a configuration runs, and if not why (`kind` + figures) and the nearest change that makes it run.

    kind: "" (fits), "heads" (tp does not split the attention heads), "weights" (weights plus the reserve
    exceed memory per GPU), "engine" (the engine refuses it for another reason: `message` says which).
    fix: the EngineConfig fields to change (e.g. {"tp": 4}), empty when no single change helps.
    """

    kind: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    fix: dict[str, Any] = field(default_factory=dict)
    other_tps: tuple[int, ...] = ()  # other tp degrees that also fit, nearest first
    # For the fix's tp and each other one: (KV GB per GPU it leaves, conversations that KV holds at the
    # current lengths). A fix that barely fits (70B on two H100s: 1.4 GB, six users) is no fix for 64 users.
    room: dict[int, tuple[float, int]] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return not self.kind


@dataclass(frozen=True, slots=True)
class Choice:
    """One picker row: a preset's name, a one-line description, and how it fits with the rest."""

    name: str
    desc: str
    fit: Fit


def refusal(cfg: EngineConfig) -> str | None:
    """The engine's one-line refusal of `cfg`, or None when it builds (the one validation layer decides)."""
    try:
        Engine(cfg)
    except InputError as e:
        return str(e)
    return None


def explain_fit(cfg: EngineConfig) -> Fit:
    """Why `cfg` does not run (kind and figures from the physics) and the nearest single change that runs."""
    message = refusal(cfg)
    if message is None:
        return Fit()
    try:
        hw, model = load_hardware(cfg.hardware), load_model(cfg.model)
    except InputError:  # an unknown preset or a bad file: nothing to explain but the refusal, nothing to fix
        return Fit("engine", message=message)
    kind, figures = "engine", {}
    sm = _step_model(cfg)
    if sm is None and _step_model(replace(cfg, tp=1)) is not None:  # only the tp is refused: it splits no heads
        kind, figures = "heads", {"heads": model.heads, "kv_heads": model.kv_heads, "tp": cfg.tp}
    if sm is not None and sm.kv_capacity_bytes <= 0:
        kind = "weights"
        figures = {"weights_gb": sm.weight_bytes_per_gpu / 1e9, "reserve_gb": sm.reserve_bytes / 1e9,
                   "memory_gb": hw.memory_gb, "tp": cfg.tp}
    tps = _serving_first(cfg, _fitting_tps(cfg))
    fix: dict[str, Any] = {"tp": tps[0]} if tps else _dtype_fix(cfg)
    return Fit(kind, figures, message, fix, tuple(tps[1:ALTERNATIVES + 1]), {d: kv_room(replace(cfg, tp=d))
                                                                             for d in tps[:ALTERNATIVES + 1]})


def kv_room(cfg: EngineConfig) -> tuple[float, int]:
    """(KV pool GB per GPU, conversations it holds at their full length: mean prompt + think + output tokens)."""
    sm = _step_model(cfg)
    if sm is None or sm.kv_capacity_bytes <= 0:
        return 0.0, 0
    tokens = sum(parse_dist(getattr(cfg, f), f).mean for f in ("prompt", "think", "output"))
    per_user = sm.kv_bytes_per_token * max(1.0, tokens)
    return sm.kv_capacity_bytes / 1e9, int(sm.kv_capacity_bytes // per_user)


def _serving_first(cfg: EngineConfig, tps: list[int]) -> list[int]:
    """The nearest fitting degree whose KV holds every closed-loop user first (then the rest, nearest first):
    the nearest degree that merely fits may leave room for a handful of conversations."""
    if cfg.users <= 0 or not tps:
        return tps
    serving = [d for d in tps if kv_room(replace(cfg, tp=d))[1] >= cfg.users]
    if not serving or serving[0] == tps[0]:
        return tps
    return [serving[0], *(d for d in tps if d != serving[0])]


def _step_model(cfg: EngineConfig) -> StepModel | None:
    """The step model the engine would build for cfg (every StepOptions field the config names), or None if refused."""
    opts = StepOptions(**{f.name: getattr(cfg, f.name) for f in fields(StepOptions) if hasattr(cfg, f.name)})
    try:
        return StepModel(load_hardware(cfg.hardware), load_model(cfg.model), opts)
    except InputError:
        return None


def _fitting_tps(cfg: EngineConfig) -> list[int]:
    """The FIX_TPS degrees the engine accepts for cfg, nearest to its own first (fewer GPUs first on a tie)."""
    near = sorted((d for d in FIX_TPS if d != cfg.tp), key=lambda d: (abs(math.log2(d / cfg.tp)), d))
    out: list[int] = []
    for d in near:
        if refusal(replace(cfg, tp=d)) is None:
            out.append(d)
            if len(out) > ALTERNATIVES:
                break
    return out


def _dtype_fix(cfg: EngineConfig) -> dict[str, Any]:
    """At the same tp: the widest narrower weight dtype that runs (of one width, the one this GPU's tensor cores
    run fastest: fp8 on an H100), else a narrower KV cache; {} when none does."""
    own = DTYPE_BYTES[cfg.weight_dtype or load_model(cfg.model).weight_dtype]
    hw = load_hardware(cfg.hardware)
    narrower = sorted((d for d in WEIGHT_DTYPES if DTYPE_BYTES[d] < own),
                      key=lambda d: (-round(8 * DTYPE_BYTES[d]), -hw.peak_flops(d)))  # whole bits: int8-g128 is 8
    for d in narrower:
        if refusal(replace(cfg, weight_dtype=d)) is None:
            return {"weight_dtype": d}
    for d in sorted(KV_DTYPES, key=lambda d: DTYPE_BYTES[d]):
        if DTYPE_BYTES[d] < DTYPE_BYTES[cfg.kv_dtype] and refusal(replace(cfg, kv_dtype=d)) is None:
            return {"kv_dtype": d}
    return {}


def model_choices(cfg: EngineConfig) -> list[Choice]:
    """Every model preset ('params · layers · weights') and how it fits on the current GPU at the current tp."""
    out = []
    for name in model_names():
        m = load_model(name)
        moe = f" ({m.params_active / 1e9:.0f}B active)" if m.is_moe else ""
        desc = f"{m.params_total / 1e9:.1f}B{moe} · {m.layers} layers · {m.weight_bytes(cfg.weight_dtype) / 1e9:.0f} GB"
        out.append(Choice(name, desc, explain_fit(replace(cfg, model=name))))
    return out


def hardware_choices(cfg: EngineConfig) -> list[Choice]:
    """Every GPU preset ('memory · bandwidth · bf16 TFLOPS · $/h') and how the current model fits on it."""
    out = []
    for name in hardware_names():
        hw = load_hardware(name)
        desc = (f"{hw.memory_gb:g} GB · {hw.memory_bandwidth_gbps / 1000:.2f} TB/s · "
                f"{hw.tflops['bf16']:g} TFLOPS · ${hw.price_per_hour:g}/h")
        out.append(Choice(name, desc, explain_fit(replace(cfg, hardware=name))))
    return out


def fix_words(fit: Fit, lang: str) -> str:
    """The fix in words: 'needs tp 4', 'needs fp8 weights', or that no single change helps."""
    if not fit.fix:
        return t(lang, "fix_none")
    key, value = next(iter(fit.fix.items()))
    words = t(lang, f"fix_{key}", v=value)
    if key == "tp" and value in fit.room:
        words += f" ({room_words(fit.room[value], lang)})"
    return words


def room_words(room: tuple[float, int], lang: str) -> str:
    """'18.6 GB KV per GPU, ~45 users': the room a fix leaves, in conversations at the current lengths."""
    return t(lang, "fix_room", gb=f"{room[0]:.1f}", n=f"{room[1]:,}")


def why_words(fit: Fit, lang: str) -> str:
    """Why a choice does not fit, in words from the physics ('28 attention heads (4 KV heads) do not split over
    tp 8'); a refusal the physics does not name is the validation's own line."""
    f = fit.figures
    if fit.kind == "heads":
        return t(lang, "fit_heads", heads=f["heads"], kv=f["kv_heads"], tp=f["tp"])
    if fit.kind == "weights":
        return t(lang, "fit_weights", w=f["weights_gb"], r=f["reserve_gb"], m=f["memory_gb"], tp=f["tp"])
    return fit.message


def remedy_words(fit: Fit, lang: str) -> str:
    """The fix and the other tp degrees that fit: 'needs tp 4 · tp 2 or 1 would fit too'."""
    parts = [fix_words(fit, lang)]
    if fit.other_tps:
        tps = [f"{x} ({t(lang, 'fix_room_short', n=f'{fit.room[x][1]:,}')})" if x in fit.room else str(x)
               for x in fit.other_tps]
        listed = tps[0] if len(tps) == 1 else f"{', '.join(tps[:-1])} {t(lang, 'or')} {tps[-1]}"
        parts.append(t(lang, "fix_also", tps=listed))
    return " · ".join(parts)


def fit_words(fit: Fit, lang: str) -> str:
    """Why, then the fix, on one line: '28 attention heads (4 KV heads) do not split over tp 8 · needs tp 4 ·
    tp 2 or 1 would fit too'."""
    return f"{why_words(fit, lang)} · {remedy_words(fit, lang)}"
