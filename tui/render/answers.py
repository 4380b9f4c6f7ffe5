"""The answers users see stream out: a request's visible tokens map to words (en) or characters (zh)
of a small built-in corpus, starting at a sentence picked by request id, so text is deterministic."""

from __future__ import annotations

from functools import cache
from importlib import resources

from rich.cells import cell_len


@cache
def corpus(lang: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(tokens, sentence start indices) of tui/corpus/<lang>.txt; en tokens are words, zh characters."""
    name = "zh" if lang == "zh" else "en"
    text = resources.files("tui").joinpath("corpus", f"{name}.txt").read_text(encoding="utf-8")
    tokens: list[str] = []
    starts: list[int] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        starts.append(len(tokens))
        if name == "zh":
            for ch in line:
                if not ch.isspace():
                    tokens.append(ch)
                    if ch in "。！？":
                        starts.append(len(tokens))
        else:
            for word in line.split():
                tokens.append(word)
                if word.endswith((".", "!", "?")):
                    starts.append(len(tokens))
    n = len(tokens)
    return tuple(tokens), tuple(sorted({s for s in starts if s < n}))


def answer_tail(lang: str, req_id: int, visible: int, width: int) -> str:
    """The end of request `req_id`'s answer after `visible` tokens: the last at most `width` cells of it."""
    if visible <= 0 or width <= 0:
        return ""
    tokens, starts = corpus(lang)
    n = len(tokens)
    start = starts[(req_id * 7919) % len(starts)]  # a prime stride spreads requests over the sentences
    zh = lang == "zh"
    # Walk back from the newest token only as far as the width needs (a row shows ~15 words, not 600).
    picked: list[str] = []
    used = 0
    for i in range(visible - 1, -1, -1):
        tok = tokens[(start + i) % n]
        w = cell_len(tok) if zh else len(tok) + (1 if picked else 0)  # en corpus is ASCII, joined by spaces
        if used + w > width:
            room = width - used - (0 if zh or not picked else 1)
            if room > 0 and not zh:
                picked.append(tok[-room:])  # a partly visible word at the left edge
            break
        picked.append(tok)
        used += w
    picked.reverse()
    return "".join(picked) if zh else " ".join(picked)
