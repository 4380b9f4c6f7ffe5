"""Ending early is said in one line and loses nothing (issue 30, class 8): SIGTERM and Ctrl+C stop a run with
143 / 130 and leave the previous --trace-out file whole; a reader that closes the pipe early (`| head -1`) is a
quiet exit 0."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LONG = ["run", "--users", "256", "--requests", "300000"]  # ~tens of CPU seconds: it is stopped long before its end


@pytest.mark.parametrize(("sig", "code", "word"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl+C")])
def test_a_stopped_run_says_so_and_keeps_the_previous_trace(tmp_path: Path, sig: int, code: int, word: str) -> None:
    trace = tmp_path / "run.json"
    trace.write_text("the previous trace")
    p = subprocess.Popen([sys.executable, "-m", "tui.cli", *LONG, "--trace-out", str(trace)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3.0)  # past start-up (imports, building the engine): the run is under way
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == code
    assert err.strip().splitlines() == [f"tokensim: stopped ({word}); nothing more was written"]
    assert trace.read_text() == "the previous trace"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["run.json"]


@pytest.mark.parametrize("argv", [["step"], ["list", "models"], ["run", "--json", "--requests", "50"]])
def test_a_reader_that_stops_early_is_a_quiet_exit_0(argv: list[str]) -> None:
    p = subprocess.Popen([sys.executable, "-m", "tui.cli", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone before the first line is written (`| head -0`)
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0
    assert err == b""
