"""`tokensim` with no subcommand: its options build the same EngineConfig the app runs."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from tui.cli import build_parser
from tui.commands.app_cmd import config_from_args
from tui.defaults import default_config


def parse(*argv: str) -> object:
    return build_parser(list(argv)).parse_args(list(argv))


def test_no_options_is_the_teaching_default() -> None:
    args = parse()
    assert config_from_args(args) == default_config()
    assert args.lang is None and args.speed == 1.0 and not args.paused


def test_options_of_tokensim_run() -> None:
    args = parse("--hardware", "h200", "--model", "llama-3.1-8b", "--users", "64", "--prompt", "2000", "--output",
                 "uniform:100,300", "--think", "500", "--think-time", "exp:5", "--scheduler", "chunked",
                 "--max-batch", "128", "--max-batched-tokens", "4096", "--fast-share", "0.1", "--seed", "7",
                 "--dtype", "fp8", "--tp", "2", "--bandwidth-mult", "2", "--lang", "zh", "--speed", "0.01", "--paused")
    cfg = config_from_args(args)
    assert cfg == EngineConfig(hardware="h200", model="llama-3.1-8b", users=64, prompt="2000",
                               output="uniform:100,300", think="500", think_time="exp:5", scheduler="chunked",
                               max_batch=128, max_batched_tokens=4096, fast_share=0.1, seed=7, weight_dtype="fp8",
                               tp=2, bandwidth_mult=2.0)
    assert args.lang == "zh" and args.speed == 0.01 and args.paused


def test_rate_alone_means_an_open_loop() -> None:
    cfg = config_from_args(parse("--rate", "3"))
    assert cfg.rate == 3 and cfg.users == 0 and cfg.think_time == "0" and cfg.requests is None


def test_help_shows_the_apps_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--help")
    out = " ".join(capsys.readouterr().out.split())
    assert "(default uniform:500,3000)" in out and "(default 6 unless --rate)" in out
    assert "(default exp:2)" in out


@pytest.mark.parametrize("bad", [["--lang", "fr"], ["--speed", "0"], ["--users", "-1"], ["--scheduler", "fifo"]])
def test_bad_options_exit_2(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parse(*bad)
    assert e.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1  # one line


def test_a_config_that_does_not_fit_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from tui.cli import main

    assert main(["--model", "llama-3.1-405b"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tokensim: error:") and "does not fit" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv", [[], ["--paused"], ["scene", "1"], ["tour"]])
def test_without_a_terminal_one_line_and_exit_2(argv: list[str]) -> None:
    """`tokensim | head`, `tokensim scene 1 </dev/null`: no escape codes into a pipe, no app left running."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TEXTUAL_DRIVER"}
    p = subprocess.run([sys.executable, "-m", "tui.cli", *argv], stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=60, env=env)
    assert p.returncode == 2
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs a terminal" in lines[0], p.stderr


def test_textual_serve_may_run_the_app_without_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """textual-serve launches the app on pipes with TEXTUAL_DRIVER naming its web driver: that is allowed."""
    from engine.errors import InputError
    from tui.commands.options import require_terminal

    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    with pytest.raises(InputError):
        require_terminal("hint")
    monkeypatch.setenv("TEXTUAL_DRIVER", "textual.drivers.web_driver:WebDriver")
    require_terminal("hint")
