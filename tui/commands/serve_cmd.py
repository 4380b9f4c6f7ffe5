"""`tokensim serve`: the live factory floor in a web browser, served by textual-serve.

textual-serve runs a small web server; every browser tab that connects gets its own app process, started
from a shell command string with Textual's web driver (TEXTUAL_DRIVER=textual.drivers.web_driver:WebDriver),
which talks to the server over pipes, not a terminal. That command is this Python running `tui.cli` with
the app's options given to serve, so every tab opens the same configuration.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import shlex
import socket
import sys
import urllib.parse
from typing import Any

from engine.errors import InputError
from engine.validation import printable_line
from tui.commands import app_cmd

DEFAULT_HOST = "127.0.0.1"  # loopback: only this machine can connect unless --host says otherwise
DEFAULT_PORT = 8000

# A CJK monospace fallback inside the terminal's own font family. textual-serve's page draws with xterm.js in
# "'Roboto Mono', Monaco, 'Courier New', monospace", none of which has Chinese, so the app's Chinese depended on the
# browser's guess (empty boxes on a machine whose guess finds no CJK font). This face adds CJK glyphs to the family
# 'Roboto Mono' for the CJK ranges only (Latin still comes from the fonts the page names), from the first of these
# installed: Noto Sans Mono CJK (Debian/Ubuntu fonts-noto-cjk), Source Han Mono (the same design by Adobe's name),
# Sarasa Mono, then the systems' own CJK fonts on macOS (PingFang) and Windows (Microsoft YaHei, SimHei).
CJK_FALLBACK = [
    "Noto Sans Mono CJK SC", "Noto Sans Mono CJK TC", "Source Han Mono SC", "Sarasa Mono SC",
    "Noto Sans CJK SC", "PingFang SC", "Microsoft YaHei", "SimHei",
]
# CJK radicals, punctuation, kana and ideographs; Hangul; compatibility ideographs; full-width forms.
CJK_RANGES = "U+2E80-9FFF, U+AC00-D7AF, U+F900-FAFF, U+FE30-FE4F, U+FF00-FFEF"
CJK_FONT_FACE = (
    "<style>@font-face { font-family: 'Roboto Mono'; "
    f"src: {', '.join(f'local({name!r})' for name in CJK_FALLBACK)}; unicode-range: {CJK_RANGES}; }}</style>"
    # Load the face before xterm draws its first Chinese glyph, so the glyph cache holds it rather than a fallback.
    "<script>document.fonts.load(\"16px 'Roboto Mono'\", \"\\u4e2d\");</script>"
)


def with_cjk_fonts(page: str) -> str:
    """The page with CJK_FONT_FACE at the end of its <head> (unchanged if it has no </head>)."""
    return page.replace("</head>", CJK_FONT_FACE + "</head>", 1)


def port_number(text: str) -> int:
    """argparse type: a TCP port, 1-65535 (0 would make the page's websocket address unknowable)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 1 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 1 and 65535, got {v}")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The app's own options (model, workload, --lang, --speed, --paused), then --host, --port, --public-url."""
    app_cmd.add_arguments(p)
    s = p.add_argument_group("server")
    s.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to listen on (default {DEFAULT_HOST}: this machine only; 0.0.0.0 opens it "
                        "to the network)")
    s.add_argument("--port", type=port_number, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    s.add_argument("--public-url", default=None,
                   help="the server's address as browsers see it, e.g. https://... behind a proxy (default: "
                        "the address each browser used to fetch the page)")


def app_argv(args: argparse.Namespace) -> list[str]:
    """The app's options as given (defaults left out), as words for `tokensim`'s own command line.

    Each is written `--name=value`, so a value that starts with '-' (a negative seed) is not read as an option.
    """
    parser = argparse.ArgumentParser(add_help=False)
    app_cmd.add_arguments(parser)
    words: list[str] = []
    for action in parser._actions:  # argparse keeps no public list of a parser's options
        if not action.option_strings:
            continue
        value = getattr(args, action.dest)
        if value == action.default:
            continue
        name = max(action.option_strings, key=len)  # the long form
        if action.nargs == 0 and isinstance(action.const, bool):  # a flag (store_true / store_false)
            words.append(name)
        elif action.nargs is None and action.const is None:  # a single value
            words.append(f"{name}={value}")
        else:
            raise TypeError(f"serve cannot pass on option {name} ({type(action).__name__})")
    return words


def app_command(args: argparse.Namespace) -> str:
    """The shell command textual-serve runs for each browser tab: this Python, `tui.cli`, the app's options."""
    return shlex.join([sys.executable, "-m", "tui.cli", *app_argv(args)])


def is_loopback(host: str) -> bool:
    """True when every address `host` names is on this machine only (127.0.0.0/8, ::1)."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)


# What to try when binding fails, by errno (the default: another port).
_BIND_HINTS = {
    errno.EADDRNOTAVAIL: "that is not an address of this machine (try 127.0.0.1)",
    errno.EACCES: "ports below 1024 need privileges; pick another with --port",
}


def check_port_free(host: str, port: int) -> None:
    """Bind every address of host:port once and let go, so a taken port or a bad host is one clear line.

    textual-serve prints its banner before it binds; without this check a port in use would first
    announce that it is serving and then fail with a traceback.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as e:
        raise InputError(f"--host {host!r}: cannot resolve it ({e.strerror or e}); try 127.0.0.1") from None
    for family, kind, proto, _, addr in infos:
        with socket.socket(family, kind, proto) as s:
            # aiohttp listens with SO_REUSEADDR; set it too so a port in TIME_WAIT is not called "in use".
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(addr)
            except OSError as e:
                raise InputError(f"cannot listen on {host} port {port}: {e.strerror or e}; "
                                 f"{_BIND_HINTS.get(e.errno, 'pick another with --port')}") from None


def public_url(host: str, port: int) -> str:
    """http://HOST:PORT, with an IPv6 literal in brackets."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def make_server(command: str, host: str, port: int, fixed_url: str | None = None) -> Any:
    """textual-serve's Server for `command`, announcing itself in one line.

    The page names the websocket the browser opens next; unless fixed_url is given, it names the address
    the browser used to fetch the page, which reaches the server from wherever that browser is
    (textual-serve's own default, http://HOST:PORT, fails from another machine when HOST is 0.0.0.0).
    """
    try:
        from textual_serve.server import Server  # imported here: only serve needs the web server
    except ImportError:  # an install from before serve existed
        raise InputError("textual-serve is not installed; reinstall tokensim: pip install -e .") from None

    class TokensimServer(Server):
        async def on_startup(self, app: object) -> None:
            """Where to point the browser, in place of textual-serve's banner."""
            self.console.print(f"tokensim: open {self.public_url} in a web browser (Ctrl+C stops the server)",
                               highlight=False, soft_wrap=True)

        async def handle_index(self, request: Any) -> Any:
            """The page, its links built on the address this request came to (or on fixed_url)."""
            if fixed_url is None:
                # Safe across concurrent requests: the wrapped handler reads public_url before it first awaits.
                self.public_url = f"{request.scheme}://{request.host}"
            response = await super().handle_index(request)
            response.text = with_cjk_fonts(response.text)
            return response

        async def _process_messages(self, websocket: Any, app_service: Any) -> None:
            """textual-serve's loop over one tab's messages, with the tab's websocket on record while it runs."""
            open_tabs.add(websocket)
            try:
                await super()._process_messages(websocket, app_service)
            finally:
                open_tabs.discard(websocket)

        async def on_shutdown(self, app: object) -> None:
            """Close every open tab's websocket, so Ctrl+C stops at once: aiohttp would otherwise wait up to a
            minute for them to end by themselves (each tab's app is then told to quit)."""
            for websocket in list(open_tabs):
                await websocket.close(code=1001, message=b"server stopped")  # 1001: going away

    open_tabs: set[Any] = set()
    return TokensimServer(command, host=host, port=port, title="tokensim",
                          public_url=fixed_url or public_url(host, port))


def check_public_url(url: str | None) -> None:
    """--public-url is an http(s) URL with a host (it becomes the page's links; anything else is broken links)."""
    if url is None:
        return
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in url):
        raise InputError(f"--public-url {printable_line(url)!r}: expected an http:// or https:// URL with a host,"
                         " e.g. https://sim.example.com")


def run(args: argparse.Namespace) -> int:
    """Check the options (the engine is built once here, so a bad one fails now), then serve until Ctrl+C."""
    from engine.serving.engine import Engine

    check_public_url(args.public_url)
    Engine(app_cmd.config_from_args(args))  # a model that does not fit etc. is one line now, not per tab
    check_port_free(args.host, args.port)
    if not is_loopback(args.host):
        sys.stderr.write(f"tokensim serve: listening on {args.host}: anyone who can reach this machine on port "
                         f"{args.port} can open the app\n")
    server = make_server(app_command(args), args.host, args.port, args.public_url)
    try:
        server.serve()
    except OSError as e:  # lost a race for the port after the check above
        raise InputError(f"cannot listen on {args.host} port {args.port}: {e.strerror or e}") from None
    return 0
