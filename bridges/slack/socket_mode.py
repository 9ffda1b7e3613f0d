"""Slack over Socket Mode: the bridge opens its connections to Slack, no public URL needed.

``SLACK_MODE=socket`` with an app-level token (``xapp-…``, scope ``connections:write``):
:meth:`SlackSocketBridge.run` asks ``apps.connections.open`` for a WebSocket URL and holds the
connection through ``slack_sdk``'s asyncio Socket Mode client on aiohttp
(:mod:`slack_sdk.socket_mode.aiohttp`: the bridge's own HTTP stack already; it pings, notices
a connection gone silent and keeps trying to connect on its own, where the ``websockets``
client gives up after one failed attempt and speaks no proxy). Each envelope is read the way
a webhook delivery is (:class:`bridges.slack.bridge.SlackBot`: an ``events_api`` payload is an
Events API callback, an ``interactive`` one a button press), handed to the pipeline, and
acknowledged (its ``envelope_id`` sent back) once taken, before any turn runs. An envelope
not acknowledged is sent again by Slack, on this connection or another instance's: one the
bridge could not take (the state store down) is left unacknowledged on purpose, and one taken
already is run once by the de-duplication of deliveries (:mod:`bridges.deliveries`).

Back-pressure: the SDK's client reads every frame into its own ``message_queue`` and runs
each message's listeners in a task of its own, both without bound. Here the queue holds at
most :data:`READ_AHEAD` envelopes and at most :data:`TAKING_MAX` are being taken at once (each
waits for room in a full pipeline); past that the client stops reading the WebSocket, so
what Slack sends meanwhile stays with Slack, unacknowledged, and comes later or again. While
it stops reading, the pongs to its pings wait unread too: the client's ping-pong check does not
count that time (aiohttp's own heartbeat is off, so it can't close a connection held back).

A ``disconnect`` (``refresh_requested``, ``warning``, ``link_disabled``) or a connection lost
opens a new one through ``apps.connections.open``; attempts that never reach Slack's ``hello``
wait longer and longer (:data:`_FIRST_WAIT_S` doubling up to :data:`_MOST_WAIT_S`). An
app-level token Slack refuses (``invalid_auth``, ``not_allowed_token_type``, …) ends the
connection with one error in the log: no retry mends it.

Every instance holds its own connections (Slack spreads envelopes over them, up to ten per
app); nothing is leased. Nothing here logs the tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from typing import Any, Final

import aiohttp
import msgspec
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from bridges.json_body import decode
from bridges.port import BridgeError, Deliver, WebhookOutcome
from bridges.slack.bridge import SlackBot
from bridges.slack.wire import _SOCKET_ENVELOPE, _seconds
from core.config.settings import ConfigurationError, SlackSettings

__all__ = ["SlackSocketBridge"]

log = logging.getLogger("mercury.bridges.slack")

#: Seconds before the second attempt at a connection that never said hello; doubled each
#: further attempt, up to :data:`_MOST_WAIT_S`.
_FIRST_WAIT_S: Final = 1.0
_MOST_WAIT_S: Final = 60.0
#: ``apps.connections.open``'s errors that no retry mends: the app-level token is wrong,
#: revoked, of another kind, or lacks ``connections:write``.
_TOKEN_REFUSED: Final = frozenset(
    {
        "not_authed",
        "invalid_auth",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "not_allowed_token_type",
        "missing_scope",
        "no_permission",
    }
)
#: Seconds between the client's pings (a connection silent for four is replaced), and its
#: pause after a failed attempt to connect (the SDK's own default).
_PING_INTERVAL_S: Final = 5.0
#: Seconds an ``apps.connections.open`` call may take.
_OPEN_TIMEOUT_S: Final = 15
#: The largest envelope the bridge reads (characters): aiohttp's own frame limit until now,
#: far above Slack's largest event. One larger is acknowledged and refused, once.
ENVELOPE_MAX_CHARS: Final = 4 * 1024 * 1024
#: The WebSocket's frame limit (bytes): room for an envelope over the bridge's limit to be
#: read far enough to be acknowledged, instead of the connection dropping with it unanswered
#: (Slack would send it again for ever).
_FRAME_MAX_BYTES: Final = 64 * 1024 * 1024
#: Envelopes read from the connection and waiting to be taken; with this many waiting, the
#: client reads no further (the SDK's own queue has no bound).
READ_AHEAD: Final = 32
#: Envelopes being taken at once (read, handed to the pipeline, acknowledged); each waits for
#: room while the pipeline is full, and past this many the queue above fills up.
TAKING_MAX: Final = 16
#: Seconds the reader waits for room before it says so in the log, and at least between two
#: such lines.
_HELD_LOG_AFTER_S: Final = 1.0
_HELD_LOG_EVERY_S: Final = 60.0
#: An envelope's id, read from its text without parsing the rest (the first top-level key).
_ENVELOPE_ID: Final = re.compile(r'(?<!\\)"envelope_id"\s*:\s*"([^"\\]{1,200})"')


class SlackSocketBridge(SlackBot):
    """One Slack app's bot over Socket Mode: a :class:`~bridges.port.GatewayBridge` that
    every instance runs (no webhook: ``/webhooks/slack`` answers 404)."""

    def __init__(
        self,
        settings: SlackSettings,
        *,
        bot_name: str,
        first_wait_s: float = _FIRST_WAIT_S,
        most_wait_s: float = _MOST_WAIT_S,
        ping_interval_s: float = _PING_INTERVAL_S,
        read_ahead: int = READ_AHEAD,
        taking_max: int = TAKING_MAX,
    ) -> None:
        if not settings.bot_token or not settings.app_token:
            raise ConfigurationError(
                "The Slack bridge in Socket Mode needs SLACK_BOT_TOKEN and SLACK_APP_TOKEN; "
                "set both from the Slack app's settings, or turn MERCURY_SLACK off."
            )
        super().__init__(settings, bot_name=bot_name)
        self._app_token = settings.app_token
        self._first_wait_s = first_wait_s
        self._most_wait_s = most_wait_s
        self._ping_interval_s = ping_interval_s
        self._read_ahead = read_ahead
        self._taking_max = taking_max
        self._connections: _Connections | None = None

    @property
    def backlog(self) -> int:
        """Envelopes read from Slack and not taken yet: waiting in the client's queue or
        being taken (at most ``read_ahead + taking_max``)."""
        client = self._connections
        return 0 if client is None else client.message_queue.qsize() + len(client.taking)

    async def run(self, deliver: Deliver) -> None:
        """Hold Socket Mode connections and hand on what comes over them, until cancelled
        (or until Slack refuses the app-level token, which is logged once)."""
        refused: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        client = _Connections(
            self._app_token,
            logger=logging.getLogger("mercury.bridges.slack.socket_mode"),
            web_client=AsyncWebClient(base_url=self._api_url, timeout=_OPEN_TIMEOUT_S),
            ping_interval=self._ping_interval_s,
            read_ahead=self._read_ahead,
            taking_max=self._taking_max,
        )
        self._connections = client
        client.refused = refused
        client.first_wait_s, client.most_wait_s = self._first_wait_s, self._most_wait_s

        async def on_message(
            connections: AsyncBaseSocketModeClient, message: dict[str, Any], raw: str | None
        ) -> None:
            await self._take(connections, deliver, raw)

        client.message_listeners.append(on_message)
        try:
            await client.connect()
            code = await refused
            log.error(
                "Slack refused the app-level token (%s), so the Slack bridge receives nothing: "
                "set SLACK_APP_TOKEN to the app's xapp- token with the connections:write "
                "scope, turn Socket Mode on in the app's settings, and restart.",
                code,
            )
        finally:
            self._connections = None
            await client.close()

    async def _take(
        self, connections: AsyncBaseSocketModeClient, deliver: Deliver, raw: str | None
    ) -> None:
        """Read one Socket Mode message; an envelope's messages and presses are handed to
        ``deliver`` and the envelope acknowledged, unless taking them failed. An envelope over
        :data:`ENVELOPE_MAX_CHARS` is acknowledged unread (refused), so it comes once."""
        if raw is not None and len(raw) > ENVELOPE_MAX_CHARS:
            found = _ENVELOPE_ID.search(raw, 0, 4096)
            log.warning(
                "a Slack Socket Mode envelope (%s) of %d characters is over the %d the bridge "
                "reads: acknowledged and refused, nothing of it runs.",
                found.group(1) if found else "without an id",
                len(raw),
                ENVELOPE_MAX_CHARS,
            )
            if found is not None:
                await self._acknowledge(connections, found.group(1))
            return
        try:
            envelope = decode(_SOCKET_ENVELOPE, (raw or "").encode())
        except msgspec.DecodeError as exc:
            log.warning("a Slack Socket Mode message could not be read: %s", exc)
            return
        if envelope.type == "hello":
            if isinstance(connections, _Connections):
                connections.attempts = 0
            log.info("Slack's Socket Mode connection is open.")
            return
        if not envelope.envelope_id:
            return
        outcome = await self._read_envelope(envelope.type, bytes(envelope.payload))
        if outcome.verdict in ("malformed", "challenge"):
            log.warning(
                "a Slack %s envelope could not be read: %s",
                envelope.type[:40],
                outcome.reason or outcome.verdict,
            )
        try:
            for message in outcome.messages:
                await deliver(message)
            for press in outcome.presses:
                await deliver(press)
        except Exception:
            # Not acknowledged: Slack sends it again, and what was taken runs once.
            log.exception("a Slack %s envelope could not be taken", envelope.type[:40])
            return
        await self._acknowledge(connections, envelope.envelope_id)

    @staticmethod
    async def _acknowledge(connections: AsyncBaseSocketModeClient, envelope_id: str) -> None:
        try:
            await connections.send_socket_mode_response(SocketModeResponse(envelope_id=envelope_id))
        except (ConnectionError, aiohttp.ClientError) as exc:
            # The connection went away first: Slack sends the envelope again, and what was
            # taken runs once.
            log.info(
                "a Slack envelope's acknowledgement was lost with its connection (%s)",
                type(exc).__name__,
            )

    async def _read_envelope(self, kind: str, payload: bytes) -> WebhookOutcome:
        """An envelope's payload, read as its webhook delivery would be."""
        if kind == "events_api":
            return await self._read_callback(payload)
        if kind == "interactive":
            return self._read_press(payload)
        # Slash commands, shortcuts' and views' envelopes: nothing for the assistant.
        return WebhookOutcome(verdict="ignored", reason=f"a {kind} envelope")


