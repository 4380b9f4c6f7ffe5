"""`tokensim serve-api`: an OpenAI-compatible HTTP server whose answers are timed by the engine (issue 29).

The shape (DESIGN.md, "the front door"): handlers (app.py) only check a request, hand it to the driver and
await its token events; the driver (driver.py) is ONE asyncio task that moves engine.serving.live's engine to
the wall clock's reading and wakes each request's stream when its tokens exist; /metrics (metrics.py) are
Prometheus collectors reading that engine's state under vLLM's metric names. Needs the `api` extra
(uvicorn, starlette, prometheus_client).
"""
