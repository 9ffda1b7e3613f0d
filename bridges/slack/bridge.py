"""The Slack bridge: Events API callbacks and button presses read into :class:`Received` and
:class:`Pressed` (:class:`SlackBot`, whichever way they come; :class:`SlackBridge` checks the
signed webhook deliveries that carry them), replies, files and private answers through the
Web API, and the names of the bot and the people it reads. The package's docstring
(:mod:`bridges.slack`) tells the whole of it, its exception tree included."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any, Final, TypeVar
from urllib.parse import parse_qs, urlsplit

import aiohttp
import msgspec
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
from slack_sdk.signature import Clock as SdkClock
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bridges.downloads import read_capped, refuse_past
from bridges.freshness import epoch
from bridges.hosts import on_platform
from bridges.json_body import decode
from bridges.port import (
    ACTION_MAX_BYTES,
    Attachment,
    BridgeError,
    EgressFile,
    LiveLimits,
    LiveReply,
    PlatformUnavailable,
    Pressed,
    Received,
    ReplyButton,
    ThreadInfo,
    WebhookOutcome,
)
from bridges.slack.blocks import (
    LIVE_MAX_CHARS,
    MAX_MESSAGE_CHARS,
    _context,
    _escape,
    _sections,
    split_message,
)
from bridges.slack.live import _NO_STREAMING, _SlackReply
from bridges.slack.wire import (
    _ENVELOPE,
    _EVENT_KIND,
    _INTERACTION,
    _MESSAGE,
    _api_error,
    _Authorization,
    _Message,
    _Profile,
    _Refused,
    _seconds,
)
from core.clock import Clock, system_clock
from core.config.settings import ConfigurationError, SlackSettings
from core.spaces.ids import InvalidSpaceId, parse_space_id

log = logging.getLogger("mercury.bridges.slack")

#: Seconds a Web API call may take in all (connect, send, answer).
_CALL_TIMEOUT_S: Final = 15.0
#: Seconds :meth:`SlackBridge.complete` waits for an author's name, counted from the moment
#: the lookup began at receive time (the acknowledgement never waits for one).
_LOOKUP_TIMEOUT_S: Final = 1.5
#: Seconds an author whose lookup failed is not looked up again (Slack slow or down).
_LOOKUP_BACKOFF_S: Final = 60.0
#: Name lookups under way at once; past this an unknown author stays unnamed (a flood).
_LOOKUPS_AT_ONCE: Final = 64
#: People whose display names are kept (least recently used forgotten first).
_NAMES_KEPT: Final = 4_096
#: Messages read before the bot's own user id was known, kept to be read again by
#: :meth:`SlackBridge.complete` (oldest forgotten first).
_UNRESOLVED_KEPT: Final = 1_024
#: Message subtypes that are a person writing: plain (no subtype), a message with files, and
#: a thread reply also sent to the channel (``thread_broadcast``, a person's own words too).
#: Edits, deletions, joins and bots' messages are not.
_HUMAN_SUBTYPES: Final = frozenset({None, "file_share", "thread_broadcast"})
#: Hosts the bot token may be sent to for a download, besides the Web API's own.
_FILE_DOMAINS: Final = ("slack.com", "slack-gov.com")
_READ_CHUNK: Final = 64 * 1024
_SPECIAL: Final = re.compile(r"<([^<>\n]+)>")
_TS: Final = re.compile(r"[0-9]{1,12}\.[0-9]{1,8}")

#: The least time between two updates of one reply: ``chat.update`` is a tier-3 method (about
#: 50 a minute), ``chat.appendStream`` tier 4; 1.2 s keeps one chat within either.
_EDIT_INTERVAL_S: Final = 1.2
#: How many buttons a reply carries (an ``actions`` block holds 25; more would not read well).
_MAX_BUTTONS: Final = 5
#: What ``assistant.threads.setStatus`` answers where the app may not show a status at all;
#: remembered, so that it is not asked again.
_NO_STATUS: Final = frozenset(
    {"unknown_method", "method_deprecated", "missing_scope", "not_allowed_token_type"}
)
#: Pressed messages' blocks kept to settle them with their text (least recently used forgotten).
_PRESSED_KEPT: Final = 1_024


_K = TypeVar("_K")
_V = TypeVar("_V")


class _ClockForSdk(SdkClock):
    """The injected clock as ``slack_sdk``'s signature verifier reads it (epoch seconds)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def now(self) -> float:
        return self._clock().timestamp()


