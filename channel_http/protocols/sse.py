"""Server-Sent Events: prebuilt frames and the stream body that forwards a turn's events.

The body only forwards. It takes every event waiting in one batch and writes their frames
at once (nothing waits to be coalesced: a lone frame goes out at once), sends a ``: ping``
comment when the turn has been quiet for the heartbeat interval, and cancels the turn when
the client leaves (:class:`EventStream` cancels the body on ``http.disconnect``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, ClassVar, Final

import msgspec
from litestar.response import Stream
from litestar.response.base import ASGIResponse
from litestar.response.streaming import ASGIStreamingResponse
from litestar.types import HTTPResponseBodyEvent, Receive, Scope, Send

from channel_http.access_log import BodySink, body_sink
from core.engine.events import Event, TurnStarted
from core.engine.sessions import Turn

if TYPE_CHECKING:
    from core.engine.turn_events import TurnEvents
    from core.observe.metrics import Metrics

HEARTBEAT: Final = b": ping\n\n"
HEADERS: Final = {
    "cache-control": "no-cache, no-transform",
    "x-accel-buffering": "no",
    "connection": "keep-alive",
}
MEDIA_TYPE: Final = "text/event-stream"  # Litestar appends "; charset=utf-8"

_encode = msgspec.json.Encoder().encode


def frame(event: Event | TurnStarted) -> bytes:
    """``event: <name>\\ndata: <compact JSON>\\n\\n`` for one event."""
    return b"event: " + event.name + b"\ndata: " + _encode(event) + b"\n\n"


def framed(event: Event | TurnStarted, turn_id: bytes, seq: int) -> bytes:
    """The frame with its SSE id, ``<turn id>.<number>``: what Last-Event-ID sends back."""
    return b"id: %b.%d\n" % (turn_id, seq) + frame(event)


class EventStream(Stream):
    """Litestar's :class:`~litestar.response.Stream`, its body sent without anyio.

    Litestar runs each streamed body in an anyio task group and cancels it through a cancel
    scope once ``http.disconnect`` arrives, which it does at the end of every response too;
    anyio's cancel formats the task's repr into a reason nobody reads. That was ~12% of a
    short turn's CPU on the event loop (docs/benchmarks.md). Here the body runs as one
    asyncio task beside the wait for ``http.disconnect``; whichever ends first ends the
    other, and an error of the body is raised as before.

    The frames go to the request log's send (:class:`~channel_http.access_log.BodySink`),
    past the send wrappers of the layers inside it, which only act on a response's start:
    one ``await`` per frame instead of four. The start and the end cross every layer.
    """

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> ASGIResponse:
        response = super().to_asgi_response(*args, **kwargs)
        response.__class__ = _StreamedBody
        return response


class _StreamedBody(ASGIStreamingResponse):
    __slots__ = ()

    #: Whether an :class:`Opening`'s first frame goes out from the response's own task
    #: (``False`` only for the benchmark's before/after: ``bench/server.py --opening task``).
    opening_at_once: ClassVar[bool] = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.start_response(send=send)
        if self.is_head_response:
            await send(_END)
        else:
            await self._send_body(send, receive, body_sink(scope))
        await self.after_response()

    async def _send_body(self, send: Send, receive: Receive, sink: BodySink | None) -> None:
        stream = self.iterator
        if isinstance(stream, Opening):
            self.iterator = stream.frames
            if self.opening_at_once:
                await _send_opening(stream.frames, send, sink)
        loop = asyncio.get_running_loop()
        body = loop.create_task(self._forward(send, sink))
        left = loop.create_task(_until_disconnect(receive))
        try:
            await asyncio.wait((body, left), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            body.cancel()
            left.cancel()
            raise
        left.cancel()
        if not body.done():
            # The client left: the body is cancelled and its own clean-up (the turn's
            # cancel) has run before the response ends, as in Litestar's task group.
            body.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await body
            return
        body.result()  # the body's own error, if it had one

    async def _forward(self, send: Send, sink: BodySink | None) -> None:
        """The frames past the inner layers' send wrappers, the end through all of them."""
        direct = send if sink is None else sink.send
        sent = 0
        try:
            async for chunk in self.iterator:
                body = chunk if isinstance(chunk, bytes) else chunk.encode(self.encoding)
                await direct({"type": "http.response.body", "body": body, "more_body": True})
                sent += len(body)
        finally:
            if sink is not None:
                sink.sent += sent
        await send(_END)


class Opening:
    """A body whose first frame is ready at once (no wait before its first ``yield``).

    :class:`EventStream` then takes that frame in the response's own task and writes it
    with the headers' turn of the loop; the rest follows from the body's task as usual.
    """

    __slots__ = ("frames",)

    def __init__(self, frames: AsyncGenerator[bytes, None]) -> None:
        self.frames = frames

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.frames


