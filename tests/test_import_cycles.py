"""No import circle among the UI and scene modules, counting every import statement (function-level and
TYPE_CHECKING ones too): a circle is a knot where changing one module means reading all of them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules(pkgs: tuple[str, ...]) -> dict[str, Path]:
    """Module name -> file, for every module of the packages."""
    out = {}
    for pkg in pkgs:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            parts = f.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(name: str, f: Path, known: dict[str, Path]) -> set[str]:
    """The known modules one module names in any import statement (`from a import b` counts a.b when b is one)."""
    pkg = name.split(".") if f.name == "__init__.py" else name.split(".")[:-1]
    named: set[str] = set()
    for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            named.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
            named.add(base)
            named.update(f"{base}.{a.name}" for a in node.names)
    out = set()
    for m in named:
        while m and m not in known:
            m = m.rpartition(".")[0]
        if m and m != name:
            out.add(m)
    return out


def circles(pkgs: tuple[str, ...]) -> list[list[str]]:
    """The strongly connected groups of more than one module in the import graph (Tarjan's algorithm)."""
    mods = _modules(pkgs)
    graph = {m: _imports(m, f, mods) for m, f in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_among_tui_and_scenes() -> None:
    assert len(_modules(("tui", "scenes"))) > 60
    assert circles(("tui", "scenes")) == []


def test_the_option_table_imports_no_numpy_rich_or_textual() -> None:
    """engine.options is read by every command before it knows which runs: stdlib only."""
    code = ("import sys, engine.options as o\n"
            "assert len(o.OPTIONS) > 40\n"
            "print(','.join(sorted(k for k in sys.modules if k.split('.')[0] in ('numpy', 'rich', 'textual'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ""
