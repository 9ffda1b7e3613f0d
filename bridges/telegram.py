"""The Telegram bridge: Bot API updates in at our webhook, replies out through the Bot API.

It drives python-telegram-bot's :class:`telegram.Bot` (on httpx) against
``TelegramSettings.api_url``, so a local Bot API server or a stand-in takes the cloud's
place by configuration alone. How Telegram maps onto the port:

* a thread is ``telegram:<chat_id>``, or ``telegram:<chat_id>:<message_thread_id>`` for a
  forum topic; a topic is a space of its own, and a chat whose id is positive is a DM;
* only new ``message`` updates are read: an edit, a channel post, a bot's message, an
  automatic forward from a linked channel and a message with nothing to read (a service
  message, a sticker) are ``ignored``;
* a ``mention`` of ``@<bot username>`` or a ``text_mention`` of the bot is written
  ``@<bot_name>``; other mentions stay as Telegram shows them;
* documents, photos (the largest size), voice notes, audio, video and video notes are
  attachments whose ``ref`` is the ``file_id``; a caption is the message's text;
* a reply is plain text (no parse mode) split at 4,096 UTF-16 units, answering the triggering
  message in a group, in its topic; files follow as documents.

The bot's own id is the digits before the token's colon; its username comes from ``getMe``,
asked in the background on the first update and kept. A webhook's answer never waits for
Telegram: an update read before ``getMe`` answered is read again with the username by
:meth:`TelegramBridge.complete`, which the pipeline calls after the acknowledgement.

Exceptions (the port's)::

    BridgeError                  Telegram refused a call (400, 403, a bad token, a file too big)
    └── PlatformUnavailable      Telegram could not be reached, timed out, answered 5xx or 429
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import mimetypes
import os
from collections import OrderedDict
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, TypeVar

import httpx
import msgspec
from telegram import Bot, InputFile, Message, MessageEntity, ReplyParameters, Update, User
from telegram.constants import ChatAction, ChatType
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.request import HTTPXRequest

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
from core.config.settings import ConfigurationError, TelegramSettings
from core.spaces.ids import parse_space_id

__all__ = ["MAX_MESSAGE_CHARS", "SECRET_HEADER", "TelegramBridge", "split_text"]

#: The longest text one ``sendMessage`` takes, in UTF-16 code units as Telegram counts.
MAX_MESSAGE_CHARS: Final = 4096
#: The header every webhook delivery carries the ``secret_token`` of ``setWebhook`` in.
SECRET_HEADER: Final = "x-telegram-bot-api-secret-token"  # noqa: S105 - a header's name

_PLATFORM: Final = "telegram"
_DECODER: Final = msgspec.json.Decoder(dict[str, Any])
_T = TypeVar("_T")
#: Messages kept to be read again once the bot's username is known (a restart's first minute).
_UNRESOLVED_KEPT: Final = 1_024

log = logging.getLogger("mercury.bridges.telegram")


@dataclass(frozen=True, slots=True)
class _Identity:
    """Who the bot is: its user id and username (``None`` while ``getMe`` can't be had)."""

    id: int | None
    username: str | None


class _TokenRedaction(logging.Filter):
    """Writes ``<token>`` for the bot token in httpx's request lines (the token is in the URL)."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if self._token in text:
            record.msg = text.replace(self._token, "<token>")
            record.args = ()
        return True


class TelegramBridge:
    """The Telegram bot, as the pipeline sees it: a :class:`bridges.port.WebhookBridge`."""

    def __init__(
        self, settings: TelegramSettings, *, bot_name: str, timeout_s: float = 10.0
    ) -> None:
        if not settings.bot_token or not settings.webhook_secret:
            raise ConfigurationError(
                "The Telegram bridge needs TELEGRAM_BOT_TOKEN and TELEGRAM_WEBHOOK_SECRET; "
                "set both."
            )
        # Since PTB 22.2, RetryAfter's own constructor warns that retry_after (and every
        # duration) will become a timedelta unless the process opts in; opting in keeps a 429
        # from raising a DeprecationWarning where warnings are errors (the test suite).
        os.environ.setdefault("PTB_TIMEDELTA", "true")
        self._token = settings.bot_token
        self._secret = settings.webhook_secret.encode()
        self._bot_name = bot_name
        self._timeout_s = timeout_s
        # python-telegram-bot never retries on its own; the timeouts bound every call, and a
        # 429 comes back as RetryAfter for the caller to decide on.
        self._requests = tuple(
            HTTPXRequest(
                connection_pool_size=8,
                read_timeout=timeout_s,
                write_timeout=timeout_s,
                connect_timeout=timeout_s,
                pool_timeout=timeout_s,
                media_write_timeout=max(timeout_s, 60.0),
            )
            for _ in range(2)
        )
        self._bot = Bot(
            self._token,
            base_url=settings.api_url,
            base_file_url=settings.file_url,
            request=self._requests[0],
            get_updates_request=self._requests[1],
        )
        self._identity: _Identity | None = None
        self._identity_lock = asyncio.Lock()
        self._identity_task: asyncio.Task[None] | None = None
        #: Messages read before the bot's username was known, to be read again by
        #: :meth:`complete` (oldest forgotten first).
        self._unresolved: OrderedDict[str, tuple[Message, User]] = OrderedDict()
        self._downloads: httpx.AsyncClient | None = None
        self._redaction = _TokenRedaction(self._token)
        logging.getLogger("httpx").addFilter(self._redaction)

    @property
    def platform(self) -> str:
        return _PLATFORM

    # -- threads ---------------------------------------------------------------------------

    def parse_thread(self, thread_id: str) -> ThreadInfo:
        """A chat, or a forum topic, is its own space; :class:`ValueError` for another id."""
        space = parse_space_id(thread_id)
        if space.platform != _PLATFORM:
            raise ValueError(f"{thread_id!r} is not a Telegram thread; give telegram:<chat>.")
        return ThreadInfo(space_id=thread_id, conversation_external_id=thread_id, is_dm=space.is_dm)

    # -- the webhook -----------------------------------------------------------------------

    async def receive(
        self,
        method: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
    ) -> WebhookOutcome:
        """Check the secret token, then read one update (at most one message)."""
        given = headers.get(SECRET_HEADER)
        if given is None:
            return WebhookOutcome(verdict="forged", reason="the update carries no secret token")
        if not hmac.compare_digest(given.encode("utf-8", "replace"), self._secret):
            return WebhookOutcome(verdict="forged", reason="the update's secret token is wrong")
        if method.upper() != "POST":
            return WebhookOutcome(
                verdict="malformed", reason=f"Telegram POSTs updates, not {method}"
            )
        try:
            data = decode(_DECODER, body)
        except msgspec.DecodeError:
            return WebhookOutcome(verdict="malformed", reason="the update is not a JSON object")
        if not isinstance(data.get("update_id"), int):
            return WebhookOutcome(verdict="malformed", reason="the update has no update_id")
        try:
            update = Update.de_json(data, self._bot)
        except Exception:  # any shape the SDK can't read is a malformed update, never a crash
            return WebhookOutcome(verdict="malformed", reason="the update could not be read")
        message = update.message
        if message is None:
            kind = next((k for k in data if k != "update_id"), "nothing")
            return WebhookOutcome(verdict="ignored", reason=f"an update of kind {kind}")
        why_not = _why_ignored(message)
        if why_not:
            return WebhookOutcome(verdict="ignored", reason=why_not)
        author = message.from_user
        if author is None:
            return WebhookOutcome(verdict="ignored", reason="a message without an author")
        me = self._identity_now()
        try:
            received = self._received(str(update.update_id), message, author, me)
        except Exception:  # entities or media the SDK read but that make no sense
            return WebhookOutcome(verdict="malformed", reason="the message could not be read")
        try:
            self.parse_thread(received.thread_id)
        except ValueError:
            # Refused before it is taken: past the answer the pipeline could only fail on it.
            return WebhookOutcome(
                verdict="malformed", reason="a chat or topic id that can't be a space id"
            )
        if not received.text and not received.attachments:
            return WebhookOutcome(verdict="ignored", reason="a message with nothing to read")
        if me.username is None:
            self._unresolved[received.delivery_id] = (message, author)
            while len(self._unresolved) > _UNRESOLVED_KEPT:
                self._unresolved.popitem(last=False)
        return WebhookOutcome(verdict="accepted", messages=(received,))

    def _received(
        self, delivery_id: str, message: Message, author: User, me: _Identity
    ) -> Received:
        if message.text is not None:
            text = message.text
            mentions = message.parse_entities([MessageEntity.MENTION, MessageEntity.TEXT_MENTION])
        else:
            text = message.caption or ""
            mentions = message.parse_caption_entities(
                [MessageEntity.MENTION, MessageEntity.TEXT_MENTION]
            )
        chat_id = message.chat.id
        thread_id = f"{_PLATFORM}:{chat_id}"
        if message.is_topic_message and message.message_thread_id is not None:
            thread_id += f":{message.message_thread_id}"
        return Received(
            platform=_PLATFORM,
            thread_id=thread_id,
            delivery_id=delivery_id,
            message_id=str(message.message_id),
            author_id=str(author.id),
            author_name=author.full_name,
            text=self._with_mentions(text, mentions, me),
            is_dm=message.chat.type == ChatType.PRIVATE,
            is_reply_to_bot=_replies_to(message, me),
            attachments=_attachments(message),
            sent_at=message.date,
        )

    def _with_mentions(self, text: str, mentions: dict[MessageEntity, str], me: _Identity) -> str:
        """``text`` with every mention of the bot written ``@<bot_name>``.

        Entity offsets count UTF-16 code units, so the text is cut in that encoding.
        """
        encoded = text.encode("utf-16-le")
        pieces: list[str] = []
        at = 0
        for entity in sorted(mentions, key=lambda e: e.offset):
            if not _names_bot(entity, mentions[entity], me):
                continue
            start, end = entity.offset * 2, (entity.offset + entity.length) * 2
            if start < at:
                continue
            pieces.append(encoded[at:start].decode("utf-16-le", "replace"))
            pieces.append(f"@{self._bot_name}")
            at = end
        if not pieces:
            return text
        pieces.append(encoded[at:].decode("utf-16-le", "replace"))
        return "".join(pieces)

    async def complete(self, message: Received) -> Received:
        """``message`` read again with the bot's username, if it came before ``getMe``
        answered (after the acknowledgement: the pipeline calls this when it handles it).

        Waits for ``getMe`` at most the API's timeout; when Telegram can't tell, the message
        stays as it was read (replies to the bot count, ``@username`` mentions do not).
        """
        unresolved = self._unresolved.pop(message.delivery_id, None)
        if unresolved is None:
            return message
        try:
            me = await self._me()
        except BridgeError as exc:
            log.warning("Telegram's getMe failed (%s); the update is read without it.", exc)
            return message
        try:
            return self._received(message.delivery_id, *unresolved, me)
        except Exception:  # read once already: this can't fail differently, but never raise
            return message

    def _identity_now(self) -> _Identity:
        """The bot's identity as known now, without a call: until ``getMe`` has answered, the
        id from the token (the digits before its colon) and no username, while ``getMe`` is
        asked in the background. A webhook's answer never waits for Telegram (#34)."""
        if self._identity is not None:
            return self._identity
        if self._identity_task is None or self._identity_task.done():
            self._identity_task = asyncio.get_running_loop().create_task(self._learn_identity())
        prefix = self._token.partition(":")[0]
        return _Identity(id=int(prefix) if prefix.isdigit() else None, username=None)

    async def _learn_identity(self) -> None:
        try:
            await self._me()
        except BridgeError as exc:
            log.warning("Telegram's getMe failed (%s); it is asked again later.", exc)

    async def _me(self) -> _Identity:
        async with self._identity_lock:
            if self._identity is None:
                await self._call("getMe", self._bot.initialize())
                me = self._bot.bot
                self._identity = _Identity(id=me.id, username=me.username)
            return self._identity

    # -- media -----------------------------------------------------------------------------

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The file's bytes through ``getFile`` and the file URL, refused past ``max_bytes``."""
        if attachment.size_bytes is not None and attachment.size_bytes > max_bytes:
            raise _too_big(attachment.name, attachment.size_bytes, max_bytes)
        await self._me()
        file = await self._call("getFile", self._bot.get_file(attachment.ref))
        if file.file_size is not None and file.file_size > max_bytes:
            raise _too_big(attachment.name, file.file_size, max_bytes)
        if not file.file_path:
            raise BridgeError(f"Telegram gave no path to download {attachment.name!r} from.")
        if self._downloads is None:
            self._downloads = httpx.AsyncClient(timeout=self._timeout_s)
        try:
            async with self._downloads.stream("GET", file.file_path) as response:
                if response.status_code != httpx.codes.OK:
                    raise _download_refused(attachment.name, response.status_code)
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > max_bytes:
                        raise _too_big(attachment.name, None, max_bytes)
                return bytes(data)
        except httpx.HTTPError as exc:
            # The URL holds the token: name the failure, never the exception's text.
            raise PlatformUnavailable(
                f"Downloading {attachment.name!r} from Telegram failed ({type(exc).__name__}); "
                "try again later."
            ) from None

    # -- replies ---------------------------------------------------------------------------

    async def start_typing(self, message: Received) -> None:
        """``sendChatAction(typing)`` in the message's chat and topic (it shows for ~5 s)."""
        chat_id, topic = _target(message.thread_id)
        await self._me()
        await self._call(
            "sendChatAction",
            self._bot.send_chat_action(chat_id, ChatAction.TYPING, message_thread_id=topic),
        )

    async def send_reply(self, to: Received, text: str, files: Sequence[EgressFile] = ()) -> None:
        """The text in messages of at most 4,096 UTF-16 units, then each file as a document.

        In a group the first message answers ``to`` (still sent if ``to`` was deleted); in a
        forum topic everything goes to the topic.
        """
        chat_id, topic = _target(to.thread_id)
        await self._me()
        answer = None
        if not to.is_dm:
            answer = ReplyParameters(int(to.message_id), allow_sending_without_reply=True)
        for part in split_text(text):
            await self._call(
                "sendMessage",
                self._bot.send_message(
                    chat_id, part, message_thread_id=topic, reply_parameters=answer
                ),
            )
            answer = None
        for file in files:
            document = InputFile(file.data, filename=file.filename)
            document.mimetype = file.mime_type
            await self._call(
                "sendDocument",
                self._bot.send_document(chat_id, document, message_thread_id=topic),
            )

    async def close(self) -> None:
        """Shut the Bot API clients and the download client."""
        task, self._identity_task = self._identity_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        try:
            await self._bot.shutdown()
            for request in self._requests:
                await request.shutdown()  # also when the bot never initialized
            if self._downloads is not None:
                await self._downloads.aclose()
        finally:
            logging.getLogger("httpx").removeFilter(self._redaction)

    # -- calls -----------------------------------------------------------------------------

    async def _call(self, method: str, call: Awaitable[_T]) -> _T:
        """``call``'s result; its failure as the port's errors, with Telegram's description."""
        try:
            return await call
        except RetryAfter as exc:
            raise PlatformUnavailable(
                f"Telegram's {method} is rate limited; retry after {_seconds(exc):g} s."
            ) from None
        except TimedOut:
            raise PlatformUnavailable(
                f"Telegram's {method} timed out after {self._timeout_s:g} s; try again later."
            ) from None
        except BadRequest as exc:  # before NetworkError: BadRequest is one
            raise BridgeError(f"Telegram refused {method}: {self._redacted(exc.message)}") from None
        except NetworkError as exc:
            description = self._redacted(exc.message)
            if "Request Entity Too Large" in description:  # a 413: no retry will help
                raise BridgeError(f"Telegram's {method} refused a file as too large.") from None
            raise PlatformUnavailable(
                f"Telegram's {method} failed ({description}); try again later."
            ) from None
        except InvalidToken:
            # The SDK's message quotes the token; ours doesn't.
            raise BridgeError(
                f"Telegram refused {method}: the bot token was rejected; check TELEGRAM_BOT_TOKEN."
            ) from None
        except Forbidden as exc:
            raise BridgeError(f"Telegram refused {method}: {self._redacted(exc.message)}") from None
        except ChatMigrated as exc:
            raise BridgeError(
                f"Telegram refused {method}: the group became a supergroup, now chat "
                f"{exc.new_chat_id}."
            ) from None
        except TelegramError as exc:
            raise BridgeError(
                f"Telegram's {method} failed: {self._redacted(exc.message)}"
            ) from None

    def _redacted(self, text: str) -> str:
        return text.replace(self._token, "<token>")


def split_text(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """``text`` in parts of at most ``limit`` UTF-16 code units, cut after a paragraph, a
    line or a space where one falls in the part's second half; blank parts are dropped."""
    parts: list[str] = []
    rest = text
    while rest:
        cut = _fitting_prefix(rest, limit)
        if cut < len(rest):
            for separator in ("\n\n", "\n", " "):
                at = rest.rfind(separator, cut // 2, cut)
                if at > 0:
                    cut = at + len(separator)
                    break
        part, rest = rest[:cut], rest[cut:]
        if part.strip():
            parts.append(part)
    return parts


def _fitting_prefix(text: str, limit: int) -> int:
    """How many characters of ``text`` fit in ``limit`` UTF-16 code units."""
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            return index
    return len(text)


def _why_ignored(message: Message) -> str:
    """Why the assistant doesn't read ``message``; empty when it does."""
    author = message.from_user
    if author is not None and author.is_bot:
        return "a message from a bot"
    if message.is_automatic_forward:
        return "a post forwarded from the group's linked channel"
    return ""


def _names_bot(entity: MessageEntity, text: str, me: _Identity) -> bool:
    if entity.type == MessageEntity.TEXT_MENTION:
        return entity.user is not None and me.id is not None and entity.user.id == me.id
    return me.username is not None and text.lower() == f"@{me.username.lower()}"


def _replies_to(message: Message, me: _Identity) -> bool:
    replied = message.reply_to_message
    if replied is None or replied.from_user is None or me.id is None:
        return False
    # In a forum every message of a topic replies to the topic's opening service message;
    # that is where the message is, not whom it answers.
    if replied.forum_topic_created is not None:
        return False
    return replied.from_user.id == me.id


def _attachments(message: Message) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    if message.document is not None:
        doc = message.document
        found.append(_attachment(doc.file_id, doc.file_name, "document", doc.mime_type, doc))
    if message.photo:
        largest = max(message.photo, key=lambda size: size.width * size.height)
        found.append(_attachment(largest.file_id, None, "photo", "image/jpeg", largest))
    if message.voice is not None:
        voice = message.voice
        found.append(
            _attachment(voice.file_id, None, "voice", voice.mime_type or "audio/ogg", voice)
        )
    if message.audio is not None:
        audio = message.audio
        found.append(_attachment(audio.file_id, audio.file_name, "audio", audio.mime_type, audio))
    if message.video is not None:
        video = message.video
        found.append(_attachment(video.file_id, video.file_name, "video", video.mime_type, video))
    if message.video_note is not None:
        note = message.video_note
        found.append(_attachment(note.file_id, None, "video_note", "video/mp4", note))
    return tuple(found)


def _attachment(
    file_id: str, name: str | None, kind: str, mime_type: str | None, media: Any
) -> Attachment:
    if not name:
        extension = mimetypes.guess_extension(mime_type or "") or ""
        name = kind + {".oga": ".ogg", ".jpe": ".jpg"}.get(extension, extension)
    size = getattr(media, "file_size", None)
    return Attachment(name=name, ref=file_id, mime_type=mime_type, size_bytes=size)


def _target(thread_id: str) -> tuple[int, int | None]:
    """The chat id and the forum topic (or ``None``) of a Telegram ``thread_id``."""
    platform, _, rest = thread_id.partition(":")
    chat, _, topic = rest.partition(":")
    if platform != _PLATFORM or not chat.lstrip("-").isdigit() or (topic and not topic.isdigit()):
        raise ValueError(f"{thread_id!r} is not a Telegram thread; give telegram:<chat>[:<topic>].")
    return int(chat), int(topic) if topic else None


def _too_big(name: str, size: int | None, max_bytes: int) -> BridgeError:
    told = f"{size} bytes" if size is not None else f"over {max_bytes} bytes"
    return BridgeError(
        f"The Telegram file {name!r} is {told}, past the {max_bytes}-byte limit; it was not "
        "downloaded."
    )


def _download_refused(name: str, status: int) -> BridgeError:
    if status == httpx.codes.TOO_MANY_REQUESTS or status >= httpx.codes.INTERNAL_SERVER_ERROR:
        return PlatformUnavailable(
            f"Telegram's file server answered {status} for {name!r}; try again later."
        )
    return BridgeError(f"Telegram's file server refused {name!r} ({status}).")


def _seconds(exc: RetryAfter) -> float:
    value = exc.retry_after  # a timedelta under PTB_TIMEDELTA, seconds without it
    return value.total_seconds() if isinstance(value, timedelta) else float(value)
