"""The Telegram bridge: updates read into :class:`Received` and :class:`Pressed`, replies,
files, presses and private answers through the Bot API. The package's docstring
(:mod:`bridges.telegram`) tells the whole of it, its exception tree included."""

from __future__ import annotations

import asyncio
import hmac
import logging
import mimetypes
import os
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Generic, TypeVar

import httpx
import msgspec
from telegram import (
    Bot,
    CallbackQuery,
    InlineKeyboardMarkup,
    InputFile,
    Message,
    MessageEntity,
    ReplyParameters,
    Update,
    User,
)
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

from bridges.downloads import read_capped, refuse_past
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
from bridges.sign_in import SIGN_IN_OPENING
from bridges.telegram.live import _LiveReply
from bridges.telegram.text import MAX_MESSAGE_CHARS, _units, quiet, split_text
from core.config.settings import ConfigurationError, TelegramSettings
from core.spaces.ids import parse_space_id

#: The header every webhook delivery carries the ``secret_token`` of ``setWebhook`` in.
SECRET_HEADER: Final = "x-telegram-bot-api-secret-token"  # noqa: S105 - a header's name

#: What a live reply keeps to: a message's 4,096 units; Telegram's flood control allows
#: about one message (or edit) a second per chat; eight choices still read as a list.
LIVE_LIMITS: Final = LiveLimits(
    max_chars=MAX_MESSAGE_CHARS, edit_interval_s=1.0, max_buttons=8, units="utf16"
)

#: A draft vanishes about 30 s after its last update: one unchanged for this long is sent
#: again, so "Thinking…" or a tool's status stays while nothing else changes.
DRAFT_REFRESH_S: Final = 20.0
#: "typing…" shows for about 5 s: sent again this often until a group's message is posted.
TYPING_REFRESH_S: Final = 4.5

#: The most an answer to a press (an alert) shows.
_ALERT_MAX_CHARS: Final = 200

_PLATFORM: Final = "telegram"
#: How many pressable messages' texts a bridge keeps, to say under them what was chosen.
_KEPT_TEXTS: Final = 512
#: How many drafts with a stop button a bridge remembers the stop action of.
_KEPT_DRAFTS: Final = 512
_DECODER: Final = msgspec.json.Decoder(dict[str, Any])
_T = TypeVar("_T")
#: Messages kept to be read again once the bot's username is known (a restart's first minute).
_UNRESOLVED_KEPT: Final = 1_024
#: A private chat's Start as Telegram sends it: ``/start``, ``/start@<bot>``, and a deep
#: link's payload (``t.me/<bot>?start=<payload>``: 1 to 64 of A-Z a-z 0-9 _ -).
_START: Final = re.compile(r"/start(?:@(?P<bot>\w{1,64}))?(?:[ \t]+(?P<payload>[\w-]{1,64}))?\s*")

log = logging.getLogger("mercury.bridges.telegram")


_K = TypeVar("_K")
_V = TypeVar("_V")