class SlackBot:
    """One Slack app's bot, however its events come: reads an Events API callback or an
    interactivity payload, answers through the Web API. :class:`SlackBridge` takes them from
    signed webhook deliveries, :class:`bridges.slack.socket_mode.SlackSocketBridge` from
    Socket Mode connections; both read them here, the same way."""

    def __init__(self, settings: SlackSettings, *, bot_name: str) -> None:
        if not settings.bot_token:
            raise ConfigurationError(
                "The Slack bridge needs SLACK_BOT_TOKEN; set it from the Slack app's "
                "settings, or turn MERCURY_SLACK off."
            )
        self._token = settings.bot_token
        self._api_url = settings.api_url
        self._bot_name = bot_name
        # One retry of a dropped connection, as the SDK's default, written out so that it stays
        # bounded; rate limits and 5xx are not retried here: the pipeline hears of them.
        self._client = AsyncWebClient(
            token=settings.bot_token,
            base_url=settings.api_url,
            timeout=int(_CALL_TIMEOUT_S),
            retry_handlers=[AsyncConnectionErrorRetryHandler(max_retry_count=1)],
        )
        self._http: aiohttp.ClientSession | None = None
        self._closed = False
        self._bot_user_id: str | None = None
        self._identity_task: asyncio.Task[None] | None = None
        self._names: OrderedDict[str, str] = OrderedDict()
        #: Name lookups under way: the task and when (loop time) it began.
        self._lookups: dict[str, tuple[asyncio.Task[None], float]] = {}
        #: Until when (loop time) an author whose lookup failed is not looked up again.
        self._unnamed: dict[str, float] = {}
        self._unresolved: OrderedDict[str, _Message] = OrderedDict()
        #: The bot's workspace (``auth.test``'s ``team_id``), once known.
        self._team_id: str | None = None
        #: Authors' workspaces, from their messages (Slack Connect channels mix them).
        self._teams: OrderedDict[str, str] = OrderedDict()
        #: Workspaces whose answers to ``chat.startStream`` said they have no streaming.
        self._no_streaming: set[str] = set()
        #: Whether ``assistant.threads.setStatus`` may be asked (False once refused for good).
        self._status_allowed = True
        #: The blocks of pressed messages (channel, ts), to settle them keeping their text.
        self._pressed_blocks: OrderedDict[tuple[str, str], tuple[dict[str, Any], ...]] = (
            OrderedDict()
        )
        #: The thread each of the bot's replies is in (channel, ts → thread_ts): what a press
        #: on it starts is answered in that thread, not under the reply itself.
        self._threads_of: OrderedDict[tuple[str, str], str] = OrderedDict()

    @property
    def platform(self) -> str:
        return "slack"

    # -- threads -----------------------------------------------------------------------------

    def parse_thread(self, thread_id: str) -> ThreadInfo:
        """The channel's space, and the thread as the conversation (``slack:C1[:ts]``)."""
        space_id, thread_ts = _split_thread(thread_id)
        try:
            space = parse_space_id(space_id)
        except InvalidSpaceId:
            space = None
        if (
            space is None
            or space.platform != "slack"
            or (thread_ts is not None and _TS.fullmatch(thread_ts) is None)
        ):
            raise ValueError(
                f"{thread_id!r} is not a Slack thread id; one reads slack:<channel> or "
                "slack:<channel>:<thread_ts>, as the Slack bridge writes them."
            )
        return ThreadInfo(space_id=space.id, conversation_external_id=thread_id, is_dm=space.is_dm)

    # -- deliveries --------------------------------------------------------------------------

    async def _read_callback(self, body: bytes) -> WebhookOutcome:
        """An Events API callback (a webhook's JSON body, a Socket Mode ``events_api``
        envelope's payload): the message it carries, or the URL verification's answer."""
        try:
            envelope = decode(_ENVELOPE, body)
        except msgspec.DecodeError as exc:
            return WebhookOutcome(
                verdict="malformed", reason=f"the body is no Events API JSON: {exc}"
            )
        if envelope.type == "url_verification":
            if envelope.challenge is None:
                return WebhookOutcome(
                    verdict="malformed", reason="a url_verification without a challenge"
                )
            return WebhookOutcome(
                verdict="challenge", body=envelope.challenge.encode(), content_type="text/plain"
            )
        if envelope.type != "event_callback":
            return WebhookOutcome(verdict="ignored", reason=f"an envelope of type {envelope.type}")
        if not envelope.event or not envelope.event_id:
            return WebhookOutcome(verdict="malformed", reason="an event_callback without its event")
        return await self._read_event(
            envelope.event_id, envelope.event, envelope.authorizations, envelope.event_time
        )

    async def _read_event(
        self,
        event_id: str,
        raw: msgspec.Raw,
        authorizations: Sequence[_Authorization],
        event_time: int | float | None = None,
    ) -> WebhookOutcome:
        try:
            kind = decode(_EVENT_KIND, raw).type
            if kind != "message":
                # A mention in a channel arrives twice, as ``app_mention`` and as ``message``;
                # only the latter also covers DMs and unmentioned talk (ambient context), so
                # taking messages alone runs each message once.
                return WebhookOutcome(verdict="ignored", reason=f"a {kind} event")
            message = decode(_MESSAGE, raw)
        except msgspec.DecodeError as exc:
            return WebhookOutcome(verdict="malformed", reason=f"the event is unreadable: {exc}")
        if message.subtype not in _HUMAN_SUBTYPES:
            return WebhookOutcome(verdict="ignored", reason=f"a {message.subtype} message")
        if message.bot_id is not None or message.user is None:
            return WebhookOutcome(verdict="ignored", reason="a bot's message")
        if not message.channel or not message.ts:
            return WebhookOutcome(verdict="malformed", reason="a message without channel or ts")
        bot_user_id = self._bot_identity(authorizations)
        if bot_user_id is not None and message.user == bot_user_id:
            return WebhookOutcome(verdict="ignored", reason="the bot's own message")
        if team := message.user_team or message.team:
            _remember_in(self._teams, message.user, team)
        try:
            sent_at = epoch(event_time) if event_time is not None else epoch(message.ts)
            received = self._received(event_id, message, message.user, bot_user_id, sent_at)
        except ValueError:
            return WebhookOutcome(verdict="malformed", reason="a channel id Slack never writes")
        if bot_user_id is None:
            self._unresolved[event_id] = message
            while len(self._unresolved) > _UNRESOLVED_KEPT:
                self._unresolved.popitem(last=False)
        return WebhookOutcome(verdict="accepted", messages=(received,))

    def _received(
        self,
        event_id: str,
        message: _Message,
        author: str,
        bot_user_id: str | None,
        sent_at: datetime | None,
    ) -> Received:
        """``message`` as the pipeline takes it; :class:`ValueError` for a channel id Slack
        never writes."""
        assert message.channel is not None and message.ts is not None  # noqa: S101 - checked
        in_thread = message.thread_ts is not None and message.thread_ts != message.ts
        thread_id = f"slack:{message.channel}" + (f":{message.thread_ts}" if in_thread else "")
        # A question asked in the channel's conversation is answered where the bot answered:
        # in the thread under the asker's own message (or one the bot started).
        under = in_thread and message.parent_user_id in {author, bot_user_id} - {None}
        return Received(
            parent_thread_id=f"slack:{message.channel}" if under else None,
            platform="slack",
            thread_id=thread_id,
            delivery_id=event_id,
            message_id=message.ts,
            author_id=author,
            author_name=self._author_name(author, message.user_profile),
            text=self._readable(message.text or "", bot_user_id),
            is_dm=self.parse_thread(thread_id).is_dm,
            # Only a thread the bot itself started; the bot answers under people's messages,
            # so a thread it replied in is started by a person and not detected (see docs).
            is_reply_to_bot=(
                in_thread and bot_user_id is not None and message.parent_user_id == bot_user_id
            ),
            attachments=tuple(
                Attachment(
                    name=file.name or file.title or file.id,
                    ref=file.url_private,
                    mime_type=file.mimetype,
                    size_bytes=file.size,
                )
                for file in message.files
                # A file deleted or hidden by the plan's limits comes without a URL.
                if file.url_private
            ),
            sent_at=sent_at,
        )

    def _read_press(self, payload: bytes) -> WebhookOutcome:
        """An interactivity payload (a webhook form's ``payload``, a Socket Mode
        ``interactive`` envelope's): each button of a ``block_actions`` as a
        :class:`Pressed`; other interactions (shortcuts, views) are ignored."""
        try:
            interaction = decode(_INTERACTION, payload)
        except msgspec.DecodeError as exc:
            return WebhookOutcome(verdict="malformed", reason=f"the payload is unreadable: {exc}")
        if interaction.type != "block_actions":
            return WebhookOutcome(verdict="ignored", reason=f"a {interaction.type} interaction")
        container, message = interaction.container, interaction.message
        channel = (interaction.channel.id if interaction.channel else None) or (
            container.channel_id if container else None
        )
        message_ts = (container.message_ts if container else None) or (
            message.ts if message else None
        )
        user = interaction.user
        if not channel or not message_ts or user is None or not interaction.actions:
            return WebhookOutcome(
                verdict="malformed", reason="a block_actions without channel, message or user"
            )
        if container is not None and container.is_ephemeral:
            return WebhookOutcome(verdict="ignored", reason="a press on an ephemeral message")
        thread_ts = (container.thread_ts if container else None) or (
            message.thread_ts if message else None
        )
        pressed: list[Pressed] = []
        for action in interaction.actions:
            value = action.value or action.action_id
            if action.type != "button" or not value:
                continue
            if len(value.encode()) > ACTION_MAX_BYTES:
                return WebhookOutcome(verdict="malformed", reason="an action longer than ours")
            thread_id = self._pressed_thread(channel, action.block_id, thread_ts, message_ts)
            if thread_id is None:
                return WebhookOutcome(verdict="malformed", reason="a channel id Slack never writes")
            delivery = interaction.trigger_id or f"{channel}:{message_ts}:{action.action_ts}"
            pressed.append(
                Pressed(
                    platform="slack",
                    thread_id=thread_id,
                    delivery_id=f"{delivery}:{value}" if len(interaction.actions) > 1 else delivery,
                    message_id=message_ts,
                    author_id=user.id,
                    author_name=user.name or user.username,
                    action=value,
                    is_dm=self.parse_thread(thread_id).is_dm,
                    respond=interaction.response_url or "",
                    sent_at=epoch(action.action_ts) if action.action_ts else None,
                )
            )
        if not pressed:
            return WebhookOutcome(verdict="ignored", reason="no button of ours was pressed")
        if message is not None and message.blocks:
            kept = tuple(block for block in message.blocks if block.get("type") != "actions")
            _remember_in(self._pressed_blocks, (channel, message_ts), kept, _PRESSED_KEPT)
        if thread_ts:
            _remember_in(self._threads_of, (channel, message_ts), thread_ts, _PRESSED_KEPT)
        return WebhookOutcome(verdict="accepted", presses=tuple(pressed))

    def _pressed_thread(
        self, channel: str, block_id: str, thread_ts: str | None, message_ts: str
    ) -> str | None:
        """The conversation a pressed message answers: the one its ``actions`` block names
        (its ``block_id``, written by :meth:`open_reply`: a channel's top-level question is
        answered in a thread and still is the conversation ``slack:<channel>``), else the
        thread the message is in."""
        for candidate in (
            block_id,
            f"slack:{channel}:{thread_ts}" if thread_ts and thread_ts != message_ts else "",
            f"slack:{channel}",
        ):
            if not candidate.startswith(f"slack:{channel}"):
                continue
            try:
                self.parse_thread(candidate)
            except ValueError:
                continue
            if _split_thread(candidate)[0] == f"slack:{channel}":
                return candidate
        return None

    # -- who is who --------------------------------------------------------------------------

    async def complete(self, message: Received) -> Received:
        """``message`` with what its delivery did not say, learned after the acknowledgement.

        The pipeline calls this when it handles the message. A message read before the bot's
        user id was known is read again once ``auth.test`` answers (its ``<@UBOT>`` becomes
        ``@<bot_name>``); an author without a name gets the one ``users.info`` gave, waiting
        at most :data:`_LOOKUP_TIMEOUT_S` from the moment the lookup began. Never raises:
        what Slack can't tell in time is left out.
        """
        unresolved = self._unresolved.pop(message.delivery_id, None)
        if unresolved is not None and unresolved.user == message.author_id:
            bot_user_id = await self._learned_identity()
            if bot_user_id is not None:
                with contextlib.suppress(ValueError):
                    message = self._received(
                        message.delivery_id,
                        unresolved,
                        message.author_id,
                        bot_user_id,
                        message.sent_at,
                    )
        if message.author_name is not None:
            return message
        under_way = self._lookups.get(message.author_id)
        if under_way is not None:
            task, began = under_way
            left = began + _LOOKUP_TIMEOUT_S - asyncio.get_running_loop().time()
            if left > 0:
                await asyncio.wait({task}, timeout=left)  # never cancels the shared lookup
        name = self._names.get(message.author_id)
        return message if name is None else msgspec.structs.replace(message, author_name=name)

    # -- who is who --------------------------------------------------------------------------

    def _bot_identity(self, authorizations: Sequence[_Authorization] = ()) -> str | None:
        """The bot's user id as far as known now, without a call to Slack.

        The delivery's own ``authorizations`` (signed with the rest) name the bot user Slack
        delivers the event to; when they don't, ``auth.test`` is asked in the background and
        ``None`` read for now.
        """
        if self._bot_user_id is not None:
            return self._bot_user_id
        for authorization in authorizations:
            if authorization.is_bot and authorization.user_id:
                self._bot_user_id = authorization.user_id
                if authorization.team_id and self._team_id is None:
                    self._team_id = authorization.team_id
                return self._bot_user_id
        self._ask_identity()
        return None

    def _ask_identity(self) -> None:
        """``auth.test`` in the background, once at a time."""
        if self._identity_task is None or self._identity_task.done():
            self._identity_task = asyncio.get_running_loop().create_task(self._auth_test())

    async def _auth_test(self) -> None:
        try:
            answer = await self._call("auth.test", self._client.auth_test)
        except BridgeError as error:
            # The error names the call already ("Slack could not be reached for auth.test …").
            said = str(error).removesuffix(".").removesuffix("; try again later")
            log.warning("%s; the bot's id is read later.", said)
            return
        if self._bot_user_id is None:
            self._bot_user_id = str(answer["user_id"])
        team = answer.get("team_id")
        if team and self._team_id is None:
            self._team_id = str(team)

    async def _learned_identity(self) -> str | None:
        """The bot's user id, waiting for ``auth.test`` (after the acknowledgement)."""
        for _ in range(2):  # the call under way (it may fail), then one more
            if self._bot_user_id is not None:
                break
            self._ask_identity()
            if self._identity_task is not None:
                await asyncio.wait({self._identity_task}, timeout=_CALL_TIMEOUT_S)
        return self._bot_user_id

    def _author_name(self, user_id: str, profile: _Profile | None) -> str | None:
        """The author's name if the event or the cache has it; else a lookup is begun."""
        if profile is not None and (name := _name_of(profile)):
            self._remember(user_id, name)
            return name
        if (known := self._names.get(user_id)) is not None:
            self._names.move_to_end(user_id)
            return known
        self._look_up(user_id)
        return None

    def _look_up(self, user_id: str) -> None:
        """``users.info`` for ``user_id`` in the background, unless one is under way, it
        failed lately, or too many are under way."""
        if user_id in self._lookups or len(self._lookups) >= _LOOKUPS_AT_ONCE:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._unnamed.get(user_id, 0.0) > now:
            return
        self._unnamed.pop(user_id, None)
        task = loop.create_task(self._users_info(user_id))
        self._lookups[user_id] = (task, now)
        task.add_done_callback(lambda _: self._lookups.pop(user_id, None))

    async def _users_info(self, user_id: str) -> None:
        try:
            answer = await self._call("users.info", partial(self._client.users_info, user=user_id))
            name = _name_in(answer.get("user"))
        except BridgeError:
            name = None
        if name:
            self._remember(user_id, name)
            return
        # A name is a nicety: the message runs without it, and Slack is not asked again soon.
        now = asyncio.get_running_loop().time()
        if len(self._unnamed) >= _NAMES_KEPT:
            self._unnamed = {user: until for user, until in self._unnamed.items() if until > now}
        self._unnamed[user_id] = now + _LOOKUP_BACKOFF_S

    def _remember(self, user_id: str, name: str) -> None:
        _remember_in(self._names, user_id, name)

    def _readable(self, text: str, bot_user_id: str | None) -> str:
        """Slack's markup as a person reads it: ``<@UBOT>`` → ``@<bot_name>``, and so on."""

        def one(found: re.Match[str]) -> str:
            inner = found[1]
            target, _, label = inner.partition("|")
            if target.startswith("@"):
                user_id = target[1:]
                if user_id == bot_user_id:
                    return f"@{self._bot_name}"
                return "@" + (label or self._names.get(user_id) or user_id)
            if target.startswith("#"):
                return "#" + (label or target[1:])
            if target.startswith("!"):
                # <!here>, <!channel>, <!subteam^S1|@team>, <!date^…|fallback>
                return label or "@" + target[1:].partition("^")[0]
            url = target
            if not label or label == url or label == _without_scheme(url):
                return url if not url.startswith("mailto:") else url.removeprefix("mailto:")
            return f"{label} ({url})"

        readable = _SPECIAL.sub(one, text) if "<" in text else text
        # Slack escapes exactly these three; &amp; last, so "&amp;lt;" stays "&lt;".
        return readable.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")

    # -- files in ----------------------------------------------------------------------------

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The file at ``url_private``, fetched with the bot token; at most ``max_bytes``."""
        refuse_past(attachment.name, max_bytes, attachment.size_bytes)
        if not self._may_carry_token(attachment.ref):
            raise BridgeError(
                f"The Slack bridge does not send its token to {urlsplit(attachment.ref).netloc} "
                f"for {attachment.name!r}; Slack's files are on files.slack.com."
            )
        try:
            async with self._session().get(
                attachment.ref,
                headers={"Authorization": f"Bearer {self._token}"},
                # Slack answers a download it refuses with a redirect to its sign-in page; we
                # never follow one (and never carry the token to wherever it points).
                allow_redirects=False,
            ) as answer:
                sign_in_page = answer.content_type == "text/html" and attachment.mime_type != (
                    "text/html"
                )
                if 300 <= answer.status < 400 or sign_in_page:
                    raise BridgeError(
                        f"Slack sent the sign-in page instead of {attachment.name!r}: give the app "
                        "the files:read scope, reinstall it, and invite the bot to the channel."
                    )
                if answer.status == 429 or answer.status >= 500:
                    raise PlatformUnavailable(
                        f"Slack answered {answer.status} to the download of {attachment.name!r}; "
                        "try again later."
                    )
                if answer.status != 200:
                    raise BridgeError(
                        f"Slack answered {answer.status} to the download of {attachment.name!r}."
                    )
                refuse_past(attachment.name, max_bytes, answer.content_length)
                return await read_capped(
                    answer.content.iter_chunked(_READ_CHUNK), attachment.name, max_bytes
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PlatformUnavailable(
                f"Slack could not be reached to download {attachment.name!r} "
                f"({type(exc).__name__}); try again later."
            ) from exc

    def _may_carry_token(self, url: str) -> bool:
        return on_platform(url, api_url=self._api_url, domains=_FILE_DOMAINS)

    # -- replies -----------------------------------------------------------------------------

    async def start_typing(self, message: Received) -> None:
        """Nothing: Slack shows no typing indicator for an Events API bot."""

    async def send_reply(self, to: Received, text: str, files: Sequence[EgressFile] = ()) -> None:
        """Answer in ``to``'s thread (a channel message's answer is threaded under it)."""
        channel, thread_ts = self._reply_place(to)
        for part in split_message(_escape(text), MAX_MESSAGE_CHARS):
            await self._call(
                "chat.postMessage",
                partial(
                    self._client.chat_postMessage, channel=channel, text=part, thread_ts=thread_ts
                ),
            )
        await self._upload(channel, thread_ts, files)

    async def _upload(
        self, channel: str, thread_ts: str | None, files: Sequence[EgressFile]
    ) -> None:
        """Share ``files`` in the thread, through ``files_upload_v2``."""
        if files:
            await self._call(
                "files_upload_v2",
                partial(
                    self._client.files_upload_v2,
                    file_uploads=[
                        {"filename": file.filename, "content": file.data, "title": file.filename}
                        for file in files
                    ],
                    channel=channel,
                    thread_ts=thread_ts,
                ),
            )

    # -- live replies and buttons (#37) ---------------------------------------------------------

    @property
    def live_limits(self) -> LiveLimits:
        return LiveLimits(
            max_chars=LIVE_MAX_CHARS, edit_interval_s=_EDIT_INTERVAL_S, max_buttons=_MAX_BUTTONS
        )

    async def open_reply(
        self, to: Received, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> LiveReply:
        """A reply to ``to`` written live: streamed in its thread (``chat.startStream``) where
        the workspace streams, else posted and edited; ``status`` shown as the thread's
        status (streaming) or a line under the text (post and edit)."""
        channel, thread_ts = self._reply_place(to)
        # The workspace comes with the bot's identity (the delivery's authorizations, or
        # auth.test): unknown for now, streaming is tried and its refusal not kept.
        await self._learned_identity()
        workspace = self._team_id or ""
        reply = _SlackReply(
            self,
            channel=channel,
            thread_ts=thread_ts,
            conversation=to.thread_id,
            recipient_user=to.author_id,
            recipient_team=self._teams.get(to.author_id) or self._team_id,
            # A plain DM answer (not in a thread) stays a plain message: a stream is a reply.
            stream=thread_ts is not None and workspace not in self._no_streaming,
            stop=tuple(buttons),
        )
        await reply.begin(status)
        return reply

    def reply_ref(self, reply: LiveReply) -> str | None:
        """The reply's message ``ts``, once posted or started."""
        return reply.ts if isinstance(reply, _SlackReply) else None

    async def reopen_reply(
        self, to: Received, ref: str, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> LiveReply:
        """The message ``ref`` (its ``ts``) an earlier run posted, its stream ended if it was
        one, written on by post and edit (``chat.update``): it shows ``status`` at once."""
        channel, thread_ts = self._reply_place(to)
        reply = _SlackReply(
            self,
            channel=channel,
            thread_ts=thread_ts,
            conversation=to.thread_id,
            recipient_user=to.author_id,
            recipient_team=self._teams.get(to.author_id) or self._team_id,
            stream=False,
            stop=tuple(buttons),
        )
        await reply.resume(ref, status)
        return reply

    async def send_private(self, to: Received, text: str) -> None:
        """``text`` to ``to``'s author alone, as an ephemeral message where they wrote."""
        channel, thread_ts = self._reply_place(to)
        await self._call(
            "chat.postEphemeral",
            partial(
                self._client.chat_postEphemeral,
                channel=channel,
                user=to.author_id,
                text=_escape(text),
                thread_ts=thread_ts,
            ),
        )

    async def answer_press(self, press: Pressed, text: str) -> None:
        """``text`` to the presser alone, through the press's ``response_url`` (ephemeral,
        the pressed message left as it is); an ephemeral message where Slack gave none."""
        channel = _split_thread(press.thread_id)[0].removeprefix("slack:")
        if not press.respond:
            await self._call(
                "chat.postEphemeral",
                partial(
                    self._client.chat_postEphemeral,
                    channel=channel,
                    user=press.author_id,
                    text=_escape(text),
                ),
            )
            return
        if not on_platform(press.respond, api_url=self._api_url, domains=_FILE_DOMAINS):
            raise BridgeError(
                f"The Slack bridge answers presses only on Slack's hosts, not on "
                f"{urlsplit(press.respond).netloc}."
            )
        hook = AsyncWebhookClient(
            press.respond,
            timeout=int(_CALL_TIMEOUT_S),
            session=self._session(),
            retry_handlers=[AsyncConnectionErrorRetryHandler(max_retry_count=1)],
        )
        try:
            answer = await hook.send(
                text=_escape(text), response_type="ephemeral", replace_original=False
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PlatformUnavailable(
                f"Slack could not be reached to answer a press ({type(exc).__name__}); "
                "try again later."
            ) from exc
        if answer.status_code == 429 or answer.status_code >= 500:
            raise PlatformUnavailable(
                f"Slack answered {answer.status_code} to the answer of a press; try again later.",
                retry_after_s=_seconds(answer.headers.get("Retry-After")),
            )
        if answer.status_code != 200:
            raise BridgeError(
                f"Slack refused the answer of a press: {answer.body or answer.status_code}."
            )

    async def settle_press(self, press: Pressed, text: str) -> None:
        """The pressed message without its buttons, ``text`` under its own text."""
        channel = _split_thread(press.thread_id)[0].removeprefix("slack:")
        kept = self._pressed_blocks.pop((channel, press.message_id), ())
        blocks = [*kept, _context(text)] if kept else _sections(text)
        await self._call(
            "chat.update",
            partial(
                self._client.chat_update,
                channel=channel,
                ts=press.message_id,
                text=_escape(text),
                blocks=blocks,
            ),
        )

    async def _set_status(self, channel: str, thread_ts: str, status: str) -> bool:
        """Show ``status`` as the thread's status ("" clears it); False where Slack would not
        (never raises: a status is a nicety)."""
        if not self._status_allowed:
            return False
        try:
            await self._call(
                "assistant.threads.setStatus",
                partial(
                    self._client.assistant_threads_setStatus,
                    channel_id=channel,
                    thread_ts=thread_ts,
                    status=status,
                ),
            )
        except _Refused as refused:
            if refused.code in _NO_STATUS:
                self._status_allowed = False
            return False
        except BridgeError:
            return False
        return True

    def _wrote(self, channel: str, ts: str, thread_ts: str | None) -> None:
        """Remember the thread of a reply the bot wrote (for what a press on it starts)."""
        if thread_ts is not None:
            _remember_in(self._threads_of, (channel, ts), thread_ts, _PRESSED_KEPT)

    def _streaming_refused(self, code: str) -> None:
        """Remember that this workspace does not stream (``code`` said so for all of it)."""
        if code in _NO_STREAMING:
            self._no_streaming.add(self._team_id or "")

    def _reply_place(self, to: Received) -> tuple[str, str | None]:
        """The channel and the ``thread_ts`` an answer to ``to`` goes to."""
        space_id, thread_ts = _split_thread(to.thread_id)
        channel = space_id.removeprefix("slack:")
        if thread_ts is None:
            # A press's turn answers the bot's reply: in the thread that reply is in.
            thread_ts = self._threads_of.get((channel, to.message_id))
        if thread_ts is None and not to.is_dm:
            thread_ts = to.message_id
        return channel, thread_ts

    # -- the Web API -------------------------------------------------------------------------

    def _session(self) -> aiohttp.ClientSession:
        """The one HTTP session of the bridge, opened on first use (in the running loop)."""
        if self._closed:
            raise BridgeError("The Slack bridge is closed; build a new one to call Slack again.")
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=_CALL_TIMEOUT_S))
        return self._http

    async def _call(
        self, method: str, call: Callable[[], Awaitable[AsyncSlackResponse]]
    ) -> AsyncSlackResponse:
        """Make one SDK call, its failure turned into :class:`BridgeError` or its subclass."""
        self._client.session = self._session()
        try:
            return await call()
        except SlackApiError as exc:
            # files_upload_v2 makes three calls: name the one that failed.
            api_url = str(getattr(exc.response, "api_url", "") or "")
            raise _api_error(api_url.rpartition("/")[2] or method, exc.response) from None
        except SlackRequestError as exc:
            # The upload step of files_upload_v2 reports its status only in the message.
            status = re.search(r"status: (\d+)", str(exc))
            kind = (
                PlatformUnavailable
                if status and (status[1] == "429" or status[1].startswith("5"))
                else BridgeError
            )
            raise kind(f"Slack refused {method}: {exc}") from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PlatformUnavailable(
                f"Slack could not be reached for {method} ({type(exc).__name__}); try again later."
            ) from exc

    async def close(self) -> None:
        """Stop the lookups under way and close the HTTP session (the SDK client holds
        nothing else)."""
        self._closed = True
        tasks = [task for task, _ in self._lookups.values()]
        if self._identity_task is not None:
            tasks.append(self._identity_task)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        http, self._http = self._http, None
        self._client.session = None
        if http is not None:
            await http.close()


