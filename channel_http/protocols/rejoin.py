"""Rejoining a turn: the stream of a :class:`~core.turn_logs.TurnLog`, from any event on.

With ``HTTP_SURFACE_REJOIN_S`` > 0, ``POST /turn`` runs the turn into a log (a pump task
moves its events there in batches, so the turn never waits for a reader) and streams the log.
When the connection drops, the client comes back with the standard ``Last-Event-ID`` header,
either on ``GET /turn/events?turnId=…`` or by sending its ``POST /turn`` again (what
fetch-event-source and similar clients do on their own): it receives every event after that
id, then the live rest. Ids are ``<turn id>.<sequence number>``; the turn id is unguessable and
only its owner finds the log (anyone else gets the same 404 as for an unknown id).

Through the instance running the turn, the reader follows the log in memory. Through another
instance (several share a PostgreSQL state store), it follows the copy in the store
(:class:`~core.turn_logs.LogElsewhere`), which the turn's instance writes in batches.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from channel_http.protocols.sse import HEARTBEAT, framed
from core.engine import events
from core.engine.sessions import Turn
from core.turn_logs import LogElsewhere, TurnLog, TurnLogs

if TYPE_CHECKING:
    from core.observe.metrics import Metrics

#: Another protocol's rendering of a batch of logged events (the ``turn`` event first).
Render = Callable[[Sequence[events.Event | events.TurnStarted]], bytes]

_EVENT_ID: Final = re.compile(r"([A-Za-z0-9_-]{1,64})\.(\d{1,9})")


def parse_event_id(value: str) -> tuple[str, int] | None:
    """``(turn id, sequence number)`` from a Last-Event-ID, or None when it isn't one of ours."""
    match = _EVENT_ID.fullmatch(value.strip())
    if match is None:
        return None
    return match.group(1), int(match.group(2))


def start_logged(turn: Turn, logs: TurnLogs, owner: str, metrics: Metrics | None = None) -> TurnLog:
    """Moves ``turn``'s events into a new log, in a task of its own, until the turn ends."""
    log = logs.open(owner, turn.cancel)
    log.pump = asyncio.get_running_loop().create_task(_pump(turn, log, logs, metrics))
    return log


async def drain(turn: Turn) -> tuple[list[events.Event], bool]:
    """The turn's next events, as many as are waiting (at least one), and whether it ended.

    The one place rejoining reads a turn's hand-off, so a change to it is made here.
    """
    batch = await turn.events.take()
    if None in batch:  # the end: nothing after it counts
        return batch[: batch.index(None)], True
    return batch, False


async def _pump(turn: Turn, log: TurnLog, logs: TurnLogs, metrics: Metrics | None) -> None:
    first = metrics is not None
    try:
        while True:
            batch, ended = await drain(turn)
            if first and batch:
                first = False
                metrics.turn_first_event.observe(time.perf_counter() - turn.started)  # type: ignore[union-attr]
            if batch:
                log.extend(batch)
            if ended:
                return
    finally:
        logs.end(log)


def follow(
    log: TurnLog | LogElsewhere,
    start: int,
    heartbeat_s: float,
    metrics: Metrics | None = None,
    render: Render | None = None,
) -> AsyncGenerator[bytes, None]:
    """The log's events numbered ``start`` and later, then the live rest until the turn ends.

    A log of this instance opens with its ``turn`` event, so following it from 0 yields that
    frame before any wait (what :class:`~channel_http.protocols.sse.Opening` asks). With a
    ``render``, the events are what it writes instead of this dialect's frames (another
    protocol's rendering, as :func:`~channel_http.protocols.sse.forward` takes one).
    """
    if isinstance(log, TurnLog):
        return _follow_here(log, start, heartbeat_s, metrics, render)
    return _follow_elsewhere(log, start, heartbeat_s, metrics, render)


async def _follow_here(
    log: TurnLog,
    start: int,
    heartbeat_s: float,
    metrics: Metrics | None,
    render: Render | None,
) -> AsyncGenerator[bytes, None]:
    tid = log.turn_id.encode()
    position = start
    log.attach()
    if metrics is not None:
        metrics.open_streams.inc()
    try:
        while True:
            end = len(log.events)
            if position < end:
                if render is None:
                    yield b"".join(framed(event, tid, seq) for seq, event in log.since(position))
                elif written := render([event for _, event in log.since(position)]):
                    yield written
                position = end
                continue
            if log.done:
                return
            try:
                async with asyncio.timeout(heartbeat_s):
                    await log.changed()
            except TimeoutError:
                yield HEARTBEAT
                if metrics is not None:
                    metrics.heartbeats.inc()
    finally:
        log.detach()
        if metrics is not None:
            metrics.open_streams.dec()


#: How long a reader elsewhere waits for a notice before it looks at the store anyway.
_POLL_S: Final = 0.5


async def _follow_elsewhere(
    log: LogElsewhere,
    start: int,
    heartbeat_s: float,
    metrics: Metrics | None,
    render: Render | None,
) -> AsyncGenerator[bytes, None]:
    tid = log.turn_id.encode()
    position = start
    loop = asyncio.get_running_loop()
    await log.attach()
    if metrics is not None:
        metrics.open_streams.inc()
    try:
        quiet_since = loop.time()
        while True:
            log.expect()  # before reading: a batch written meanwhile wakes the wait below
            frames, ended = await log.read(position)
            if frames:
                if render is None:
                    yield b"".join(
                        b"id: %b.%d\nevent: %b\ndata: %b\n\n" % (tid, seq, name, data)
                        for seq, name, data in frames
                    )
                elif written := render([_decoded(name, data) for _, name, data in frames]):
                    yield written
                position = frames[-1][0] + 1
                quiet_since = loop.time()
            if ended:
                return
            quiet = loop.time() - quiet_since
            if quiet >= heartbeat_s:
                yield HEARTBEAT
                quiet_since = loop.time()
                if metrics is not None:
                    metrics.heartbeats.inc()
                quiet = 0.0
            await log.changed(min(_POLL_S, heartbeat_s - quiet))
    finally:
        await asyncio.shield(log.detach())
        if metrics is not None:
            metrics.open_streams.dec()


_KINDS: Final[tuple[Any, ...]] = (*events.EVENT_TYPES, events.TurnStarted)
_DECODERS: Final = {kind.name: msgspec.json.Decoder(kind) for kind in _KINDS}


def _decoded(name: bytes, data: bytes) -> events.Event | events.TurnStarted:
    """An event another instance logged, from its name and JSON data, for a ``render``."""
    event: events.Event | events.TurnStarted = _DECODERS[name].decode(data)
    return event
