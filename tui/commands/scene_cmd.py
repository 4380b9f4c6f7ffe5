"""`tokensim scene`: list the guided scenes, open one in the app, or play it headless.

    tokensim scene                         the list (id, title, claims)
    tokensim scene --json                  the same as JSON
    tokensim scene ID                      open the scene in the app (→ next step, ← back)
    tokensim scene ID --headless [--json]  play it without the app: narration and checkpoint results

ID is a scene id (e.g. compute-x2), its number (5), or the path of a scene .toml file. A headless run
exits 1 if any checkpoint fails, so it doubles as a check that the engine still reproduces the claims.
"""

from __future__ import annotations

import argparse
from typing import Any

from scenes.schema import Scene, find_scene, load_shipped
from scenes.words import LANGS
from tui.commands.options import console, print_json, require_terminal, run_app


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", nargs="?", help="scene id or number (see the list), or a scene .toml file")
    p.add_argument("--headless", action="store_true", help="play without the app: narration and checkpoints")
    p.add_argument("--json", action="store_true", help="machine-readable output (the list, or a headless run)")
    p.add_argument("--lang", choices=LANGS, default=None, help="narration language (default: from the locale)")
    p.add_argument("--step", type=int, default=None, help="open the app at this step (1-based, default 1)")


def pick_lang(lang: str | None) -> str:
    """The --lang given, else the locale's ('zh' for a Chinese locale, else 'en')."""
    if lang:
        return lang
    from tui.i18n import default_lang

    return default_lang()


def scene_rows(lang: str) -> list[dict[str, Any]]:
    """One row per shipped scene, in play order: number, id, title and the claim ids it checks."""
    return [{"number": s.number, "id": s.id, "title": s.title.get(lang), "claims": list(s.claims)}
            for s in load_shipped()]


def print_list(lang: str) -> None:
    """The scenes as a Rich table."""
    from rich.table import Table

    t = Table(title="tokensim guided scenes" if lang == "en" else "tokensim 导览场景", header_style="bold")
    for col in ("#", "id", "title" if lang == "en" else "标题", "claims"):
        t.add_column(col, justify="right" if col == "#" else "left")
    for r in scene_rows(lang):
        t.add_row(str(r["number"]), r["id"], r["title"], " ".join(r["claims"]))
    out = console()
    out.print(t)
    out.print("tokensim scene ID  ·  tokensim scene ID --headless  ·  tokensim tour" if lang == "en"
              else "tokensim scene 编号或 id  ·  加 --headless 不开界面播放  ·  tokensim tour 按顺序播放全部")


def play_headless(scene: Scene, lang: str) -> dict[str, Any]:
    """Play a scene without the app (the director drives a fresh engine) and return the result dict."""
    from scenes.director import Director

    return Director(scene, lang).play_headless()


def print_headless(result: dict[str, Any]) -> None:
    """Narration per step and each checkpoint's expected vs actual, as plain text."""
    from rich.markup import escape

    out = console()
    out.print(f"[bold]{escape(result['title'])}[/]  ({result['id']} · {' '.join(result['claims'])})")
    n = len(result["steps"])
    for st in result["steps"]:
        hl = f" · {st['highlight']}" if st["highlight"] else ""
        out.print(f"\n[bold]── {st['index'] + 1}/{n}{hl}[/]")
        if "question" in st:
            _print_question(st["question"], result.get("lang", "en"))
        out.print(escape(st["narration"]))
        for c in st["checkpoints"]:
            out.print(("[green]✓[/] " if c["ok"] else "[red]✗[/] ") + escape(_describe(c)))
    total = len(result["checkpoints"])
    good = sum(c["ok"] for c in result["checkpoints"])
    out.print(f"\n{'[green]' if result['ok'] else '[red]'}{good}/{total} checkpoints hold[/]")


def _print_question(q: dict[str, Any], lang: str) -> None:
    """A step's question as asked (before the step ran), then the engine's answer and why."""
    from rich.markup import escape

    from tui.i18n import t as label

    out = console()
    out.print(f"[bold cyan]? {escape(q['ask'])}[/]")
    for i, c in enumerate(q["choices"]):
        out.print(f"   {i + 1}) {escape(c)}")
    if q["correct"] < 0:
        out.print(f"[red]✗ {label(lang, 'quiz_no_answer')}: {q['metric']} = {q['value']}[/]")
        return
    fig = f" ({q['metric']} = {_num(q['value'])})" if q["metric"] else ""
    right = f"{q['correct'] + 1}) {escape(q['choices'][q['correct']])}"
    out.print(f"[green]→ {label(lang, 'quiz_answer')}: {right}[/]{fig}")
    out.print(escape(q["explain"]))


def question_line(q: dict[str, Any]) -> str:
    """One line for a tour summary: '? Compute doubles ... → 3) the same time (step_ms/before = 1)'."""
    if q["correct"] < 0:
        return f"? {q['ask']} → ✗ {q['metric']} = {q['value']}"
    fig = f" ({q['metric']} = {_num(q['value'])})" if q["metric"] else ""
    return f"? {q['ask']} → {q['correct'] + 1}) {q['choices'][q['correct']]}{fig}"


def _num(v: float | str) -> str:
    """A figure for people: text as is, big numbers with thousands separators, others to 4 significant digits."""
    if isinstance(v, str):
        return v
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:,.4g}"


def _describe(c: dict[str, Any]) -> str:
    """'C02 step_ms_ideal = 8.361 ms (expected ≈ 8.36 ±0.5%)'."""
    what = f"{c['metric']} now ÷ at '{c['vs_mark']}'" if c.get("vs_mark") else c["metric"]
    act, exp = c["actual"], c["expected"]
    act_s = "?" if act is None else _num(act)
    exp_s = _num(exp)
    op = "≈" if c["op"] == "approx" else c["op"]
    unit = f" {c['unit']}" if c.get("unit") and c["unit"] not in ("text", "x") else ""
    tol = f" {c['tolerance']}" if c.get("tolerance") else ""
    err = f": {c['error']}" if c.get("error") else ""
    return f"{c['claim']} {what} = {act_s}{unit} (expected {op} {exp_s}{tol}){err}"


def run(args: argparse.Namespace) -> int:
    lang = pick_lang(args.lang)
    if args.id is None:
        if args.headless:
            from engine.errors import InputError

            raise InputError("--headless needs a scene id (tokensim scene lists them)")
        if args.json:
            print_json(scene_rows(lang))
        else:
            print_list(lang)
        return 0
    scene = find_scene(args.id)
    if args.step is not None and (args.headless or args.json):
        from engine.errors import InputError

        raise InputError("--step opens the app at a step; a headless play runs every step: drop one")
    if args.headless or args.json:
        result = play_headless(scene, lang)
        if args.json:
            print_json(result)
        else:
            print_headless(result)
        return 0 if result["ok"] else 1
    step = 1 if args.step is None else args.step
    if not 1 <= step <= len(scene.steps):
        from engine.errors import InputError

        raise InputError(f"--step {step}: scene {scene.id} has steps 1 to {len(scene.steps)}")
    require_terminal(f"to play it without one: tokensim scene {args.id} --headless")
    from tui.scene_app import SceneApp

    return run_app(SceneApp([scene], lang=lang, step=step - 1))
