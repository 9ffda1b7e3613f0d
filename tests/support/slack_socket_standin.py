"""A stand-in for Slack's Socket Mode, on top of the Slack stand-in's Web API (127.0.0.1).

``apps.connections.open`` (the app-level token as ``Authorization: Bearer``; a bot token is
``not_allowed_token_type``, any other ``invalid_auth``; ``fail_next`` fails it too) hands out
a one-use ``ws://127.0.0.1:<port>/link/?ticket=…`` URL; the WebSocket there speaks Slack's
envelope protocol::

    server ─► {"type": "hello", "num_connections": 1, "connection_info": {...}, ...}
    server ─► {"type": "events_api" | "interactive", "envelope_id": "…", "payload": {...},
               "accepts_response_payload": false, "retry_attempt": 0, "retry_reason": ""}
    client ─► {"envelope_id": "…"}                      (the acknowledgement)
    server ─► {"type": "disconnect", "reason": "refresh_requested", "debug_info": {...}}

As Slack does, it sends each envelope on one open connection (the newest it has not asked to
be replaced), keeps an envelope until it is acknowledged, and sends one whose connection went
away unacknowledged again on the next (``retry_attempt`` + 1). A connection it asked to be
replaced (:meth:`SlackSocketStandIn.refresh`) gets no new envelopes and is closed by the
client; :meth:`SlackSocketStandIn.drop` ends a connection abruptly, and
``drop_after=True`` ends it right after an envelope, before its acknowledgement can count;
:meth:`SlackSocketStandIn.retry_unacked` sends what is not acknowledged yet again, as Slack
does when an acknowledgement is late.

Everything else (``chat.postMessage``, users, files, ``response_url``) is the Slack stand-in's
(:mod:`tests.support.slack_standin`).
"""

from __future__ import annotations

import contextlib
import hmac
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import WSMsgType, web

from tests.support.slack_standin import APP_ID, ApiCall, SlackStandIn, _bearer, _refused

__all__ = ["APP_TOKEN", "Envelope", "SlackSocketStandIn"]

APP_TOKEN: Final = "xapp-1-A0STANDIN-0001-standin-app-token"


@dataclass(kw_only=True)
class Envelope:
    """One envelope Slack holds for the app until it is acknowledged."""

    envelope_id: str
    type: str
    payload: dict[str, Any]
    #: How many times it was sent (redeliveries after a lost connection included).
    sent: int = 0
    #: How many acknowledgements came for it on a live connection.
    acked: int = 0
    carrier: _Link | None = field(default=None, repr=False)


@dataclass(eq=False, kw_only=True)
class _Link:
    """One WebSocket connection and what Slack thinks of it."""

    socket: web.WebSocketResponse
    number: int
    #: A ``disconnect`` was sent: no new envelopes go on it.
    retiring: bool = False
    #: Ended by the stand-in: what comes on it after that does not count.
    dropped: bool = False
    closed: bool = False

    @property
    def live(self) -> bool:
        return not (self.dropped or self.closed)


