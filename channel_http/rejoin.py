"""Rejoining a turn: the stream of a :class:`~core.turn_log.TurnLog`, from any event on.

With ``HTTP_SURFACE_REJOIN_S`` > 0, ``POST /turn`` runs the turn into a log (a pump task
moves its events there in batches, so the turn never waits for a reader) and streams the log.
When the connection drops, the client comes back with the standard ``Last-Event-ID`` header,
either on ``GET /turn/events?turnId=…`` or by sending its ``POST /turn`` again (what
fetch-event-source and similar clients do on their own): it receives every event after that
id, then the live rest. Ids are ``<turn id>.<sequence number>``; the turn id is unguessable and
only its owner finds the log (anyone else gets the same 404 as for an unknown id).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final

from channel_http.sse import HEARTBEAT, framed
from core.sessions import Turn
from core.turn_log import TurnLog, TurnLogs

if TYPE_CHECKING:
    from core.metrics import Metrics

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


async def _pump(turn: Turn, log: TurnLog, logs: TurnLogs, metrics: Metrics | None) -> None:
    take = turn.events.take
    try:
        while True:
            batch = await take()
            ended = None in batch
            if ended:  # the end: nothing after it counts
                batch = batch[: batch.index(None)]
            if batch:
                if metrics is not None and not log.events:
                    metrics.turn_first_event.observe(time.perf_counter() - turn.started)
                log.extend(batch)
            if ended:
                return
    finally:
        logs.end(log)


async def follow(
    log: TurnLog, start: int, heartbeat_s: float, metrics: Metrics | None = None
) -> AsyncIterator[bytes]:
    """The log's events numbered ``start`` and later, then the live rest until the turn ends."""
    tid = log.turn_id.encode()
    position = start
    log.attach()
    if metrics is not None:
        metrics.open_streams.inc()
    try:
        while True:
            end = len(log.events)
            if position < end:
                yield b"".join(framed(event, tid, seq) for seq, event in log.since(position))
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
