"""The ASGI app: OpenAI's completions and chat completions, /v1/models, /health, /version, /metrics.

Handlers check a request (errors are OpenAI-style JSON: {"error": {"message", "type", "param", "code"}}, as
vLLM's server answers), hand it to the driver and await its stream's events; they never touch the engine.
The simulated model never ends an answer early (no EOS): an answer is max_tokens long (so ignore_eos changes
nothing and min_tokens is only checked), or, without max_tokens, a length drawn from --output; its text is
filler (tui.api.text) with exactly the token count `usage` reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engine import validation as V
from engine.errors import InputError
from tui.api import text
from tui.api.driver import Driver, QueueFull, Stream
from tui.api.fields import ApiError, Parsed, parse_request

log = logging.getLogger("tokensim.api")
MAX_BODY_BYTES = 8 << 20  # a request body larger than this is refused (413) before it is parsed
DISCONNECT_POLL_S = 0.5  # a non-streaming request checks this often whether its client is still there
MAX_CONNECTIONS = 2048  # requests in flight at once (--max-connections); past it, OpenAI's 503 JSON
SEND_TIMEOUT_S = 10.0  # a stream whose client has not read for this long is ended and its request aborted
UNGUARDED = ("/metrics", "/health")  # answered even at the connection cap: a scrape must see the flood


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """What the app serves: the model's name, its longest request, and how answers without max_tokens are drawn."""

    model: str
    version: str
    max_model_len: int
    draw_output: Callable[[], int]
    tokens: text.Tokens
    max_body: int = MAX_BODY_BYTES
    max_connections: int = MAX_CONNECTIONS
    send_timeout: float = SEND_TIMEOUT_S


def _utf8(s: str | None) -> str | None:
    """s as UTF-8 can carry it: JSON's \\ud800 escapes decode to lone surrogates that UTF-8 cannot encode, and a
    message naming such a field (an unknown key, a model's name) would fail to encode into a 500."""
    return None if s is None else s.encode("utf-8", "backslashreplace").decode("utf-8")


def error(status: int, message: str, kind: str = "BadRequestError", param: str | None = None) -> JSONResponse:
    """An OpenAI-style error body with its HTTP status."""
    return JSONResponse({"error": {"message": _utf8(message), "type": kind, "param": _utf8(param), "code": status}},
                        status_code=status)


async def _read_json(request: Request, limit: int) -> Any:
    """The body as JSON, refusing one over `limit` bytes as soon as it is (never buffering more)."""
    chunks, size = [], 0
    async for c in request.stream():
        size += len(c)
        if size > limit:
            raise ApiError(413, f"request body is over {limit:,} bytes", "RequestTooLargeError")
        chunks.append(c)
    try:
        text = b"".join(chunks).decode("utf-8")
        V.check_json_depth(text, "request body")  # the validation layer's bound: json would recurse past it
        return json.loads(text)
    except InputError as e:
        raise ApiError(400, str(e)) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"request body is not valid JSON ({e})") from None


class _Chunks:
    """The JSON of one request's stream chunks, with the constant parts formatted once."""

    def __init__(self, chat: bool, rid: str, model: str) -> None:
        self.chat = chat
        obj = "chat.completion.chunk" if chat else "text_completion"
        self.head = json.dumps({"id": rid, "object": obj, "created": int(time.time()), "model": model})[:-1]
        self._cache: dict[str, str] = {}

    def token(self, j: int) -> str:
        """The SSE event of answer token j (one filler word): formatted once per word and stream, since a
        stream sends hundreds of them and 1,000 streams share the server's one core."""
        w = text.filler(j, 1)
        ev = self._cache.get(w)
        if ev is None:
            ev = self._cache[w] = self.piece(w)
        return ev

    def piece(self, words: str, finish: str | None = None, role: bool = False) -> str:
        """An SSE event carrying `words` (and a finish reason on the last)."""
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": words} if role else {"content": words}
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": words, "logprobs": None, "finish_reason": finish}
        return f"data: {self.head}, \"choices\": [{json.dumps(choice)}]}}\n\n"

    def usage(self, prompt: int, output: int) -> str:
        """The closing chunk with usage (stream_options.include_usage): no choices."""
        u = json.dumps(_usage(prompt, output))
        return f"data: {self.head}, \"choices\": [], \"usage\": {u}}}\n\n"


def _usage(prompt: int, output: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output}


async def _sse(driver: Driver, s: Stream, p: Parsed, rid: str, model: str) -> AsyncIterator[str]:
    """One token per event as the engine makes them; if the client goes away first, the request is aborted."""
    ch = _Chunks(p.chat, rid, model)
    sent, ended = 0, False
    try:
        if p.chat:
            yield ch.piece("", role=True)
        while True:
            if not s.done:
                await s.event.wait()
                s.event.clear()
            upto = s.total - 1 if s.done else s.gen  # the last token goes out with the finish reason
            if upto > sent:  # the tokens of the steps since the last wake (one, unless this stream lags), in one write
                yield "".join(ch.token(j) for j in range(sent, upto))
            sent = max(sent, upto)
            if s.done:
                break
        yield ch.piece(text.filler(sent, s.total - sent), p.finish)
        if p.include_usage:
            yield ch.usage(p.prompt_tokens, s.total)
        yield "data: [DONE]\n\n"
        ended = True
    finally:
        if not ended:
            driver.abort(s)


class SlowClient(Exception):
    """A stream's client stopped reading: its socket's buffers stayed full past the send timeout."""


