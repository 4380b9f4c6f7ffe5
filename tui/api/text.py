"""Prompt token counts and answer text for the simulated server.

Counting: with `tokenizers` installed and a tokenizer.json given (--tokenizer), the count is that tokenizer's;
otherwise it is estimated as one token per 4 bytes of UTF-8 text, rounded up: OpenAI's rule of thumb for
English ("one token generally corresponds to ~4 characters of common English text", OpenAI help center, "What
are tokens and how to count them?"). Chat messages add a few tokens each for the chat template's role markers
(OpenAI's cookbook "How to count tokens with tiktoken" counts 3 per message and 3 to prime the reply; vLLM's
templates for Llama/Qwen add a similar handful), so the estimate adds CHAT_PER_MESSAGE per message and
CHAT_REPLY once. Answers are filler: common short English words, each one token in GPT-2/Llama-style BPE
vocabularies, so the text has the token count `usage` reports.

Prefix caching needs the tokens themselves, not only their count: a prompt is also written as a token string,
UNIT bytes per token (a tokenizer's ids; or, estimated, the text's UTF-8 bytes in 4-byte chunks, the last
padded with a byte UTF-8 never uses; a chat message's role markers as marker units), so its length is always
UNIT x its token count. block_hashes cuts it into KV blocks and chains each block's hash with its parent's, as
vLLM's automatic prefix caching does: two prompts share the hashes of exactly the leading blocks whose tokens
agree.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

BYTES_PER_TOKEN = 4  # the estimate's rule (module docstring)
CHAT_PER_MESSAGE = 3  # role markers around each message
CHAT_REPLY = 3  # the assistant turn's opening
_WORDS = (" the", " of", " and", " to", " in", " a", " is", " that", " for", " it", " on", " with", " as",
          " was", " at", " by", " this", " be", " are", " from")


UNIT = 4  # bytes per token in a token string
_PAD = b"\xff"  # pads an estimated text's last unit (never a byte of UTF-8)


class Tokens(NamedTuple):
    """How prompts are tokenized: their token count, and their token string (UNIT bytes per token)."""

    count: Callable[[str], int]
    units: Callable[[str], bytes]


def estimate(text: str) -> int:
    """Tokens of `text` by the 4-bytes rule (at least 1 for non-empty text)."""
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / BYTES_PER_TOKEN)


def estimate_units(text: str) -> bytes:
    """The estimated token string of `text`: its UTF-8 bytes, padded to whole 4-byte tokens (estimate's count)."""
    b = text.encode("utf-8", "surrogatepass")
    return b + _PAD * (-len(b) % UNIT)


def load_tokens(path: str | None) -> Tokens:
    """Counting and token strings: a tokenizer.json's (needs the `tokenizers` package) or the estimate's."""
    if path is None:
        return Tokens(estimate, estimate_units)
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise ValueError("--tokenizer needs the `tokenizers` package (pip install tokenizers)") from e
    try:
        tok = Tokenizer.from_file(path)
    except Exception as e:  # the library raises its own exception types for unreadable files
        raise ValueError(f"--tokenizer {path}: cannot load it ({e})") from e

    def ids(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    return Tokens(lambda text: len(ids(text)), lambda text: np.asarray(ids(text), dtype="<u4").tobytes())


def _marker(role: str, k: int) -> bytes:
    """The k-th chat-template marker unit of a `role` message (a byte no text unit starts with, then the role)."""
    return bytes([0xFE, k]) + role.encode("utf-8", "surrogatepass")[:2].ljust(2, b"\x00")


def block_hashes(units: bytes, block_tokens: int) -> np.ndarray:
    """One hash per full KV block of a token string (`block_tokens` tokens of UNIT bytes): each block's is the
    hash of its parent's and its own tokens (blake2b, 8 bytes), so equal hashes mean equal token prefixes."""
    size = block_tokens * UNIT
    n = len(units) // size
    out = np.empty(n, dtype=np.uint64)
    parent = b""
    for i in range(n):
        parent = hashlib.blake2b(parent + units[i * size:(i + 1) * size], digest_size=8).digest()
        out[i] = int.from_bytes(parent, "little")
    return out


def chat_prompt(messages: list[dict[str, Any]], tokens: Tokens) -> tuple[int, bytes]:
    """A chat's prompt: its tokens and its token string (each message's role markers, then its text; the
    reply's opening last). Consecutive requests of one conversation share the string up to their last turn."""
    parts = [(str(m.get("role", "")), f"{m.get('role', '')}\n{_content(m.get('content'))}") for m in messages]
    units = b"".join(b"".join(_marker(role, k) for k in range(CHAT_PER_MESSAGE)) + tokens.units(p)
                     for role, p in parts) + b"".join(_marker("", 0x80 + k) for k in range(CHAT_REPLY))
    return len(units) // UNIT, units


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
