"""sse.Opening: a turn's first frame leaves in the headers' turn of the loop, not one later."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from types import SimpleNamespace
from typing import Any

import pytest
from litestar import Litestar, get
from litestar.exceptions import LitestarException

from channel_http.protocols import rejoin, sse
from core.engine.turn_events import TurnEvents
from core.turn_logs import MemoryTurnLogs

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Loop:
    """Counts the loop's iterations (a callback that re-schedules itself once per iteration)."""

    def __init__(self) -> None:
        self.iterations = 0
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.iterations += 1
        self._handle = self._loop.call_soon(self._tick)

    def stop(self) -> None:
        self._handle.cancel()


async def _serve(
    frames: AsyncGenerator[bytes, None], opening: bool, fail_first_body: bool = False
) -> list[tuple[int, dict[str, Any]]]:
    """One GET through a Litestar app whose route streams ``frames``: (iteration, message)."""

    @get("/s")
    async def route() -> sse.EventStream:
        body = sse.Opening(frames) if opening else frames
        return sse.EventStream(body, media_type=sse.MEDIA_TYPE, headers=sse.HEADERS)

    app = Litestar([route])
    loop_count = _Loop()
    sent: list[tuple[int, dict[str, Any]]] = []
    disconnected = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if not sent:
            return {"type": "http.request", "body": b"", "more_body": False}
        await disconnected.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if fail_first_body and message["type"] == "http.response.body":
            raise ConnectionResetError("the client is gone")
        sent.append((loop_count.iterations, message))

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/s",
        "raw_path": b"/s",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"test")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    try:
        await asyncio.wait_for(app(scope, receive, send), 10)  # type: ignore[arg-type]
    finally:
        loop_count.stop()
    return sent


async def _three() -> AsyncGenerator[bytes, None]:
    yield b"event: turn\ndata: {}\n\n"
    await asyncio.sleep(0)
    yield b"event: text\ndata: {}\n\n"
    yield b"event: final\ndata: {}\n\n"


async def test_the_opening_frame_leaves_in_the_same_loop_iteration_as_the_headers() -> None:
    sent = await _serve(_three(), opening=True)
    kinds = [(m["type"], m.get("body", b"")[:12]) for _, m in sent]
    assert kinds == [
        ("http.response.start", b""),
        ("http.response.body", b"event: turn\n"),
        ("http.response.body", b"event: text\n"),
        ("http.response.body", b"event: final"),
        ("http.response.body", b""),
    ]
    (start_at, _), (first_at, _) = sent[0], sent[1]
    assert first_at == start_at
    assert sent[2][0] > first_at  # the rest from the body's task, after the generator's wait


async def test_without_opening_the_first_frame_waits_for_the_body_task() -> None:
    """The contrast that shows the test above measures something."""
    sent = await _serve(_three(), opening=False)
    (start_at, _), (first_at, first) = sent[0], sent[1]
    assert first["body"].startswith(b"event: turn\n")
    assert first_at > start_at


async def test_the_before_after_switch_of_the_benchmark_sends_it_from_the_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sse._StreamedBody, "opening_at_once", False)
    sent = await _serve(_three(), opening=True)
    assert [m.get("body", b"")[:12] for _, m in sent[1:4]] == [
        b"event: turn\n",
        b"event: text\n",
        b"event: final",
    ]
    assert sent[1][0] > sent[0][0]


async def test_a_failed_first_write_runs_the_body_clean_up_at_once() -> None:
    cleaned = asyncio.Event()

    async def frames() -> AsyncGenerator[bytes, None]:
        try:
            yield b"event: turn\ndata: {}\n\n"
            await asyncio.sleep(3600)
            yield b"never"
        finally:
            cleaned.set()  # where the turn's stream cancels its turn

    with pytest.raises(LitestarException) as raised:  # Litestar's wrap of an error after start
        await _serve(frames(), opening=True, fail_first_body=True)
    assert isinstance(raised.value.__cause__, ConnectionResetError)
    assert cleaned.is_set()


def _first_step_at_once(frames: AsyncGenerator[bytes, None]) -> bytes:
    """The generator's first frame, provided it comes without a wait (else the test fails)."""
    step = frames.__anext__()
    try:
        step.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    step.close()
    pytest.fail("the body waited before its first frame: sse.Opening would block the response")


async def test_a_turns_body_yields_its_turn_frame_before_any_wait() -> None:
    turn = SimpleNamespace(events=TurnEvents(), cancel=lambda: None, started=0.0)
    frames = sse.event_stream(turn, 15.0, "t1")  # type: ignore[arg-type]
    assert _first_step_at_once(frames).startswith(b"id: t1.0\nevent: turn\n")
    await frames.aclose()


async def test_a_new_turn_logs_body_yields_its_turn_frame_before_any_wait() -> None:
    log = MemoryTurnLogs(grace_s=30.0).open("alice", lambda: None)
    frames = rejoin.follow(log, 0, 15.0)
    first = _first_step_at_once(frames)
    assert first.startswith(b"id: %b.0\nevent: turn\n" % log.turn_id.encode())
    await frames.aclose()
