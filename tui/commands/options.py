"""Options shared by the commands that build a step model or an engine, and their parsing."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from rich.console import Console

from engine import validation as V
from engine.errors import InputError
from engine.numbers import json_safe
from engine.physics.calibration import load_runtime_file, runtimes
from engine.physics.specs import KV_DTYPES, WEIGHT_DTYPES, load_hardware, load_model
from engine.physics.step import StepModel, StepOptions

# argparse types: the same checks (and messages) as file fields and EngineConfig, from engine.validation.
positive_int = V.option(V.whole, lo=1)
nonneg_int = V.option(V.whole, lo=0)
seed_int = V.option(V.whole, lo=0, hi=2**32 - 1)
positive_float = V.option(V.positive)
nonneg_float = V.option(V.number, lo=0.0)
seconds = V.option(V.positive, hi=V.MAX_SECONDS)
multiplier = V.option(V.positive, hi=V.MAX_MULT)


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
    g.add_argument("--runtime", default=None, choices=sorted(runtimes()),
                   help="calibrated runtime profile (default vllm)")
    # Outside the group: a file the app's settings form does not edit (its fields are the group's options).
    p.add_argument("--runtime-file", metavar="FILE.toml", default=None,
                   help="a runtime profile written by tokensim calibrate (instead of --runtime)")


def step_model_from_args(args: argparse.Namespace) -> StepModel:
    """Build and fit-check the step model the options describe."""
    _runtime_file(args)
    hw = load_hardware(args.hardware)
    model = load_model(args.model)
    sm = StepModel(hw, model, StepOptions(tp=args.tp, weight_dtype=args.dtype, kv_dtype=args.kv_dtype,
                                          ideal=args.ideal, runtime=args.runtime or "vllm"))
    sm.check_fits()
    return sm


def runtime_for_run(args: argparse.Namespace) -> str:
    """A run prices one kind of step: --runtime names a calibration that --ideal switches off, so refuse the pair."""
    _runtime_file(args)
    if args.runtime is not None and args.ideal:
        raise InputError(f"--runtime {args.runtime} does nothing with --ideal (peak figures, no runtime): drop one")
    return args.runtime or "vllm"


def _runtime_file(args: argparse.Namespace) -> None:
    """--runtime-file: load and register the profile, and name it as --runtime (giving both is a contradiction)."""
    path = getattr(args, "runtime_file", None)
    if path is None:
        return
    rt = load_runtime_file(path)
    if args.runtime not in (None, rt.name):
        raise InputError(f"--runtime {args.runtime} and --runtime-file {path} both name the profile: give one")
    args.runtime = rt.name


def run_app(app: Any) -> int:
    """Run a Textual app; if it crashes, exit 1 with one line on stderr (the traceback goes to a file it names)."""
    import io
    import tempfile

    buf = io.StringIO()
    app.error_console = Console(file=buf, width=120, markup=False, highlight=False)  # Textual prints crashes here
    app.run()
    code = app.return_code or 0
    if code:
        text = buf.getvalue().strip()
        last = next((ln.strip(" │╰─╯") for ln in reversed(text.splitlines()) if ln.strip(" │╰─╯")), "unknown error")
        with tempfile.NamedTemporaryFile("w", prefix="tokensim-crash-", suffix=".txt", delete=False) as f:
            f.write(text + "\n")
        sys.stderr.write(f"tokensim: error: the app stopped on an internal error: {last} (details: {f.name})\n")
    return code


# Version of the --json reports of run, plan, step and replay (docs/schema/<command>.schema.json describes each):
# raised when a key goes or changes meaning; a new key does not raise it.
SCHEMA_VERSION = 1


def versioned(obj: dict[str, Any]) -> dict[str, Any]:
    """A --json report with its schema_version first."""
    return {"schema_version": SCHEMA_VERSION, **obj}


def print_json(obj: Any) -> None:
    """Machine-readable output on stdout (NaN and infinities, which JSON cannot write, as null)."""
    sys.stdout.write(json.dumps(json_safe(obj), indent=2, ensure_ascii=False, default=_jsonable) + "\n")


def _jsonable(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    raise InputError(f"cannot serialise {type(o).__name__} to JSON")


class _Console(Console):
    """Rich's console, but a reader that stopped early (`tokensim step | head -1`) is not an error: Rich's own
    handler exits 1; this one stops writing and lets the CLI's entry point end quietly with 0."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def console(stderr: bool = False) -> Console:
    """A Rich console; when piped (no terminal) it is 140 columns wide so tables are not squeezed."""
    stream = sys.stderr if stderr else sys.stdout
    return _Console(stderr=stderr, width=None if stream.isatty() else 140)


def require_terminal(headless_hint: str) -> None:
    """Refuse to open the app without a terminal on stdin and stdout (a pipe, /dev/null, a cron job).

    Without one, Textual writes escape codes into the pipe and keeps running after the reader has gone.
    textual-serve runs the app behind its web driver with pipes, and names that driver in TEXTUAL_DRIVER.
    """
    if os.environ.get("TEXTUAL_DRIVER"):
        return
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise InputError(f"the simulator needs a terminal (stdin and stdout are not one); {headless_hint}")
