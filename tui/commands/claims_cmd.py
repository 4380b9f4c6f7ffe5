"""`tokensim claims`: every claim of the articles, the article's figure beside the engine's."""

from __future__ import annotations

import argparse

from rich.table import Table

from engine.errors import InputError, suggest
from engine.evidence.claims import CLAIM_IDS, compute
from tui.commands.options import console, print_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    every = f"{CLAIM_IDS[0]}..{CLAIM_IDS[-1]}"
    p.add_argument("ids", nargs="*", metavar="ID", help=f"claim ids to check (default: all, {every})")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    ids = [i.upper() for i in args.ids]
    for i in ids:
        if i not in CLAIM_IDS:
            raise InputError(f"unknown claim '{i}'{suggest(i, list(CLAIM_IDS))}")
    rows = compute(ids or None)
    if args.json:
        print_json(rows)
        return 0
    t = Table(title="The articles' claims, recomputed", header_style="bold", show_lines=False)
    t.add_column("id", no_wrap=True)
    t.add_column("claim")
    t.add_column("article", justify="right")
    t.add_column("simulated", justify="right")
    t.add_column("", no_wrap=True)
    t.add_column("why they differ / how it is computed", style="dim")
    for r in rows:
        mark = "[yellow]pending[/]" if r["pending"] else ("[green]agrees[/]" if r["agrees"] else "[red]differs[/]")
        t.add_row(r["id"], r["claim"], r["article_text"], r["simulated_text"], mark, r.get("note", ""))
    console().print(t)
    if args.ids:
        for r in rows:
            if r.get("sensitivity"):
                _sensitivity(r)
    n_ok = sum(1 for r in rows if r["agrees"])
    n_pending = sum(1 for r in rows if r["pending"])
    console().print(f"{n_ok} agree, {len(rows) - n_ok - n_pending} differ, {n_pending} pending")
    return 0


def _sensitivity(r: dict[str, object]) -> None:
    """A claim's sensitivity table (C26): the ratio as one assumption moves at a time."""
    t = Table(title=f"{r['id']}: one assumption at a time", header_style="bold")
    for col in ("varied", "value", "active params", "GPU-ms / served token", "serving MFU", "training tokens",
                "x Chinchilla"):
        t.add_column(col, justify="left" if col in ("varied", "value") else "right")
    sens = r["sensitivity"]
    assert isinstance(sens, dict)
    for axis, rows in sens.items():
        for x in rows:
            if axis == "volume":
                value = f"{x['served']:.0e} {x['reading']}"
            elif axis == "model":
                value = f"{x['model']} on {x['gpus']} GPUs"
            else:
                value = f"{x[axis]}"
            if not x["kv_fits"]:
                value += " (KV does not fit)"
            t.add_row(axis, value, f"{x['params_active'] / 1e9:.1f}B", f"{x['serve_gpu_s_per_token'] * 1e3:.3f}",
                      f"{x['serve_mfu']:.1%}", f"{x['train_tokens']:.2e}", f"{x['chinchilla_x']:,.0f}")
    console().print(t)
