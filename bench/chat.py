"""Chat turns through the pipeline, live answers on and off, beside the same turn over /turn.

A server of its own (``python -m bench.chat serve``) runs the app with an in-process chat
platform (:class:`BenchBridge`: a webhook bridge and a :class:`~bridges.port.LiveBridge`
that only notes the time of each call), and the benchmark's model stand-in
(:mod:`bench.standin`) writes ``paced N RATE`` answers. The client delivers ``--turns``
chat messages at once (each in a DM of its own, so each its own chat), waits for every
answer, and reads from the server:

- **server CPU per streamed token**: the server process's CPU over the block, less its idle
  rate, divided by the tokens streamed; the same block of turns over ``POST /turn``
  (the answer streamed to the client as SSE) is the reference;
- **first words**: from the delivery's arrival to the first update showing words (live on)
  or to the one message (live off); the stand-in writes the first token as soon as the
  model request arrives, so this bounds the time after the model's first token from above;
- **platform calls per answer** (live on: open, shows, finish) against the interval.

::

    python -m bench.chat [--turns 50] [--tokens 300] [--rate 50] [--interval 1.0]
        [--json bench/results/chat.json]

Results: a table on stdout, the JSON in ``bench/results/chat.json``. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgspec

from bench.turns import HOST, ROOT, _free_port, _pct, _wait_listening, cpu_s
from bridges.port import (
    Attachment,
    EgressFile,
    LiveLimits,
    LiveReply,
    Received,
    ReplyButton,
    ThreadInfo,
    WebhookOutcome,
)

RESULTS = Path(__file__).parent / "results"
TOKEN = "bench-chat-token"


# ------------------------------------------------------------------ the server's platform


@dataclass
class _Turn:
    arrived: float
    words: float | None = None
    ended: float | None = None
    calls: int = 0
    text: str = ""


@dataclass
class BenchBridge:
    """A chat platform in the server's process: takes unsigned deliveries (loopback only)
    and notes when each answer showed words and ended, and how many calls it took."""

    limits: LiveLimits
    platform: str = "slack"
    turns: dict[str, _Turn] = field(default_factory=dict)

    @property
    def live_limits(self) -> LiveLimits:
        return self.limits

    def parse_thread(self, thread_id: str) -> ThreadInfo:
        space = ":".join(thread_id.split(":")[:2])
        return ThreadInfo(space_id=space, conversation_external_id=thread_id, is_dm=True)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        return b""

    async def start_typing(self, message: Received) -> None:
        return None

    async def send_reply(self, to: Received, text: str, files: Sequence[EgressFile] = ()) -> None:
        turn = self.turns[to.thread_id]
        turn.calls += 1
        turn.words = turn.ended = time.perf_counter()
        turn.text = text

    async def close(self) -> None:
        return None

    async def receive(
        self, method: str, query: Mapping[str, str], headers: Mapping[str, str], body: bytes
    ) -> WebhookOutcome:
        message = msgspec.json.decode(body, type=Received)
        self.turns[message.thread_id] = _Turn(arrived=time.perf_counter())
        return WebhookOutcome(verdict="accepted", messages=(message,))

    async def open_reply(
        self, to: Received, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> LiveReply:
        turn = self.turns[to.thread_id]
        turn.calls += 1
        return _Reply(turn)

    async def send_private(self, to: Received, text: str) -> None:
        return None

    async def answer_press(self, press: Any, text: str) -> None:
        return None

    async def settle_press(self, press: Any, text: str) -> None:
        return None


@dataclass
class _Reply:
    turn: _Turn

    async def show(self, text: str, status: str | None) -> None:
        self.turn.calls += 1
        if text and self.turn.words is None:
            self.turn.words = time.perf_counter()

    async def finish(
        self, text: str, buttons: Sequence[ReplyButton] = (), files: Sequence[EgressFile] = ()
    ) -> None:
        turn = self.turn
        turn.calls += 1
        turn.ended = time.perf_counter()
        turn.text += text
        if turn.words is None:
            turn.words = turn.ended

    async def fail(self, text: str) -> None:
        self.turn.calls += 1
        self.turn.ended = time.perf_counter()


def serve(args: argparse.Namespace) -> None:
    import uvicorn
    from litestar import get

    from channel_http.app import build_app
    from core.config import load_settings

    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    bridge = BenchBridge(LiveLimits(max_chars=4096, edit_interval_s=args.interval))

    @get("/bench/chat/stats", sync_to_thread=False)
    def stats() -> dict[str, Any]:
        turns = list(bridge.turns.values())
        bridge.turns.clear()
        return {
            "turns": [
                {
                    "words_s": None if t.words is None else t.words - t.arrived,
                    "ended": t.ended is not None,
                    "calls": t.calls,
                    "chars": len(t.text),
                }
                for t in turns
            ]
        }

    @get("/bench/chat/pending", sync_to_thread=False)
    def pending() -> dict[str, int]:
        return {"open": sum(t.ended is None for t in bridge.turns.values())}

    env = {
        "MERCURY_CONFIG_FILE": "",
        "MERCURY_AUTH": "static",
        "AUTH_STATIC_TOKENS": json.dumps({TOKEN: {"id": "bench", "displayName": "Bench"}}),
        "MERCURY_DATA_DIR": args.data,
        "OLLAMA_HOST": args.ollama,
        "OLLAMA_MODEL": "bench",
        "MERCURY_MEMORY_STORE": "off",
        "MERCURY_RATE_LIMIT_PER_USER": "1000",
        "MERCURY_RATE_LIMIT_WINDOW_MS": "1000",
        "MERCURY_METRICS": "false",
        "BRIDGE_LIVE_ANSWERS": args.live,
        "CHAT_TIMEOUT_S": "600",
    }
    settings = load_settings(env, cwd=Path(args.data))
    app = build_app(settings, bridges=[bridge], extra_routes=[stats, pending])
    uvicorn.run(
        app,
        host=HOST,
        port=args.port,
        loop="uvloop",
        lifespan="on",
        log_level="warning",
        access_log=False,
    )


# ------------------------------------------------------------------ the client


@contextlib.contextmanager
def _processes(live: str, interval: float, cpus: tuple[int | None, int | None]) -> Iterator[Any]:
    py = sys.executable
    ollama_port, port = _free_port(), _free_port()
    started: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="mercury-bench-chat-") as data:
        try:
            cmd = [py, "-m", "bench.standin", "--port", str(ollama_port)]
            if cpus[1] is not None:
                cmd += ["--cpu", str(cpus[1])]
            standin = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)
            started.append(standin)
            _wait_listening(standin, ollama_port, "model stand-in")
            cmd = [py, "-m", "bench.chat", "serve", "--port", str(port), "--data", data]
            cmd += ["--ollama", f"http://{HOST}:{ollama_port}", "--live", live]
            cmd += ["--interval", str(interval)]
            if cpus[0] is not None:
                cmd += ["--cpu", str(cpus[0])]
            server = subprocess.Popen(cmd, cwd=ROOT)
            started.append(server)
            _wait_listening(server, port, "server")
            yield port, server.pid
        finally:
            for proc in reversed(started):
                proc.terminate()
            for proc in reversed(started):
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()


def _message(n: int, text: str, block: int) -> bytes:
    return msgspec.json.encode(
        Received(
            platform="slack",
            thread_id=f"slack:D{block * 10000 + n}",
            delivery_id=f"Ev{block}x{n}",
            message_id=f"{n}.0",
            author_id=f"U{n}",
            author_name=f"User {n}",
            text=text,
            is_dm=True,
        )
    )


async def _idle_rate(pid: int) -> float:
    before = cpu_s(pid)
    await asyncio.sleep(1.0)
    return cpu_s(pid) - before


async def chat_block(port: int, pid: int, plan: argparse.Namespace, block: int) -> dict[str, Any]:
    """``plan.turns`` chat turns at once; the server's CPU and every answer's figures."""
    url = f"http://{HOST}:{port}"
    text = f"paced {plan.tokens} {plan.rate}"
    idle = await _idle_rate(pid)
    headers = {"authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=url, timeout=60, headers=headers) as client:
        before, started = cpu_s(pid), time.perf_counter()
        answers = await asyncio.gather(
            *(
                client.post("/webhooks/slack", content=_message(n, text, block))
                for n in range(plan.turns)
            )
        )
        if any(a.status_code != 200 or a.json()["taken"] != 1 for a in answers):
            raise RuntimeError(f"a delivery was not taken: {answers[0].text}")
        deadline = time.monotonic() + 300
        while (await client.get("/bench/chat/pending")).json()["open"]:
            if time.monotonic() > deadline:
                raise RuntimeError("the chat turns did not end within 300 s")
            await asyncio.sleep(0.05)
        cpu = cpu_s(pid) - before - idle * (time.perf_counter() - started)
        turns = (await client.get("/bench/chat/stats")).json()["turns"]
    expected = len(f"{'tok ' * plan.tokens}")
    short = [t for t in turns if t["chars"] != expected]
    if short:
        raise RuntimeError(f"{len(short)} answers were not whole: {short[:2]}")
    words = [t["words_s"] for t in turns]
    return {
        "cpu_per_token_us": cpu / (plan.turns * plan.tokens) * 1e6,
        "first_words_p50_s": _pct(words, 0.5),
        "first_words_p95_s": _pct(words, 0.95),
        "calls_per_answer": _pct([float(t["calls"]) for t in turns], 0.5),
    }


async def turn_block(port: int, pid: int, plan: argparse.Namespace) -> dict[str, Any]:
    """The same turns over ``POST /turn``, streamed to the client as SSE."""
    url = f"http://{HOST}:{port}"
    body = {"text": f"paced {plan.tokens} {plan.rate}"}
    headers = {"authorization": f"Bearer {TOKEN}"}
    idle = await _idle_rate(pid)
    limits = httpx.Limits(max_connections=plan.turns + 5)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:

        async def one() -> float:
            sent = time.perf_counter()
            first: float | None = None
            async with client.stream("POST", "/turn", json=body, headers=headers) as reply:
                async for line in reply.aiter_lines():
                    if first is None and line == "event: text":
                        first = time.perf_counter()
            return (first or time.perf_counter()) - sent

        before, started = cpu_s(pid), time.perf_counter()
        words = await asyncio.gather(*(one() for _ in range(plan.turns)))
        cpu = cpu_s(pid) - before - idle * (time.perf_counter() - started)
    return {
        "cpu_per_token_us": cpu / (plan.turns * plan.tokens) * 1e6,
        "first_words_p50_s": _pct(list(words), 0.5),
        "first_words_p95_s": _pct(list(words), 0.95),
    }


async def run(plan: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"plan": vars(plan) | {"json": str(plan.json)}}
    cpus = (0, 1) if (os.cpu_count() or 1) >= 2 else (None, None)
    for live in ("on", "off"):
        with _processes(live, plan.interval, cpus) as (port, pid):
            blocks = [await chat_block(port, pid, plan, n) for n in range(plan.repeats)]
            result[f"chat_live_{live}"] = _median(blocks)
            if live == "on":
                result["turn"] = _median([await turn_block(port, pid, plan)])
    result["ratio_live_on"] = (
        result["chat_live_on"]["cpu_per_token_us"] / result["turn"]["cpu_per_token_us"]
    )
    result["ratio_live_off"] = (
        result["chat_live_off"]["cpu_per_token_us"] / result["turn"]["cpu_per_token_us"]
    )
    result["at"] = datetime.now(UTC).isoformat(timespec="seconds")
    result["load_average"] = os.getloadavg()
    return result


def _median(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    return {key: _pct([b[key] for b in blocks], 0.5) for key in blocks[0]}


def table(result: dict[str, Any]) -> str:
    plan = result["plan"]
    rows = [
        f"{plan['turns']} concurrent turns, {plan['tokens']} tokens at {plan['rate']}/s, "
        f"edit interval {plan['interval']} s",
        "| | CPU per token | first words p50 | first words p95 | calls per answer |",
        "|---|---|---|---|---|",
    ]
    for name, key in (
        ("chat, live answers on", "chat_live_on"),
        ("chat, live answers off", "chat_live_off"),
        ("POST /turn", "turn"),
    ):
        figure = result[key]
        calls = figure.get("calls_per_answer")
        rows.append(
            f"| {name} | {figure['cpu_per_token_us']:.1f} µs | "
            f"{figure['first_words_p50_s']:.3f} s | {figure['first_words_p95_s']:.3f} s | "
            f"{'' if calls is None else f'{calls:.0f}'} |"
        )
    rows.append(
        f"CPU per token against /turn: live on {result['ratio_live_on']:.2f}x, "
        f"live off {result['ratio_live_off']:.2f}x (target ≤ 1.5x)"
    )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.chat")
    sub = parser.add_subparsers(dest="command")
    server = sub.add_parser("serve")
    server.add_argument("--port", type=int, required=True)
    server.add_argument("--data", required=True)
    server.add_argument("--ollama", required=True)
    server.add_argument("--live", choices=["on", "off"], default="on")
    server.add_argument("--interval", type=float, default=1.0)
    server.add_argument("--cpu", type=int, default=None)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=RESULTS / "chat.json")
    args = parser.parse_args()
    if args.command == "serve":
        serve(args)
        return
    import uvloop

    result = uvloop.run(run(args))
    print(table(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
