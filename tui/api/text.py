"""Prompt token counts and answer text for the simulated server.

Counting: with `tokenizers` installed and a tokenizer.json given (--tokenizer), the count is that tokenizer's;
otherwise it is estimated as one token per 4 bytes of UTF-8 text, rounded up: OpenAI's rule of thumb for
English ("one token generally corresponds to ~4 characters of common English text", OpenAI help center, "What
are tokens and how to count them?"). Chat messages add a few tokens each for the chat template's role markers
(OpenAI's cookbook "How to count tokens with tiktoken" counts 3 per message and 3 to prime the reply; vLLM's
templates for Llama/Qwen add a similar handful), so the estimate adds CHAT_PER_MESSAGE per message and
CHAT_REPLY once. Answers are filler: common short English words, each one token in GPT-2/Llama-style BPE
vocabularies, so the text has the token count `usage` reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

BYTES_PER_TOKEN = 4  # the estimate's rule (module docstring)
CHAT_PER_MESSAGE = 3  # role markers around each message
CHAT_REPLY = 3  # the assistant turn's opening
_WORDS = (" the", " of", " and", " to", " in", " a", " is", " that", " for", " it", " on", " with", " as",
          " was", " at", " by", " this", " be", " are", " from")


def estimate(text: str) -> int:
    """Tokens of `text` by the 4-bytes rule (at least 1 for non-empty text)."""
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / BYTES_PER_TOKEN)


def load_counter(path: str | None) -> Callable[[str], int]:
    """The token counter: a tokenizer.json's (needs the `tokenizers` package) or the estimate."""
    if path is None:
        return estimate
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise ValueError("--tokenizer needs the `tokenizers` package (pip install tokenizers)") from e
    try:
        tok = Tokenizer.from_file(path)
    except Exception as e:  # the library raises its own exception types for unreadable files
        raise ValueError(f"--tokenizer {path}: cannot load it ({e})") from e
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def chat_prompt(messages: list[dict[str, Any]], count: Callable[[str], int]) -> tuple[int, str, int, str]:
    """A chat's prompt: (tokens, the whole text, tokens of every message but the last, their text). The
    leading messages are what consecutive requests of one conversation (or one system prompt) share."""
    parts = [f"{m.get('role', '')}\n{_content(m.get('content'))}" for m in messages]
    sizes = [count(p) + CHAT_PER_MESSAGE for p in parts]
    head = "\x00".join(parts[:-1])
    return sum(sizes) + CHAT_REPLY, "\x00".join(parts), sum(sizes[:-1]), head


def _content(c: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "".join(p.get("text", "") for p in c if isinstance(p, dict))
    return ""


def filler(start: int, k: int) -> str:
    """Tokens start..start+k-1 of an answer: one short word per token, the same words for the same positions."""
    n = len(_WORDS)
    return "".join(_WORDS[(start + j) % n] for j in range(k))
