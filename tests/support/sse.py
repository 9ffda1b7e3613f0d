"""Reading a turn's event stream as a client would, with arrival times."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import aconnect_sse


@dataclass
class Received:
    status: int
    headers: httpx.Headers
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    raw: bytes = b""
    body: dict[str, Any] | None = None
    turn_id: str | None = None
    """From the ``turn`` event that opens every stream (kept out of ``events``)."""
    ids: list[str] = field(default_factory=list)
    """The SSE id of every event in ``events``."""

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def of(self, name: str) -> list[dict[str, Any]]:
        return [data for event, data in self.events if event == name]

    @property
    def final(self) -> dict[str, Any]:
        """The one ``final`` event, its ``usage`` (the model's token counts, which the
        stand-ins report on every answer) left out: read it with ``of("final")``."""
        finals = self.of("final")
        assert len(finals) == 1, self.events
        return {key: value for key, value in finals[0].items() if key != "usage"}

    @property
    def text(self) -> str:
        return "".join(data["chunk"] for data in self.of("text"))


async def turn(
    client: httpx.AsyncClient,
    body: dict[str, Any],
    headers: dict[str, str],
    *,
    path: str = "/turn",
) -> Received:
    """POST a turn and read every event until the stream closes."""
    async with aconnect_sse(client, "POST", path, json=body, headers=headers) as source:
        response = source.response
        received = Received(status=response.status_code, headers=response.headers)
        if response.status_code != 200:
            await response.aread()
            received.body = json.loads(response.content)
            return received
        async for event in source.aiter_sse():
            if not event.data:  # httpx_sse's empty event for a heartbeat after an id
                continue
            data = json.loads(event.data)
            if event.event == "turn":
                received.turn_id = data["turnId"]
                continue
            received.events.append((event.event, data))
            received.ids.append(event.id)
            received.times.append(time.monotonic())
    return received
