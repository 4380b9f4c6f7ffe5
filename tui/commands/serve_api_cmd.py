"""`tokensim serve-api`: a simulated vLLM server. OpenAI's HTTP API on 127.0.0.1, answers timed by the engine.

Each HTTP request becomes a request in the engine (its prompt's token count, max_tokens for the answer); tokens
are sent when the engine's steps make them, on the engine's clock mapped to the wall's (--time-scale); /metrics
has vLLM's metric names. Options are named as vLLM's `vllm serve` names them. Needs the `api` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
from importlib import metadata
from typing import Any

import numpy as np

from engine import options as O
from engine.config import MAX_BATCHED_TOKENS, SCHEDULERS, EngineConfig
from engine.errors import InputError
from engine.fleet.routers import ROUTERS
from engine.fleet.spec import parse_pd
from engine.traffic.workload import Sampler, parse_dist
from tui.commands.options import add_model_options, nonneg_int, positive_float, positive_int, seed_int
from tui.commands.serve_cmd import DEFAULT_HOST, DEFAULT_PORT, check_port_free, port_number

DEFAULT_OUTPUT = "256"  # answer tokens when a request gives no max_tokens
MAX_CONNECTIONS = 2048  # requests in flight before the app answers OpenAI's 503 (tui.api.app.Guard)
# Each connection's kernel send buffer (SO_SNDBUF on the listening socket, inherited by every accepted one;
# Linux doubles the figure given, and stops autotuning it). Autotuned, a loopback socket's buffer grows to
# ~4 MB (net.ipv4.tcp_wmem's maximum): ~20,000 tokens a client that never reads would swallow before its writes
# wait and --send-timeout can find it. At 128 KB it is ~700 tokens, and a stream of ~200 B events needs far
# less than 128 KB in flight to keep up (loopback's round trip is microseconds).
SEND_BUFFER_BYTES = 64 << 10
UVICORN_SLACK = 256  # uvicorn's own cap (plain-text 503) sits this far above --max-connections: ours answers first


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Model options, vLLM's serving knobs, the clock mapping and the listening address."""
    add_model_options(p)
    s = p.add_argument_group("serving (as vLLM names them)")
    s.add_argument("--served-model-name", default=None, help="the model's name in the API (default: --model)")
    s.add_argument("--max-num-seqs", type=positive_int, default=256, help="most sequences in a step (default 256)")
    s.add_argument("--max-num-batched-tokens", type=positive_int, default=MAX_BATCHED_TOKENS,
                   help=f"token budget of a step (default {MAX_BATCHED_TOKENS})")
    s.add_argument("--max-model-len", type=positive_int, default=None,
                   help="longest request, prompt + answer; longer ones get a 400 (default: the model's context)")
    s.add_argument("--scheduler", choices=SCHEDULERS, default="chunked",
                   help="batching policy (default chunked, vLLM V1's chunked prefill)")
    s.add_argument("--gpu-memory-utilization", type=O.BY_NAME["gpu_memory_utilization"].parse(), default=None,
                   help="KV pool by vLLM's memory rule with this share of GPU memory")
    s.add_argument("--kv-blocks", type=positive_int, default=None, help="a KV pool of this many 16-token blocks")
    s.add_argument("--prefix-caching", choices=("on", "off"), default="on",
                   help="reuse KV blocks of prompts that share a prefix (default on, as vLLM)")
    s.add_argument("--max-waiting", type=nonneg_int, default=None,
                   help="refuse requests with 503 while this many wait (default: no cap)")
    f = p.add_argument_group("fleet")
    f.add_argument("--replicas", type=positive_int, default=None,
                   help="replicas of the engine behind this one address, each with its own KV pool (default 1,"
                        " or P + D with --pd)")
    f.add_argument("--router", choices=tuple(ROUTERS), default="round-robin",
                   help="how the address picks a replica for each request (default round-robin)")
    f.add_argument("--replica-ports", type=port_number, metavar="BASE", default=None,
                   help="also serve replica i alone on 127.0.0.1:BASE+i (its own /metrics), for an external"
                        " router to balance")
    f.add_argument("--pd", metavar="P:D", default=None,
                   help="prefill/decode disaggregation: the router sends each request to one of P prefill replicas;"
                        " its prompt's KV is copied to one of D decode replicas, which streams the answer")
    f.add_argument("--kv-link-gbps", type=O.BY_NAME["kv_link_gbps"].parse(), default=None,
                   help=O.BY_NAME["kv_link_gbps"].en)
    w = p.add_argument_group("answers and clock")
    w.add_argument("--time-scale", type=positive_float, default=1.0,
                   help="engine seconds per wall second (default 1: real time; 10: ten times faster)")
    w.add_argument("--output", default=DEFAULT_OUTPUT,
                   help=f"answer tokens for requests without max_tokens, a number or distribution (default "
                        f"{DEFAULT_OUTPUT})")
    w.add_argument("--seed", type=seed_int, default=0, help="seed of the drawn answer lengths (default 0)")
    w.add_argument("--tokenizer", metavar="TOKENIZER.json", default=None,
                   help="count prompt tokens with this tokenizer (needs the tokenizers package); default: an"
                        " estimate of one token per 4 bytes")
    a = p.add_argument_group("server")
    a.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to listen on (default {DEFAULT_HOST}: this machine only)")
    a.add_argument("--port", type=port_number, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    a.add_argument("--max-connections", type=positive_int, default=MAX_CONNECTIONS,
                   help=f"requests in flight at once; more get OpenAI's 503 error JSON (default {MAX_CONNECTIONS})")
    a.add_argument("--send-timeout", type=positive_float, default=10.0, metavar="SECONDS",
                   help="end a stream (and abort its request) when its client has read nothing this long"
                        " (default 10)")
    a.add_argument("--floor", action="store_true",
                   help="show the factory floor serving the HTTP clients (the server runs inside the app; a fleet:"
                        " its overview, a row per replica)")
    a.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info",
                   help="server log detail (default info)")


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """The engine the options describe (no workload of its own: HTTP clients are the workload)."""
    return EngineConfig(
        hardware=args.hardware, model=args.model, tp=args.tp, weight_dtype=args.dtype, kv_dtype=args.kv_dtype,
        ideal=args.ideal, runtime=args.runtime or "vllm", scheduler=args.scheduler, max_batch=args.max_num_seqs,
        max_batched_tokens=args.max_num_batched_tokens, users=0, rate=0.0, seed=args.seed,
        kv_pool_blocks=args.kv_blocks, gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len, prefix_caching=args.prefix_caching == "on")


