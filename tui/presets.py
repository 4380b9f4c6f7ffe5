"""Picker rows for the shipped presets: name, a one-line description, and whether it fits with the rest."""

from __future__ import annotations

from engine.config import EngineConfig
from engine.errors import InputError
from engine.specs import hardware_names, load_hardware, load_model, model_names
from engine.step import StepModel, StepOptions


def _fits(hw_name: str, model_name: str, cfg: EngineConfig) -> bool:
    """Whether the model's weights leave room for a KV pool on this GPU (tp and dtype as configured)."""
    try:
        sm = StepModel(load_hardware(hw_name), load_model(model_name),
                       StepOptions(tp=cfg.tp, weight_dtype=cfg.weight_dtype, kv_dtype=cfg.kv_dtype))
    except InputError:
        return False
    return sm.kv_capacity_bytes > 0


def model_choices(cfg: EngineConfig) -> list[tuple[str, str, bool]]:
    """(name, 'params · layers · weights', fits) for every model preset, on the current GPU."""
    out = []
    for name in model_names():
        m = load_model(name)
        moe = f" ({m.params_active / 1e9:.0f}B active)" if m.is_moe else ""
        desc = f"{m.params_total / 1e9:.1f}B{moe} · {m.layers} layers · {m.weight_bytes(cfg.weight_dtype) / 1e9:.0f} GB"
        out.append((name, desc, _fits(cfg.hardware, name, cfg)))
    return out


def hardware_choices(cfg: EngineConfig) -> list[tuple[str, str, bool]]:
    """(name, 'memory · bandwidth · bf16 TFLOPS · $/h', fits) for every GPU preset, for the current model."""
    out = []
    for name in hardware_names():
        hw = load_hardware(name)
        desc = (f"{hw.memory_gb:g} GB · {hw.memory_bandwidth_gbps / 1000:.2f} TB/s · "
                f"{hw.tflops['bf16']:g} TFLOPS · ${hw.price_per_hour:g}/h")
        out.append((name, desc, _fits(name, cfg.model, cfg)))
    return out
