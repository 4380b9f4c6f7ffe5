"""The engine and workload options shared by `tokensim` (the app) and the headless commands that serve users.

`add_engine_options(p)` adds hardware/model (tui.commands.options.add_model_options) plus the workload
and scheduler options; `config_from_args(args)` turns them into an EngineConfig. Values are checked by
the Engine itself (one-line InputError), so the rules live in one place.
"""

from __future__ import annotations

import argparse

from engine.config import SCHEDULERS, EngineConfig
from tui.commands.options import add_model_options, nonneg_int, positive_int


def _nonneg_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= v < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return v


def add_engine_options(p: argparse.ArgumentParser, defaults: EngineConfig | None = None) -> None:
    """Hardware, model, workload and scheduler options, defaulting to `defaults` (EngineConfig() if None)."""
    d = defaults or EngineConfig()
    add_model_options(p, hardware=d.hardware, model=d.model)
    g = p.add_argument_group("workload")
    g.add_argument("--users", "-u", type=nonneg_int, default=None,
                   help=f"closed-loop users: each asks, reads the answer, thinks, asks again (default {d.users}; "
                        "0 with --rate)")
    g.add_argument("--rate", type=_nonneg_float, default=d.rate,
                   help="open loop: Poisson arrivals per second instead of users (default off)")
    g.add_argument("--prompt", default=d.prompt, help=f"prompt tokens: N or a distribution (default {d.prompt})")
    g.add_argument("--output", default=d.output, help=f"answer tokens (default {d.output})")
    g.add_argument("--think", default=d.think, help=f"hidden reasoning tokens before the answer (default {d.think})")
    g.add_argument("--think-time", default=d.think_time,
                   help=f"seconds a user pauses between answer and next question (default {d.think_time})")
    g.add_argument("--seed", type=int, default=d.seed, help=f"random seed (default {d.seed})")
    s = p.add_argument_group("scheduler")
    s.add_argument("--scheduler", choices=SCHEDULERS, default=d.scheduler, help=f"(default {d.scheduler})")
    s.add_argument("--max-batch", type=positive_int, default=d.max_batch,
                   help=f"sequences per step at most (default {d.max_batch})")
    s.add_argument("--max-batched-tokens", type=positive_int, default=d.max_batched_tokens,
                   help=f"tokens per step at most (default {d.max_batched_tokens})")
    s.add_argument("--fast-share", type=_nonneg_float, default=d.fast_share,
                   help="share of users in a small-batch priority 'fast lane' (default 0)")
    p.set_defaults(_engine_defaults=d)


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """The EngineConfig the options describe. --rate without --users means an open loop (0 users)."""
    d: EngineConfig = getattr(args, "_engine_defaults", None) or EngineConfig()
    users = args.users if args.users is not None else (0 if args.rate > 0 else d.users)
    return EngineConfig(
        hardware=args.hardware, model=args.model, tp=args.tp, weight_dtype=args.dtype, kv_dtype=args.kv_dtype,
        ideal=args.ideal, runtime=args.runtime, scheduler=args.scheduler, max_batch=args.max_batch,
        max_batched_tokens=args.max_batched_tokens, fast_share=args.fast_share, fast_max_batch=d.fast_max_batch,
        users=users, rate=args.rate, prompt=args.prompt, output=args.output, think=args.think,
        think_time=args.think_time, seed=args.seed,
    )
