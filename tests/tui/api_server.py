"""A serve-api server on 127.0.0.1 in a background thread, for the API tests (needs the `api` extra)."""

from __future__ import annotations

import os
import socket
import threading
import time
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


@contextmanager
def serving(*argv: str) -> Iterator[tuple[str, object]]:
    """`tokensim serve-api ARGV` on a free loopback port; yields (base URL, driver) and stops it after."""
    need("uvicorn")
    import uvicorn

    from tui.cli import build_parser
    from tui.commands import serve_api_cmd

    port = free_port()
    words = ["serve-api", "--port", str(port), "--log-level", "warning", *argv]
    args = build_parser(words).parse_args(words)
    app, driver = serve_api_cmd.build(args)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           limit_concurrency=serve_api_cmd.MAX_CONNECTIONS))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not th.is_alive():
            raise RuntimeError("serve-api did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", driver
    finally:
        server.should_exit = True
        th.join(10)