def build(args: argparse.Namespace):  # -> (Starlette, Driver); untyped here so the module imports without the extra
    """The app and its driver for these options (InputError for bad ones). Needs the `api` extra."""
    app, driver, _ = build_all(args)
    return app, driver


def build_all(args: argparse.Namespace):  # -> (Starlette, Driver, [Starlette]): the door, the driver, each replica
    """The fleet's app, its driver, and with --replica-ports one app per replica. Needs the `api` extra."""
    try:
        from tui.api import text
        from tui.api.app import ServerSpec, build_app
        from tui.api.driver import Driver
    except ImportError as e:
        raise InputError(f"serve-api needs the api extra: pip install -e \".[api]\" ({e.name} is missing)") from None
    from engine.fleet.live import LiveFleet

    pd = fleet_shape(args)
    if getattr(args, "floor", False) and args.replica_ports is not None:
        raise InputError("--floor serves the one address inside the app: it takes no --replica-ports")
    if args.replica_ports is not None and args.replica_ports + args.replicas - 1 > 65535:
        raise InputError(f"--replica-ports {args.replica_ports}: {args.replicas} ports from there pass 65535")
    live = LiveFleet(config_from_args(args), args.replicas, args.router, pd, args.kv_link_gbps)
    rng = np.random.default_rng([args.seed, 0xA91])
    sampler = Sampler(parse_dist(args.output, "--output", 1), rng, True, 1, live.max_tokens_per_request)
    try:
        tokens = text.load_tokens(args.tokenizer)
    except ValueError as e:
        raise InputError(str(e)) from None
    name = args.served_model_name or args.model
    spec = ServerSpec(model=name, version=metadata.version("tokensim"), max_model_len=live.max_tokens_per_request,
                      draw_output=lambda: int(sampler.take(1)[0]), tokens=tokens,
                      max_connections=args.max_connections, send_timeout=args.send_timeout)
    driver = Driver(live, args.time_scale, name, args.max_waiting)
    apps = [build_app(driver, spec, i) for i in range(args.replicas)] if args.replica_ports is not None else []
    return build_app(driver, spec), driver, apps