class SlackSocketStandIn(SlackStandIn):
    """Slack's Web API and its Socket Mode connections for one app."""

    name = "Slack Socket Mode stand-in"

    def __init__(self, *, app_token: str = APP_TOKEN, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app_token = app_token
        self.envelopes: dict[str, Envelope] = {}
        #: ``apps.connections.open`` answered with a URL / refused.
        self.opened = 0
        self.refused_opens = 0
        #: Connections that got Slack's hello.
        self.hellos = 0
        #: How many WebSocket connections to come are refused (503), their URL spent.
        self.refuse_links = 0
        #: Connections refused so far, and those tried with a URL already spent.
        self.refused_links = 0
        self.spent_urls = 0
        #: When each ``apps.connections.open`` came (``time.monotonic``).
        self.open_times: list[float] = []
        self._links: list[_Link] = []
        self._tickets: set[str] = set()
        self._numbers = itertools.count(1)

    def env(self) -> dict[str, str]:
        """The environment of a server whose Slack bridge runs in Socket Mode against this
        stand-in (no signing secret: Socket Mode reads no signed requests)."""
        env = super().env()
        del env["SLACK_SIGNING_SECRET"]
        return {**env, "SLACK_MODE": "socket", "SLACK_APP_TOKEN": self.app_token}

    def reset(self) -> None:
        """Forget the envelopes and the counts too (the connections stay)."""
        super().reset()
        self.envelopes.clear()
        self.opened = self.refused_opens = 0
        self.refuse_links = self.refused_links = self.spent_urls = 0
        self.open_times.clear()

    @property
    def unacked(self) -> list[Envelope]:
        return [envelope for envelope in self.envelopes.values() if not envelope.acked]

    @property
    def open_connections(self) -> int:
        return sum(1 for link in self._links if link.live)

    # -- what a test does --------------------------------------------------------------------

    async def send_event(self, event: dict[str, Any], *, drop_after: bool = False) -> Envelope:
        """``event`` in an ``events_api`` envelope (its ``event_callback`` as the payload)."""
        return await self.send("events_api", self.envelope(event), drop_after=drop_after)

    async def send_press(self, payload: dict[str, Any]) -> Envelope:
        """A ``block_actions`` payload (:meth:`block_actions`) in an ``interactive`` envelope."""
        return await self.send("interactive", payload)

    async def send(
        self, kind: str, payload: dict[str, Any], *, drop_after: bool = False
    ) -> Envelope:
        """Hold a new envelope and send it on a connection (or on the next one opened);
        ``drop_after``: end that connection right after it."""
        envelope = Envelope(envelope_id=self._new_id("env-"), type=kind, payload=payload)
        await self.in_loop(self._hold(envelope, drop_after))
        return envelope

    async def refresh(self) -> None:
        """``disconnect`` with reason ``refresh_requested`` on every open connection."""
        await self.in_loop(self._disconnect("refresh_requested"))

    async def retry_unacked(self) -> None:
        """Send every envelope not acknowledged yet again on a connection, as Slack does when
        an acknowledgement is late (``retry_reason`` ``timeout``)."""
        await self.in_loop(self._retry())

    async def drop(self) -> None:
        """End every open connection abruptly, as a network failure would."""
        await self.in_loop(self._drop_all())

    # -- serving -----------------------------------------------------------------------------

    def application(self) -> web.Application:
        app = super().application()
        app.router.add_get("/link/", self._link)
        return app

    async def _api(self, request: web.Request) -> web.Response:
        if request.match_info["method"] != "apps.connections.open":
            return await super()._api(request)
        token = _bearer(request.headers.get("Authorization"))
        with self._lock:
            self.calls.append(
                ApiCall(
                    method="apps.connections.open",
                    params={},
                    http_method=request.method,
                    token=token,
                )
            )
            self.open_times.append(time.monotonic())
            failure = self._take_failure("apps.connections.open")
        if failure is not None:
            return web.json_response({"ok": False, "error": failure.error}, status=failure.status)
        if token is None:
            self.refused_opens += 1
            return _refused("not_authed")
        if not hmac.compare_digest(token, self.app_token):
            self.refused_opens += 1
            if token.startswith("xoxb-"):
                return _refused("not_allowed_token_type")
            return _refused("invalid_auth")
        ticket = self._new_id("ticket-")
        self._tickets.add(ticket)
        self.opened += 1
        url = f"ws://127.0.0.1:{self.port}/link/?ticket={ticket}&app_id={APP_ID}"
        return web.json_response({"ok": True, "url": url})

    async def _link(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            self.spent_urls += 1
            return web.Response(status=401, text="The ticket is unknown or used.")
        self._tickets.discard(ticket)
        if self.refuse_links > 0:  # a URL is good for one attempt, even a failed one
            self.refuse_links -= 1
            self.refused_links += 1
            return web.Response(status=503, text="The connection could not be made.")
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        link = _Link(socket=socket, number=next(self._numbers))
        self._links.append(link)
        try:
            await socket.send_json(
                {
                    "type": "hello",
                    "num_connections": self.open_connections,
                    "debug_info": {
                        "host": "standin-socket",
                        "build_number": 1,
                        "approximate_connection_time": 3600,
                    },
                    "connection_info": {"app_id": APP_ID},
                }
            )
            self.hellos += 1
            self._notify()
            await self._flush()
            async for message in socket:
                if message.type != WSMsgType.TEXT:
                    continue
                with contextlib.suppress(ValueError):
                    self._acknowledged(link, json.loads(message.data))
        finally:
            link.closed = True
            self._links.remove(link)
            self._notify()
            # What it carried unacknowledged goes on another connection.
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self._flush()
        return socket

    def _acknowledged(self, link: _Link, answer: Any) -> None:
        if link.dropped or not isinstance(answer, dict):
            return
        envelope = self.envelopes.get(str(answer.get("envelope_id")))
        if envelope is not None:
            envelope.acked += 1
            self._notify()

    async def _hold(self, envelope: Envelope, drop_after: bool) -> None:
        self.envelopes[envelope.envelope_id] = envelope
        link = await self._send(envelope)
        if drop_after and link is not None:
            link.dropped = True
            await link.socket.close(code=1011, message=b"dropped")

    def _target(self) -> _Link | None:
        ready = [link for link in self._links if link.live and not link.retiring]
        return ready[-1] if ready else None

    async def _send(self, envelope: Envelope) -> _Link | None:
        link = self._target()
        if link is None:
            return None  # sent when a connection opens
        envelope.carrier = link
        await link.socket.send_json(
            {
                "envelope_id": envelope.envelope_id,
                "payload": envelope.payload,
                "type": envelope.type,
                "accepts_response_payload": False,
                "retry_attempt": envelope.sent,
                "retry_reason": "timeout" if envelope.sent else "",
            }
        )
        envelope.sent += 1
        self._notify()
        return link

    async def _flush(self) -> None:
        """Send every unacknowledged envelope whose connection went away."""
        for envelope in list(self.envelopes.values()):
            carrier = envelope.carrier
            if not envelope.acked and (carrier is None or not carrier.live):
                if await self._send(envelope) is None:
                    return

    async def _retry(self) -> None:
        for envelope in list(self.envelopes.values()):
            if not envelope.acked:
                await self._send(envelope)

    async def _disconnect(self, reason: str) -> None:
        for link in list(self._links):
            if link.live and not link.retiring:
                link.retiring = True
                await link.socket.send_json(
                    {
                        "type": "disconnect",
                        "reason": reason,
                        "debug_info": {"host": "standin-socket"},
                    }
                )

    async def _drop_all(self) -> None:
        for link in list(self._links):
            if link.live:
                link.dropped = True
                await link.socket.close(code=1011, message=b"dropped")

    async def closing(self) -> None:
        for link in list(self._links):
            with contextlib.suppress(ConnectionError, RuntimeError):
                await link.socket.close()
