"""Checking a completions or chat completions request body: what it asks for, or an ApiError with its status.

Fields the OpenAI API defines and a simulated answer cannot honour (sampling, stop strings, logprobs, tools)
are accepted and ignored, as they change which tokens come out, not how many or when; any other field is a
400, so a typo never passes silently. n must be 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tui.api import text

# Accepted and ignored: they change the words, not their number or timing.
_IGNORED = frozenset({
    "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "logprobs", "top_logprobs", "user", "logit_bias", "best_of",
    "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output", "response_format",
    "tools", "tool_choice", "parallel_tool_calls", "add_generation_prompt", "chat_template", "chat_template_kwargs",
    "add_special_tokens", "request_id", "priority", "metadata", "store", "service_tier", "reasoning_effort",
    "length_penalty", "use_beam_search", "truncate_prompt_tokens", "continue_final_message", "documents",
    "echo_prompt", "modalities", "prediction", "web_search_options", "audio", "guided_json", "guided_regex",
    "guided_choice", "guided_grammar", "structured_outputs", "extra_body", "cache_salt", "stream_interval",
})
_COMMON = frozenset({"model", "max_tokens", "stream", "stream_options", "n", "ignore_eos", "min_tokens"})
_CHAT = _COMMON | {"messages", "max_completion_tokens"} | _IGNORED
_COMPLETION = _COMMON | {"prompt", "echo", "suffix"} | _IGNORED


class ApiError(Exception):
    """A request the server refuses: HTTP status, message, OpenAI error type, the offending field."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param


@dataclass(frozen=True, slots=True)
class Parsed:
    """What a valid request asks the engine for, and how to answer it."""

    chat: bool
    prompt_tokens: int
    output: int
    stream: bool
    include_usage: bool
    finish: str  # "length" (max_tokens reached) or "stop" (a drawn length: the answer ended by itself)
    units: bytes  # the prompt's token string (tui.api.text: UNIT bytes per token), for prefix-cache keys


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param)


def _int(body: dict[str, Any], name: str, lo: int) -> int | None:
    """An optional whole-number field of at least lo (bools are not numbers here)."""
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(name, f"{name} must be an integer, got {json_type(v)}")
    if v < lo:
        raise _bad(name, f"{name} must be at least {lo}, got {v}")
    return v


def _bool(body: dict[str, Any], name: str) -> bool:
    v = body.get(name, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise _bad(name, f"{name} must be a boolean, got {json_type(v)}")
    return v


def json_type(v: Any) -> str:
    """A JSON value's type name, for messages."""
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object",
            type(None): "null"}.get(type(v), type(v).__name__)


def _prompt(body: dict[str, Any], chat: bool, tokens: text.Tokens) -> tuple[int, Callable[[], bytes]]:
    """(prompt tokens, its token string when asked) of a chat's messages or a completion's prompt."""
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise _bad("messages", "messages must be a non-empty array of messages")
        for m in msgs:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) \
                    or not isinstance(m.get("content", ""), (str, list, type(None))):
                raise _bad("messages", "each message must be an object with a string role and string content")
        n, units = text.chat_prompt(msgs, tokens)
        return n, lambda: units
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
        p = p[0]  # a batch of one prompt
    if isinstance(p, str) and p:
        units = tokens.units(p)
        return len(units) // text.UNIT, lambda: units
    if isinstance(p, list) and p and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in p):
        ids = p  # token ids: the exact count, and (once the request is known to fit) the tokens themselves
        return len(ids), lambda: b"".join((x & 0xFFFFFFFF).to_bytes(text.UNIT, "little") for x in ids)
    raise _bad("prompt", "prompt must be a non-empty string or array of token ids (one prompt per request)")


def parse_request(body: Any, chat: bool, model: str, max_len: int, tokens: text.Tokens,
                  draw_output: Callable[[], int]) -> Parsed:
    """Check a request body against the API and the server's limits (ApiError), and say what it asks for."""
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {json_type(body)}")
    unknown = sorted(set(body) - (_CHAT if chat else _COMPLETION))
    if unknown:
        raise _bad(unknown[0], f"unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}")
    if body.get("model") is not None and body.get("model") != model:
        raise ApiError(404, f"the model `{body.get('model')}` does not exist (this server serves `{model}`)",
                       "NotFoundError", "model")
    n = _int(body, "n", 1)
    if n not in (None, 1):
        raise _bad("n", f"n must be 1 (one answer per request), got {n}")
    for name in ("echo",):
        if _bool(body, name):
            raise _bad(name, f"{name} is not supported by the simulated server")
    stream, _ = _bool(body, "stream"), _bool(body, "ignore_eos")
    so = body.get("stream_options")
    if so is not None and (not isinstance(so, dict) or not isinstance(so.get("include_usage", False), bool)):
        raise _bad("stream_options", "stream_options must be an object with a boolean include_usage")
    if so is not None and not stream:
        raise _bad("stream_options", "stream_options is only allowed when stream is true")
    mt = _int(body, "max_tokens", 1)
    if chat and mt is None:
        mt = _int(body, "max_completion_tokens", 1)
    min_t = _int(body, "min_tokens", 0)
    if min_t is not None and mt is not None and min_t > mt:
        raise _bad("min_tokens", f"min_tokens ({min_t}) must not exceed max_tokens ({mt})")
    prompt, units = _prompt(body, chat, tokens)
    room = max_len - prompt
    if room < 1:
        raise _bad("messages" if chat else "prompt", f"the prompt is {prompt:,} tokens but this model's context is "
                   f"{max_len:,} tokens, answer included: shorten the prompt")
    if mt is not None and mt > room:
        raise _bad("max_tokens", f"max_tokens {mt:,} plus the prompt's {prompt:,} tokens is more than this model's"
                   f" context of {max_len:,} tokens: ask for at most {room:,}")
    output = mt if mt is not None else max(min(draw_output(), room), min(min_t or 1, room))
    return Parsed(chat, prompt, output, stream, bool(so and so.get("include_usage")),
                  "length" if mt is not None else "stop", units())