def fleet_shape(args: argparse.Namespace) -> tuple[int, int] | None:
    """The P/D split (None: none) with args.replicas set to the fleet's size; InputError for options that
    contradict each other or would do nothing."""
    pd = parse_pd(args.pd) if args.pd else None
    if pd and args.replicas is not None and args.replicas != sum(pd):
        raise InputError(f"--pd {args.pd} is {sum(pd)} replicas, but --replicas is {args.replicas}")
    args.replicas = sum(pd) if pd else args.replicas or 1
    if args.kv_link_gbps is not None and pd is None:
        raise InputError("--kv-link-gbps sets the link P/D copies KV over: it does nothing without --pd P:D")
    front = pd[0] if pd else args.replicas
    if args.router != "round-robin" and front == 1:
        raise InputError(f"--router {args.router} picks among replicas that read prompts: give --replicas N or"
                         " --pd P:D with P of 2 or more")
    return pd


def uvicorn_limit(args: argparse.Namespace) -> int:
    """uvicorn's limit_concurrency: above --max-connections (which the app enforces with an OpenAI 503), a last
    bound on connections that never send a request."""
    return args.max_connections + UVICORN_SLACK


def ports(args: argparse.Namespace) -> list[int]:
    """Every port this server listens on: the door's, then each replica's (--replica-ports)."""
    base = args.replica_ports
    return [args.port] + ([base + i for i in range(args.replicas)] if base is not None else [])


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port whose connections have SEND_BUFFER_BYTES of send buffer (a port in use
    or an address not of this machine: one line, exit 2)."""
    check_port_free(host, port)
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                      flags=socket.AI_PASSIVE)[0]
    s = socket.socket(family, kind, proto)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
    s.bind(addr)
    s.listen(2048)
    s.setblocking(False)
    return s


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted (a port in use or an address not of this machine: one line, exit 2)."""
    app, driver, apps = build_all(args)
    socks = [listen(args.host, port) for port in ports(args)]
    import uvicorn

    if args.floor:
        return _run_floor(args, app, driver, uvicorn, socks[0])
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    servers = [uvicorn.Server(uvicorn.Config(a, log_level=args.log_level, limit_concurrency=uvicorn_limit(args),
                                             timeout_keep_alive=5)) for a in [app, *apps]]
    asyncio.run(serve_all(servers, socks))
    return 0


def _run_floor(args: argparse.Namespace, app: Any, driver: Any, uvicorn: Any, sock: socket.socket) -> int:
    """The floor app with the server inside it, on its event loop; the server logs nothing to the terminal (the
    floor owns it): /metrics has tokensim:engine_lag_seconds."""
    from tui.api.floor import ServeFloorApp
    from tui.commands.options import run_app

    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False,
                                           limit_concurrency=uvicorn_limit(args), timeout_keep_alive=5))
    return run_app(ServeFloorApp(server, sock, floor_subject(args, driver), config_from_args(args),
                                 speed=args.time_scale))  # the header's "x real time" is the server's mapping


def floor_subject(args: argparse.Namespace, driver: Any) -> Any:
    """What --floor draws: the served engine, or a fleet's (--replicas, --pd) overview of its replicas."""
    from tui.api.floor import ServedFleet

    live = driver.live
    if len(live.replicas) == 1:
        return live.replicas[0].engine
    return ServedFleet(live, config_from_args(args), args.router, args.kv_link_gbps)


async def serve_all(servers: list, socks: list[socket.socket]) -> None:  # servers: list[uvicorn.Server]
    """uvicorn servers on one event loop (and one driver), server i on socket i: when the first stops (Ctrl-C),
    all stop."""
    tasks = [asyncio.create_task(s.serve(sockets=[k])) for s, k in zip(servers, socks, strict=True)]
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for s in servers:
        s.should_exit = True
    await asyncio.gather(*tasks, return_exceptions=True)
