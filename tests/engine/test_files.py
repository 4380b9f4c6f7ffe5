"""Files tokensim writes are whole or absent, and never one of the run's inputs (issue 30, class 1)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import InputError
from engine.files import atomic_output, write_text_atomic

ROOT = Path(__file__).resolve().parents[2]


def test_a_finished_write_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")
    write_text_atomic(target, "new", "--x")
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit, RuntimeError])
def test_a_write_stopped_half_way_keeps_the_previous_file(tmp_path: Path, stop: type[BaseException]) -> None:
    target = tmp_path / "out.json"
    target.write_text("previous trace")
    with pytest.raises(stop), atomic_output(target, "--trace-out") as f:
        f.write("half a tra")
        raise stop()
    assert target.read_text() == "previous trace"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_full_disk_is_one_input_error_and_the_previous_file_stays(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.json"
    target.write_text("previous")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(InputError, match="--trace-out .*No space left"), atomic_output(target, "--trace-out") as f:
        f.write("x" * 1000)
    assert target.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_an_input_of_the_run_is_refused_as_a_target(tmp_path: Path) -> None:
    src = tmp_path / "trace.csv"
    src.write_text("timestamp,input,output\n")
    link = tmp_path / "same.csv"
    os.link(src, link)
    for target in (src, link, tmp_path / "." / "trace.csv"):
        with pytest.raises(InputError, match="one of this run's inputs"):
            write_text_atomic(target, "x", "--trace-out", inputs=[None, "llama-3.1-8b", str(src)])
    assert src.read_text() == "timestamp,input,output\n"
    write_text_atomic(tmp_path / "other.json", "x", "--trace-out", inputs=[str(src), "llama-3.1-8b"])


def test_run_refuses_to_write_its_trace_over_its_workload_file(tmp_path: Path) -> None:
    wl = tmp_path / "w.toml"
    text = "[[stage]]\nrate = 2\nduration = 5\n"
    wl.write_text(text)
    p = subprocess.run([sys.executable, "-m", "tui.cli", "run", "--workload", str(wl), "--trace-out", str(wl)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "--trace-out" in p.stderr and "inputs" in p.stderr
    assert wl.read_text() == text


def test_a_written_file_gets_the_umask_mode_or_keeps_the_replaced_files(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "new.svg", "<svg/>", "--plot-file")
        assert (tmp_path / "new.svg").stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600
        kept = tmp_path / "kept.json"
        kept.write_text("old")
        kept.chmod(0o640)
        write_text_atomic(kept, "new", "--x")
        assert kept.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(mask)
