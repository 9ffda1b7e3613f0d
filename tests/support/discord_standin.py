"""A stand-in for Discord: its REST API, its CDN and its gateway on 127.0.0.1, for discord.py.

The real ``discord.Client`` logs in, opens the gateway, reads dispatches and sends replies
through it, so a test exercises the same wire as against Discord::

    with DiscordStandIn() as discord_api:
        settings = DiscordSettings(
            enabled=True, bot_token=discord_api.token, api_url=discord_api.api_url
        )
        ...  # run the bridge
        discord_api.wait_until_ready()
        discord_api.post_message(GENERAL, ALICE, f"<@{BOT.id}> hello")
        discord_api.wait_for_calls(lambda c: c.path.endswith("/messages"))

What it serves (every REST call needs ``Authorization: Bot <token>``; a wrong one is a 401)::

    GET  /api/v10/users/@me                      the bot's user
    GET  /api/v10/oauth2/applications/@me        the bot's application (discord.py's login)
    GET  /api/v10/gateway, /api/v10/gateway/bot  where the gateway is
    GET  /api/v10/channels/{id}                  a channel, thread or DM channel
    GET  /api/v10/channels/{id}/messages/{id}    a message posted here
    POST /api/v10/channels/{id}/messages         JSON, or multipart (payload_json + files[n])
    PATCH  /api/v10/channels/{id}/messages/{id}  an edit of the bot's own message (the same
                                                 checks; files add attachments)
    DELETE /api/v10/channels/{id}/messages/{id}  204
    POST /api/v10/channels/{id}/typing           204
    POST /api/v10/users/@me/channels             the DM channel with ``recipient_id``
    POST /api/v10/interactions/{id}/{token}/callback     answers a press (types 4, 5, 6, 7),
                                                 once, within ``interaction_window_s``; no
                                                 bot token (Discord needs none)
    POST   /api/v10/webhooks/{app}/{token}       a follow-up to an answered press
    PATCH  /api/v10/webhooks/{app}/{token}/messages/@original   its original message
    GET  /attachments/{channel}/{id}/{filename}  the CDN; signed like Discord's (ex, is, hm):
                                                 a missing or wrong signature is a 404
    GET  /gateway (websocket)                    the gateway, below

The gateway speaks Discord's protocol: HELLO (op 10), heartbeat ACKs (op 11), IDENTIFY (op 2:
a wrong token closes with 4004, a privileged intent the application has not enabled with
4014), READY (guilds unavailable, ``session_id``, ``resume_gateway_url``), one GUILD_CREATE per
guild (channels, active threads, roles, the bot's member), RESUME (op 6) answered with the
session's events after the given ``seq`` replayed and RESUMED (an unknown session, or one
its client closed with 1000/1001, is INVALID_SESSION), and RECONNECT (op 7) when a test
asks. Events reach every session, and are kept for one whose connection dropped until it is
resumed; a session resumed on a new connection leaves the old one closed (4000). IDENTIFYs
and RESUMEs are recorded, and so is the most connections live at once. It honours
``encoding=json`` and ``compress=zlib-stream`` (one zlib stream per connection, every
payload flushed with Z_SYNC_FLUSH), as discord.py asks; any other encoding or compression
closes with 4002.

Every REST call and every CDN download is recorded (:class:`RestCall`); the next N of them
(or of those of one method) can be told to fail (:meth:`DiscordStandIn.fail_next`: a 5xx, or
a 429 with ``retry_after`` as Discord sends it) and every answer can be slowed
(:attr:`DiscordStandIn.delay_s`). A bot's message is dispatched back to the gateway as
MESSAGE_CREATE, an edit as MESSAGE_UPDATE, as Discord does.

Buttons: a message's ``components`` (action rows of buttons) are checked as Discord checks
them and kept on the message; :meth:`DiscordStandIn.press` has a person press one, sending
INTERACTION_CREATE (a message component, type 3) over the gateway, and every answer to it is
recorded (:class:`InteractionAnswer`: a callback's type and flags, a follow-up, an edit of
the original). A person in ``dms_closed`` takes no direct message (403, 50007).

Its start, stop, address, waits and errors (``StandInError``, ``StandInTimeoutError``) are
the stand-ins' base's, :mod:`tests.support.standin`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import mimetypes
import secrets
import time
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote

from aiohttp import BodyPartReader, WSMsgType, web

from tests.support.standin import StandInError, StandInTimeoutError, ThreadedStandIn

__all__ = [
    "ALICE",
    "BOB",
    "BOT",
    "CAROL",
    "DM_ALICE",
    "ENGINEERS",
    "GENERAL",
    "GROUP_DM",
    "GUILD",
    "RANDOM",
    "THREAD",
    "DiscordStandIn",
    "Failure",
    "InteractionAnswer",
    "Pressing",
    "RestCall",
    "StandInError",
    "StandInTimeoutError",
    "UploadedFile",
    "User",
]

API_PREFIX: Final = "/api/v10"
DISCORD_EPOCH_MS: Final = 1_420_070_400_000
#: discord.py's ``Intents.message_content``: privileged, enabled in the developer portal.
MESSAGE_CONTENT_INTENT: Final = 1 << 15
#: Discord's upload limit for a bot in a guild without boosts.
UPLOAD_LIMIT: Final = 10 * 1024 * 1024

# Gateway opcodes.
_DISPATCH, _HEARTBEAT, _IDENTIFY, _RESUME, _RECONNECT = 0, 1, 2, 6, 7
_INVALID_SESSION, _HELLO, _HEARTBEAT_ACK = 9, 10, 11


# --------------------------------------------------------------------------------------------
# The world the stand-in holds


@dataclass(frozen=True, kw_only=True)
class User:
    """A Discord user; ``nick`` is their nickname in the test guild."""

    id: int
    username: str
    global_name: str | None = None
    nick: str | None = None
    bot: bool = False

    def payload(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": str(self.id),
            "username": self.username,
            "discriminator": "0",
            "global_name": self.global_name,
            "avatar": None,
            "public_flags": 0,
        }
        if self.bot:
            data["bot"] = True
        return data

    def member_payload(self) -> dict[str, Any]:
        """The guild member object without its user, as MESSAGE_CREATE carries it."""
        return {
            "roles": [],
            "nick": self.nick,
            "avatar": None,
            "joined_at": "2024-01-01T00:00:00.000000+00:00",
            "premium_since": None,
            "deaf": False,
            "mute": False,
            "flags": 0,
            "pending": False,
        }


BOT: Final = User(id=1100000000000000001, username="mercury", global_name="Mercury", bot=True)
ALICE: Final = User(id=1100000000000000011, username="alice", global_name="Alice")
BOB: Final = User(id=1100000000000000012, username="bob", global_name="Bob", nick="Bobby")
CAROL: Final = User(id=1100000000000000013, username="carol", global_name=None)
GUILD: Final = 1200000000000000001
GENERAL: Final = 1200000000000000010
RANDOM: Final = 1200000000000000011
THREAD: Final = 1200000000000000020
ENGINEERS: Final = 1200000000000000030
DM_ALICE: Final = 1200000000000000040
#: A group DM (channel type 3) of Alice, Bob and the bot.
GROUP_DM: Final = 1200000000000000050
_APPLICATION_ID: Final = BOT.id
#: Interaction callback types (Discord's InteractionResponseType).
CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE = 4, 5, 6, 7
EPHEMERAL: Final = 1 << 6


@dataclass(kw_only=True)
class UploadedFile:
    """One ``files[n]`` part of a multipart message."""

    field: str
    filename: str
    content_type: str
    data: bytes


@dataclass(kw_only=True)
class RestCall:
    """One HTTP request the stand-in answered (REST or CDN); ``path`` has no ``/api/v10``."""

    method: str
    path: str
    query: dict[str, str]
    authorization: str | None
    json: Any = None
    files: list[UploadedFile] = field(default_factory=list)
    status: int = 0
    answer: Any = None
    """The message a message create made."""
    at: float = field(default_factory=time.monotonic)
    """When it came (monotonic), to count calls in a window."""

    @property
    def content(self) -> str | None:
        """The message text of a message create, if any."""
        return self.json.get("content") if isinstance(self.json, dict) else None


_CALL: Final = web.RequestKey("call", RestCall)


@dataclass(frozen=True, kw_only=True)
class Failure:
    """How the stand-in fails one call: a status and, for a 429, Discord's ``retry_after``;
    ``method`` narrows it to calls of that method (the others pass)."""

    status: int = 500
    retry_after: float = 1.0
    message: str | None = None
    method: str | None = None


@dataclass(kw_only=True)
class Pressing:
    """A button a person pressed: the interaction Discord sent, and whether it was answered."""

    id: int
    token: str
    user: User
    channel_id: int
    message_id: int
    custom_id: str
    created: float
    """When it was sent (monotonic): Discord takes the first answer within 3 s."""
    acknowledged: bool = False
    original_id: int | None = None
    """The message ``@original`` names once answered (the pressed one, or the answer's)."""


@dataclass(frozen=True, kw_only=True)
class InteractionAnswer:
    """One answer to a press: ``via`` a ``callback`` (``type`` 4-7), a ``followup``, or an
    edit of the ``original``; ``flags`` 64 is ephemeral (only the presser sees it)."""

    interaction_id: int
    via: str
    type: int | None
    flags: int
    content: str | None
    components: list[dict[str, Any]] | None

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & EPHEMERAL)


