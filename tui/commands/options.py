"""Options shared by the commands that build a step model or an engine, and their parsing."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from rich.console import Console

from engine.calibration import runtimes
from engine.errors import InputError
from engine.numbers import json_safe
from engine.specs import KV_DTYPES, WEIGHT_DTYPES, load_hardware, load_model
from engine.step import StepModel, StepOptions


def positive_int(text: str) -> int:
    """argparse type: a whole number > 0."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {v}")
    return v


def nonneg_int(text: str) -> int:
    """argparse type: a whole number >= 0."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return v


def add_model_options(p: argparse.ArgumentParser, hardware: str = "h100-sxm", model: str = "generic-14b") -> None:
    """--hardware, --model, --tp, --dtype, --kv-dtype, --ideal, --runtime."""
    g = p.add_argument_group("hardware and model")
    g.add_argument("--hardware", "-H", default=hardware, help=f"GPU preset or TOML file (default {hardware})")
    g.add_argument("--model", "-m", default=model,
                   help=f"model preset, TOML file or Hugging Face config.json (default {model})")
    g.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel GPUs (default 1)")
    g.add_argument("--dtype", choices=WEIGHT_DTYPES, default=None, help="weight dtype (default: the model's own)")
    g.add_argument("--kv-dtype", choices=KV_DTYPES, default="bf16", help="KV cache dtype (default bf16)")
    g.add_argument("--ideal", action="store_true",
                   help="peak bandwidth and FLOP/s, zero overhead: the articles' arithmetic")
    g.add_argument("--runtime", default="vllm", choices=sorted(runtimes()),
                   help="calibrated runtime profile (default vllm)")


def step_model_from_args(args: argparse.Namespace) -> StepModel:
    """Build and fit-check the step model the options describe."""
    hw = load_hardware(args.hardware)
    model = load_model(args.model)
    sm = StepModel(hw, model, StepOptions(tp=args.tp, weight_dtype=args.dtype, kv_dtype=args.kv_dtype,
                                          ideal=args.ideal, runtime=args.runtime))
    sm.check_fits()
    return sm


def print_json(obj: Any) -> None:
    """Machine-readable output on stdout (NaN and infinities, which JSON cannot write, as null)."""
    sys.stdout.write(json.dumps(json_safe(obj), indent=2, ensure_ascii=False, default=_jsonable) + "\n")


def _jsonable(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    raise InputError(f"cannot serialise {type(o).__name__} to JSON")


def console(stderr: bool = False) -> Console:
    """A Rich console; when piped (no terminal) it is 140 columns wide so tables are not squeezed."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 140)


def require_terminal(headless_hint: str) -> None:
    """Refuse to open the app without a terminal on stdin and stdout (a pipe, /dev/null, a cron job).

    Without one, Textual writes escape codes into the pipe and keeps running after the reader has gone.
    textual-serve runs the app behind its web driver with pipes, and names that driver in TEXTUAL_DRIVER.
    """
    if os.environ.get("TEXTUAL_DRIVER"):
        return
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise InputError(f"the simulator needs a terminal (stdin and stdout are not one); {headless_hint}")
