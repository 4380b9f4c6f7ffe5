"""Everything read from a file is printed escaped (issue 30, class 6): a model or hardware file's name, a config's
architectures, can carry terminal escape sequences; none may reach the terminal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine.validation import printable, printable_line

ROOT = Path(__file__).resolve().parents[2]
EVIL = "evil\x1b[2J\x1b]0;title\x07\u202etxt.exe"
MODEL = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
         "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072}


def test_printable_escapes_controls_and_bidi_overrides_and_keeps_the_rest() -> None:
    out = printable({"k\x1b": [EVIL, "显卡 é ok", 3, None, "two\nlines\tand a tab\r"]})
    assert out == {"k\\x1b": ["evil\\x1b[2J\\x1b]0;title\\x07\\u202etxt.exe", "显卡 é ok", 3, None,
                               "two\nlines\tand a tab\\r"]}
    assert printable_line("a\nb\x1b") == "a\\nb\\x1b"


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tui.cli", *argv], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def test_a_model_name_with_escapes_is_printed_escaped(tmp_path: Path) -> None:
    f = tmp_path / "m.json"
    f.write_text(json.dumps({**MODEL, "name": EVIL, "display": EVIL}))
    for argv in (("step", "--model", str(f)), ("run", "--model", str(f), "--requests", "5")):
        p = _run(*argv)
        assert p.returncode == 0, p.stderr
        assert "\x1b" not in p.stdout + p.stderr and "\u202e" not in p.stdout
        assert "\\x1b[2j" in p.stdout.lower()  # the name, escaped (run prints it lower-cased)


def test_an_error_about_a_file_value_is_one_escaped_line(tmp_path: Path) -> None:
    f = tmp_path / "gpu.toml"
    f.write_text('name = "x"\nmemory_gb = "a\\u001b[31m\\nb"\n')
    p = _run("step", "--hardware", str(f))
    assert p.returncode == 2
    assert len(p.stderr.splitlines()) == 1 and "\x1b" not in p.stderr
    f2 = tmp_path / "m.json"
    f2.write_text(json.dumps({**MODEL, "architectures": ["Bert\x1b[31mModel"], "model_type": "bert"}))
    p = _run("step", "--model", str(f2))
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "\x1b" not in p.stderr
