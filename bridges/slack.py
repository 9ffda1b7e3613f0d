"""The Slack bridge: Events API deliveries in, Web API replies out, on the official ``slack_sdk``.

Slack posts every event to ``POST /webhooks/slack``, signed with the app's signing secret
(``v0=`` HMAC-SHA256 of ``v0:<timestamp>:<body>``, at most five minutes old); the bridge
checks the signature before it reads anything else (:meth:`SlackBridge.receive`), answers
the URL verification challenge, and turns each human message into a :class:`Received`:

* ``thread_id`` is ``slack:<channel>`` for a top-level message and
  ``slack:<channel>:<thread_ts>`` for one inside a thread, so every Slack thread is a
  conversation of its channel's space;
* the bot's mention ``<@UBOT>`` becomes ``@<bot_name>``; other people's mentions, channels
  and links are written as a person reads them (``@Ada``, ``#general``, ``label (url)``);
* files arrive as :class:`Attachment` refs (their ``url_private``), downloaded only when the
  pipeline asks, with the bot token and the size cap enforced while streaming.

A reply is threaded: in a channel under the message it answers (or in that message's
thread), in a DM only when the message was in a thread. Text longer than 3,500 characters
goes as several messages cut at line or word boundaries; files follow the text through
``files_upload_v2`` (``files.getUploadURLExternal``, the upload, then
``files.completeUploadExternal`` into the same thread).

Slack has no typing indicator for Events API bots, so :meth:`SlackBridge.start_typing` does
nothing. Nothing here logs or repeats the bot token or the signing secret.

Exception tree (see :mod:`bridges.port`; ``ConfigurationError`` is :mod:`core.config.settings`'s)::

    BridgeError                  Slack refused a call; the message carries Slack's error code
    └── PlatformUnavailable      Slack could not be reached, answered 5xx or rate-limited us
    ConfigurationError           the bridge was built without its bot token or signing secret
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
import msgspec
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
from slack_sdk.signature import Clock as SdkClock
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bridges.freshness import epoch
from bridges.hosts import on_platform
from bridges.json_body import decode
from bridges.port import (
    Attachment,
    BridgeError,
    EgressFile,
    PlatformUnavailable,
    Received,
    ThreadInfo,
    WebhookOutcome,
)
from core.clock import Clock, system_clock
from core.config.settings import ConfigurationError, SlackSettings
from core.spaces.ids import InvalidSpaceId, parse_space_id

__all__ = ["MAX_MESSAGE_CHARS", "SlackBridge", "split_message"]

log = logging.getLogger("mercury.bridges.slack")

#: Slack truncates a message's text past 40,000 characters and advises under 4,000; we cut
#: at 3,500 so that a few escaped ``&<>`` never push a part over.
MAX_MESSAGE_CHARS: Final = 3_500
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


class _File(msgspec.Struct, frozen=True, kw_only=True):
    id: str = ""
    name: str | None = None
    title: str | None = None
    mimetype: str | None = None
    size: int | None = None
    url_private: str | None = None


class _Profile(msgspec.Struct, frozen=True, kw_only=True):
    display_name: str | None = None
    real_name: str | None = None
    name: str | None = None


class _Message(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    subtype: str | None = None
    user: str | None = None
    bot_id: str | None = None
    text: str | None = None
    ts: str | None = None
    thread_ts: str | None = None
    parent_user_id: str | None = None
    channel: str | None = None
    files: tuple[_File, ...] = ()
    user_profile: _Profile | None = None


class _EventKind(msgspec.Struct, frozen=True, kw_only=True):
    type: str


class _Authorization(msgspec.Struct, frozen=True, kw_only=True):
    user_id: str | None = None
    is_bot: bool = False


class _Envelope(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    challenge: str | None = None
    event_id: str | None = None
    #: When Slack says the event happened (epoch seconds): the message's age.
    event_time: int | float | None = None
    # Read in a second step: events we don't handle may carry fields (``user`` as an object
    # in ``user_change``) that the message's shape would call malformed.
    event: msgspec.Raw = msgspec.Raw(b"")  # empty: the envelope has no event
    authorizations: tuple[_Authorization, ...] = ()


_ENVELOPE: Final = msgspec.json.Decoder(_Envelope)
_EVENT_KIND: Final = msgspec.json.Decoder(_EventKind)
_MESSAGE: Final = msgspec.json.Decoder(_Message)


class _ClockForSdk(SdkClock):
    """The injected clock as ``slack_sdk``'s signature verifier reads it (epoch seconds)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def now(self) -> float:
        return self._clock().timestamp()