@dataclass(kw_only=True)
class _Channel:
    id: int
    type: int
    name: str | None = None
    guild_id: int | None = None
    parent_id: int | None = None
    recipients: tuple[User, ...] = ()
    position: int = 0

    def payload(self, *, in_guild_create: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {"id": str(self.id), "type": self.type, "flags": 0}
        if self.type in (1, 3):  # a DM; a group DM (its recipients leave the bot out)
            data["recipients"] = [u.payload() for u in self.recipients]
            data["last_message_id"] = None
            if self.type == 3:
                data.update(name=self.name, icon=None, owner_id=str(self.recipients[0].id))
            return data
        if not in_guild_create:
            data["guild_id"] = str(self.guild_id)
        data.update(
            name=self.name,
            parent_id=None if self.parent_id is None else str(self.parent_id),
            last_message_id=None,
            rate_limit_per_user=0,
        )
        if self.type in (11, 12):
            data.update(
                guild_id=str(self.guild_id),
                owner_id=str(ALICE.id),
                message_count=0,
                member_count=2,
                thread_metadata={
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "archive_timestamp": _now_iso(),
                    "locked": False,
                },
            )
        else:
            data.update(position=self.position, topic=None, nsfw=False, permission_overwrites=[])
        return data


@dataclass(kw_only=True)
class _Session:
    """One gateway connection."""

    ws: web.WebSocketResponse
    compressor: Any = None
    session_id: str | None = None
    sequence: int = 0
    identified: bool = False
    #: Every dispatch of the session so far (sequence, event, data), to replay on RESUME.
    log: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)

    @property
    def live(self) -> bool:
        return self.identified and not self.ws.closed

    async def send(self, payload: dict[str, Any]) -> None:
        text = json.dumps(payload, separators=(",", ":"))
        if self.compressor is None:
            await self.ws.send_str(text)
        else:
            data = self.compressor.compress(text.encode()) + self.compressor.flush(
                zlib.Z_SYNC_FLUSH
            )
            await self.ws.send_bytes(data)

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send ``event`` with the session's next sequence number; kept to be replayed, and
        only kept while no connection holds the session (Discord buffers it)."""
        self.sequence += 1
        self.log.append((self.sequence, event, data))
        if not self.ws.closed:
            # A connection whose peer just died (kill -9) may not be closed yet while its
            # transport is: the event stays in the log for the RESUME, as Discord keeps it.
            with contextlib.suppress(ConnectionResetError):
                await self.send({"op": _DISPATCH, "t": event, "s": self.sequence, "d": data})


# --------------------------------------------------------------------------------------------
# The stand-in


class DiscordStandIn(ThreadedStandIn):
    """Discord's REST API, CDN and gateway on 127.0.0.1; a context manager running a thread."""

    name = "Discord stand-in"
    wait_hint = "check that the client really connected or called"
    wait_timeout = 10.0
    shutdown_timeout = 1.0

    def __init__(
        self,
        *,
        token: str = "standin.bot-token.discord",  # noqa: S107 - a stand-in's token
        message_content_enabled: bool = True,
        heartbeat_interval_ms: int = 41_250,
    ) -> None:
        super().__init__()
        self.token = token
        self.message_content_enabled = message_content_enabled
        """Whether the application may ask for the privileged MESSAGE CONTENT intent."""
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.delay_s = 0.0
        """A pause before every REST and CDN answer."""
        self.calls: list[RestCall] = []
        self.identifies: list[dict[str, Any]] = []
        """Every IDENTIFY's ``d``, the token replaced by whether it was right."""
        self.gateway_queries: list[dict[str, str]] = []
        self.gateway_closes: list[int] = []
        """Close codes the stand-in sent."""
        self.ready_count = 0
        self.resumed_count = 0
        self.resumes: list[dict[str, Any]] = []
        """Every RESUME's ``d`` (the token replaced by whether it was right), with
        ``accepted``: whether the session was resumed (else INVALID_SESSION)."""
        self.most_live_sessions = 0
        """The most connections that held an identified session at the same moment."""
        self.session_ids: list[str] = []
        """The id of every session an IDENTIFY started, in order."""
        self.heartbeats = 0
        self.messages: dict[int, dict[str, Any]] = {}
        self.channels: dict[int, _Channel] = {}
        self.forbidden_channels: set[int] = set()
        """Channels where the bot lacks Send Messages: a post there is a 403 (50013)."""
        self.dms_closed: set[int] = set()
        """People who take no direct messages from the bot: a DM to them is a 403 (50007)."""
        self.interaction_window_s = 3.0
        """How long a press waits for its first answer; after that it is unknown (10062)."""
        self.pressings: dict[int, Pressing] = {}
        self.answers: list[InteractionAnswer] = []
        """Every answer to a press, in order."""
        self.ephemeral_messages: dict[int, dict[str, Any]] = {}
        self._failures: deque[Failure] = deque()
        self._files: dict[str, tuple[bytes, str]] = {}
        self._cdn_key = secrets.token_bytes(16)
        #: Where the CDN redirects every download to, when set (a CDN gone astray).
        self.cdn_redirect: str | None = None
        self._sessions: list[_Session] = []
        self._resumable: dict[str, _Session] = {}
        self._closings: set[asyncio.Future[bool]] = set()
        self._ids = 0
        self._build_world()

    def _build_world(self) -> None:
        for channel in (
            _Channel(id=GENERAL, type=0, name="general", guild_id=GUILD, position=0),
            _Channel(id=RANDOM, type=0, name="random", guild_id=GUILD, position=1),
            _Channel(id=THREAD, type=11, name="planning", guild_id=GUILD, parent_id=GENERAL),
            _Channel(id=DM_ALICE, type=1, recipients=(ALICE,)),
            _Channel(id=GROUP_DM, type=3, name="lunch", recipients=(ALICE, BOB)),
        ):
            self.channels[channel.id] = channel
        self._announced_threads = {THREAD}

    # -- where it is ---------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        """The REST base, as ``DISCORD_API_URL`` takes it."""
        return self.url + API_PREFIX

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    # -- scripting -----------------------------------------------------------------------

    def fail_next(
        self,
        n: int = 1,
        *,
        status: int = 500,
        retry_after: float = 1.0,
        method: str | None = None,
    ) -> None:
        """Answer the next ``n`` REST or CDN calls (of ``method``, if given) with ``status``
        (a 429 says ``retry_after``, in its body and its ``Retry-After`` header)."""
        self._failures.extend(
            Failure(status=status, retry_after=retry_after, method=method) for _ in range(n)
        )

    def press(
        self,
        message_id: int,
        user: User,
        *,
        label: str | None = None,
        custom_id: str | None = None,
        as_seen: dict[str, Any] | None = None,
        timeout: float = 5.0,
    ) -> Pressing:
        """Have ``user`` press a button of the message (by ``label``, or its ``custom_id``; the
        first button without either): INTERACTION_CREATE goes to the gateway.

        ``as_seen`` is the message as the person's client still shows it (a copy taken
        earlier): a button pressed before the client got the update that took it away.
        """
        message = as_seen if as_seen is not None else self.messages.get(message_id)
        if message is None:
            raise StandInError(f"The Discord stand-in has no message {message_id}.")
        buttons = [
            b
            for row in message.get("components") or []
            for b in row.get("components", [])
            if b.get("type") == 2
        ]
        chosen = [
            b
            for b in buttons
            if (label is None or b.get("label") == label)
            and (custom_id is None or b.get("custom_id") == custom_id)
        ]
        if not chosen:
            raise StandInError(
                f"Message {message_id} has no such button (it has "
                f"{[b.get('label') for b in buttons]}); Discord shows only the buttons it has."
            )
        channel = self._channel(int(message["channel_id"]))
        pressing = Pressing(
            id=self._snowflake(),
            token="aW50ZXJhY3Rpb24" + secrets.token_urlsafe(48),
            user=user,
            channel_id=channel.id,
            message_id=message_id,
            custom_id=chosen[0]["custom_id"],
            created=time.monotonic(),
        )
        self.pressings[pressing.id] = pressing
        payload: dict[str, Any] = {
            "id": str(pressing.id),
            "application_id": str(_APPLICATION_ID),
            "type": 3,
            "data": {"custom_id": pressing.custom_id, "component_type": 2},
            "channel_id": str(channel.id),
            "channel": channel.payload(),
            "token": pressing.token,
            "version": 1,
            "message": message,
            "app_permissions": "2248473465835073",
            "locale": "en-US",
            "entitlements": [],
            "attachment_size_limit": UPLOAD_LIMIT,
        }
        if channel.guild_id is not None:
            payload.update(
                guild_id=str(channel.guild_id),
                guild={"id": str(channel.guild_id), "locale": "en-US", "features": []},
                guild_locale="en-US",
                member={**user.member_payload(), "user": user.payload(), "permissions": "0"},
                authorizing_integration_owners={"0": str(channel.guild_id)},
                context=0,
            )
        else:
            payload.update(
                user=user.payload(),
                authorizing_integration_owners={"0": str(channel.guild_id or 0)},
                context=1,
            )
        self.dispatch("INTERACTION_CREATE", payload, timeout=timeout)
        return pressing

    def answers_to(self, pressing: Pressing) -> list[InteractionAnswer]:
        return [a for a in list(self.answers) if a.interaction_id == pressing.id]

    def edits(self, message_id: int | None = None) -> list[RestCall]:
        """The message edits answered 200, in order (``message_id`` narrows them)."""
        return self.matching(
            lambda c: (
                c.method == "PATCH"
                and c.path.startswith("/channels/")
                and (message_id is None or c.path.endswith(f"/messages/{message_id}"))
                and c.status == 200
            )
        )

    def create_thread(self, parent_id: int, name: str) -> int:
        """A thread the gateway never announced: discord.py knows it only by asking REST."""
        thread_id = self._snowflake()
        self.channels[thread_id] = _Channel(
            id=thread_id, type=11, name=name, guild_id=GUILD, parent_id=parent_id
        )
        return thread_id

    def add_file(self, channel_id: int, filename: str, data: bytes, content_type: str) -> dict:
        """Put ``data`` on the CDN; the attachment object a message carries for it."""
        attachment_id = self._snowflake()
        path = f"/attachments/{channel_id}/{attachment_id}/{filename}"
        self._files[path] = (data, content_type)
        url = self.url + quote(path) + "?" + self._signature(path)
        return {
            "id": str(attachment_id),
            "filename": filename,
            "size": len(data),
            "url": url,
            "proxy_url": url,
            "content_type": content_type,
        }

    def post_message(
        self,
        channel_id: int,
        author: User,
        content: str,
        *,
        mentions: Sequence[User] = (),
        role_mentions: Sequence[int] = (),
        reply_to: int | None = None,
        resolve_reply: bool = True,
        attachments: Sequence[dict[str, Any]] = (),
        webhook_id: int | None = None,
        message_type: int | None = None,
        announce: bool = True,
        sent_at: float | None = None,
        timeout: float = 5.0,
    ) -> dict[str, Any]:
        """Have ``author`` post in ``channel_id``: store it, dispatch MESSAGE_CREATE; its payload.

        ``reply_to`` makes it a reply (type 19); ``resolve_reply=False`` leaves
        ``referenced_message`` out, as Discord does when it did not look the message up.
        ``message_type`` overrides the type (7: a member joined, a system message).
        ``announce=False`` only stores it: a message from before the client connected.
        ``sent_at`` (epoch seconds) dates its snowflake id, as a message sent then has.
        """
        channel = self._channel(channel_id)
        payload = self._message_payload(
            channel,
            author,
            content,
            mentions=mentions,
            role_mentions=role_mentions,
            attachments=list(attachments),
            reply_to=reply_to,
            resolve_reply=resolve_reply,
            sent_at=sent_at,
        )
        if webhook_id is not None:
            payload["webhook_id"] = str(webhook_id)
        if message_type is not None:
            payload["type"] = message_type
        if announce:
            self.dispatch("MESSAGE_CREATE", payload, timeout=timeout)
        return payload

    def dispatch(self, event: str, data: dict[str, Any], *, timeout: float = 5.0) -> None:
        """Send a dispatch to every identified gateway connection (wait_until_ready first)."""
        self.run_in_loop(self._dispatch(event, data), timeout)

    def request_reconnect(self, *, timeout: float = 5.0) -> None:
        """Ask every connection to reconnect (op 7), as Discord does before it moves a session."""
        self.run_in_loop(self._send_all({"op": _RECONNECT, "d": None}), timeout)

    # -- waiting (from any thread) -------------------------------------------------------

    async def wait_until_ready_async(self, n: int = 1, timeout: float = 15.0) -> None:
        await self.wait_until_async(
            lambda: self.ready_count >= n, timeout, what=f"{n} READY session(s)"
        )

    async def wait_for_calls_async(
        self, predicate: Callable[[RestCall], bool], n: int = 1, timeout: float = 10.0
    ) -> list[RestCall]:
        await self.wait_until_async(
            lambda: len(self.matching(predicate)) >= n, timeout, what=f"{n} matching call(s)"
        )
        return self.matching(predicate)

    def wait_until_ready(self, n: int = 1, timeout: float = 15.0) -> None:
        """Until ``n`` sessions got READY and their GUILD_CREATE (messages then reach them)."""
        self.wait_until(lambda: self.ready_count >= n, timeout, what=f"{n} READY session(s)")

    def wait_for_calls(
        self, predicate: Callable[[RestCall], bool], n: int = 1, timeout: float = 10.0
    ) -> list[RestCall]:
        """Until ``n`` answered calls match ``predicate``; those calls."""
        self.wait_until(
            lambda: len(self.matching(predicate)) >= n, timeout, what=f"{n} matching call(s)"
        )
        return self.matching(predicate)

    def matching(self, predicate: Callable[[RestCall], bool]) -> list[RestCall]:
        return [c for c in list(self.calls) if c.status and predicate(c)]

    def sent_messages(self, channel_id: int | None = None) -> list[RestCall]:
        """The message creates answered 200, in order (``channel_id`` narrows them)."""
        suffix = "/messages"
        prefix = "/channels/" if channel_id is None else f"/channels/{channel_id}/"
        return self.matching(
            lambda c: (
                c.method == "POST"
                and c.path.startswith(prefix)
                and c.path.endswith(suffix)
                and c.status == 200
            )
        )

    # -- serving -------------------------------------------------------------------------

    def application(self) -> web.Application:
        app = web.Application(middlewares=[self._http_middleware], client_max_size=4 * UPLOAD_LIMIT)
        app.router.add_get("/gateway", self._gateway)
        api = API_PREFIX
        app.router.add_get(api + "/users/@me", self._me)
        app.router.add_get(api + "/oauth2/applications/@me", self._application)
        app.router.add_get(api + "/gateway", self._gateway_info)
        app.router.add_get(api + "/gateway/bot", self._gateway_info)
        app.router.add_get(api + "/channels/{channel}", self._get_channel)
        app.router.add_get(api + "/channels/{channel}/messages/{message}", self._get_message)
        app.router.add_post(api + "/channels/{channel}/messages", self._create_message)
        app.router.add_patch(api + "/channels/{channel}/messages/{message}", self._edit_message)
        app.router.add_delete(api + "/channels/{channel}/messages/{message}", self._delete_message)
        app.router.add_post(api + "/channels/{channel}/typing", self._typing)
        app.router.add_post(api + "/users/@me/channels", self._create_dm)
        app.router.add_post(
            api + "/interactions/{interaction}/{token}/callback", self._interaction_callback
        )
        app.router.add_post(api + "/webhooks/{application}/{token}", self._followup)
        app.router.add_patch(
            api + "/webhooks/{application}/{token}/messages/@original", self._edit_original
        )
        app.router.add_get("/attachments/{channel}/{attachment}/{filename}", self._cdn)
        return app

    async def closing(self) -> None:
        for session in list(self._sessions):
            with contextlib.suppress(Exception):
                await session.ws.close(code=1001)

    # -- HTTP: recording, failures, auth ---------------------------------------------------

    @web.middleware
    async def _http_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        if request.path == "/gateway":
            return await handler(request)
        path = request.path.removeprefix(API_PREFIX)
        call = RestCall(
            method=request.method,
            path=path,
            query=dict(request.query),
            authorization=request.headers.get("Authorization"),
        )
        await _read_body(request, call)
        request[_CALL] = call
        self.calls.append(call)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        response: web.StreamResponse
        failure = self._failure_for(call)
        tokenless = path.startswith(("/interactions/", "/webhooks/"))
        if failure is not None:
            response = _failure_response(failure)
        elif (
            request.path.startswith(API_PREFIX)
            and not tokenless
            and call.authorization != f"Bot {self.token}"
        ):
            response = _error(401, 0, "401: Unauthorized")
        else:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                response = _error(exc.status, 0, f"{exc.status}: {exc.reason}")
        call.status = response.status
        self._notify()
        return response

    def _failure_for(self, call: RestCall) -> Failure | None:
        for failure in self._failures:
            if failure.method is None or failure.method == call.method:
                self._failures.remove(failure)
                return failure
        return None

    # -- REST ------------------------------------------------------------------------------

    async def _me(self, request: web.Request) -> web.Response:
        return _json({**BOT.payload(), "verified": True, "mfa_enabled": False})

    async def _application(self, request: web.Request) -> web.Response:
        return _json(
            {
                "id": str(_APPLICATION_ID),
                "name": "Mercury",
                "icon": None,
                "description": "",
                "bot_public": False,
                "bot_require_code_grant": False,
                "owner": ALICE.payload(),
                "verify_key": "00" * 32,
                "flags": 1 << 19 if self.message_content_enabled else 0,
                "bot": BOT.payload(),
            }
        )

    async def _gateway_info(self, request: web.Request) -> web.Response:
        data: dict[str, Any] = {"url": self.gateway_url}
        if request.path.endswith("/bot"):
            data["shards"] = 1
            data["session_start_limit"] = {
                "total": 1000,
                "remaining": 999,
                "reset_after": 86_400_000,
                "max_concurrency": 1,
            }
        return _json(data)

    async def _get_channel(self, request: web.Request) -> web.Response:
        channel = self.channels.get(_snowflake_of(request, "channel"))
        if channel is None:
            return _error(404, 10003, "Unknown Channel")
        return _json(channel.payload())

    async def _get_message(self, request: web.Request) -> web.Response:
        if _snowflake_of(request, "channel") not in self.channels:
            return _error(404, 10003, "Unknown Channel")
        message = self.messages.get(_snowflake_of(request, "message"))
        if message is None or message["channel_id"] != request.match_info["channel"]:
            return _error(404, 10008, "Unknown Message")
        return _json(message)

    async def _typing(self, request: web.Request) -> web.Response:
        if _snowflake_of(request, "channel") not in self.channels:
            return _error(404, 10003, "Unknown Channel")
        return web.Response(status=204)

    async def _create_message(self, request: web.Request) -> web.Response:
        channel = self.channels.get(_snowflake_of(request, "channel"))
        if channel is None:
            return _error(404, 10003, "Unknown Channel")
        if channel.id in self.forbidden_channels:
            return _error(403, 50013, "Missing Permissions")
        if channel.type == 1 and any(u.id in self.dms_closed for u in channel.recipients):
            return _error(403, 50007, "Cannot send messages to this user")
        call = request[_CALL]
        body = call.json if isinstance(call.json, dict) else {}
        content = body.get("content") or ""
        refused = _refused_body(body, call.files)
        if refused is not None:
            return refused
        components = body.get("components") or []
        if not content and not call.files and not components:
            return _error(400, 50006, "Cannot send an empty message")
        reply_to: int | None = None
        reference = body.get("message_reference")
        if isinstance(reference, dict) and reference.get("message_id"):
            reply_to = int(reference["message_id"])
            if reply_to not in self.messages and reference.get("fail_if_not_exists", True):
                return _invalid_form(
                    "message_reference", "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message"
                )
        attachments = [
            self.add_file(channel.id, f.filename, f.data, _guess_type(f.filename))
            for f in call.files
        ]
        payload = self._message_payload(
            channel,
            BOT,
            content,
            attachments=attachments,
            reply_to=reply_to if reply_to in self.messages else None,
            resolve_reply=True,
        )
        payload["components"] = components
        call.answer = payload
        # Discord echoes a bot's own message to its gateway connection.
        await self._dispatch("MESSAGE_CREATE", payload, required=False)
        return _json(payload)

    async def _edit_message(self, request: web.Request) -> web.Response:
        channel = self.channels.get(_snowflake_of(request, "channel"))
        if channel is None:
            return _error(404, 10003, "Unknown Channel")
        message = self.messages.get(_snowflake_of(request, "message"))
        if message is None or message["channel_id"] != str(channel.id):
            return _error(404, 10008, "Unknown Message")
        if message["author"]["id"] != str(BOT.id):
            return _error(403, 50005, "Cannot edit a message authored by another user")
        call = request[_CALL]
        body = call.json if isinstance(call.json, dict) else {}
        refused = self._apply_edit(channel, message, body, call)
        if refused is not None:
            return refused
        call.answer = message
        await self._dispatch("MESSAGE_UPDATE", message, required=False)
        return _json(message)

    def _apply_edit(
        self, channel: _Channel, message: dict[str, Any], body: dict[str, Any], call: RestCall
    ) -> web.Response | None:
        """Edit ``message`` as Discord does: only the fields given change."""
        refused = _refused_body(body, call.files)
        if refused is not None:
            return refused
        content = body.get("content", message["content"])
        components = body.get("components", message.get("components"))
        attachments = message["attachments"]
        if "attachments" in body or call.files:
            kept = {str(a.get("id")) for a in body.get("attachments") or []}
            attachments = [a for a in attachments if a["id"] in kept]
            attachments += [
                self.add_file(channel.id, f.filename, f.data, _guess_type(f.filename))
                for f in call.files
            ]
        if not (content or "") and not attachments and not components:
            return _error(400, 50006, "Cannot send an empty message")
        message.update(
            content=content or "",
            components=components or [],
            attachments=attachments,
            edited_timestamp=_now_iso(),
        )
        return None

    async def _delete_message(self, request: web.Request) -> web.Response:
        message = self.messages.get(_snowflake_of(request, "message"))
        if message is None or message["channel_id"] != request.match_info["channel"]:
            return _error(404, 10008, "Unknown Message")
        if message["author"]["id"] != str(BOT.id):
            return _error(403, 50013, "Missing Permissions")
        del self.messages[int(message["id"])]
        return web.Response(status=204)

    async def _create_dm(self, request: web.Request) -> web.Response:
        body = request[_CALL].json
        recipient = body.get("recipient_id") if isinstance(body, dict) else None
        people = {u.id: u for u in (ALICE, BOB, CAROL)}
        if not str(recipient or "").isdigit() or int(recipient) not in people:
            return _invalid_form("recipient_id", "NUMBER_TYPE_COERCE", "Value is not snowflake.")
        person = people[int(recipient)]
        for channel in self.channels.values():
            if channel.type == 1 and channel.recipients == (person,):
                return _json(channel.payload())
        channel = _Channel(id=self._snowflake(), type=1, recipients=(person,))
        self.channels[channel.id] = channel
        return _json(channel.payload())

    async def _interaction_callback(self, request: web.Request) -> web.Response:
        pressing = self.pressings.get(_snowflake_of(request, "interaction"))
        if pressing is None or pressing.token != request.match_info["token"]:
            return _error(404, 10062, "Unknown interaction")
        if pressing.acknowledged:
            return _error(400, 40060, "Interaction has already been acknowledged.")
        if time.monotonic() - pressing.created > self.interaction_window_s:
            return _error(404, 10062, "Unknown interaction")
        call = request[_CALL]
        body = call.json if isinstance(call.json, dict) else {}
        kind = body.get("type")
        data = body.get("data") or {}
        if kind not in (CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE):
            return _invalid_form("type", "BASE_TYPE_CHOICES", f"Value must be one of 4-7: {kind}")
        channel = self._channel(pressing.channel_id)
        resource: dict[str, Any] | None = None
        flags = int(data.get("flags") or 0)
        if kind == CHANNEL_MESSAGE:
            refused = _refused_body(data, call.files)
            if refused is not None:
                return refused
            if not data.get("content") and not data.get("components"):
                return _error(400, 50006, "Cannot send an empty message")
            message = self._answer_message(channel, data, flags)
            pressing.original_id = int(message["id"])
            resource = message
        elif kind == UPDATE_MESSAGE:
            message = self.messages[pressing.message_id]
            refused = self._apply_edit(channel, message, data, call)
            if refused is not None:
                return refused
            pressing.original_id = pressing.message_id
            resource = message
            await self._dispatch("MESSAGE_UPDATE", message, required=False)
        else:
            pressing.original_id = pressing.message_id
        pressing.acknowledged = True
        self.answers.append(
            InteractionAnswer(
                interaction_id=pressing.id,
                via="callback",
                type=kind,
                flags=flags,
                content=data.get("content"),
                components=data.get("components"),
            )
        )
        self._notify()
        answer: dict[str, Any] = {
            "interaction": {
                "id": str(pressing.id),
                "type": 3,
                "response_message_id": None if resource is None else resource["id"],
                "response_message_loading": kind == DEFERRED_CHANNEL_MESSAGE,
                "response_message_ephemeral": bool(flags & EPHEMERAL),
            }
        }
        if resource is not None:
            answer["resource"] = {"type": kind, "message": resource}
        if request.query.get("with_response") in ("1", "true", "True"):
            return _json(answer)
        return web.Response(status=204)

    def _pressing_of(self, request: web.Request) -> Pressing | None:
        if request.match_info["application"] != str(_APPLICATION_ID):
            return None
        token = request.match_info["token"]
        for pressing in self.pressings.values():
            if pressing.token == token and time.monotonic() - pressing.created < 15 * 60:
                return pressing
        return None

    async def _followup(self, request: web.Request) -> web.Response:
        pressing = self._pressing_of(request)
        if pressing is None:
            return _error(404, 10015, "Unknown Webhook")
        if not pressing.acknowledged:
            return _error(404, 10015, "Unknown Webhook")
        call = request[_CALL]
        body = call.json if isinstance(call.json, dict) else {}
        refused = _refused_body(body, call.files)
        if refused is not None:
            return refused
        flags = int(body.get("flags") or 0)
        message = self._answer_message(self._channel(pressing.channel_id), body, flags)
        self.answers.append(
            InteractionAnswer(
                interaction_id=pressing.id,
                via="followup",
                type=None,
                flags=flags,
                content=body.get("content"),
                components=body.get("components"),
            )
        )
        self._notify()
        return _json(message)

    async def _edit_original(self, request: web.Request) -> web.Response:
        pressing = self._pressing_of(request)
        if pressing is None or not pressing.acknowledged or pressing.original_id is None:
            return _error(404, 10015, "Unknown Webhook")
        original = self.messages.get(pressing.original_id) or self.ephemeral_messages.get(
            pressing.original_id
        )
        if original is None:
            return _error(404, 10008, "Unknown Message")
        call = request[_CALL]
        body = call.json if isinstance(call.json, dict) else {}
        refused = self._apply_edit(self._channel(pressing.channel_id), original, body, call)
        if refused is not None:
            return refused
        self.answers.append(
            InteractionAnswer(
                interaction_id=pressing.id,
                via="original",
                type=None,
                flags=int(original.get("flags") or 0),
                content=body.get("content"),
                components=body.get("components"),
            )
        )
        if pressing.original_id in self.messages:
            await self._dispatch("MESSAGE_UPDATE", original, required=False)
        self._notify()
        return _json(original)

    def _answer_message(
        self, channel: _Channel, data: dict[str, Any], flags: int
    ) -> dict[str, Any]:
        """A message answering a press (the application's); an ephemeral one only its presser
        sees: kept apart, never in the channel."""
        payload = self._message_payload(
            channel,
            BOT,
            data.get("content") or "",
            attachments=[],
            reply_to=None,
            resolve_reply=False,
        )
        payload.update(
            components=data.get("components") or [],
            flags=flags,
            type=20,
            webhook_id=str(_APPLICATION_ID),
            application_id=str(_APPLICATION_ID),
        )
        if flags & EPHEMERAL:
            del self.messages[int(payload["id"])]
            self.ephemeral_messages[int(payload["id"])] = payload
        return payload

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        if self.cdn_redirect is not None:
            return web.Response(status=302, headers={"Location": self.cdn_redirect})
        path = request.path
        stored = self._files.get(path)
        expected = self._signature(path)
        given = "&".join(f"{k}={request.query.get(k, '')}" for k in ("ex", "is", "hm"))
        if stored is None or not hmac.compare_digest(given, expected):
            return web.Response(status=404, text="This content is no longer available.")
        data, content_type = stored
        return web.Response(body=data, content_type=content_type)

    # -- messages --------------------------------------------------------------------------

    def _message_payload(
        self,
        channel: _Channel,
        author: User,
        content: str,
        *,
        mentions: Sequence[User] = (),
        role_mentions: Sequence[int] = (),
        attachments: list[dict[str, Any]],
        reply_to: int | None,
        resolve_reply: bool,
        sent_at: float | None = None,
    ) -> dict[str, Any]:
        message_id = self._snowflake(sent_at)
        in_guild = channel.guild_id is not None
        payload: dict[str, Any] = {
            "id": str(message_id),
            "channel_id": str(channel.id),
            "author": author.payload(),
            "content": content,
            "timestamp": _now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": "@everyone" in content,
            "mentions": [
                {**u.payload(), "member": u.member_payload()} if in_guild else u.payload()
                for u in mentions
            ],
            "mention_roles": [str(r) for r in role_mentions],
            "attachments": attachments,
            "embeds": [],
            "components": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
        }
        if in_guild:
            payload["guild_id"] = str(channel.guild_id)
            payload["member"] = author.member_payload()
        if reply_to is not None:
            payload["type"] = 19
            reference = {"type": 0, "message_id": str(reply_to), "channel_id": str(channel.id)}
            if in_guild:
                reference["guild_id"] = str(channel.guild_id)
            payload["message_reference"] = reference
            if resolve_reply:
                referenced = self.messages.get(reply_to)
                payload["referenced_message"] = (
                    None if referenced is None else _without_reference(referenced)
                )
        self.messages[message_id] = payload
        return payload

    def _channel(self, channel_id: int) -> _Channel:
        channel = self.channels.get(channel_id)
        if channel is None:
            raise StandInError(f"The Discord stand-in has no channel {channel_id}.")
        return channel

    def _snowflake(self, at: float | None = None) -> int:
        self._ids += 1
        now_ms = int((time.time() if at is None else at) * 1000)
        return ((now_ms - DISCORD_EPOCH_MS) << 22) | (self._ids & 0x3FFFFF)

    def _signature(self, path: str) -> str:
        # Discord signs CDN attachment links: ex (expiry), is (issued), hm (an HMAC of both).
        issued = "65a0b000"
        expires = "ffffffff"
        digest = hmac.new(
            self._cdn_key, f"{path}:{expires}:{issued}".encode(), hashlib.sha256
        ).hexdigest()
        return f"ex={expires}&is={issued}&hm={digest}"

    # -- the gateway -----------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True, max_msg_size=0)
        await ws.prepare(request)
        query = dict(request.query)
        self.gateway_queries.append(query)
        session = _Session(ws=ws)
        if query.get("encoding", "json") != "json" or query.get("compress") not in (
            None,
            "zlib-stream",
        ):
            await self._close(session, 4002)
            return ws
        if query.get("compress") == "zlib-stream":
            session.compressor = zlib.compressobj()
        self._sessions.append(session)
        try:
            await session.send(
                {"op": _HELLO, "d": {"heartbeat_interval": self.heartbeat_interval_ms}}
            )
            async for frame in ws:
                if frame.type is not WSMsgType.TEXT:
                    continue
                await self._on_gateway_payload(session, json.loads(frame.data))
        finally:
            self._sessions.remove(session)
            if ws.close_code in (1000, 1001) and session.session_id is not None:
                # A client's own clean close ends its session, as on Discord: no RESUME.
                if self._resumable.get(session.session_id) is session:
                    del self._resumable[session.session_id]
            self._notify()
        return ws

    async def _on_gateway_payload(self, session: _Session, payload: dict[str, Any]) -> None:
        op, data = payload.get("op"), payload.get("d")
        if op == _HEARTBEAT:
            self.heartbeats += 1
            await session.send({"op": _HEARTBEAT_ACK})
        elif op == _IDENTIFY:
            await self._identify(session, data)
        elif op == _RESUME:
            await self._resume(session, data)
        self._notify()

    async def _identify(self, session: _Session, data: dict[str, Any]) -> None:
        token_ok = data.get("token") == self.token
        self.identifies.append({**data, "token": token_ok})
        if not token_ok:
            await self._close(session, 4004)
            return
        if data.get("intents", 0) & MESSAGE_CONTENT_INTENT and not self.message_content_enabled:
            await self._close(session, 4014)
            return
        session.session_id = secrets.token_hex(16)
        self.session_ids.append(session.session_id)
        session.identified = True
        self._resumable[session.session_id] = session
        self._count_live()
        await session.dispatch(
            "READY",
            {
                "v": 10,
                "user": {**BOT.payload(), "verified": True, "mfa_enabled": False},
                "guilds": [{"id": str(GUILD), "unavailable": True}],
                "session_id": session.session_id,
                "resume_gateway_url": self.gateway_url,
                "application": {"id": str(_APPLICATION_ID), "flags": 0},
                "private_channels": [],
                "relationships": [],
                "presences": [],
                "_trace": ["discord-standin"],
            },
        )
        await session.dispatch("GUILD_CREATE", self._guild_payload())
        self.ready_count += 1

    async def _resume(self, session: _Session, data: dict[str, Any]) -> None:
        previous = self._resumable.get(data.get("session_id", ""))
        accepted = previous is not None and data.get("token") == self.token
        self.resumes.append(
            {**data, "token": data.get("token") == self.token, "accepted": accepted}
        )
        if previous is None or not accepted:
            await session.send({"op": _INVALID_SESSION, "d": False})
            return
        if previous is not session and not previous.ws.closed:
            # The session moves to the new connection; the old one is closed, as on Discord
            # (in the background: a stalled client may never answer the close).
            previous.identified = False
            closing = asyncio.ensure_future(previous.ws.close(code=4000))
            self._closings.add(closing)
            closing.add_done_callback(self._closings.discard)
        session.session_id = previous.session_id
        session.sequence = previous.sequence
        session.log = previous.log
        session.identified = True
        self._resumable[previous.session_id or ""] = session
        self._count_live()
        # What was dispatched after the sequence the client saw, replayed, then RESUMED.
        seen = data.get("seq") or 0
        for sequence, event, payload in list(session.log):
            if sequence > seen:
                await session.send({"op": _DISPATCH, "t": event, "s": sequence, "d": payload})
        await session.dispatch("RESUMED", {"_trace": ["discord-standin"]})
        self.resumed_count += 1

    def _count_live(self) -> None:
        live = sum(1 for s in self._sessions if s.live)
        self.most_live_sessions = max(self.most_live_sessions, live)

    def replayed(self) -> list[int]:
        """The sequence numbers each accepted RESUME asked to replay after."""
        return [r.get("seq") or 0 for r in self.resumes if r["accepted"]]

    def _guild_payload(self) -> dict[str, Any]:
        in_guild = [c for c in self.channels.values() if c.guild_id == GUILD]
        return {
            "id": str(GUILD),
            "name": "Test guild",
            "icon": None,
            "owner_id": str(ALICE.id),
            "unavailable": False,
            "large": False,
            "member_count": 4,
            "joined_at": "2024-01-01T00:00:00.000000+00:00",
            "features": [],
            "emojis": [],
            "stickers": [],
            "roles": [
                {"id": str(GUILD), "name": "@everyone", "position": 0, "permissions": "0"},
                {
                    "id": str(ENGINEERS),
                    "name": "engineers",
                    "position": 1,
                    "permissions": "0",
                    "mentionable": True,
                },
            ],
            "channels": [
                c.payload(in_guild_create=True) for c in in_guild if c.type not in (11, 12)
            ],
            "threads": [c.payload() for c in in_guild if c.id in self._announced_threads],
            "members": [{**BOT.member_payload(), "user": BOT.payload()}],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
        }

    async def _dispatch(self, event: str, data: dict[str, Any], *, required: bool = True) -> None:
        # Each session gets it: sent on its connection, or kept for a RESUME while it has
        # none (its connection dropped: kill -9, a network loss).
        sessions = list(self._resumable.values())
        if not sessions and required:
            raise StandInError(
                f"No gateway connection is identified to receive {event}; wait_until_ready() first."
            )
        for session in sessions:
            await session.dispatch(event, data)

    async def _send_all(self, payload: dict[str, Any]) -> None:
        for session in [s for s in self._sessions if not s.ws.closed]:
            await session.send(payload)

    async def _close(self, session: _Session, code: int) -> None:
        self.gateway_closes.append(code)
        await session.ws.close(code=code)
        self._notify()


