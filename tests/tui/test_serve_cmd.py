"""`tokensim serve` without a browser: its options, its one-line errors, and the app starting as textual-serve starts it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.tui.served import free_port, serving, wait_for
from tui.cli import build_parser, main
from tui.commands import serve_cmd


def parse(*argv: str) -> object:
    return build_parser(["serve", *argv]).parse_args(["serve", *argv])


def test_loopback_port_8000_by_default() -> None:
    args = parse()
    assert (args.host, args.port, args.public_url) == ("127.0.0.1", 8000, None)
    assert serve_cmd.is_loopback(args.host)
    assert serve_cmd.app_argv(args) == []  # no options given: the app opens with its own defaults


def test_the_apps_options_are_passed_on_as_given() -> None:
    given = ["--model", "qwen2.5-7b", "--tp", "2", "--users", "12", "--prompt", "uniform:100,200", "--seed", "3",
             "--ideal", "--lang", "zh", "--speed", "0.25", "--paused", "--compute-mult", "1.5"]
    args = parse(*given, "--port", "8123", "--host", "localhost")
    words = serve_cmd.app_argv(args)
    assert "--seed=3" in words and "--paused" in words and not any("port" in w or "host" in w for w in words)
    # The command the browser tab runs parses back to exactly the options the app would get directly.
    command = shlex.split(serve_cmd.app_command(args))
    assert command[:3] == [sys.executable, "-m", "tui.cli"]
    direct, passed = build_parser(given).parse_args(given), build_parser(command[3:]).parse_args(command[3:])
    assert vars(passed) == vars(direct)


def test_public_url_brackets_ipv6() -> None:
    assert serve_cmd.public_url("127.0.0.1", 8000) == "http://127.0.0.1:8000"
    assert serve_cmd.public_url("::1", 9000) == "http://[::1]:9000"


@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True),
                                           ("0.0.0.0", False), ("192.0.2.7", False)])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert serve_cmd.is_loopback(host) is loopback


@pytest.mark.parametrize("port", ["0", "65536", "-1", "http"])
def test_a_bad_port_is_one_line_and_exit_2(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parse("--port", port)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "--port" in err


def test_a_port_in_use_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"port {port}" in err and "--port" in err


def test_a_host_that_is_not_this_machine_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--host", "192.0.2.7"]) == 2  # TEST-NET-1: no machine has it; nothing is sent
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "192.0.2.7" in err


def test_a_bad_app_option_fails_before_serving(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--model", "llama-3.1-405b"]) == 2  # does not fit one H100: said once, not per tab
    assert capsys.readouterr().err.count("\n") == 1


async def test_the_app_starts_under_textual_serves_web_driver() -> None:
    """The app runs as textual-serve runs it (a pipe, not a terminal) and draws its header.

    This is the exact path of a browser tab without the browser, so it runs everywhere: if the app ever
    refuses to start without a terminal, this fails even where Chromium is absent.
    """
    from textual_serve.app_service import AppService
    from textual_serve.download_manager import DownloadManager

    received = bytearray()
    drew_header = asyncio.Event()

    async def write_bytes(data: bytes) -> None:
        received.extend(data)
        # the header's right end: the welcome line (its `tokensim tour`) may reach the pipe first
        if b"tokensim" in received and b"paused" in received:
            drew_header.set()

    async def ignore(*_: object) -> None:
        return None

    command = serve_cmd.app_command(parse("--paused", "--lang", "en"))
    service = AppService(command, write_bytes=write_bytes, write_str=ignore, close=ignore,
                         download_manager=DownloadManager())
    await service.start(120, 40)
    try:
        header = asyncio.create_task(drew_header.wait())
        app_ended = service._task  # done when the app process closes its output (textual-serve's own task)
        assert app_ended is not None
        await asyncio.wait({header, app_ended}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
        header.cancel()
        assert drew_header.is_set(), "the app drew no header under textual-serve (its stderr is in captured stdout)"
    finally:
        try:
            await asyncio.wait_for(service.stop(), timeout=10)  # asks the app to quit, waits for it
        finally:
            process = service._process  # textual-serve keeps no public handle on it
            if process is not None and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
    assert b"paused" in received  # --paused reached the app through the command string


def fetch_page(port: int, host_header: str) -> str:
    """GET / from the server on 127.0.0.1 as if the browser had typed host_header (no proxy, 5 s at most)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(f"http://127.0.0.1:{port}/", headers={"Host": host_header})
    with opener.open(request, timeout=5) as response:
        return response.read().decode()