class SlackBridge:
    """One Slack app's bot: reads its Events API deliveries, answers through the Web API."""

    def __init__(
        self, settings: SlackSettings, *, bot_name: str, clock: Clock = system_clock
    ) -> None:
        if not settings.bot_token or not settings.signing_secret:
            raise ConfigurationError(
                "The Slack bridge needs SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET; set both "
                "from the Slack app's settings, or turn MERCURY_SLACK off."
            )
        self._token = settings.bot_token
        self._api_url = settings.api_url
        self._bot_name = bot_name
        self._verifier = SignatureVerifier(settings.signing_secret, clock=_ClockForSdk(clock))
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
        return Received(
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
            log.warning("Slack's auth.test failed (%s); the bot's id is read later.", error)
            return
        if self._bot_user_id is None:
            self._bot_user_id = str(answer["user_id"])

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
        self._names[user_id] = name
        self._names.move_to_end(user_id)
        while len(self._names) > _NAMES_KEPT:
            self._names.popitem(last=False)

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
        if attachment.size_bytes is not None and attachment.size_bytes > max_bytes:
            raise _too_large(attachment, max_bytes)
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
                if answer.content_length is not None and answer.content_length > max_bytes:
                    raise _too_large(attachment, max_bytes)
                data = bytearray()
                while chunk := await answer.content.read(
                    min(_READ_CHUNK, max_bytes + 1 - len(data))
                ):
                    data += chunk
                    if len(data) > max_bytes:
                        raise _too_large(attachment, max_bytes)
                return bytes(data)
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

    def _reply_place(self, to: Received) -> tuple[str, str | None]:
        """The channel and the ``thread_ts`` an answer to ``to`` goes to."""
        space_id, thread_ts = _split_thread(to.thread_id)
        channel = space_id.removeprefix("slack:")
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


# -- helpers ---------------------------------------------------------------------------------


def split_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """``text`` in parts of at most ``limit`` characters, cut at a paragraph, line or word.

    A word longer than ``limit`` is cut where it must, never inside an ``&amp;``-style entity.
    Empty parts are dropped, so blank text gives no part at all.
    """
    parts: list[str] = []
    rest = text
    while len(rest) > limit:
        window = rest[: limit + 1]  # a separator right after the limit still counts
        for separator in ("\n\n", "\n", " "):
            cut = window.rfind(separator, 0, limit + 1)
            if cut >= limit // 2:
                # Blank lines around a cut would only show as a gap at a message's edge.
                parts.append(rest[:cut].rstrip("\n"))
                rest = rest[cut + len(separator) :].lstrip("\n")
                break
        else:
            cut = limit
            entity = window.rfind("&", max(0, limit - 7), limit)
            if entity > 0 and ";" not in window[entity:limit]:
                cut = entity
            parts.append(rest[:cut])
            rest = rest[cut:]
    parts.append(rest)
    return [part for part in parts if part.strip()]


def _split_thread(thread_id: str) -> tuple[str, str | None]:
    """``slack:C1:17.1`` → (``slack:C1``, ``17.1``); ``slack:C1`` → (``slack:C1``, None)."""
    platform, _, rest = thread_id.partition(":")
    channel, _, thread_ts = rest.partition(":")
    return f"{platform}:{channel}", thread_ts or None


def _escape(text: str) -> str:
    """Slack's three control characters escaped, so that no text becomes a ping or a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


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


def _too_large(attachment: Attachment, max_bytes: int) -> BridgeError:
    return BridgeError(
        f"{attachment.name!r} is larger than the {max_bytes:,} bytes a file may have here; "
        "share a smaller one."
    )


def _api_error(method: str, response: Any) -> BridgeError:
    """The failure of ``method`` as Slack answered it (status, ``error`` code, Retry-After)."""
    status = int(getattr(response, "status_code", 0) or 0)
    data = getattr(response, "data", None)
    code = data.get("error") if isinstance(data, dict) else None
    if status == 429:
        retry_after = (getattr(response, "headers", None) or {}).get("Retry-After")
        wait = f" after {retry_after} s" if retry_after else " later"
        return PlatformUnavailable(f"Slack rate-limited {method}; try again{wait}.")
    if status >= 500:
        return PlatformUnavailable(
            f"Slack answered {status} to {method}"
            + (f" ({code})" if code else "")
            + "; try again later."
        )
    return BridgeError(f"Slack refused {method}: {code or f'HTTP {status}'}.")