_END: Final[HTTPResponseBodyEvent] = {"type": "http.response.body", "body": b"", "more_body": False}


async def _send_opening(
    frames: AsyncGenerator[bytes, None], send: Send, sink: BodySink | None
) -> None:
    """The first frame from the response's task, right behind the headers.

    A task of its own would wait one more turn of the loop, which is milliseconds beside
    hundreds of streams (docs/benchmarks.md; 458b4e3). If it can't be sent, the body is
    closed at once, so its own clean-up (the turn's cancel) runs now.
    """
    direct = send if sink is None else sink.send
    try:
        first = await anext(frames)
        await direct({"type": "http.response.body", "body": first, "more_body": True})
    except BaseException:
        await frames.aclose()
        raise
    if sink is not None:
        sink.sent += len(first)


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class _Pinger:
    """Wakes the stream with :data:`_PING` once it has been quiet for ``interval``.

    One timer per stream, re-armed when it fires, instead of a timeout around every wait
    (``asyncio.timeout`` costs about 3.5 µs an event on the per-token path).
    """

    __slots__ = ("events", "handle", "interval", "last", "loop")

    def __init__(self, events: TurnEvents, interval: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.events = events
        self.interval = interval
        self.last = self.loop.time()
        self.handle = self.loop.call_at(self.last + interval, self.fire)

    def fire(self) -> None:
        now = self.loop.time()
        due = self.last + self.interval
        if now >= due:
            self.events.wake(_PING)
            due = now + self.interval
        self.handle = self.loop.call_at(due, self.fire)

    def cancel(self) -> None:
        self.handle.cancel()


_PING: Final[Any] = object()


def event_stream(
    turn: Turn, heartbeat_s: float, turn_id: str, metrics: Metrics | None = None
) -> AsyncGenerator[bytes, None]:
    """The turn's events as frames numbered from 1, after the ``turn`` event (number 0)."""
    tid = turn_id.encode()
    opening = framed(TurnStarted(turn_id=turn_id), tid, 0)
    return forward(turn, heartbeat_s, opening, _Numbered(tid), metrics)


class _Numbered:
    """Mercury's frames for a batch of events, each with its id: one %-format per event."""

    __slots__ = ("head", "seq")

    def __init__(self, turn_id: bytes) -> None:
        # framed() in one %-format per event: the id, the name and the JSON.
        self.head = b"id: " + turn_id.replace(b"%", b"%%") + b".%d\nevent: %b\ndata: %b\n\n"
        self.seq = 0

    def __call__(self, batch: list[Event]) -> bytes:
        head, seq = self.head, self.seq
        frames = []
        for event in batch:
            seq += 1
            frames.append(head % (seq, event.name, _encode(event)))
        self.seq = seq
        return frames[0] if len(frames) == 1 else b"".join(frames)


async def forward(
    turn: Turn,
    heartbeat_s: float,
    opening: bytes,
    render: Callable[[list[Event]], bytes],
    metrics: Metrics | None = None,
    ending: Callable[[], bytes] | None = None,
) -> AsyncGenerator[bytes, None]:
    """``opening``, then the turn's events as ``render`` writes them, until the turn ends;
    then what ``ending`` writes, for a protocol that closes its stream with a frame of its own.

    The body of every protocol's stream (each renders the events its own way). Everything
    the turn emitted since the last write goes out as one write; a ``: ping`` comment when
    the turn has been quiet for the heartbeat interval; the turn is cancelled when the body
    ends, so a client that leaves stops it. ``opening`` is ready at once (what
    :class:`Opening` asks).
    """
    turn_events = turn.events
    take, take_nowait = turn_events.take, turn_events.take_nowait
    pinger = _Pinger(turn_events, heartbeat_s)
    loop_time = pinger.loop.time
    first = metrics is not None  # one check per batch, the histogram once per turn
    if metrics is not None:
        metrics.open_streams.inc()
    try:
        yield opening
        while True:
            batch = take_nowait() or await take()
            if batch[0] is _PING:  # the timer adds its tick only to an empty hand-off
                del batch[0]
            ended = None in batch
            if ended:  # the end: nothing after it counts
                del batch[batch.index(None) :]
            if batch or ended:
                if first and batch:
                    first = False
                    metrics.turn_first_event.observe(time.perf_counter() - turn.started)  # type: ignore[union-attr]
                written = render(batch) if batch else b""
                if ended and ending is not None:
                    written += ending()  # in the same write as the last events
                if written:
                    yield written
                pinger.last = loop_time()
            else:
                yield HEARTBEAT
                pinger.last = loop_time()
                if metrics is not None:
                    metrics.heartbeats.inc()
            if ended:
                return
    finally:
        pinger.cancel()
        turn.cancel()
        if metrics is not None:
            metrics.open_streams.dec()