def test_the_page_points_its_websocket_at_the_address_the_browser_used(tmp_path: Path) -> None:
    # Listening on 127.0.0.1 stands in for 0.0.0.0 here: what matters is that the page is built per request.
    with serving(tmp_path / "serve.log") as (port, _):
        assert f'data-session-websocket-url="ws://127.0.0.1:{port}/ws"' in fetch_page(port, f"127.0.0.1:{port}")
        assert 'data-session-websocket-url="ws://gpu-box.lan:9000/ws"' in fetch_page(port, "gpu-box.lan:9000")


def test_public_url_fixes_the_address(tmp_path: Path) -> None:
    with serving(tmp_path / "serve.log", "--public-url", "https://sim.example.org") as (port, _):
        page = fetch_page(port, f"127.0.0.1:{port}")
    assert 'data-session-websocket-url="wss://sim.example.org/ws"' in page
    assert "https://sim.example.org/static/js/textual.js" in page
    assert serve_cmd.CJK_FONT_FACE + "</head>" in page  # Chinese gets a named CJK font (the browser test draws it)


async def test_ctrl_c_with_a_tab_open_stops_the_server_and_its_app_at_once(tmp_path: Path) -> None:
    import aiohttp  # textual-serve's own web library

    with serving(tmp_path / "serve.log", "--lang", "en") as (port, proc):
        async with aiohttp.ClientSession() as http, http.ws_connect(f"http://127.0.0.1:{port}/ws?width=100&height=30",
                                                                    timeout=aiohttp.ClientWSTimeout(ws_close=5)) as tab:
            async def until_header() -> None:
                received = b""
                async for message in tab:
                    received += message.data if message.type == aiohttp.WSMsgType.BINARY else b""
                    if b"tokensim" in received:
                        return

            await asyncio.wait_for(until_header(), timeout=20)  # the tab's app is up
            os.kill(proc.pid, signal.SIGINT)  # Ctrl+C, to the server alone

            async def until_closed() -> None:
                async for _ in tab:
                    pass

            await asyncio.wait_for(until_closed(), timeout=5)  # aiohttp alone would keep it open a minute
        assert await asyncio.to_thread(proc.wait, 5) == 0

        def group_gone() -> bool:
            try:
                os.killpg(proc.pid, 0)  # signal 0: only asks whether any process of the group is left
            except ProcessLookupError:
                return True
            return False

        await asyncio.to_thread(wait_for, "the tab's app to quit", group_gone, time.monotonic() + 5)


def test_without_textual_serve_installed_it_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "textual_serve.server", None)  # None in sys.modules: the import fails
    assert main(["serve", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install" in err


def test_serve_can_pass_on_every_option_of_the_app() -> None:
    """An option the app gains later (of a kind app_argv cannot write) fails here, not in a user's browser."""
    import argparse

    from tui.commands import app_cmd

    app_parser = argparse.ArgumentParser(add_help=False)
    app_cmd.add_arguments(app_parser)
    options = [a for a in app_parser._actions if a.option_strings]
    args = parse()
    for a in options:  # every option given, with a value unlike its default
        setattr(args, a.dest, (not a.default) if a.nargs == 0 else "x")
    words = serve_cmd.app_argv(args)
    assert len(words) == len(options)
    assert {w.split("=")[0] for w in words} == {max(a.option_strings, key=len) for a in options}
