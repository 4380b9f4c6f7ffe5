"""`tokensim` with no subcommand: open the live factory floor (the options of `tokensim run`, plus view options).

The engine and workload options are `tokensim run`'s, from the one option table (engine.options), with the app's
teaching defaults (tui.defaults) in place of run's, and no request limit: the floor runs until q.
"""

from __future__ import annotations

import argparse

from engine import vllm_flags
from engine.config import EngineConfig
from engine.options import config_from, setup_from
from tui.commands.options import add_options, positive_float, require_terminal, run_app
from tui.defaults import default_config
from tui.i18n import LANGS


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`tokensim run`'s model, workload, scheduler and fleet options (engine.options; defaults: the app's), then
    --lang, --speed, --paused."""
    add_options(p, "app", base=default_config())
    p.add_argument("--vllm-args", metavar='"vllm serve ..."', help=vllm_flags.HELP)  # read by tui.cli before parsing
    v = p.add_argument_group("view")
    v.add_argument("--lang", choices=LANGS, default=None, help="labels in zh or en (default: from the locale)")
    v.add_argument("--speed", type=positive_float, default=1.0,
                   help="simulated seconds per wall second: 0.01 slow motion, 1 real time, 10 fast-forward "
                        "(default 1)")
    v.add_argument("--paused", action="store_true", help="open paused (space plays, n steps)")


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """run's EngineConfig for these options, with the app's defaults where none were given and no request cap."""
    return config_from(args, default_config())


def run(args: argparse.Namespace) -> int:
    """Build the engine (bad options fail here, as one line) and run the app until q."""
    from tui.app import TokensimApp  # Textual loads only when the app opens

    cfg = config_from_args(args)
    if cfg.energy:  # a GPU without power figures cannot be priced in watts: one line now, not a blank column
        from engine.physics.energy import Power
        from engine.physics.specs import load_hardware

        Power.of(load_hardware(cfg.hardware))
    app = TokensimApp(cfg, lang=args.lang, autoplay=not args.paused, speed=args.speed, fleet=setup_from(args, cfg),
                      welcome=True)
    require_terminal("for a report without one, try: tokensim run")  # after the options: their errors first
    return run_app(app)
