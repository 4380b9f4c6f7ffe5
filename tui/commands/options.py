"""Options shared by the commands that build a step model or an engine, and their parsing."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from engine import options as O
from engine import validation as V
from engine.config import EngineConfig
from engine.errors import InputError
from engine.evidence import bands
from engine.numbers import json_safe
from engine.physics.specs import load_hardware, load_model
from engine.physics.step import StepModel, StepOptions

if TYPE_CHECKING:
    from rich.console import Console

# argparse types: the same checks (and messages) as file fields and EngineConfig, from engine.validation.
positive_int = V.option(V.whole, lo=1)
nonneg_int = V.option(V.whole, lo=0)
seed_int = V.option(V.whole, lo=0, hi=2**32 - 1)
positive_float = V.option(V.positive)
nonneg_float = V.option(V.number, lo=0.0)
seconds = V.option(V.positive, hi=V.MAX_SECONDS)
multiplier = V.option(V.positive, hi=V.MAX_MULT)


def add_options(p: argparse.ArgumentParser, command: str, groups: Iterable[str] = O.GROUPS,
                base: EngineConfig | None = None) -> dict[str, argparse._ArgumentGroup]:
    """Add `command`'s options of `groups` from the one table (engine.options), each in its named group; returns
    the groups by title (for a command's own extra options). `base` is the app's opening config: its values are
    the defaults, and an option's app wording (with "{default}") is its help."""
    made: dict[str, argparse._ArgumentGroup] = {}
    for o in O.options_for(command, groups):
        g = made.get(o.group) or made.setdefault(o.group, p.add_argument_group(o.group))
        default = o.default
        if base is not None and default is not None and o.config_field is not None:
            default = getattr(base, o.config_field)
        text = o.app_en.format(default=default if o.default is not None else getattr(base, o.name)) \
            if base is not None and o.app_en else o.en
        kw: dict[str, Any] = {"default": default, "help": text.replace("%", "%%")}
        if o.kind == "flag":
            kw["action"] = "store_true"
        else:
            kw.update(type=o.parse(), metavar=o.metavar)
            if o.kind == "choice":
                kw["choices"] = o.choice_list()
        g.add_argument(*o.flags, dest=o.name, **kw)
    if O.GROUPS[0] in groups:
        # Outside the groups: a file the app's settings form does not edit (its fields are the table's options).
        p.add_argument("--runtime-file", metavar="FILE.toml", default=None,
                       help="a runtime profile written by tokensim calibrate (instead of --runtime)")
    return made


def add_model_options(p: argparse.ArgumentParser) -> None:
    """--hardware, --model, --tp, --dtype, --kv-dtype, --ideal, --runtime (the table's "hardware and model")."""
    add_options(p, "step", groups=(O.GROUPS[0],))


def step_model_from_args(args: argparse.Namespace) -> StepModel:
    """Build and fit-check the step model the options describe."""
    hw = load_hardware(args.hardware)
    model = load_model(args.model)
    sm = StepModel(hw, model, StepOptions(tp=args.tp, ep=getattr(args, "ep", 1),
                                          ep_comm=getattr(args, "ep_comm", "all-to-all"),
                                          pp=getattr(args, "pp", 1),
                                          weight_dtype=args.dtype, kv_dtype=args.kv_dtype,
                                          ideal=args.ideal, runtime=args.runtime or "vllm"))
    sm.check_fits()
    return sm


def run_app(app: Any) -> int:
    """Run a Textual app; if it crashes, exit 1 with one line on stderr (the traceback goes to a file it names)."""
    import io
    import tempfile

    from rich.console import Console

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


def runtime_file(args: argparse.Namespace) -> None:
    """--runtime-file: load and register the profile, and name it as --runtime (giving both is a contradiction).
    Called once, when the command line is parsed, for every command that has the option."""
    path = getattr(args, "runtime_file", None)
    if path is None:
        return
    rt = bands.load_profile_file(path)
    if getattr(args, "runtime", None) not in (None, rt.name):
        raise InputError(f"--runtime {args.runtime} and --runtime-file {path} both name the profile: give one")
    args.runtime = rt.name


def print_json(obj: Any) -> None:
    """Machine-readable output on stdout (NaN and infinities, which JSON cannot write, as null)."""
    sys.stdout.write(json.dumps(json_safe(obj), indent=2, ensure_ascii=False, default=_jsonable) + "\n")


def _jsonable(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    raise InputError(f"cannot serialise {type(o).__name__} to JSON")


@functools.cache
def _console_class() -> type[Console]:
    """Rich's console, but a reader that stopped early (`tokensim step | head -1`) is not an error: Rich's own
    handler exits 1; this one stops writing and lets the CLI's entry point end quietly with 0. Made on first use:
    rich.console costs ~13 ms to import, which a --json report never needs (issue 26's start-up target)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return _Console


def console(stderr: bool = False) -> Console:
    """A Rich console; when piped (no terminal) it is 140 columns wide so tables are not squeezed."""
    stream = sys.stderr if stderr else sys.stdout
    return _console_class()(stderr=stderr, width=None if stream.isatty() else 140)


def require_terminal(headless_hint: str) -> None:
    """Refuse to open the app without a terminal on stdin and stdout (a pipe, /dev/null, a cron job).

    Without one, Textual writes escape codes into the pipe and keeps running after the reader has gone.
    textual-serve runs the app behind its web driver with pipes, and names that driver in TEXTUAL_DRIVER.
    """
    if os.environ.get("TEXTUAL_DRIVER"):
        return
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise InputError(f"the simulator needs a terminal (stdin and stdout are not one); {headless_hint}")


def check_plot_file(path: str | None, inputs: Iterable[str | None]) -> None:
    """A --plot-file (run, plan) names an .svg or .html file that is not one of the command's `inputs`: refused in
    one line before the work starts, not after it."""
    if not path:
        return
    from engine.files import check_target
    from tui.render.svg import write_kind

    if not write_kind(path):
        raise InputError(f"--plot-file {path}: name a .svg or .html file")
    check_target(path, "--plot-file", inputs)
