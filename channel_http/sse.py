"""Server-Sent Events: prebuilt frames and the stream body that forwards a turn's queue.

The body only forwards. It coalesces frames already waiting into one write (nothing
waits to be coalesced: a lone frame goes out at once), sends a ``: ping`` comment when
the turn has been quiet for the heartbeat interval, and cancels the turn when the
client leaves (Litestar cancels the body on ``http.disconnect``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Final

import msgspec

from core.events import Event, TurnStarted
from core.sessions import Turn

if TYPE_CHECKING:
    from core.metrics import Metrics

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


class _Pinger:
    """Puts :data:`_PING` on a turn's queue once the stream has been quiet for ``interval``.

    One timer per stream, re-armed when it fires, instead of a timeout around every wait
    (``asyncio.timeout`` costs about 3.5 µs an event on the per-token path).
    """

    __slots__ = ("handle", "interval", "last", "loop", "queue")

    def __init__(self, queue: asyncio.Queue[Any], interval: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue = queue
        self.interval = interval
        self.last = self.loop.time()
        self.handle = self.loop.call_at(self.last + interval, self.fire)

    def fire(self) -> None:
        now = self.loop.time()
        due = self.last + self.interval
        if now >= due:
            if self.queue.empty():
                self.queue.put_nowait(_PING)
            due = now + self.interval
        self.handle = self.loop.call_at(due, self.fire)

    def cancel(self) -> None:
        self.handle.cancel()


_PING: Final[Any] = object()


async def event_stream(
    turn: Turn, heartbeat_s: float, turn_id: str, metrics: Metrics | None = None
) -> AsyncIterator[bytes]:
    """The turn's events as frames numbered from 1, after the ``turn`` event (number 0)."""
    queue = turn.queue
    get_nowait = queue.get_nowait
    pinger = _Pinger(queue, heartbeat_s)
    loop_time = pinger.loop.time
    tid = turn_id.encode()
    seq = 0
    first = metrics is not None  # one check per event, the histogram once per turn
    if metrics is not None:
        metrics.open_streams.inc()
    try:
        yield framed(TurnStarted(turn_id=turn_id), tid, 0)
        while True:
            try:
                event = get_nowait()
            except asyncio.QueueEmpty:
                event = await queue.get()
            if event is _PING:
                yield HEARTBEAT
                pinger.last = loop_time()
                if metrics is not None:
                    metrics.heartbeats.inc()
                continue
            if event is None:
                return
            if first:
                first = False
                metrics.turn_first_event.observe(time.perf_counter() - turn.started)  # type: ignore[union-attr]
            seq += 1
            data = framed(event, tid, seq)
            while queue.qsize():
                event = get_nowait()
                if event is None:
                    yield data
                    return
                if event is not _PING:
                    seq += 1
                    data += framed(event, tid, seq)
            yield data
            pinger.last = loop_time()
    finally:
        pinger.cancel()
        turn.cancel()
        if metrics is not None:
            metrics.open_streams.dec()
