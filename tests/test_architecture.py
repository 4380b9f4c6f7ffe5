"""The architecture's rules, checked: no import circle anywhere, and engine/ code in readable pieces.

Issue 25 asked for both: an import circle makes a module impossible to read (or import) alone, and a 1,000-line class
or a 100-line function is where the next feature gets copied instead of added. Every executed `import` statement
counts, function-level ones too (a circle hidden inside a function is still a circle), and so does the package
`__init__` an import runs; annotation-only imports under `if TYPE_CHECKING:` do not.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "scenes", "tui")
MAX_CLASS_LINES = 500  # engine/ only (issue 25)
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the three packages."""
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            parts = f.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of the tree except the bodies of `if TYPE_CHECKING:` blocks: an import there names a type for an
    annotation (step kinds take a Lane) and is never executed, so it orders no loading and closes no circle.
    Imports inside functions do count."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def _imports(tree: ast.Module, mods: dict[str, Path]) -> set[str]:
    """The project modules a file imports anywhere in it (a `from pkg import module` names the module)."""

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    deps: set[str | None] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            deps.update(known(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                deps.add(full if full in mods else known(node.module))
    deps.discard(None)
    # Importing a.b.c runs a/__init__.py and a/b/__init__.py first: those packages are dependencies too.
    for d in list(deps):
        parts = d.split(".")  # type: ignore[union-attr]
        deps.update(".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in mods)
    return {d for d in deps if d is not None}


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (a package's own __init__ is not counted as a dependency of its
    children: importing engine.fleet.fleet runs engine/fleet/__init__.py, which is not an edge back)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps = _imports(ast.parse(path.read_text(encoding="utf-8")), mods)
        graph[name] = {d for d in deps if d != name and not name.startswith(d + ".")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_circle_finder_finds_a_circle() -> None:
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(g) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_function_level_imports_count_and_type_checking_ones_do_not() -> None:
    mods = {"engine.a": Path("a"), "engine.b": Path("b"), "engine.c": Path("c"), "engine": Path("i")}
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from engine.a import X\n"
                     "def f():\n    from engine.b import Y\nimport engine.c\n")
    assert _imports(tree, mods) == {"engine.b", "engine.c", "engine"}


def test_no_import_circle_anywhere() -> None:
    graph = import_graph()
    assert "engine.physics.step" in graph and "tui.app" in graph
    assert circles(graph) == []


def _too_long(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        n = node.end_lineno - node.lineno + 1 if hasattr(node, "end_lineno") else 0
        if isinstance(node, ast.ClassDef) and n > MAX_CLASS_LINES:
            out.append(f"{path.relative_to(ROOT)}:{node.lineno} class {node.name} {n} lines")
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and n > MAX_FUNCTION_LINES:
            out.append(f"{path.relative_to(ROOT)}:{node.lineno} def {node.name} {n} lines")
    return out


def test_engine_classes_and_functions_stay_readable() -> None:
    long = [line for f in sorted((ROOT / "engine").rglob("*.py")) for line in _too_long(f)]
    assert long == []


def test_the_option_table_imports_no_numpy_rich_or_textual() -> None:
    """engine.options is read by every command before it knows which runs: stdlib only."""
    code = ("import sys, engine.options as o\n"
            "assert len(o.OPTIONS) > 40\n"
            "print(','.join(sorted(k for k in sys.modules if k.split('.')[0] in ('numpy', 'rich', 'textual'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ""
