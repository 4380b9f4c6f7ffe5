"""`tokensim` with no subcommand: open the live factory floor (the options of `tokensim run`, plus view options).

The engine and workload options are `tokensim run`'s own (tui.commands.run_cmd), with the app's
teaching defaults (tui.defaults) in place of run's, and no request limit: the floor runs until q.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import replace

from engine.config import EngineConfig
from tui.commands.options import add_model_options, positive_float, require_terminal, run_app
from tui.commands.run_cmd import add_engine_options, add_fleet_options, fleet_spec
from tui.commands.run_cmd import config_from_args as run_config_from_args
from tui.defaults import default_config
from tui.i18n import LANGS

# Options whose default the app changes, and how the default reads in --help.
_APP_DEFAULTS = ("prompt", "output")
_DEFAULT_NOTE = re.compile(r" *\(default [^)]*\)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`tokensim run`'s model, workload, scheduler and fleet options (defaults: the app's), then --lang, --speed,
    --paused."""
    d = default_config()
    add_model_options(p, hardware=d.hardware, model=d.model)
    add_engine_options(p)
    add_fleet_options(p)
    for action in p._actions:  # argparse keeps no public handle on an option's help text
        if action.dest in _APP_DEFAULTS:
            value = getattr(d, action.dest)
            action.default = value
            action.help = _DEFAULT_NOTE.sub("", action.help or "") + f" (default {value})"
        elif action.dest == "users":
            action.help = f"closed loop: N users chatting (default {d.users} unless --rate)"
        elif action.dest == "think_time":
            action.help = f"closed loop: seconds a user reads before the next question (default {d.think_time})"
        elif action.dest == "requests":
            action.help = "stop admitting after this many requests (default: no limit, the floor runs until q)"
    v = p.add_argument_group("view")
    v.add_argument("--lang", choices=LANGS, default=None, help="labels in zh or en (default: from the locale)")
    v.add_argument("--speed", type=positive_float, default=1.0,
                   help="simulated seconds per wall second: 0.01 slow motion, 1 real time, 10 fast-forward "
                        "(default 1)")
    v.add_argument("--paused", action="store_true", help="open paused (space plays, n steps)")


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """run's EngineConfig for these options, with the app's defaults where none were given and no request cap."""
    d = default_config()
    cfg = run_config_from_args(args)
    changes: dict[str, object] = {}
    scripted = args.workload is not None or args.trace is not None  # the file says who sends what, and when
    if args.users is None and args.rate is None and not scripted:
        changes["users"] = d.users
    if args.think_time is None and not scripted and (changes.get("users") or cfg.users) > 0:
        changes["think_time"] = d.think_time
    if args.requests is None:
        changes["requests"] = None  # run bounds a headless run; the live floor is unbounded
    return replace(cfg, **changes)


def run(args: argparse.Namespace) -> int:
    """Build the engine (bad options fail here, as one line) and run the app until q."""
    from tui.app import TokensimApp  # Textual loads only when the app opens

    cfg = config_from_args(args)
    app = TokensimApp(cfg, lang=args.lang, autoplay=not args.paused, speed=args.speed, fleet=fleet_spec(args, cfg))
    require_terminal("for a report without one, try: tokensim run")  # after the options: their errors first
    return run_app(app)