class SlackBridge(SlackBot):
    """One Slack app's bot over HTTP: reads its signed Events API and interactivity
    deliveries (``/webhooks/slack``, ``/webhooks/slack/interactions``)."""

    def __init__(
        self, settings: SlackSettings, *, bot_name: str, clock: Clock = system_clock
    ) -> None:
        if not settings.bot_token or not settings.signing_secret:
            raise ConfigurationError(
                "The Slack bridge needs SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET; set both "
                "from the Slack app's settings, or turn MERCURY_SLACK off."
            )
        super().__init__(settings, bot_name=bot_name)
        self._verifier = SignatureVerifier(settings.signing_secret, clock=_ClockForSdk(clock))

    async def receive(
        self,
        method: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
    ) -> WebhookOutcome:
        """Check one Events API delivery's signature, then read the message it carries.

        A retry (``X-Slack-Retry-Num``) carries the same ``event_id`` and is parsed again:
        the pipeline's de-duplication runs it once. Nothing here waits for Slack: the bot's
        user id comes from the delivery's ``authorizations``, the author's name from the event
        or from what is known; what is missing is learned in the background and filled in by
        :meth:`complete`, after the acknowledgement.
        """
        if not self._is_signed(headers, body):
            return WebhookOutcome(
                verdict="forged",
                reason="the X-Slack-Signature is missing, wrong or older than five minutes",
            )
        if method.upper() != "POST":
            return WebhookOutcome(
                verdict="malformed", reason=f"Slack delivers by POST, not {method}"
            )
        content_type = headers.get("content-type", "").partition(";")[0].strip().lower()
        if content_type == "application/x-www-form-urlencoded":
            # A button pressed: Slack posts interactivity as a form with one ``payload``.
            return self._read_interaction(body)
        return await self._read_callback(body)

    def _is_signed(self, headers: Mapping[str, str], body: bytes) -> bool:
        signature = headers.get("x-slack-signature")
        if signature is not None and not signature.isascii():
            # The SDK compares the signatures as text, which refuses non-ASCII with a
            # TypeError: a signature Slack never writes is simply not Slack's.
            return False
        try:
            return self._verifier.is_valid(
                body=body,
                timestamp=headers.get("x-slack-request-timestamp"),
                signature=signature,
            )
        except ValueError:  # a timestamp that isn't a number, a body that isn't UTF-8
            return False

    async def receive_interactions(
        self,
        method: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
    ) -> WebhookOutcome:
        """Check one interactivity delivery (``/webhooks/slack/interactions``) as strictly as
        an event, then read its presses. Never raises; calls nothing."""
        if not self._is_signed(headers, body):
            return WebhookOutcome(
                verdict="forged",
                reason="the X-Slack-Signature is missing, wrong or older than five minutes",
            )
        if method.upper() != "POST":
            return WebhookOutcome(
                verdict="malformed", reason=f"Slack delivers by POST, not {method}"
            )
        return self._read_interaction(body)

    def _read_interaction(self, body: bytes) -> WebhookOutcome:
        """A signed interactivity delivery: the form around one ``payload``."""
        try:
            form = parse_qs(
                body.decode("utf-8"), strict_parsing=True, max_num_fields=8, errors="strict"
            )
        except (UnicodeDecodeError, ValueError) as exc:
            return WebhookOutcome(verdict="malformed", reason=f"the form is unreadable: {exc}")
        payloads = form.get("payload", [])
        if len(payloads) != 1:
            return WebhookOutcome(
                verdict="malformed", reason="an interactivity form without exactly one payload"
            )
        return self._read_press(payloads[0].encode())


