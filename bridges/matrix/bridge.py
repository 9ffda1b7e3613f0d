"""The Matrix bridge's connection, parsing and replies (see :mod:`bridges.matrix`)."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import re
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, TypeVar

import aiohttp
from mautrix.api import Method, Path
from mautrix.client import ClientAPI
from mautrix.errors import MatrixConnectionError, MatrixError, MatrixRequestError
from mautrix.types import ContentURI, EventID, FilterID, LoginType, RoomID, SyncToken, UserID

from bridges.downloads import read_capped, refuse_past
from bridges.matrix.live import LiveMatrixReply
from bridges.pacing import split
from bridges.port import (
    Admits,
    Attachment,
    BridgeError,
    Deliver,
    EgressFile,
    LiveLimits,
    LiveReply,
    PlatformUnavailable,
    Pressed,
    Received,
    ReplyButton,
    ThreadInfo,
)
from bridges.sign_in import is_direct
from core.config.settings import ConfigurationError
from core.spaces.ids import parse_space_id

if TYPE_CHECKING:
    from core.config.settings import MatrixSettings

__all__ = ["LIVE_LIMITS", "MESSAGE_LIMIT", "PLATFORM", "MatrixBridge"]

PLATFORM: Final = "matrix"
#: The most characters of one message: an event is at most 64 KiB of JSON, and an edit carries
#: its text twice (the fallback body and ``m.new_content``).
MESSAGE_LIMIT: Final = 6000
#: Matrix has no rate limit on edits beyond the homeserver's own; one a second is gentle, and
#: Matrix messages carry no buttons (confirmations are typed back).
LIVE_LIMITS: Final = LiveLimits(max_chars=MESSAGE_LIMIT, edit_interval_s=1.0, max_buttons=0)

log = logging.getLogger("mercury.bridges.matrix")

_T = TypeVar("_T")

#: How long the homeserver holds a sync open when nothing happens (milliseconds).
_SYNC_TIMEOUT_MS: Final = 30_000
_FIRST_RETRY_S: Final = 1.0
_LAST_RETRY_S: Final = 60.0
#: "is typing…" lasts this long unless the reply comes first (milliseconds).
_TYPING_MS: Final = 30_000
#: What the bridge remembers per room and of its own messages (oldest forgotten first).
_KNOWN_ROOMS: Final = 4096
_KNOWN_EVENTS: Final = 4096
#: Message types read as text; a notice is a program's (the spec's convention: clients never
#: answer one), so it never starts a turn and is ambient context at most.
_TEXT_TYPES: Final = frozenset({"m.text", "m.emote", "m.notice"})
_FILE_TYPES: Final = frozenset({"m.file", "m.image", "m.audio", "m.video"})
#: The reply fallback some clients still put before the text: quoted lines, then a blank line.
_REPLY_FALLBACK: Final = re.compile(r"\A(?:> [^\n]*\n)+\n")
#: Only sync what the bridge reads: no presence, no ephemeral events but in joined rooms.
_FILTER: Final = {
    "presence": {"types": []},
    "account_data": {"types": []},
    "room": {
        "ephemeral": {"types": []},
        "account_data": {"types": []},
        "state": {"lazy_load_members": True},
        "timeline": {"limit": 50},
    },
}


class _Room:
    """What the bridge knows of one joined room."""

    __slots__ = ("encrypted", "members", "names", "warned")

    def __init__(self) -> None:
        #: Who is in the room, joined or invited (None: asked again when next needed).
        self.members: frozenset[str] | None = None
        self.encrypted = False
        self.warned = False
        self.names: dict[str, str] = {}


class MatrixBridge:
    """Matrix through mautrix's client API: one sync loop, replies and media over HTTP.

    Nothing touches the network until :meth:`run` or the first call that needs the
    homeserver; a password login happens then. ``request_timeout`` bounds every call but the
    sync's long poll.
    """

    def __init__(
        self,
        settings: MatrixSettings,
        *,
        bot_name: str,
        request_timeout: float = 60.0,
        sync_timeout_ms: int = _SYNC_TIMEOUT_MS,
    ) -> None:
        if not settings.homeserver or not settings.user_id:
            raise ConfigurationError(
                "The Matrix bridge needs MATRIX_HOMESERVER and MATRIX_USER_ID; set the "
                "homeserver's address and the bot's user id."
            )
        if not settings.access_token and not settings.password:
            raise ConfigurationError(
                "The Matrix bridge needs MATRIX_ACCESS_TOKEN or MATRIX_PASSWORD; set the bot's "
                "access token (or its password)."
            )
        self._homeserver = settings.homeserver.rstrip("/")
        self._user_id = settings.user_id
        #: Accounts that are programs (``MATRIX_BOT_USERS``): Matrix itself flags none.
        self._bot_users = settings.bot_users
        self._token = settings.access_token or ""
        self._password = settings.password
        self._bot_name = bot_name
        self._request_timeout = request_timeout
        self._sync_timeout_ms = sync_timeout_ms
        self._session: aiohttp.ClientSession | None = None
        self._client: ClientAPI | None = None
        self._login_lock = asyncio.Lock()
        self._since: str | None = None
        self._filter_id: str | None = None
        self._admits: Admits | None = None
        self._display_name: str | None = None
        self._rooms: OrderedDict[str, _Room] = OrderedDict()
        #: The ids of the messages the bot sent (a reply to one is a reply to the bot).
        self._mine: OrderedDict[str, None] = OrderedDict()
        #: The rooms of the DMs the bot opened to reach a person alone, by user id.
        self._private: dict[str, str] = {}
        self._closed = False
        self._closing = asyncio.Event()

    @property
    def platform(self) -> str:
        return PLATFORM

    @property
    def live_limits(self) -> LiveLimits:
        return LIVE_LIMITS

    @property
    def connection_name(self) -> str:
        return f"{PLATFORM}:{self._user_id}"

    def checkpoint(self) -> bytes | None:
        """The sync token to go on from (``next_batch`` of the last sync handed on)."""
        return self._since.encode() if self._since is not None else None

    def restore(self, checkpoint: bytes) -> None:
        """Go on from ``checkpoint`` (a sync token) rather than from now."""
        self._since = checkpoint.decode()

    def admit_by(self, admits: Admits) -> None:
        self._admits = admits

    # -- the sync loop ------------------------------------------------------------------------

    async def run(self, deliver: Deliver) -> None:
        """Sync and hand on every message until cancelled or closed; a homeserver that fails
        for a while is tried again with backoff. Raises :class:`BridgeError` when the
        homeserver refuses the bot's credentials for good."""
        pause = _FIRST_RETRY_S
        while not self._closed:
            try:
                client = await self._logged_in()
                if self._since is None:
                    await self._first_sync(client)
                while not self._closed:
                    await self._sync_once(client, deliver)
                    pause = _FIRST_RETRY_S
            except PlatformUnavailable as exc:
                if self._closed:
                    return
                log.warning("Matrix is unavailable (%s); trying again in %.0f s.", exc, pause)
                with contextlib.suppress(TimeoutError):  # close() ends the pause
                    await asyncio.wait_for(self._closing.wait(), pause)
                pause = min(pause * 2, _LAST_RETRY_S)

    async def _first_sync(self, client: ClientAPI) -> None:
        """A first start begins from now: the backlog is skipped, the invites waiting are
        handled and the direct rooms learned."""
        # An initial sync answers at once whatever its timeout; a timeout of its own keeps
        # it apart from an earlier start's, which Synapse may answer from its response cache
        # (for minutes), with that start's token: the messages since would run again.
        answer = await self._sync(client, since=None, timeout_ms=secrets.randbelow(10**9) + 1)
        await self._handle_invites(client, answer)
        self._since = str(answer["next_batch"])

    async def _sync_once(self, client: ClientAPI, deliver: Deliver) -> None:
        answer = await self._sync(client, since=self._since, timeout_ms=self._sync_timeout_ms)
        await self._handle_invites(client, answer)
        rooms = answer.get("rooms") or {}
        for room_id in rooms.get("leave") or {}:
            self._rooms.pop(room_id, None)
        for room_id, joined in (rooms.get("join") or {}).items():
            try:
                await self._handle_room(client, room_id, joined, deliver)
            except (asyncio.CancelledError, PlatformUnavailable):
                raise
            except Exception:
                # Data the bridge can't read must not stop the connection: the room's events
                # of this sync are skipped, and said so.
                log.exception("The Matrix bridge could not read the sync of room %s.", room_id)
        # Only now: a sync whose events were not all handed on is synced again.
        self._since = str(answer["next_batch"])

    async def _handle_room(
        self, client: ClientAPI, room_id: str, joined: dict[str, Any], deliver: Deliver
    ) -> None:
        """Learn what ``joined`` (a room's part of a sync) says, hand on its messages."""
        room = self._room(room_id)
        for event in (joined.get("state") or {}).get("events") or []:
            self._learn_state(room, event)
        timeline = (joined.get("timeline") or {}).get("events") or []
        # What came before the bot joined is not for it (its state is learned all the same).
        joined_at = max(
            (i for i, event in enumerate(timeline) if self._is_own_join(event)), default=0
        )
        for index, event in enumerate(timeline):
            if event.get("state_key") is not None:
                self._learn_state(room, event)
                continue
            if index < joined_at:
                continue
            received = await self._received(client, room_id, room, event)
            if received is not None:
                try:
                    await deliver(received)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception(
                        "The Matrix bridge could not hand on event %s.", event.get("event_id")
                    )

    async def _sync(
        self, client: ClientAPI, *, since: str | None, timeout_ms: int
    ) -> dict[str, Any]:
        if self._filter_id is None:
            created = await self._call(
                "creating the sync filter",
                client.api.request(
                    Method.POST, Path.v3.user[self._user_id].filter, content=_FILTER
                ),
            )
            self._filter_id = str(created["filter_id"])
        answer = await self._call(
            "a sync",
            client.sync(
                since=SyncToken(since) if since else None,
                timeout=timeout_ms,
                filter_id=FilterID(self._filter_id),
            ),
            limit_s=self._request_timeout + min(timeout_ms, self._sync_timeout_ms) / 1000,
        )
        if not isinstance(answer, dict) or not isinstance(answer.get("next_batch"), str):
            raise PlatformUnavailable("The homeserver's sync answer has no next_batch.")
        return answer

    async def _handle_invites(self, client: ClientAPI, answer: dict[str, Any]) -> None:
        """Join each room an admitted person invited the bot to, and a DM a stranger invited
        it to under ``pairing`` (where they get a code); decline the others."""
        invites = (answer.get("rooms") or {}).get("invite") or {}
        for room_id, invited in invites.items():
            inviter, direct, name = None, False, None
            for event in (invited.get("invite_state") or {}).get("events") or []:
                content = event.get("content") or {}
                if event.get("type") == "m.room.member" and event.get("state_key") == (
                    self._user_id
                ):
                    inviter = event.get("sender")
                    direct = content.get("is_direct") is True
            for event in (invited.get("invite_state") or {}).get("events") or []:
                if event.get("type") == "m.room.member" and event.get("state_key") == inviter:
                    name = (event.get("content") or {}).get("displayname")
            try:
                admission = (
                    await self._admits(inviter, name if isinstance(name, str) else None)
                    if isinstance(inviter, str) and self._admits is not None
                    else "refused"
                )
            except Exception:
                # Left pending: a first start (from now) sees it again.
                log.exception("Could not tell whether %s may invite the Matrix bot.", inviter)
                continue
            try:
                if admission == "refused":
                    await self._call("declining an invite", client.leave_room(RoomID(room_id)))
                    log.info(
                        "The Matrix bot declined the invite to %s by %s, who is not admitted.",
                        room_id,
                        inviter,
                    )
                    continue
                await self._call("joining a room", client.join_room_by_id(RoomID(room_id)))
                if admission == "pairing" and not await self._only_two(
                    client, room_id, str(inviter)
                ):
                    # A stranger is given a code in a DM alone: never in a group.
                    await self._call("leaving a room", client.leave_room(RoomID(room_id)))
                    log.info(
                        "The Matrix bot left %s: %s, not admitted, invited it to a room of "
                        "more than the two of them.",
                        room_id,
                        inviter,
                    )
                    continue
                if direct:
                    await self._mark_direct(client, room_id, str(inviter))
                log.info("The Matrix bot joined %s, invited by %s.", room_id, inviter)
            except BridgeError as exc:
                if isinstance(exc, PlatformUnavailable):
                    raise
                log.warning("The Matrix bot could not answer the invite to %s: %s", room_id, exc)

    async def _mark_direct(self, client: ClientAPI, room_id: str, person: str) -> None:
        """List ``room_id`` among the bot's direct rooms (``m.direct``) for clients to show as
        such; what the bridge takes for a DM is judged from the members alone."""
        path = Path.v3.user[self._user_id].account_data["m.direct"]
        try:
            current = await self._call(
                "reading the direct rooms", client.api.request(Method.GET, path)
            )
        except BridgeError:
            current = None
        rooms = current.get(person) if isinstance(current, dict) else None
        content = dict(current) if isinstance(current, dict) else {}
        content[person] = [*(rooms if isinstance(rooms, list) else []), room_id]
        await self._call(
            "marking a direct room", client.api.request(Method.PUT, path, content=content)
        )

    def _is_own_join(self, event: dict[str, Any]) -> bool:
        content = event.get("content") or {}
        return (
            event.get("type") == "m.room.member"
            and event.get("state_key") == self._user_id
            and content.get("membership") == "join"
            and (event.get("unsigned") or {}).get("prev_content", {}).get("membership") != "join"
        )

    def _room(self, room_id: str) -> _Room:
        room = self._rooms.get(room_id)
        if room is None:
            room = self._rooms[room_id] = _Room()
            while len(self._rooms) > _KNOWN_ROOMS:
                self._rooms.popitem(last=False)
        else:
            self._rooms.move_to_end(room_id)
        return room

    def _learn_state(self, room: _Room, event: dict[str, Any]) -> None:
        kind = event.get("type")
        content = event.get("content") or {}
        if kind == "m.room.encryption":
            room.encrypted = True
        elif kind == "m.room.member":
            room.members = None  # asked again when next needed: a DM is judged afresh
            user = event.get("state_key")
            name = content.get("displayname")
            if isinstance(user, str) and isinstance(name, str) and name:
                room.names[user] = name

    # -- parsing ------------------------------------------------------------------------------

    async def _received(
        self, client: ClientAPI, room_id: str, room: _Room, event: dict[str, Any]
    ) -> Received | None:
        """``event`` as the pipeline takes it, or None when it is nothing for the assistant."""
        kind = event.get("type")
        sender = event.get("sender")
        event_id = event.get("event_id")
        if not isinstance(sender, str) or not isinstance(event_id, str):
            return None
        if sender == self._user_id:
            return None
        if kind == "m.room.encrypted":
            room.encrypted = True
        if room.encrypted:
            if not room.warned:
                room.warned = True
                log.warning(
                    "Matrix room %s is encrypted, which the bridge does not support: nothing "
                    "in it is answered.",
                    room_id,
                )
            return None
        content = event.get("content")
        if kind != "m.room.message" or not isinstance(content, dict):
            return None
        msgtype = content.get("msgtype")
        relates = content.get("m.relates_to")
        relates = relates if isinstance(relates, dict) else {}
        if relates.get("rel_type") == "m.replace":
            return None  # an edit: the message it edits ran already
        body = content.get("body")
        body = body if isinstance(body, str) else ""
        attachments: tuple[Attachment, ...] = ()
        if msgtype in _FILE_TYPES:
            url = content.get("url")
            if not isinstance(url, str) or not url.startswith("mxc://"):
                return None  # an encrypted file (``file``), which the bridge can't read
            info = content.get("info")
            info = info if isinstance(info, dict) else {}
            filename = content.get("filename")
            name = filename if isinstance(filename, str) and filename else body or "file"
            size = info.get("size")
            mime = info.get("mimetype")
            attachments = (
                Attachment(
                    name=name,
                    ref=url,
                    mime_type=mime if isinstance(mime, str) else None,
                    size_bytes=size if isinstance(size, int) else None,
                ),
            )
            # The body is the file's name, or a caption when a filename is given apart.
            body = body if isinstance(filename, str) and filename and body != filename else ""
        elif msgtype not in _TEXT_TYPES:
            return None
        thread_root = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
        replied = relates.get("m.in_reply_to")
        replied_id = replied.get("event_id") if isinstance(replied, dict) else None
        if relates.get("is_falling_back") is True:
            replied_id = None  # a thread's fallback points at its last message: no reply
        if isinstance(replied_id, str):
            body = _REPLY_FALLBACK.sub("", body, count=1)
        text = self._readable(body, content)
        if not text.strip() and not attachments:
            return None
        is_dm = await self._is_dm(client, room_id, room, sender)
        space_id = f"{PLATFORM}:dm:{room_id}" if is_dm else f"{PLATFORM}:{room_id}"
        try:
            parse_space_id(space_id)
        except ValueError:
            log.warning("Matrix room id %r is not one the bridge can name; ignored.", room_id)
            return None
        thread_id = space_id
        if isinstance(thread_root, str) and thread_root.startswith("$"):
            thread_id = f"{space_id}{thread_root}"
        stamp = event.get("origin_server_ts")
        return Received(
            platform=PLATFORM,
            thread_id=thread_id,
            delivery_id=event_id,
            message_id=event_id,
            author_id=sender,
            author_name=await self._name_of(client, room_id, room, sender),
            text=text,
            is_dm=is_dm,
            is_reply_to_bot=isinstance(replied_id, str)
            and await self._sent_by_bot(client, room_id, replied_id),
            attachments=attachments,
            from_bot=msgtype == "m.notice" or self._is_bot(sender),
            sent_at=(
                datetime.fromtimestamp(stamp / 1000, tz=UTC) if isinstance(stamp, int) else None
            ),
        )

    def _is_bot(self, user_id: str) -> bool:
        """Whether ``user_id`` is listed as a program (``MATRIX_BOT_USERS``)."""
        return any(fnmatch.fnmatchcase(user_id, glob) for glob in self._bot_users)

    def _readable(self, body: str, content: dict[str, Any]) -> str:
        """``body`` with each mention of the bot written ``@<name>``: its user id, and its
        display name when the message mentions the bot (``m.mentions``) or starts with it."""
        mention = f"@{self._bot_name}"
        mentions = content.get("m.mentions")
        users = mentions.get("user_ids") if isinstance(mentions, dict) else None
        named = isinstance(users, list) and self._user_id in users
        text = body.replace(self._user_id, mention)
        name = self._display_name
        if name and (named or text.lower().startswith(name.lower())):
            text = re.sub(
                rf"(?<![\w@])@?{re.escape(name)}(?!\w)", mention, text, flags=re.IGNORECASE
            )
        if named and mention.lower() not in text.lower():
            text = f"{mention} {text}"
        return text

    async def _is_dm(self, client: ClientAPI, room_id: str, room: _Room, person: str) -> bool:
        """Whether ``room_id`` is ``person``'s DM with the bot: the two of them its only
        members, joined or invited (:func:`~bridges.sign_in.is_direct`); whoever marked it
        direct, it stops being one when a third is invited."""
        if room.members is None:
            try:
                room.members = await self._members(client, room_id, room)
            except BridgeError as exc:
                log.info("Matrix did not say who is in %s: %s", room_id, exc)
                return False
        return is_direct(room.members, bot=self._user_id, person=person)

    async def _members(
        self, client: ClientAPI, room_id: str, room: _Room | None = None
    ) -> frozenset[str]:
        """Who is in ``room_id`` now, joined or invited (the homeserver's answer, never a
        cache); their display names learned into ``room``."""
        answer = await self._call(
            "the room's members",
            client.api.request(Method.GET, Path.v3.rooms[room_id].members),
        )
        members: set[str] = set()
        for event in (answer.get("chunk") if isinstance(answer, dict) else None) or []:
            user, content = event.get("state_key"), event.get("content") or {}
            if not isinstance(user, str) or content.get("membership") not in ("join", "invite"):
                continue
            members.add(user)
            name = content.get("displayname")
            if room is not None and isinstance(name, str) and name:
                room.names[user] = name
        return frozenset(members)

    async def _only_two(self, client: ClientAPI, room_id: str, person: str) -> bool:
        """Whether ``room_id`` holds ``person`` and the bot alone right now."""
        try:
            members = await self._members(client, room_id)
        except BridgeError as exc:
            if isinstance(exc, PlatformUnavailable):
                raise
            return False
        return is_direct(members, bot=self._user_id, person=person)

    async def _name_of(self, client: ClientAPI, room_id: str, room: _Room, user: str) -> str:
        name = room.names.get(user)
        if name is None:
            try:
                found = await self._call("a display name", client.get_displayname(UserID(user)))
            except BridgeError:
                found = None
            name = room.names[user] = found or user
        return name

    async def _sent_by_bot(self, client: ClientAPI, room_id: str, event_id: str) -> bool:
        if event_id in self._mine:
            return True
        try:
            event = await self._call(
                "the message replied to", client.get_event(RoomID(room_id), EventID(event_id))
            )
        except BridgeError:
            return False
        return str(event.sender) == self._user_id

    def parse_thread(self, thread_id: str) -> ThreadInfo:
        """The room's space, and the thread (``$<root>`` after it) as the conversation.

        Raises :class:`ValueError` when ``thread_id`` is not the Matrix bridge's.
        """
        space_id, dollar, root = thread_id.partition("$")
        space = parse_space_id(space_id)
        if space.platform != PLATFORM or (dollar and not root):
            raise ValueError(
                f"{thread_id!r} is not a Matrix thread id; the Matrix bridge reads "
                "matrix:<room id>, matrix:dm:<room id> and either with $<thread root> after it."
            )
        return ThreadInfo(space_id=space.id, conversation_external_id=thread_id, is_dm=space.is_dm)

    # -- calls to the homeserver ----------------------------------------------------------------

    async def _logged_in(self) -> ClientAPI:
        async with self._login_lock:
            if self._client is not None:
                return self._client
            if self._session is None or self._session.closed:
                self._session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
            client = ClientAPI(
                UserID(self._user_id),
                base_url=self._homeserver,
                token=self._token,
                client_session=self._session,
                default_retry_count=0,
                log=logging.getLogger("mercury.bridges.matrix.api"),
            )
            if not self._token:
                login = await self._call(
                    "logging in",
                    client.login(
                        identifier=UserID(self._user_id),
                        login_type=LoginType.PASSWORD,
                        password=self._password,
                        device_name="Mercury",
                    ),
                )
                self._token = login.access_token
            else:
                try:
                    whoami = await self._call("checking the access token", client.whoami())
                except PlatformUnavailable:
                    raise
                except BridgeError as refused:
                    raise BridgeError(
                        f"The homeserver refused MATRIX_ACCESS_TOKEN for {self._user_id} "
                        f"({_errcode(refused)}), so the Matrix bridge is not connected: set the "
                        "bot's current access token (or MATRIX_PASSWORD) and restart."
                    ) from None
                if str(whoami.user_id) != self._user_id:
                    raise BridgeError(
                        f"MATRIX_ACCESS_TOKEN belongs to {whoami.user_id}, not to "
                        f"MATRIX_USER_ID {self._user_id}; set the bot's own token."
                    )
            try:
                name = await self._call(
                    "the bot's display name", client.get_displayname(UserID(self._user_id))
                )
            except BridgeError:
                name = None
            self._display_name = name or self._user_id.partition(":")[0].lstrip("@")
            self._client = client
            return client

    async def _call(self, what: str, call: Awaitable[_T], *, limit_s: float | None = None) -> _T:
        """``call``, its failures as the port's: :class:`PlatformUnavailable` for what may pass
        (no answer, 429, 5xx), :class:`BridgeError` for the rest."""
        try:
            return await asyncio.wait_for(call, limit_s or self._request_timeout)
        except TimeoutError as exc:
            raise PlatformUnavailable(f"The homeserver did not answer {what} in time.") from exc
        except MatrixRequestError as exc:
            status = exc.http_status
            retry_ms = getattr(exc, "retry_after_ms", None)
            if status == 429 or status >= 500:
                raise PlatformUnavailable(
                    f"The homeserver answered {what} with HTTP {status}.",
                    retry_after_s=retry_ms / 1000 if isinstance(retry_ms, int) else None,
                ) from exc
            raise BridgeError(
                f"The homeserver refused {what}: {getattr(exc, 'errcode', None) or status} "
                f"({exc.message})."
            ) from exc
        except (MatrixConnectionError, aiohttp.ClientError, OSError) as exc:
            raise PlatformUnavailable(f"The homeserver could not be reached for {what}.") from exc
        except MatrixError as exc:
            raise BridgeError(f"The homeserver's answer to {what} was not understood.") from exc

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The file from the homeserver's media repository, with the bot's token; only an
        ``mxc://`` address is read, through ``MATRIX_HOMESERVER``."""
        refuse_past(attachment.name, max_bytes, attachment.size_bytes)
        server, _, media = attachment.ref.removeprefix("mxc://").partition("/")
        if not attachment.ref.startswith("mxc://") or not server or not media or "/" in media:
            raise BridgeError(f"The file {attachment.name!r} has no media address the bot reads.")
        await self._logged_in()
        if self._session is None:
            raise BridgeError("The Matrix bridge is closed.")
        url = f"{self._homeserver}/_matrix/client/v1/media/download/{server}/{media}"
        try:
            async with contextlib.AsyncExitStack() as stack:
                response = await stack.enter_async_context(
                    self._session.get(
                        url,
                        headers={"Authorization": f"Bearer {self._token}"},
                        timeout=aiohttp.ClientTimeout(total=self._request_timeout),
                        allow_redirects=False,
                    )
                )
                if response.status == 429 or response.status >= 500:
                    raise PlatformUnavailable(
                        f"The homeserver answered the download of {attachment.name!r} with "
                        f"HTTP {response.status}."
                    )
                if response.status != 200:
                    raise BridgeError(
                        f"The homeserver refused the download of {attachment.name!r} (HTTP "
                        f"{response.status})."
                    )
                return await read_capped(
                    response.content.iter_chunked(65536), attachment.name, max_bytes
                )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise PlatformUnavailable(
                f"The download of {attachment.name!r} from the homeserver failed."
            ) from exc

    async def start_typing(self, message: Received) -> None:
        room_id = self._room_of(message.thread_id)
        try:
            client = await self._logged_in()
            await self._call("typing", client.set_typing(RoomID(room_id), timeout=_TYPING_MS))
        except BridgeError as exc:
            log.info("Matrix did not show typing in %s: %s", room_id, exc)

    async def send_reply(self, to: Received, text: str, files: Sequence[EgressFile] = ()) -> None:
        parts = _split(text)
        for index, part in enumerate(parts):
            await self.post(to, part, answering=index == 0)
        for file in files:
            await self.send_file(to, file)
        await self.stop_typing(to)

    # -- what live replies use ---------------------------------------------------------------

    def _room_of(self, thread_id: str) -> str:
        space = self.parse_thread(thread_id).space_id
        return space.removeprefix(f"{PLATFORM}:").removeprefix("dm:")

    def _relation(self, to: Received, *, answering: bool) -> dict[str, Any] | None:
        """How a message of the bot's relates to ``to``: in its thread, or (in a group, the
        first of a reply) replying to it."""
        _, dollar, root = to.thread_id.partition("$")
        if dollar:
            return {
                "rel_type": "m.thread",
                "event_id": f"${root}",
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": to.message_id},
            }
        if answering and not to.is_dm:
            return {"m.in_reply_to": {"event_id": to.message_id}}
        return None

    async def _send(self, room_id: str, content: dict[str, Any]) -> str:
        client = await self._logged_in()
        path = Path.v3.rooms[room_id].send["m.room.message"][client.api.get_txn_id()]
        sent = await self._call(
            "sending a message", client.api.request(Method.PUT, path, content=content)
        )
        event_id = sent.get("event_id") if isinstance(sent, dict) else None
        if not isinstance(event_id, str):
            raise BridgeError("The homeserver did not say which message it took.")
        self._mine[str(event_id)] = None
        while len(self._mine) > _KNOWN_EVENTS:
            self._mine.popitem(last=False)
        return str(event_id)

    async def post(self, to: Received, text: str, *, answering: bool = True) -> str:
        """A new text message answering ``to``; its event id."""
        content: dict[str, Any] = {"msgtype": "m.text", "body": text, "m.mentions": {}}
        relation = self._relation(to, answering=answering)
        if relation is not None:
            content["m.relates_to"] = relation
        return await self._send(self._room_of(to.thread_id), content)

    async def edit(self, to: Received, event_id: str, text: str) -> None:
        """Replace the text of the bot's message ``event_id`` (``m.replace``)."""
        new = {"msgtype": "m.text", "body": text, "m.mentions": {}}
        content = {
            "msgtype": "m.text",
            "body": f"* {text}",
            "m.new_content": new,
            "m.mentions": {},
            "m.relates_to": {"rel_type": "m.replace", "event_id": event_id},
        }
        await self._send(self._room_of(to.thread_id), content)

    async def send_file(self, to: Received, file: EgressFile) -> None:
        """``file`` uploaded to the media repository and sent as an ``m.file``."""
        client = await self._logged_in()
        url: ContentURI = await self._call(
            f"uploading {file.filename!r}",
            client.upload_media(file.data, mime_type=file.mime_type, filename=file.filename),
        )
        content: dict[str, Any] = {
            "msgtype": "m.file",
            "body": file.filename,
            "filename": file.filename,
            "url": str(url),
            "info": {"mimetype": file.mime_type, "size": len(file.data)},
            "m.mentions": {},
        }
        relation = self._relation(to, answering=False)
        if relation is not None:
            content["m.relates_to"] = relation
        await self._send(self._room_of(to.thread_id), content)

    async def stop_typing(self, to: Received) -> None:
        with contextlib.suppress(BridgeError):
            client = await self._logged_in()
            await self._call(
                "typing", client.set_typing(RoomID(self._room_of(to.thread_id)), timeout=0)
            )

    async def open_reply(
        self, to: Received, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> LiveMatrixReply:
        """A reply posted once there are words (the room shows typing until then), then
        edited; Matrix carries no buttons (confirmations are typed back)."""
        return LiveMatrixReply(self, to)

    def reply_ref(self, reply: LiveReply) -> str | None:
        """The reply's event id, once posted."""
        return reply.event_id if isinstance(reply, LiveMatrixReply) else None

    async def reopen_reply(
        self, to: Received, ref: str, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> LiveMatrixReply:
        """The event ``ref`` an earlier run posted, replaced (``m.replace``) from the next
        update on."""
        return LiveMatrixReply(self, to, event_id=ref)

    async def send_private(self, to: Received, text: str) -> None:
        """``text`` in a room of ``to``'s author and the bot alone, judged right before
        sending: the one it came from, else the one the bot opened with them, else a new one
        (a room someone else joined or was invited to since is never used)."""
        client = await self._logged_in()
        content = {"msgtype": "m.text", "body": text, "m.mentions": {}}
        here = self._room_of(to.thread_id)
        if to.is_dm and await self._only_two(client, here, to.author_id):
            await self._send(here, content)
            return
        room_id = self._private.get(to.author_id)
        if room_id is None or not await self._only_two(client, room_id, to.author_id):
            created = await self._call(
                "opening a direct room",
                client.create_room(invitees=[UserID(to.author_id)], is_direct=True),
            )
            room_id = self._private[to.author_id] = str(created)
            await self._mark_direct(client, room_id, to.author_id)
        await self._send(room_id, content)

    async def answer_press(self, press: Pressed, text: str) -> None:
        """Matrix messages carry no buttons: no press ever comes."""

    async def settle_press(self, press: Pressed, text: str) -> None:
        """Matrix messages carry no buttons: no press ever comes."""

    async def close(self) -> None:
        self._closed = True
        self._closing.set()
        if self._session is not None:
            await self._session.close()
        self._client = None


def _split(text: str) -> list[str]:
    return split(text, MESSAGE_LIMIT)


def _errcode(refused: BridgeError) -> str:
    """The Matrix error code a refusal names (``M_UNKNOWN_TOKEN``), else its sentence."""
    cause = refused.__cause__
    code = getattr(cause, "errcode", None)
    return code if isinstance(code, str) and code else str(refused)
