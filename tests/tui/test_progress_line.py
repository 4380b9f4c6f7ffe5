"""The plain progress line for logs (tui.commands.progress; issue 30, class 3), through a real subprocess whose
stderr is a pipe, as under CI or nohup: plain lines on stderr, none on stdout, silenced by --quiet."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = ["run", "--users", "64", "--requests", "3000", "--json"]
LINE = re.compile(r"tokensim run: simulated [\d,.]+ s, [\d,]+ requests finished, tick [\d,]+, [\d,]+ s elapsed")


def _tokensim(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENSIM_PROGRESS_EVERY": "0.1"}
    return subprocess.run([sys.executable, "-m", "tui.cli", *argv], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)


def test_a_long_run_writes_plain_lines_on_stderr_and_clean_json_on_stdout() -> None:
    p = _tokensim(*RUN)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["requests"] == 3000  # stdout is the report alone
    lines = p.stderr.splitlines()
    assert lines and all(LINE.fullmatch(x) for x in lines), p.stderr[:500]
    assert "\x1b" not in p.stderr and "\r" not in p.stderr  # no escape codes, no carriage returns
    done = [int(re.search(r"([\d,]+) requests", x)[1].replace(",", "")) for x in lines]
    assert done == sorted(done)  # the line follows the run


def test_quiet_silences_it() -> None:
    p = _tokensim(*RUN, "--quiet")
    assert p.returncode == 0 and p.stderr == "" and json.loads(p.stdout)["requests"] == 3000
