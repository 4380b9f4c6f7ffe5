"""`tokensim` with no subcommand: open the live factory floor (the options of `tokensim run`, plus view options)."""

from __future__ import annotations

import argparse

from tui.commands.engine_options import add_engine_options, config_from_args
from tui.commands.options import positive_float
from tui.defaults import default_config
from tui.i18n import LANGS


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Engine and workload options (default: generic-14b on an H100 SXM, six users chatting), --lang, --speed."""
    add_engine_options(p, defaults=default_config())
    v = p.add_argument_group("view")
    v.add_argument("--lang", choices=LANGS, default=None, help="labels in zh or en (default: from the locale)")
    v.add_argument("--speed", type=positive_float, default=1.0,
                   help="simulated seconds per wall second: 0.01 slow motion, 1 real time, 10 fast-forward "
                        "(default 1)")
    v.add_argument("--paused", action="store_true", help="open paused (space plays, n steps)")


def run(args: argparse.Namespace) -> int:
    """Build the engine (bad options fail here, as one line) and run the app until q."""
    from tui.app import TokensimApp  # Textual loads only when the app opens

    app = TokensimApp(config_from_args(args), lang=args.lang, autoplay=not args.paused, speed=args.speed)
    app.run()
    return 0