class _Connections(SocketModeClient):
    """The SDK's aiohttp Socket Mode client, its new connections spaced out while they
    fail and stopped when Slack refuses the token, and what it reads bounded: a queue of
    ``read_ahead`` envelopes (its reader waits for room, reading no further) and
    ``taking_max`` envelopes' listeners at once (its processor waits for one to end)."""

    refused: asyncio.Future[str] | None = None
    first_wait_s: float = _FIRST_WAIT_S
    most_wait_s: float = _MOST_WAIT_S
    #: ``apps.connections.open`` calls since Slack last said hello.
    attempts: int = 0

    def __init__(self, app_token: str, *, read_ahead: int, taking_max: int, **options: Any) -> None:
        super().__init__(app_token, **options)
        # The SDK's processor task, started by its constructor, has not run yet: its first
        # ``message_queue.get()`` is this queue's.
        self.message_queue = asyncio.Queue(maxsize=read_ahead)
        self.taking_max = taking_max
        #: The envelopes' listeners running (each taking one envelope).
        self.taking: set[asyncio.Future[None]] = set()
        #: Readers waiting for room in the queue (one; two while a connection is replaced).
        self.held = 0
        #: When the reader last got room after waiting (``time.time()``), and when that was
        #: last logged.
        self.released_at = 0.0
        self._held_logged_at = 0.0

    async def enqueue_message(self, message: str) -> None:
        """The reader's step with each frame: into the queue, or, with the queue full, wait
        for room reading nothing further (back-pressure: Slack keeps the rest). A wait of
        over :data:`_HELD_LOG_AFTER_S` is logged (once a minute at most)."""
        if not self.message_queue.full():
            self.message_queue.put_nowait(message)
            return
        self.held += 1
        try:
            try:
                await asyncio.wait_for(self.message_queue.put(message), _HELD_LOG_AFTER_S)
            except TimeoutError:
                now = time.monotonic()
                if not self._held_logged_at or now - self._held_logged_at >= _HELD_LOG_EVERY_S:
                    self._held_logged_at = now
                    log.warning(
                        "%d Slack envelopes wait to be taken (the pipeline is full): the "
                        "Socket Mode connection is read no further until there is room; "
                        "Slack keeps what it sends meanwhile, unacknowledged, and sends it "
                        "again.",
                        self.message_queue.qsize() + len(self.taking),
                    )
                await self.message_queue.put(message)
        finally:
            self.held -= 1
            self.released_at = time.time()

    async def process_message(self) -> None:
        """The SDK's step (the next message's listeners started in a task of their own), once
        fewer than ``taking_max`` run."""
        while len(self.taking) >= self.taking_max:
            await asyncio.wait(set(self.taking), return_when=asyncio.FIRST_COMPLETED)
        raw: str | None = await self.message_queue.get()
        if raw is None:
            return
        # One over the bridge's limit is refused by its id alone, never parsed whole.
        fits = raw.startswith("{") and len(raw) <= ENVELOPE_MAX_CHARS
        message: dict[str, Any] = json.loads(raw) if fits else {}
        task = asyncio.ensure_future(self.run_message_listeners(message, raw))
        self.taking.add(task)
        task.add_done_callback(self.taking.discard)

    async def is_ping_pong_failing(self) -> bool:
        """The SDK's check (no pong for four ping intervals), not counting the time the
        reader waited for room: the pongs waited unread behind the envelopes."""
        if self.held:
            return False
        if self.last_ping_pong_time is not None:
            self.last_ping_pong_time = max(self.last_ping_pong_time, self.released_at)
        return await super().is_ping_pong_failing()

    async def close(self) -> None:
        """The SDK's close; the envelopes being taken are let go too (not acknowledged,
        Slack sends them again)."""
        await super().close()  # type: ignore[no-untyped-call]
        for task in list(self.taking):
            task.cancel()

    async def connect(self) -> None:  # type: ignore[override]
        """The SDK's ``connect`` (the old connection closed, a new one opened, its monitor and
        reader started), but a URL from ``apps.connections.open`` is used for one attempt
        only: one whose WebSocket fails is dropped and a new one asked for (Slack's URLs are
        single-use; the SDK would try the spent one for ever). The frame limit is
        :data:`_FRAME_MAX_BYTES`, and aiohttp's heartbeat is off."""
        while not self.closed:
            try:
                old = self.current_session
                self.auto_reconnect_enabled = False
                if old is not None:
                    with contextlib.suppress(Exception):
                        await old.close()
                if self.aiohttp_client_session.closed and not self.closed:
                    self.aiohttp_client_session = aiohttp.ClientSession()
                if self.wss_uri is None:
                    self.wss_uri = await self.issue_new_wss_url()
                url, self.wss_uri = self.wss_uri, None  # spent, whatever comes of it
                self.current_session = await self.aiohttp_client_session.ws_connect(
                    url,
                    autoping=False,
                    # The client's own pings alone tell a dead connection: aiohttp's heartbeat
                    # would close one held back (its pongs unread) as dead.
                    heartbeat=None,
                    proxy=self.proxy,
                    ssl=self.web_client.ssl if self.web_client.ssl is not None else True,
                    max_msg_size=_FRAME_MAX_BYTES,
                )
                self.auto_reconnect_enabled = self.default_auto_reconnect_enabled
                self.stale = False
                await self.current_session.ping(f"sdk-ping-pong:{time.time()}".encode())
                if self.current_session_monitor is not None:
                    self.current_session_monitor.cancel()
                self.current_session_monitor = asyncio.ensure_future(self.monitor_current_session())
                if self.message_receiver is not None:
                    self.message_receiver.cancel()
                self.message_receiver = asyncio.ensure_future(self.receive_messages())
                return
            except Exception as exc:
                if self.closed:
                    return
                log.warning(
                    "Slack's Socket Mode connection could not be opened (%s); asking for a new "
                    "URL.",
                    type(exc).__name__,
                )
                await asyncio.sleep(self.ping_interval)

    async def issue_new_wss_url(self) -> str:
        if self.attempts:
            wait = min(self.first_wait_s * 2 ** (self.attempts - 1), self.most_wait_s)
            await asyncio.sleep(wait)
        self.attempts += 1
        try:
            answer = await self.web_client.apps_connections_open(app_token=self.app_token)
        except SlackApiError as exc:
            code = str(exc.response.get("error") or f"HTTP {exc.response.status_code}")
            if code in _TOKEN_REFUSED:
                self.closed = True
                self.auto_reconnect_enabled = False
                if self.refused is not None and not self.refused.done():
                    self.refused.set_result(code)
            elif code == "ratelimited":
                retry = _seconds(exc.response.headers.get("Retry-After")) or self.most_wait_s
                await asyncio.sleep(min(retry, self.most_wait_s))
            log.warning("Slack's apps.connections.open failed (%s).", code)
            raise BridgeError(f"Slack refused apps.connections.open: {code}.") from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning(
                "Slack could not be reached for apps.connections.open (%s); trying again.",
                type(exc).__name__,
            )
            raise
        return str(answer["url"])

    async def run_message_listeners(self, message: dict[str, Any], raw_message: str) -> None:
        if message.get("type") == "disconnect":
            reason = str(message.get("reason") or "")[:60]
            if reason == "link_disabled":
                log.warning(
                    "Slack turned Socket Mode off for the app (link_disabled); the bridge "
                    "keeps asking for a connection: turn Socket Mode on in the app's settings."
                )
            else:
                log.info("Slack asked for a new Socket Mode connection (%s).", reason)
        await super().run_message_listeners(message, raw_message)
