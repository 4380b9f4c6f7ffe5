"""The core never imports the UI: engine/ and scenes/ load without textual or rich (checked in a fresh process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules(pkg: str) -> list[str]:
    """Every module of the package, subpackages included (engine/ is grouped into physics/, serving/, ...)."""
    out = []
    for f in sorted((ROOT / pkg).rglob("*.py")):
        parts = f.relative_to(ROOT).with_suffix("").parts
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def test_engine_and_scenes_never_import_textual_or_rich() -> None:
    mods = _modules("engine") + _modules("scenes")
    assert "engine.physics.step" in mods
    code = ("import importlib, sys\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            "bad = sorted(k for k in sys.modules if k.split('.')[0] in ('textual', 'rich'))\n"
            "print(','.join(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", f"the core imported UI modules: {out.stdout.strip()}"