# --------------------------------------------------------------------------------------------
# Helpers


async def _read_body(request: web.Request, call: RestCall) -> None:
    if request.method not in ("POST", "PUT", "PATCH") or not request.can_read_body:
        return
    if request.content_type == "multipart/form-data":
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                continue
            data = await part.read()
            if part.name == "payload_json":
                call.json = json.loads(data)
            else:
                call.files.append(
                    UploadedFile(
                        field=part.name or "",
                        filename=part.filename or "",
                        content_type=part.headers.get("Content-Type", ""),
                        data=bytes(data),
                    )
                )
    else:
        raw = await request.read()
        call.json = json.loads(raw) if raw else None


def _failure_response(failure: Failure) -> web.Response:
    if failure.status == 429:
        body = {
            "message": failure.message or "You are being rate limited.",
            "retry_after": failure.retry_after,
            "global": False,
        }
        return _json(
            body,
            status=429,
            headers={
                "Retry-After": str(max(1, round(failure.retry_after))),
                "X-RateLimit-Scope": "user",
                # Discord's answers pass Google's front end; discord.py reads a 429 without
                # this header as a Cloudflare ban and gives up at once.
                "Via": "1.1 google",
            },
        )
    return _error(failure.status, 0, failure.message or f"{failure.status}: the stand-in failed")