# -- helpers ---------------------------------------------------------------------------------


def _split_thread(thread_id: str) -> tuple[str, str | None]:
    """``slack:C1:17.1`` → (``slack:C1``, ``17.1``); ``slack:C1`` → (``slack:C1``, None)."""
    platform, _, rest = thread_id.partition(":")
    channel, _, thread_ts = rest.partition(":")
    return f"{platform}:{channel}", thread_ts or None


def _remember_in(kept: OrderedDict[_K, _V], key: _K, value: _V, most: int = _NAMES_KEPT) -> None:
    """``kept[key] = value``, the least recently used entries forgotten past ``most``."""
    kept[key] = value
    kept.move_to_end(key)
    while len(kept) > most:
        kept.popitem(last=False)


def _name_of(profile: _Profile) -> str | None:
    return profile.display_name or profile.real_name or profile.name or None


def _name_in(user: Any) -> str | None:
    """The name ``users.info``'s ``user`` object shows: its profile's, else its own."""
    if not isinstance(user, dict):
        return None
    profile = user.get("profile")
    for source, key in (
        (profile, "display_name"),
        (profile, "real_name"),
        (user, "real_name"),
        (user, "name"),
    ):
        value = source.get(key) if isinstance(source, dict) else None
        if isinstance(value, str) and value:
            return value
    return None


def _without_scheme(url: str) -> str:
    return url.partition("://")[2] if "://" in url else url.partition(":")[2]
