"""serve-api request bodies, structure-aware (issue 30): OpenAI-shaped completions and chat bodies with every field
sometimes right and sometimes wrong (types, unknown fields, huge and negative numbers, nested junk, unicode, empty
messages, n > 1, stream variants), plus raw bytes that are not JSON at all.

The contract: every body gets 200 with a well-formed answer, or a 4xx with an OpenAI-style error JSON; never a
500. Afterwards the engine's invariants hold (every accepted request is done, running or queued: Lane.check).
The app runs in-process through Starlette's TestClient (no sockets), its engine at 100,000x real time so answers
end in milliseconds. CI runs a small fixed budget; TOKENSIM_FUZZ_EXAMPLES=N runs N.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.harness import examples
from tests.tui.api_server import need

MODEL = "generic-14b"
MAX_LEN = 2048

JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10 ** 30), max_value=10 ** 30)
    | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8)
COUNT = st.one_of(st.integers(1, 64), st.integers(-5, 0), st.integers(MAX_LEN - 8, MAX_LEN + 8),
                  st.integers(10 ** 18, 10 ** 40), st.floats(allow_nan=False), st.sampled_from(["8", True, None]))
LONE = st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3)  # lone surrogates: JSON allows them
TEXT = st.text(max_size=40) | LONE | st.sampled_from(["", "\x00", "\u202e\u200b", "\ud7ff" * 3, "x" * 9000, "é" * 50])
PART = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", 5])}, optional={"text": TEXT | JUNK})
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant", "tool", ""]) | JUNK},
    optional={"content": TEXT | st.lists(PART | JUNK, max_size=3) | JUNK, "name": JUNK})
FIELDS = {
    "model": st.sampled_from([MODEL, "gpt-4", "", None]) | LONE | JUNK,
    "max_tokens": COUNT, "max_completion_tokens": COUNT, "min_tokens": COUNT, "n": COUNT,
    "stream": st.booleans() | JUNK,
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans() | JUNK}) | JUNK,
    "ignore_eos": st.booleans() | JUNK, "echo": st.booleans() | JUNK,
    "temperature": st.floats(allow_nan=False) | JUNK, "stop": JUNK, "logprobs": JUNK, "seed": COUNT,
}


def _valid(chat: bool) -> st.SearchStrategy[dict[str, Any]]:
    """A body the server should answer: a real prompt or conversation and well-typed fields in range."""
    part = st.fixed_dictionaries({"type": st.just("text"), "text": TEXT})
    msgs = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant"]),
                                           "content": TEXT | st.lists(part, max_size=2)}), min_size=1, max_size=3)
    prompt = st.text(min_size=1, max_size=60) | st.lists(st.integers(0, 200_000), min_size=1, max_size=8)
    ok = {"model": st.just(MODEL), "max_tokens": st.integers(1, 64), "stream": st.booleans(), "n": st.just(1),
          "temperature": st.floats(0, 2), "min_tokens": st.integers(0, 1), "ignore_eos": st.booleans(),
          "seed": st.integers(0, 2 ** 31)}
    body = st.fixed_dictionaries({"messages": msgs} if chat else {"prompt": prompt}, optional=ok)
    usage = st.none() | st.booleans()
    return st.tuples(body, usage).map(
        lambda t: {**t[0], "stream_options": {"include_usage": t[1]}} if t[0].get("stream") and t[1] is not None
        else t[0])


def _body(chat: bool) -> st.SearchStrategy[Any]:
    """A request body: mostly a valid one with a field or two broken (a wrong type, an unknown name, a huge or
    negative number, junk), else fields drawn wild, or not an object at all."""
    head = ({"messages": st.lists(MESSAGE, max_size=4) | JUNK} if chat else
            {"prompt": TEXT | st.lists(st.integers(-3, 2 ** 40), max_size=6) | st.lists(TEXT, max_size=2) | JUNK})
    names = sorted(FIELDS) + ["bogus", "Max_Tokens", "\u00e9", "\udc80", "prompt" if chat else "messages",
                              "max_completion_tokens"]
    broken = st.dictionaries(st.sampled_from(names), JUNK | COUNT, min_size=1, max_size=2)
    known = st.fixed_dictionaries(head, optional=FIELDS)
    return st.one_of(_valid(chat), st.tuples(_valid(chat), broken).map(lambda t: {**t[0], **t[1]}), known, JUNK)


RAW = st.binary(max_size=40) | st.sampled_from([b"", b"{", b"[" * 5000, b"\xff\xfe{}", b'{"prompt": "a"}' * 2,
                                                b'{"prompt": "a", "max_tokens": 1e400}',
                                                # lone surrogates, echoed in the error: were a 500 (regression)
                                                b'{"prompt": "a", "model": "\\ud800"}', b'{"\\udfff": 1}'])


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Any, Any]]:
    need("httpx")
    from starlette.testclient import TestClient

    from tui.cli import build_parser
    from tui.commands import serve_api_cmd

    words = ["serve-api", "--time-scale", "100000", "--max-model-len", str(MAX_LEN), "--output", "4",
             "--log-level", "error"]
    app, driver = serve_api_cmd.build(build_parser(words).parse_args(words))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, driver


def _holds(status: int, text: str, stream: bool) -> None:
    """200 with an answer, or a 4xx OpenAI error body."""
    assert status != 500 and status < 600, f"{status}: {text[:300]}"
    if status == 200:
        if stream:
            assert text.rstrip().endswith("data: [DONE]"), text[-200:]
        else:
            assert json.loads(text)["choices"][0]["finish_reason"] in ("length", "stop")
        return
    assert 400 <= status < 500, f"{status}: {text[:300]}"
    err = json.loads(text)["error"]
    assert isinstance(err["message"], str) and err["message"] and err["code"] == status


SETTINGS = settings(max_examples=examples(40), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
@SETTINGS
@given(data=st.data())
def test_every_body_gets_an_answer_or_a_4xx(served: tuple[Any, Any], chat: bool, data: st.DataObject) -> None:
    client, driver = served
    url = "/v1/chat/completions" if chat else "/v1/completions"
    if data.draw(st.integers(0, 9)) == 0:
        r = client.post(url, content=data.draw(RAW), headers={"content-type": "application/json"})
        _holds(r.status_code, r.text, False)
    else:
        body = data.draw(_body(chat))
        r = client.post(url, content=json.dumps(body).encode())
        _holds(r.status_code, r.text, isinstance(body, dict) and body.get("stream") is True)
    driver.live.check()
