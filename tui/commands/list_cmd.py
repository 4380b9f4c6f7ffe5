"""`tokensim list hardware|models`: the presets as tables."""

from __future__ import annotations

import argparse

from rich.table import Table

from engine.physics.specs import hardware_names, load_hardware, load_model, model_names
from tui.commands.options import console, print_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=("hardware", "models"), help="which presets to list")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def hardware_rows() -> list[dict[str, object]]:
    """One row per GPU preset: memory, bandwidth, dense TFLOPS and the bf16 ridge point."""
    rows = []
    for n in hardware_names():
        h = load_hardware(n)
        rows.append({"name": n, "display": h.display, "memory_gb": h.memory_gb,
                     "bandwidth_gbps": h.memory_bandwidth_gbps, "tflops_bf16": h.tflops["bf16"],
                     "tflops_fp8": h.tflops.get("fp8"), "tflops_fp4": h.tflops.get("fp4"),
                     "ridge_bf16": h.ridge("bf16"), "l2_mb": h.l2_mb, "sm_count": h.sm_count,
                     "price_per_hour": h.price_per_hour})
    return rows


def model_rows() -> list[dict[str, object]]:
    """One row per model preset: layers, parameters total/active, KV bytes per token (bf16)."""
    rows = []
    for n in model_names():
        m = load_model(n)
        kind = "MoE" if m.is_moe else "dense"
        if m.is_mla:
            kind += "+MLA"
        if m.sliding_layers:
            kind += "+chunked" if m.chunked else "+SWA"
        rows.append({"name": n, "display": m.display, "kind": kind, "layers": m.layers,
                     "params_total": m.params_total, "params_active": m.params_active,
                     "kv_bytes_per_token": m.kv_bytes_per_token("bf16"),
                     "weight_dtype": m.expert_dtype or m.weight_dtype,
                     "weight_gb": m.weight_bytes() / 1e9, "max_context": m.max_context})
    return rows


def run(args: argparse.Namespace) -> int:
    rows = hardware_rows() if args.what == "hardware" else model_rows()
    if args.json:
        print_json(rows)
        return 0
    t = Table(title=f"tokensim {args.what} presets", header_style="bold")
    if args.what == "hardware":
        for col in ("name", "GPU", "memory GB", "bandwidth GB/s", "bf16 TFLOPS", "fp8", "fp4", "ridge FLOP/B",
                    "L2 MB", "SMs", "$/h"):
            t.add_column(col, justify="left" if col in ("name", "GPU") else "right")
        for r in rows:
            t.add_row(str(r["name"]), str(r["display"]), f"{r['memory_gb']:g}", f"{r['bandwidth_gbps']:,.0f}",
                      f"{r['tflops_bf16']:,.1f}", _opt(r["tflops_fp8"]), _opt(r["tflops_fp4"]),
                      f"{r['ridge_bf16']:.0f}", f"{r['l2_mb']:g}", str(r["sm_count"]), f"{r['price_per_hour']:.2f}")
    else:
        for col in ("name", "kind", "layers", "params total", "active", "weights", "KV B/token (bf16)", "context"):
            t.add_column(col, justify="left" if col in ("name", "kind") else "right")
        for r in rows:
            t.add_row(str(r["name"]), str(r["kind"]), str(r["layers"]), f"{r['params_total'] / 1e9:,.2f} B",
                      f"{r['params_active'] / 1e9:,.2f} B", f"{r['weight_gb']:,.1f} GB {r['weight_dtype']}",
                      f"{r['kv_bytes_per_token']:,.0f}", f"{r['max_context']:,}")
    console().print(t)
    return 0


def _opt(v: object) -> str:
    return "-" if v is None else f"{v:,.1f}"
