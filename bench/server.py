"""The application under benchmark, with its baselines, in a process of its own.

``build_app`` with two extra routes behind the same authentication:

- ``GET /bench/bare?n=N`` streams N prebuilt ``text`` frames from an async generator
  (the baseline "emitting the same frames"; ``&rate=R``: R a second, the paced floor);
- ``GET /bench/batched?n=N`` relays the stand-in's ``fast N`` stream (``&rate=R``: its
  ``paced N R`` stream, the paced streams' baseline) with httpx, one msgspec
  decode per line and the frames of one upstream read joined into one write (``b"".join``):
  the baseline of record, a relay that batches its writes as a turn does;
- ``GET /bench/relay?n=N`` the same relay growing its write with ``+=`` (information: the
  baseline of the first benchmarks).

Served by uvicorn (uvloop, httptools), pinned to one core::

    python -m bench.server --port P --ollama http://127.0.0.1:Q --data DIR [--cpu 0]
        [--state-url postgresql://…] [--memory edge] [--gc-log PATH]
        [--slack API_URL]   (the Slack bridge on, against the stand-in at API_URL)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import msgspec
import uvicorn
from litestar import get
from litestar.enums import ScopeType
from litestar.response import Stream
from litestar.types import ASGIApp, Receive, Scope, Send

from bench import collector_log
from channel_http import access_log
from channel_http.app import build_app, with_cors
from channel_http.protocols import sse
from channel_http.serving import collector, switching
from channel_http.serving.accept import GreedyAccept, accept_greedily
from channel_http.serving.connections import server_options
from core.config.settings import load_settings
from core.engine.events import Text
from core.model import ChatChunk, OllamaModel

USERS = 64
#: The Slack app the ingestion benchmark's stand-in plays (bench/ingest.py signs with these).
SLACK_BOT_TOKEN = "xoxb-bench-0000-bot-token"
SLACK_SIGNING_SECRET = "bench-signing-secret"
TOKEN = "bench-token-%d"
FRAME = sse.frame(Text(chunk="tok "))
_decode = msgspec.json.Decoder(ChatChunk).decode
_relay: dict[str, Any] = {}


def tokens() -> dict[str, dict[str, str]]:
    return {TOKEN % i: {"id": f"user{i}", "displayName": f"User {i}"} for i in range(USERS)}


async def _frames(n: int, rate: float) -> AsyncIterator[bytes]:
    if not rate:
        for _ in range(n):
            yield FRAME
        return
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(n):
        yield FRAME
        await asyncio.sleep(max(0.0, start + (i + 1) / rate - loop.time()))


@get("/bench/bare")
async def bare(n: int = 20_000, rate: float = 0.0) -> Stream:
    return Stream(_frames(n, rate), media_type=sse.MEDIA_TYPE, headers=sse.HEADERS)


async def _relayed(n: int) -> AsyncIterator[bytes]:
    client: httpx.AsyncClient = _relay["client"]
    body = msgspec.json.encode(
        {"model": "bench", "messages": [{"role": "user", "content": f"fast {n}"}]}
    )
    async with client.stream("POST", "/api/chat", content=body) as response:
        buffer = b""
        async for data in response.aiter_raw():
            buffer += data
            if b"\n" not in buffer:
                continue
            *lines, buffer = buffer.split(b"\n")
            out = b""
            for line in lines:
                if line:
                    message = _decode(line).message
                    if message is not None and message.content:
                        out += sse.frame(Text(chunk=message.content))
            if out:
                yield out


async def _batched(n: int, rate: float) -> AsyncIterator[bytes]:
    client: httpx.AsyncClient = _relay["client"]
    shape = f"paced {n} {rate:g}" if rate else f"fast {n}"
    body = msgspec.json.encode({"model": "bench", "messages": [{"role": "user", "content": shape}]})
    frame = sse.frame
    async with client.stream("POST", "/api/chat", content=body) as response:
        buffer = b""
        async for data in response.aiter_raw():
            buffer += data
            if b"\n" not in buffer:
                continue
            *lines, buffer = buffer.split(b"\n")
            out = []
            for line in lines:
                if line:
                    message = _decode(line).message
                    if message is not None and message.content:
                        out.append(frame(Text(chunk=message.content)))
            if out:
                yield b"".join(out)


@get("/bench/batched")
async def batched(n: int = 20_000, rate: float = 0.0) -> Stream:
    return Stream(_batched(n, rate), media_type=sse.MEDIA_TYPE, headers=sse.HEADERS)


@get("/bench/relay")
async def relay(n: int = 20_000) -> Stream:
    return Stream(_relayed(n), media_type=sse.MEDIA_TYPE, headers=sse.HEADERS)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ollama", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--cpu", type=int, default=None)
    parser.add_argument(
        "--httpx-model", action="store_true", help="stream /api/chat on httpx (the old path)"
    )
    parser.add_argument("--provider", choices=["ollama", "openai"], default="ollama")
    parser.add_argument(
        "--metrics", choices=["on", "off"], default="on", help="keep Prometheus metrics (default)"
    )
    parser.add_argument("--state-url", help="MERCURY_STATE_URL (unset: SQLite in --data)")
    parser.add_argument("--memory", choices=["off", "edge"], default="off")
    parser.add_argument("--rejoin", default="0", help="HTTP_SURFACE_REJOIN_S (0: off)")
    parser.add_argument(
        "--switch",
        choices=["short", "default"],
        default="short",
        help="the interpreter's switch interval as serve sets it "
        "(channel_http/serving/switching.py), or CPython's 5 ms",
    )
    parser.add_argument(
        "--opening",
        choices=["at-once", "task"],
        default="at-once",
        help="a turn's first frame from the response's task "
        "(channel_http/protocols/sse.py Opening), or from the body's task one loop iteration later",
    )
    parser.add_argument(
        "--gc",
        choices=["settled", "default"],
        default="settled",
        help="the collector as serve leaves it (channel_http/serving/collector.py), "
        "or CPython's defaults",
    )
    parser.add_argument(
        "--accept",
        choices=["greedy", "uvloop"],
        default="greedy",
        help="new connections all at once as serve takes them (channel_http/serving/accept.py), "
        "or uvloop's one per loop iteration",
    )
    parser.add_argument(
        "--gc-thresholds",
        help="YOUNG,MIDDLE: the collector's thresholds once settled (experiments)",
    )
    parser.add_argument(
        "--gc-log", type=Path, help="append each collector pass to PATH (bench/collector_log.py)"
    )
    parser.add_argument(
        "--slack",
        metavar="API_URL",
        help="turn the Slack bridge on against the Slack stand-in's Web API at API_URL "
        "(its token and signing secret: bench/ingest.py)",
    )
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    env = {
        "MERCURY_CONFIG_FILE": "",
        "MERCURY_AUTH": "static",
        "AUTH_STATIC_TOKENS": json.dumps(tokens()),
        "MERCURY_DATA_DIR": args.data,
        "OLLAMA_HOST": args.ollama,
        "OLLAMA_MODEL": "bench",
        "MERCURY_MEMORY_STORE": args.memory,
        "MERCURY_RATE_LIMIT_PER_USER": "1000",
        "MERCURY_RATE_LIMIT_WINDOW_MS": "1000",
        "MERCURY_MODEL_PROVIDER": args.provider,
        "OPENAI_BASE_URL": args.ollama + "/v1",
        "OPENAI_MODEL": "bench",
        "MERCURY_METRICS": "true" if args.metrics == "on" else "false",
        "HTTP_SURFACE_REJOIN_S": args.rejoin,
    }
    if args.state_url:
        env["MERCURY_STATE_URL"] = args.state_url
    if args.slack:
        env.update(
            {
                "MERCURY_SLACK": "true",
                "SLACK_BOT_TOKEN": SLACK_BOT_TOKEN,
                "SLACK_SIGNING_SECRET": SLACK_SIGNING_SECRET,
                "SLACK_API_URL": args.slack,
            }
        )
    settings = load_settings(env, cwd=Path(args.data))
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    _relay["client"] = httpx.AsyncClient(base_url=args.ollama, timeout=60.0, limits=limits)
    model = None
    if args.httpx_model:
        model = OllamaModel(
            settings.ollama.host,
            settings.ollama.model,
            read_timeout_s=settings.ollama.timeout_s,
            connect_timeout_s=settings.ollama.connect_timeout_s,
        )
        model._wire = None  # the httpx path, for before/after comparisons
    if args.opening == "task":
        sse._StreamedBody.opening_at_once = False
    app = build_app(settings, model=model, extra_routes=[bare, relay, batched])
    config = uvicorn.Config(
        _Arrival(with_cors(app, settings)),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        lifespan="on",
        log_level="warning",
        access_log=False,
        backlog=4096,
        timeout_graceful_shutdown=2,
        **server_options(settings),
    )
    _Server(
        config,
        settle=args.gc == "settled",
        thresholds=tuple(int(x) for x in args.gc_thresholds.split(","))
        if args.gc_thresholds
        else None,
        greedy=args.accept == "greedy",
        short_switch=args.switch == "short",
        gc_log=args.gc_log,
    ).run()


class _Arrival:
    """Notes when each request reached the application, for the load client.

    ``Server-Timing`` then carries ``arrived``: ``time.perf_counter()`` in ms, a clock every
    process on this machine shares, so the client splits a TTFB into the wait before the
    application (its loop reading the request) and the rest. Only the request's scope is
    touched: the response's frames don't pass through here.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP:
            access_log.mark(scope, "arrived", time.perf_counter())
        await self.app(scope, receive, send)


class _Server(uvicorn.Server):
    """uvicorn, accepting and settling the collector as ``mercury-http serve`` does."""

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        settle: bool,
        greedy: bool,
        short_switch: bool,
        thresholds: tuple[int, ...] | None = None,
        gc_log: Path | None = None,
    ) -> None:
        super().__init__(config)
        self._settle = settle
        self._thresholds = thresholds
        self._gc_log = gc_log
        self._stop_gc_log: Callable[[], None] | None = None
        self._greedy = greedy
        self._short_switch = short_switch
        self._acceptors: list[GreedyAccept] = []

    async def startup(self, sockets: list[Any] | None = None) -> None:
        await super().startup(sockets)
        if self._greedy:
            self._acceptors = accept_greedily(self)
        if self._settle:
            collector.settle(*(self._thresholds or ()))
        if self._short_switch:
            switching.hand_over_sooner()
        if self._gc_log is not None:
            self._stop_gc_log = collector_log.install(self._gc_log)

    async def shutdown(self, sockets: list[Any] | None = None) -> None:
        for acceptor in self._acceptors:
            acceptor.close()
        await super().shutdown(sockets)
        if self._stop_gc_log is not None:
            self._stop_gc_log()


if __name__ == "__main__":
    main()
