"""`tokensim tour`: every guided scene in order, in the app (→ next step, then the next scene; ← back).

With --headless the scenes are played without the app and one line per scene says whether its
checkpoints hold (exit 1 if any fails); --json prints every scene's full result.
"""

from __future__ import annotations

import argparse

from scenes.schema import find_scene, load_shipped
from scenes.words import LANGS
from tui.commands.options import console, print_json, require_terminal, run_app
from tui.commands.scene_cmd import pick_lang, play_headless, question_line


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lang", choices=LANGS, default=None, help="narration language (default: from the locale)")
    p.add_argument("--start", default=None, help="begin at this scene (id or number) instead of the first")
    p.add_argument("--headless", action="store_true", help="play every scene without the app and summarise")
    p.add_argument("--json", action="store_true", help="with --headless: every scene's result as JSON")


def run(args: argparse.Namespace) -> int:
    lang = pick_lang(args.lang)
    scenes = load_shipped()
    start = 0
    if args.start is not None:
        first = find_scene(args.start)
        start = next(i for i, s in enumerate(scenes) if s.id == first.id)
    if args.headless or args.json:
        results = [play_headless(s, lang) for s in scenes[start:]]
        if args.json:
            print_json(results)
        else:
            from rich.markup import escape

            out = console()
            for r in results:
                good = sum(c["ok"] for c in r["checkpoints"])
                mark = "[green]✓[/]" if r["ok"] else "[red]✗[/]"
                out.print(f"{mark} {r['id']:<28} {good}/{len(r['checkpoints'])} checkpoints  {' '.join(r['claims'])}")
                for st in r["steps"]:
                    if "question" in st:
                        out.print("    " + escape(question_line(st["question"])), soft_wrap=True)
        return 0 if all(r["ok"] for r in results) else 1
    require_terminal("to play it without one: tokensim tour --headless")
    from tui.scene_app import SceneApp

    return run_app(SceneApp(scenes, lang=lang, scene=start))