def _json(data: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # Exactly "application/json", as Discord sends it: discord.py reads any other content
    # type (even with "; charset=utf-8") as text.
    body = json.dumps(data, separators=(",", ":")).encode()
    return web.Response(
        body=body, status=status, headers={**(headers or {}), "Content-Type": "application/json"}
    )


def _error(status: int, code: int, message: str) -> web.Response:
    return _json({"message": message, "code": code}, status=status)


def _invalid_form(field_name: str, code: str, message: str) -> web.Response:
    return _json(
        {
            "message": "Invalid Form Body",
            "code": 50035,
            "errors": {field_name: {"_errors": [{"code": code, "message": message}]}},
        },
        status=400,
    )


def _refused_body(body: dict[str, Any], files: Sequence[UploadedFile]) -> web.Response | None:
    """Discord's checks of a message body: its length, its files, its buttons."""
    content = body.get("content") or ""
    if len(content) > 2000:
        return _invalid_form("content", "BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.")
    if len(files) > 10:
        return _invalid_form("files", "BASE_TYPE_MAX_LENGTH", "Must be 10 or fewer in length.")
    if sum(len(f.data) for f in files) > UPLOAD_LIMIT:
        return _error(413, 40005, "Request entity too large")
    rows = body.get("components") or []
    if not isinstance(rows, list) or len(rows) > 5:
        return _invalid_form("components", "BASE_TYPE_MAX_LENGTH", "Must be 5 or fewer in length.")
    seen: set[str] = set()
    for row in rows:
        buttons = row.get("components") if isinstance(row, dict) else None
        if row.get("type") != 1 or not isinstance(buttons, list) or not 1 <= len(buttons) <= 5:
            return _invalid_form(
                "components", "COMPONENT_LAYOUT_WIDTH_EXCEEDED", "An action row holds 1-5 buttons."
            )
        for button in buttons:
            custom_id = button.get("custom_id") or ""
            label = button.get("label") or ""
            if (
                button.get("type") != 2
                or button.get("style") not in (1, 2, 3, 4)
                or not 1 <= len(custom_id) <= 100
                or len(label) > 80
                or custom_id in seen
            ):
                return _invalid_form(
                    "components", "BUTTON_COMPONENT_INVALID", f"Invalid button: {button!r}"
                )
            seen.add(custom_id)
    return None


def _without_reference(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k != "referenced_message"}


def _snowflake_of(request: web.Request, name: str) -> int:
    text = request.match_info[name]
    if not text.isdigit():
        raise web.HTTPNotFound()
    return int(text)


def _guess_type(filename: str) -> str:
    return mimetypes.guess_type(filename)[0] or "application/octet-stream"


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()
