"""The languages the project speaks and the words for the engine's own text figures in each.

Shared by the scenes (narration fills a text metric such as `decode_bound` with these words) and the app
(tui.i18n takes the same words for its labels), so the floor and the narration never name a thing twice.
"""

from __future__ import annotations

LANGS = ("en", "zh")

# How a roofline term (StepCost.bound; "idle" when no step ran) reads in each language.
BOUND_WORDS: dict[str, dict[str, str]] = {
    "en": {"memory": "memory", "compute": "compute", "idle": "idle"},
    "zh": {"memory": "内存", "compute": "算力", "idle": "空闲"},
}


def bound_word(lang: str, bound: str) -> str:
    """`bound` ('memory', 'compute', 'idle') in `lang`; any other text comes back unchanged."""
    return BOUND_WORDS.get(lang, BOUND_WORDS["en"]).get(bound, bound)
