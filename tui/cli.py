"""The `tokensim` command: the app with no subcommand, headless tools (step, run, claims, ...) otherwise.

Subcommands live one per module in tui/commands and are imported only when used, so headless
commands start without loading Textual. Bad input becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from engine import vllm_flags
from engine.errors import InputError
from engine.validation import printable_line

# name -> (module, one-line help). A new command is a module with add_arguments(p) and run(args).
COMMANDS: dict[str, tuple[str, str]] = {
    "list": ("tui.commands.list_cmd", "list hardware or model presets"),
    "step": ("tui.commands.step_cmd", "price one decode or prefill step from first principles"),
    "claims": ("tui.commands.claims_cmd", "check every claim of the articles against the engine"),
    "run": ("tui.commands.run_cmd", "simulate serving many users headless and report the metrics"),
    "plan": ("tui.commands.plan_cmd", "find the cheapest deployment that meets latency SLOs (local pool or Ray)"),
    "bench": ("tui.commands.bench_cmd", "measure the engine's (and the renderer's) speed"),
    "validate": ("tui.commands.validate_cmd", "compare predicted speeds with measured tables"),
    "calibrate": ("tui.commands.calibrate_cmd", "fit the runtime profile's constants to measured results"),
    "replay": ("tui.commands.replay_cmd", "replay a measured benchmark result or trace; predicted vs measured latency"),
    "scene": ("tui.commands.scene_cmd", "list guided scenes, open one, or play it headless"),
    "tour": ("tui.commands.tour_cmd", "play every guided scene in order in the app"),
    "serve": ("tui.commands.serve_cmd", "serve the app to a web browser (127.0.0.1:8000 unless --host/--port)"),
    "serve-api": ("tui.commands.serve_api_cmd", "a simulated vLLM server: OpenAI's API, answers timed by the engine"),
}

# Commands that read vLLM's spellings of the engine's options (engine.vllm_flags), besides the app.
VLLM_COMMANDS = ("run", "plan")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (not usage + error) and exits 2, and takes options
    only as spelt: no prefix matching, so a typo like --user is refused instead of read as --users."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        if self.prog == "tokensim" and message.startswith("unrecognized arguments: "):
            import difflib  # only a mistyped command needs it: not loaded at every start (issue 26, start-up)

            word = message.removeprefix("unrecognized arguments: ").split()[0]
            close = difflib.get_close_matches(word, list(COMMANDS), n=1, cutoff=0.6)
            if close and not word.startswith("-"):
                message = f"unknown command '{word}' (did you mean {close[0]}?)"
        sys.stderr.write(f"{self.prog}: error: {printable_line(message)} (see --help)\n")  # words as typed
        raise SystemExit(2)


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The top-level parser; only the subcommand actually named on the command line is imported."""
    parser = _Parser(prog="tokensim", description=__doc__.splitlines()[0])
    first = next((a for a in argv if not a.startswith("-")), None)
    if first in COMMANDS:
        sub = parser.add_subparsers(dest="command", parser_class=_Parser)
        mod_name, help_ = COMMANDS[first]
        p = sub.add_parser(first, help=help_, description=help_)
        importlib.import_module(mod_name).add_arguments(p)
    else:
        from tui.commands import app_cmd

        app_cmd.add_arguments(parser)
        parser.epilog = "commands: " + "; ".join(f"{k}: {v[1]}" for k, v in COMMANDS.items())
        parser.set_defaults(command=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    _tolerant_streams()
    first = next((a for a in args_list if not a.startswith("-")), None)
    if first is None or first in VLLM_COMMANDS:  # the app, or a command that takes the engine's options
        try:
            args_list, notes = vllm_flags.expand(args_list)
        except InputError as e:
            sys.stderr.write(f"tokensim: error: {e}\n")
            return 2
        for note in notes:
            sys.stderr.write(f"tokensim: note: {printable_line(note)}\n")
    parser = build_parser(args_list)
    args = parser.parse_args(args_list)
    previous = signal.signal(signal.SIGTERM, _terminated) if _main_thread() else None
    try:
        if getattr(args, "runtime_file", None) is not None:
            from tui.commands.options import runtime_file

            runtime_file(args)
        if args.command is None:
            from tui.commands import app_cmd

            return app_cmd.run(args)
        code = int(importlib.import_module(COMMANDS[args.command][0]).run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handlers below, not at interpreter exit
        return code
    except InputError as e:
        sys.stderr.write(f"tokensim: error: {printable_line(str(e))}\n")  # one line, whatever a file put in it
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("tokensim: stopped (Ctrl+C); nothing more was written\n")
        return 130
    except Terminated:
        sys.stderr.write("tokensim: stopped (SIGTERM); nothing more was written\n")
        return 143
    except BrokenPipeError:  # the reader stopped early (| head): quiet, and nothing left to flush at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class Terminated(BaseException):
    """SIGTERM, raised where the program is so that `finally` blocks (temporary files, workers) run on the way out;
    a BaseException, like KeyboardInterrupt, so that no `except Exception` swallows it."""


def _terminated(signum: int, frame: object) -> None:
    raise Terminated


def _main_thread() -> bool:
    """Signal handlers can only be set from the main thread (tests call main() from others)."""
    import threading

    return threading.current_thread() is threading.main_thread()


def _tolerant_streams() -> None:
    """A terminal that cannot show a character (PYTHONIOENCODING=ascii, a C locale) gets an escape, not a crash."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure") and (stream.errors or "strict") == "strict":
            stream.reconfigure(errors="backslashreplace")


if __name__ == "__main__":
    raise SystemExit(main())
