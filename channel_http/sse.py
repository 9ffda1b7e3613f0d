"""Server-Sent Events: prebuilt frames and the stream body that forwards a turn's queue.

The body only forwards. It coalesces frames already waiting into one write (nothing
waits to be coalesced: a lone frame goes out at once), sends a ``: ping`` comment when
the turn has been quiet for the heartbeat interval, and cancels the turn when the
client leaves (Litestar cancels the body on ``http.disconnect``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

import msgspec

from core.events import Event
from core.sessions import Turn

HEARTBEAT: Final = b": ping\n\n"
HEADERS: Final = {
    "cache-control": "no-cache, no-transform",
    "x-accel-buffering": "no",
    "connection": "keep-alive",
}
MEDIA_TYPE: Final = "text/event-stream"  # Litestar appends "; charset=utf-8"

_encode = msgspec.json.Encoder().encode


def frame(event: Event) -> bytes:
    """``event: <name>\\ndata: <compact JSON>\\n\\n`` for one event."""
    return b"event: " + event.name + b"\ndata: " + _encode(event) + b"\n\n"


async def event_stream(turn: Turn, heartbeat_s: float) -> AsyncIterator[bytes]:
    queue = turn.queue
    get_nowait = queue.get_nowait
    try:
        while True:
            try:
                event = get_nowait()
            except asyncio.QueueEmpty:
                try:
                    async with asyncio.timeout(heartbeat_s):
                        event = await queue.get()
                except TimeoutError:
                    yield HEARTBEAT
                    continue
            if event is None:
                return
            data = frame(event)
            while queue.qsize():
                event = get_nowait()
                if event is None:
                    yield data
                    return
                data += frame(event)
            yield data
    finally:
        turn.cancel()
