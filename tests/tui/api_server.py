"""A serve-api server on 127.0.0.1 in a background thread, for the API tests (needs the `api` extra)."""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def in_ci() -> bool:
    """CI sets CI=true; there the api extra is installed and its tests must run, never skip."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def need(module: str) -> None:
    """Skip without `module` (fail in CI, where .ci/run installs it)."""
    try:
        __import__(module)
    except ImportError:
        if in_ci():
            pytest.fail(f"CI=true but {module} is missing: .ci/run should install the api extra")
        pytest.skip(f"{module} is not installed (pip install -e '.[api]')")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> int:
    """A base port with n consecutive ports free on 127.0.0.1 right now."""
    for _ in range(50):
        base = free_port()
        if base + n > 65535:
            continue
        try:
            for i in range(1, n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", base + i))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no {n} consecutive free ports")


@contextmanager
def serving(*argv: str) -> Iterator[tuple[str, object]]:
    """`tokensim serve-api ARGV` on a free loopback port; yields (base URL, driver) and stops it after. With
    --replica-ports in ARGV (give it "auto") each replica is served too, on consecutive free ports."""
    need("uvicorn")
    import asyncio

    import uvicorn

    from tui.cli import build_parser
    from tui.commands import serve_api_cmd

    port = free_port()
    argv = tuple(str(free_ports(8)) if a == "auto" else a for a in argv)
    words = ["serve-api", "--port", str(port), "--log-level", "warning", *argv]
    args = build_parser(words).parse_args(words)
    app, driver, apps = serve_api_cmd.build_all(args)
    socks = [serve_api_cmd.listen("127.0.0.1", p) for p in serve_api_cmd.ports(args)]
    servers = [uvicorn.Server(uvicorn.Config(a, log_level="warning", limit_concurrency=serve_api_cmd.uvicorn_limit(args)))
               for a in [app, *apps]]
    th = threading.Thread(target=lambda: asyncio.run(serve_api_cmd.serve_all(servers, socks)), daemon=True)
    th.start()
    deadline = time.monotonic() + 20
    while not all(s.started for s in servers):
        if time.monotonic() > deadline or not th.is_alive():
            raise RuntimeError("serve-api did not start")
        time.sleep(0.02)
    driver.urls = [f"http://127.0.0.1:{p}" for p in serve_api_cmd.ports(args)]  # the door's, then each replica's
    try:
        yield f"http://127.0.0.1:{port}", driver
    finally:
        for s in servers:
            s.should_exit = True
        th.join(10)


def metric(text: str, name: str) -> float:
    """The value of `name` (its first labelled sample) in a Prometheus exposition text."""
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def metric_at(url: str, name: str) -> float:
    """metric() of the server at `url`'s /metrics, read now."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return metric(r.read().decode(), name)