class _Bounded(Generic[_K, _V]):
    """A mapping that keeps its ``size`` newest entries."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[_K, _V] = OrderedDict()

    def keep(self, key: _K, value: _V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)

    def get(self, key: _K) -> _V | None:
        return self._items.get(key)


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
        self,
        settings: TelegramSettings,
        *,
        bot_name: str,
        timeout_s: float = 10.0,
        draft_refresh_s: float = DRAFT_REFRESH_S,
        typing_refresh_s: float = TYPING_REFRESH_S,
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
        # The texts of messages with buttons, to write what was chosen under them, and the
        # stop action of each draft with a stop button; bounded, forgotten on restart (a
        # press then settles with what was chosen alone; a draft's stop is then ignored).
        self._refresh_s = {True: draft_refresh_s, False: typing_refresh_s}
        self._keepalives: set[asyncio.Task[None]] = set()
        self._texts: _Bounded[tuple[int, int], str] = _Bounded(_KEPT_TEXTS)
        self._typed: _Bounded[tuple[int, int | None], float] = _Bounded(_KEPT_TEXTS)
        self._drafts: _Bounded[tuple[int, int], str] = _Bounded(_KEPT_DRAFTS)

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
        if update.callback_query is not None:
            return self._press(update.callback_query, data["callback_query"])
        if isinstance(data.get("stopped_message_generation"), dict):
            return self._draft_stopped(update.update_id, data["stopped_message_generation"])
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

    def _press(self, query: CallbackQuery, raw: Mapping[str, Any]) -> WebhookOutcome:
        """A button of ours pressed: a :class:`Pressed`, or why it isn't one."""
        action = raw.get("data")  # as sent: the SDK takes any JSON value for it
        if not isinstance(action, str) or not action or len(action.encode()) > ACTION_MAX_BYTES:
            return WebhookOutcome(
                verdict="malformed", reason="a button press without a readable callback_data"
            )
        if not query.id or query.from_user is None:
            return WebhookOutcome(verdict="malformed", reason="a button press without its id")
        message = query.message
        if message is None:
            # Our messages are never inline-mode ones: such a press isn't on one of ours.
            return WebhookOutcome(verdict="ignored", reason="a press on an inline-mode message")
        if not isinstance(message, Message) or not message.is_accessible:
            # An inaccessible message (deleted, or older than Telegram keeps) tells no topic
            # to act in.
            return WebhookOutcome(verdict="ignored", reason="a press on a message too old to read")
        chat_id = message.chat.id
        thread_id = f"{_PLATFORM}:{chat_id}"
        if message.is_topic_message and message.message_thread_id is not None:
            thread_id += f":{message.message_thread_id}"
        try:
            self.parse_thread(thread_id)
        except ValueError:
            return WebhookOutcome(
                verdict="malformed", reason="a chat or topic id that can't be a space id"
            )
        if message.text is not None:
            self._texts.keep((chat_id, message.message_id), message.text)
        pressed = Pressed(
            platform=_PLATFORM,
            thread_id=thread_id,
            delivery_id=query.id,
            message_id=str(message.message_id),
            author_id=str(query.from_user.id),
            author_name=query.from_user.full_name,
            action=action,
            is_dm=message.chat.type == ChatType.PRIVATE,
            respond=query.id,
        )
        return WebhookOutcome(verdict="accepted", presses=(pressed,))

    def _draft_stopped(self, update_id: int, stopped: dict[str, Any]) -> WebhookOutcome:
        """The stop button of a draft pressed: the stop action the draft was opened with."""
        chat = stopped.get("chat")
        draft_id = stopped.get("draft_id")
        topic = stopped.get("message_thread_id")
        if (
            not isinstance(chat, dict)
            or not isinstance(chat.get("id"), int)
            or not isinstance(draft_id, int)
            or (topic is not None and not isinstance(topic, int))
        ):
            return WebhookOutcome(verdict="malformed", reason="a stopped draft that can't be read")
        chat_id: int = chat["id"]
        action = self._drafts.get((chat_id, draft_id))
        if action is None:
            return WebhookOutcome(
                verdict="ignored", reason="a stopped draft this bridge never sent"
            )
        thread_id = f"{_PLATFORM}:{chat_id}" + (f":{topic}" if topic else "")
        try:
            self.parse_thread(thread_id)
        except ValueError:
            return WebhookOutcome(
                verdict="malformed", reason="a chat or topic id that can't be a space id"
            )
        pressed = Pressed(
            platform=_PLATFORM,
            thread_id=thread_id,
            delivery_id=f"update:{update_id}",
            message_id=f"draft:{draft_id}",
            # A draft lives in a private chat, whose id is its person's.
            author_id=str(chat_id),
            author_name=None,
            action=action,
            is_dm=chat.get("type") == ChatType.PRIVATE,
        )
        return WebhookOutcome(verdict="accepted", presses=(pressed,))

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
        is_dm = message.chat.type == ChatType.PRIVATE
        return Received(
            platform=_PLATFORM,
            thread_id=thread_id,
            delivery_id=delivery_id,
            message_id=str(message.message_id),
            author_id=str(author.id),
            author_name=author.full_name,
            text=self._with_mentions(text, mentions, me),
            is_dm=is_dm,
            is_reply_to_bot=_replies_to(message, me),
            attachments=_attachments(message),
            sent_at=message.date,
            language=author.language_code,
            opening=_opening(message.text, me) if is_dm else None,
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
            said = str(exc).removesuffix(".").removesuffix("; try again later")
            log.warning("%s; the update is read without it.", said)
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
            # The error names the call already ("Telegram's getMe failed (…)"): said once.
            said = str(exc).removesuffix(".").removesuffix("; try again later")
            log.warning("%s; it is asked again later.", said)

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
        refuse_past(attachment.name, max_bytes, attachment.size_bytes)
        await self._me()
        file = await self._call("getFile", self._bot.get_file(attachment.ref))
        refuse_past(attachment.name, max_bytes, file.file_size)
        if not file.file_path:
            raise BridgeError(f"Telegram gave no path to download {attachment.name!r} from.")
        if self._downloads is None:
            self._downloads = httpx.AsyncClient(timeout=self._timeout_s)
        try:
            async with self._downloads.stream("GET", file.file_path) as response:
                if response.status_code != httpx.codes.OK:
                    raise _download_refused(attachment.name, response.status_code)
                return await read_capped(response.aiter_bytes(), attachment.name, max_bytes)
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
        await self._type(chat_id, topic)

    async def _type(self, chat_id: int, topic: int | None, *, unless_shown: bool = False) -> None:
        """``typing…`` in the chat and topic; with ``unless_shown``, not while the last one
        sent there still shows (a live reply opened just after the pipeline's typing)."""
        now = time.monotonic()
        last = self._typed.get((chat_id, topic))
        if unless_shown and last is not None and now - last < TYPING_REFRESH_S:
            return
        # Marked as asked before the call: a live reply opened while the pipeline's typing is
        # on its way must not ask for it a second time.
        self._typed.keep((chat_id, topic), now)
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
        for part in split_text(quiet(text)):
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

    # -- live replies and buttons (#37) -----------------------------------------------------

    @property
    def live_limits(self) -> LiveLimits:
        return LIVE_LIMITS

    async def open_reply(
        self, to: Received, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> LiveReply:
        """A draft showing ``status`` in a private chat (its stop button Telegram's own, when
        ``buttons`` holds one); elsewhere typing, and a message once there is something to
        show."""
        chat_id, topic = _target(to.thread_id)
        await self._me()
        reply = _LiveReply(self, to, chat_id, topic, buttons)
        if to.is_dm:
            if buttons:
                self._drafts.keep((chat_id, reply.draft_id), buttons[0].action)
            await reply.show("", status)
        else:
            await reply.type(unless_shown=True)
        task = asyncio.get_running_loop().create_task(reply.keep_alive(self._refresh_s[to.is_dm]))
        self._keepalives.add(task)
        task.add_done_callback(self._keepalives.discard)
        reply.keeping = task
        return reply

    def reply_ref(self, reply: LiveReply) -> str | None:
        """The reply's message id in a group, once posted (a private chat's draft is none)."""
        return reply.message_id if isinstance(reply, _LiveReply) else None

    async def reopen_reply(
        self, to: Received, ref: str, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> LiveReply:
        """In a group, the message ``ref`` an earlier run posted, edited from the next update
        on; in a private chat (a draft, then a message at the end) a new reply."""
        if to.is_dm or not ref.isdigit():
            return await self.open_reply(to, status=status, buttons=buttons)
        chat_id, topic = _target(to.thread_id)
        await self._me()
        reply = _LiveReply(self, to, chat_id, topic, buttons, message_id=int(ref))
        await reply.type(unless_shown=True)
        return reply

    async def send_private(self, to: Received, text: str) -> None:
        """``text`` in the private chat of ``to``'s author with the bot.

        Telegram lets a bot write first to nobody: a person who never started the bot is a
        :class:`BridgeError` that says so.
        """
        if not to.author_id.isdigit():
            raise BridgeError(f"{to.author_id!r} is not a Telegram user id; nothing was sent.")
        await self._me()
        person = int(to.author_id)
        try:
            for part in split_text(text):
                await self._call("sendMessage", self._bot.send_message(person, part))
        except PlatformUnavailable:
            raise
        except BridgeError as exc:
            if _never_started(str(exc)):
                raise BridgeError(
                    f"Telegram can't deliver a private message to {to.author_name or person}: "
                    "they haven't started a chat with the bot (or blocked it)."
                ) from None
            raise

    async def direct_chat_link(self) -> str | None:
        """``https://t.me/<bot>?start=sign-in``: opens the person's private chat with the bot,
        its Start button the first message (what lets the bot write to them)."""
        username = (await self._me()).username
        return f"https://t.me/{username}?start={SIGN_IN_OPENING}" if username else None

    async def answer_press(self, press: Pressed, text: str) -> None:
        """``text`` as an alert only the presser sees (``answerCallbackQuery``)."""
        await self._me()
        if not press.respond:  # a draft's stop: its chat is the presser's own
            chat_id, topic = _target(press.thread_id)
            await self._call(
                "sendMessage", self._bot.send_message(chat_id, text, message_thread_id=topic)
            )
            return
        if len(text) > _ALERT_MAX_CHARS:
            text = text[: _ALERT_MAX_CHARS - 1] + "…"
        await self._call(
            "answerCallbackQuery",
            self._bot.answer_callback_query(press.respond, text=text, show_alert=True),
        )

    async def settle_press(self, press: Pressed, text: str) -> None:
        """The pressed message without its keyboard, ``text`` written under its words."""
        await self._me()
        if press.respond:
            # Acknowledged first, so the button stops spinning whatever the edit does.
            await self._call("answerCallbackQuery", self._bot.answer_callback_query(press.respond))
        if not press.message_id.isdigit():
            return  # a draft: nothing stays to edit
        chat_id, _ = _target(press.thread_id)
        message_id = int(press.message_id)
        shown = self._texts.get((chat_id, message_id))
        settled = f"{shown}\n\n{text}" if shown else text
        if _units(settled) > MAX_MESSAGE_CHARS:
            settled = text
        await self._edit(chat_id, message_id, settled, None)

    async def _edit(
        self, chat_id: int, message_id: int, text: str, markup: InlineKeyboardMarkup | None
    ) -> None:
        """``editMessageText``; Telegram's "message is not modified" is the edit done."""
        try:
            await self._call(
                "editMessageText",
                self._bot.edit_message_text(
                    text, chat_id=chat_id, message_id=message_id, reply_markup=markup
                ),
            )
        except PlatformUnavailable:
            raise
        except BridgeError as exc:
            if "message is not modified" not in str(exc).lower():
                raise

    async def close(self) -> None:
        """Shut the Bot API clients and the download client."""
        task, self._identity_task = self._identity_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for task in list(self._keepalives):
            task.cancel()
        await asyncio.gather(*self._keepalives, return_exceptions=True)
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
            wait = _seconds(exc)
            raise PlatformUnavailable(
                f"Telegram's {method} is rate limited; retry after {wait:g} s.",
                retry_after_s=wait,
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


def _opening(text: str | None, me: _Identity) -> str | None:
    """The payload of a Start (``""`` for a bare ``/start``), or None when ``text`` is none:
    whatever it carries, a deep link's payload is nobody's words for the assistant."""
    found = _START.fullmatch(text or "")
    if found is None:
        return None
    bot = found["bot"]
    if bot is not None and me.username is not None and bot.lower() != me.username.lower():
        return None  # another bot's command
    return found["payload"] or ""


def _never_started(description: str) -> bool:
    """Whether Telegram refused a private message because the person never started the bot."""
    lowered = description.lower()
    return any(
        words in lowered
        for words in ("can't initiate conversation", "bot was blocked", "chat not found")
    )


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


def _download_refused(name: str, status: int) -> BridgeError:
    if status == httpx.codes.TOO_MANY_REQUESTS or status >= httpx.codes.INTERNAL_SERVER_ERROR:
        return PlatformUnavailable(
            f"Telegram's file server answered {status} for {name!r}; try again later."
        )
    return BridgeError(f"Telegram's file server refused {name!r} ({status}).")


def _seconds(exc: RetryAfter) -> float:
    value = exc.retry_after  # a timedelta under PTB_TIMEDELTA, seconds without it
    return value.total_seconds() if isinstance(value, timedelta) else float(value)