class _Sse(StreamingResponse):
    """A token stream whose writes wait at most `timeout` seconds for the client to make room. A client that
    never reads fills the kernel's and uvicorn's buffers, then uvicorn's flow control holds each write: past the
    timeout the stream ends (its generator is closed, so its request leaves the engine and frees its KV) and
    uvicorn closes the connection. Other streams never wait on it: each has its own task and buffers."""

    def __init__(self, content: AsyncIterator[str], timeout: float) -> None:
        super().__init__(content, media_type="text/event-stream")
        self.timeout = timeout

    async def stream_response(self, send: Callable[[Any], Any]) -> None:
        async def timed(message: Any) -> None:
            try:
                async with asyncio.timeout(self.timeout):  # (a timer handle, no task: 1,000 streams send a lot)
                    await send(message)
            except TimeoutError:
                raise SlowClient from None

        try:
            await super().stream_response(timed)
        except SlowClient:
            log.warning("a client read nothing for %g s: its stream is ended and its request aborted", self.timeout)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]  # (our generator: runs _sse's finally)


async def _whole(request: Request, driver: Driver, s: Stream) -> bool:
    """Wait for the whole answer; False (and the request aborted) if the client left first."""
    try:
        while not s.done:
            s.event.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(s.event.wait(), DISCONNECT_POLL_S)
            if not s.done and await request.is_disconnected():
                driver.abort(s)
                return False
    except asyncio.CancelledError:
        driver.abort(s)
        raise
    return True


def _body(p: Parsed, rid: str, model: str, output: int) -> dict[str, Any]:
    """A non-streaming answer."""
    words = text.filler(0, output)
    if p.chat:
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": words},
                                  "logprobs": None, "finish_reason": p.finish}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": words, "logprobs": None, "finish_reason": p.finish}
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": int(time.time()), "model": model, "choices": [choice],
            "usage": _usage(p.prompt_tokens, output)}


async def _generate(request: Request, chat: bool, driver: Driver, spec: ServerSpec, replica: int | None) -> Response:
    """Check a request, queue it in the engine (on `replica`, or where the router sends it), and answer it as a
    stream or whole (or refuse it)."""
    try:
        body = await _read_json(request, spec.max_body)
        p = parse_request(body, chat, spec.model, spec.max_model_len, spec.tokens, spec.draw_output)
        blocks = text.block_hashes(p.units, driver.block_tokens)
        s = driver.submit(p.prompt_tokens, p.output, blocks=blocks, replica=replica)
    except ApiError as e:
        return error(e.status, e.message, e.kind, e.param)
    except QueueFull:
        return error(503, f"the waiting queue is full ({driver.max_waiting} requests): try again later",
                     "ServiceUnavailableError")
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{s.rid}"
    if p.stream:
        return _Sse(_sse(driver, s, p, rid, spec.model), spec.send_timeout)
    if not await _whole(request, driver, s):
        return Response(status_code=499)  # nobody is there to read it (nginx's "client closed request")
    return JSONResponse(_body(p, rid, spec.model, s.total))


def build_app(driver: Driver, spec: ServerSpec, replica: int | None = None) -> Starlette:
    """The Starlette app serving `driver`'s engine: the whole fleet behind its router, the driver's task running
    for the app's lifetime; or (`replica` i) replica i alone, with its own /metrics, while the fleet's app (which
    must be served too) runs the driver."""
    registry = driver.metrics if replica is None else driver.replica_metrics[replica]

    async def completions(request: Request) -> Response:
        return await _generate(request, False, driver, spec, replica)

    async def chat(request: Request) -> Response:
        return await _generate(request, True, driver, spec, replica)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": spec.model, "object": "model", "created": 0, "owned_by": "tokensim", "root": spec.model,
             "max_model_len": spec.max_model_len}]})

    async def health(request: Request) -> Response:
        alive = driver.task is not None and not driver.task.done()
        return Response(status_code=200 if alive else 503)

    async def version(request: Request) -> Response:
        return JSONResponse({"version": spec.version})

    async def metrics(request: Request) -> Response:
        return Response(registry.exposition(), media_type=CONTENT_TYPE_LATEST)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = {404: "NotFoundError", 405: "MethodNotAllowedError"}.get(exc.status_code, "BadRequestError")
        return error(exc.status_code, str(exc.detail), kind)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # anyio (Starlette's async layer) loads its asyncio backend on first use, ~150 ms of imports: do it now,
        # or the first request's stream would stall the engine's clock by that much.
        await anyio.sleep(0)
        if replica is not None:  # the fleet's app runs the driver
            yield
            return
        task = driver.task = asyncio.create_task(driver.run())
        task.add_done_callback(_report_crash)
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    routes = [Route("/v1/completions", completions, methods=["POST"]),
              Route("/v1/chat/completions", chat, methods=["POST"]),
              Route("/v1/models", models), Route("/health", health), Route("/version", version),
              Route("/metrics", metrics)]
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error},
                     middleware=[Middleware(Guard, limit=spec.max_connections, driver=driver)])


class Guard:
    """At most `limit` requests in flight (a stream counts until it ends); the next is answered at once with
    OpenAI's 503 JSON. uvicorn's own cap (limit_concurrency, set above this one) would answer plain text, which
    OpenAI clients cannot read. /metrics and /health are always answered."""

    def __init__(self, app: Any, limit: int, driver: Driver) -> None:
        self.app, self.limit, self.driver = app, limit, driver
        self.active = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in UNGUARDED:
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            self.driver.rejected += 1
            refusal = error(503, f"the server has {self.limit:,} requests in flight, its cap (--max-connections):"
                                 " try again later", "ServiceUnavailableError")
            await refusal(scope, receive, send)
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1


def _report_crash(task: asyncio.Task[None]) -> None:
    """The driver task must never end while serving: say why if it does (/health then answers 503)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("the engine driver stopped: %r", task.exception())
