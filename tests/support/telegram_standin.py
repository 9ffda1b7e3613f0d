"""A stand-in for Telegram: the Bot API and its file server on 127.0.0.1, and a webhook sender.

The real ``telegram.Bot`` talks to it through ``base_url``/``base_file_url``, so tests run the
same requests, encodings (JSON, form, multipart) and error answers as against Telegram::

    with TelegramStandIn(webhook_secret="s3cret") as telegram:
        group = telegram.group("Ops")
        update = telegram.message(group, ALICE, "@mercury_test_bot how are you?")
        status = await telegram.deliver(update, url="http://127.0.0.1:8000/webhooks/telegram")
        [reply] = telegram.wait_for_calls("sendMessage", 1)

It serves ``POST``/``GET /bot<token>/<method>`` for ``getMe``, ``sendMessage``,
``sendDocument``, ``sendChatAction``, ``getFile``, ``setWebhook``, ``deleteWebhook``,
``getWebhookInfo``, and for live answers and buttons (#37) ``sendMessageDraft`` (private
chats only; the drafts shown are kept in :attr:`TelegramStandIn.drafts`),
``editMessageText`` and ``editMessageReplyMarkup`` (a message's ``reply_markup`` is kept, and
goes when an edit gives none; an edit that changes nothing is Telegram's 400 "message is not
modified"), ``deleteMessage`` and ``answerCallbackQuery`` (each query answered once, kept in
:attr:`TelegramStandIn.answers`), answering ``{"ok": true, "result": ...}`` or ``{"ok": false,
"error_code": ..., "description": ...}`` as the Bot API does (a malformed token or an unknown
method is a 404 ``Not Found``, a well-formed wrong token a 401 ``Unauthorized``), and
``GET /file/bot<token>/<file_path>`` for downloads. Chats, topics, messages and files are
kept, so a reply to a message that doesn't exist, a topic that doesn't exist or a chat the
bot never saw is refused with Telegram's own description (a private message to a person who
never started the bot is 403 "bot can't initiate conversation with a user"). Every call is recorded
(:class:`ApiCall`); :meth:`TelegramStandIn.fail_next` makes the next calls answer 5xx or 429
with ``retry_after``, and :attr:`TelegramStandIn.delay_s` makes every answer slow.

Updates are built with :meth:`TelegramStandIn.message` (mention entities found in the text
with UTF-16 offsets, as Telegram adds them), :meth:`TelegramStandIn.press` (a
``callback_query`` on a button of a message the bot sent) and
:meth:`TelegramStandIn.stop_draft` (a ``stopped_message_generation``), and sent with
:meth:`TelegramStandIn.deliver` carrying ``X-Telegram-Bot-Api-Secret-Token`` (the right, a
wrong or no secret); delivering the same update again is a re-delivery.

Its start, stop, address, waits and errors (``StandInError``, ``StandInTimeoutError``) are
the stand-ins' base's, :mod:`tests.support.standin`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from aiohttp import web

from tests.support.standin import StandInError, StandInTimeoutError, ThreadedStandIn

__all__ = [
    "BOT_TOKEN",
    "BOT_USERNAME",
    "ApiCall",
    "Chat",
    "Delivered",
    "StandInError",
    "StandInTimeoutError",
    "StoredFile",
    "TelegramStandIn",
    "Upload",
    "User",
]

BOT_TOKEN: Final = "7000000001:AAstandin-token_for_tests_only0000"
BOT_USERNAME: Final = "mercury_test_bot"
SECRET_HEADER: Final = "X-Telegram-Bot-Api-Secret-Token"
#: The cloud Bot API's limits: getFile serves files up to 20 MB, uploads take 50 MB.
DOWNLOAD_LIMIT: Final = 20 * 1024 * 1024
UPLOAD_LIMIT: Final = 50 * 1024 * 1024

_TOKEN_SHAPE: Final = re.compile(r"[0-9]+:[A-Za-z0-9_-]+")
_MENTION: Final = re.compile(r"(?<![\w@])@[A-Za-z0-9_]{5,32}\b")
_ACTIONS: Final = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    }
)
_INT_FIELDS: Final = frozenset(
    {"chat_id", "message_thread_id", "reply_to_message_id", "message_id", "draft_id"}
)
_NOT_MODIFIED: Final = (
    "Bad Request: message is not modified: specified new message content and reply markup "
    "are exactly the same as a current content and reply markup of the message"
)
_DEFAULT: Final[Any] = object()

ChatType = Literal["private", "group", "supergroup", "channel"]
MediaKind = Literal["document", "photo", "voice", "audio", "video", "video_note"]


class _Refusal(Exception):
    """A Bot API error answer: ``{"ok": false, "error_code": status, "description": ...}``."""

    def __init__(self, status: int, description: str, parameters: dict[str, Any] | None = None):
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters


# --------------------------------------------------------------------------------------------
# The platform's things


@dataclass(frozen=True, kw_only=True)
class User:
    """A Telegram user (or bot) as updates carry it."""

    id: int
    first_name: str
    last_name: str | None = None
    username: str | None = None
    is_bot: bool = False
    #: The IETF tag of the user's app language, as Telegram sends it (optional).
    language_code: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "is_bot": self.is_bot, "first_name": self.first_name}
        if self.last_name:
            data["last_name"] = self.last_name
        if self.username:
            data["username"] = self.username
        if self.language_code:
            data["language_code"] = self.language_code
        return data


@dataclass(frozen=True, kw_only=True)
class Chat:
    """A chat: a private chat has the user's id, a group's id is negative."""

    id: int
    type: ChatType
    title: str | None = None
    is_forum: bool = False
    user: User | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "type": self.type}
        if self.type == "private" and self.user is not None:
            data["first_name"] = self.user.first_name
            if self.user.last_name:
                data["last_name"] = self.user.last_name
            if self.user.username:
                data["username"] = self.user.username
        else:
            data["title"] = self.title or "Group"
        if self.is_forum:
            data["is_forum"] = True
        return data


@dataclass(frozen=True, kw_only=True)
class StoredFile:
    """A file the stand-in holds: ``file_id`` is what messages carry, ``path`` what getFile
    answers; ``declared_size`` is the size told in messages and getFile (``None`` tells none)."""

    file_id: str
    file_unique_id: str
    path: str
    data: bytes
    kind: MediaKind
    file_name: str | None
    mime_type: str | None
    declared_size: int | None
    width: int = 1280
    height: int = 960

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"file_id": self.file_id, "file_unique_id": self.file_unique_id}
        if self.declared_size is not None:
            data["file_size"] = self.declared_size
        if self.kind in ("document", "audio", "video") and self.file_name:
            data["file_name"] = self.file_name
        if self.kind != "photo" and self.mime_type:
            data["mime_type"] = self.mime_type
        if self.kind in ("photo", "video"):
            data["width"], data["height"] = self.width, self.height
        if self.kind in ("voice", "audio", "video", "video_note"):
            data["duration"] = 3
        if self.kind == "video_note":
            data["length"] = 240
        return data


@dataclass(frozen=True, kw_only=True)
class Upload:
    """A file part of a multipart call."""

    filename: str | None
    content_type: str | None
    data: bytes


@dataclass(kw_only=True)
class ApiCall:
    """One call the bot made: its method, its parameters (form values decoded as the Bot API
    reads them), its uploaded files, the status it was answered with, and when it came
    (``time.monotonic()``)."""

    method: str
    params: dict[str, Any]
    files: dict[str, Upload] = field(default_factory=dict)
    status: int | None = None
    token_ok: bool = True
    at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, kw_only=True)
class Delivered:
    """What the webhook answered a delivery."""

    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(kw_only=True)
class _Failure:
    remaining: int
    status: int
    retry_after: int | None
    description: str | None
    method: str | None


# --------------------------------------------------------------------------------------------
# The stand-in


class TelegramStandIn(ThreadedStandIn):
    """The Bot API, its file server and a webhook sender, on 127.0.0.1 in a thread of its own."""

    name = "Telegram stand-in"
    wait_hint = "check that the bot really made the call"
    wait_timeout = 10.0

    def __init__(
        self,
        *,
        token: str = BOT_TOKEN,
        bot_username: str = BOT_USERNAME,
        bot_first_name: str = "Mercury",
        webhook_secret: str | None = None,
        download_limit: int = DOWNLOAD_LIMIT,
        upload_limit: int = UPLOAD_LIMIT,
    ) -> None:
        super().__init__()
        self.token = token
        self.bot = User(
            id=int(token.partition(":")[0]),
            first_name=bot_first_name,
            username=bot_username,
            is_bot=True,
        )
        self.webhook_url: str | None = None
        self.webhook_secret = webhook_secret
        self.download_limit = download_limit
        self.upload_limit = upload_limit
        #: Seconds every answer (API call or download) waits before it goes out.
        self.delay_s = 0.0
        self.calls: list[ApiCall] = []
        self.downloads: list[str] = []
        self.updates: list[dict[str, Any]] = []
        #: Every draft shown, in order: ``{"chat_id", "draft_id", "text", ...}``.
        self.drafts: list[dict[str, Any]] = []
        #: Every callback query answered: ``{"callback_query_id", "text", "show_alert"}``.
        self.answers: list[dict[str, Any]] = []
        self._queries: dict[str, bool] = {}
        self._users: dict[int, User] = {}
        self._query_ids = itertools.count(4_200_000_001)
        self._lock = threading.Lock()
        # The waits' condition holds the records' lock: a wait sees a call and its answer.
        self._changed = threading.Condition(self._lock)
        self._failures: deque[_Failure] = deque()
        self._chats: dict[int, Chat] = {}
        self._messages: dict[int, dict[int, dict[str, Any]]] = {}
        self._topics: dict[int, dict[int, dict[str, Any]]] = {}
        self._files: dict[str, StoredFile] = {}
        self._paths: dict[str, StoredFile] = {}
        self._update_ids = itertools.count(500_000_001)
        self._file_numbers = itertools.count(1)
        self._user_ids = itertools.count(1_000_001)
        self._group_ids = itertools.count(1)

    # -- serving, and where -------------------------------------------------------------

    def application(self) -> web.Application:
        app = web.Application(client_max_size=max(self.upload_limit, 1 << 20) + (1 << 20))
        app.router.add_route("*", "/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)
        return app

    @property
    def api_url(self) -> str:
        """What ``TELEGRAM_API_URL`` is set to: the token follows it."""
        return f"{self.url}/bot"

    @property
    def file_url(self) -> str:
        """What ``TELEGRAM_FILE_URL`` is set to."""
        return f"{self.url}/file/bot"

    def env(self) -> dict[str, str]:
        """The environment that turns a server's Telegram bridge on, pointed at the stand-in."""
        if self.webhook_secret is None:
            raise StandInError("Give the stand-in a webhook_secret for the server to check.")
        return {
            "MERCURY_TELEGRAM": "true",
            "TELEGRAM_BOT_TOKEN": self.token,
            "TELEGRAM_WEBHOOK_SECRET": self.webhook_secret,
            "TELEGRAM_API_URL": self.api_url,
            "TELEGRAM_FILE_URL": self.file_url,
        }

    def reset(self) -> None:
        """Forget calls, failures and delay (chats, messages and files stay)."""
        with self._lock:
            self.calls.clear()
            self.downloads.clear()
            self.drafts.clear()
            self.answers.clear()
            self._failures.clear()
            self.delay_s = 0.0

    # -- scripting failures --------------------------------------------------------------

    def fail_next(
        self,
        count: int = 1,
        *,
        status: int = 500,
        retry_after: int | None = None,
        description: str | None = None,
        method: str | None = None,
    ) -> None:
        """The next ``count`` API calls (to ``method``, or any) answer ``status``.

        A 429 carries ``parameters.retry_after`` (3 s unless given), as Telegram's flood
        control does.
        """
        if status == 429 and retry_after is None:
            retry_after = 3
        with self._lock:
            self._failures.append(
                _Failure(
                    remaining=count,
                    status=status,
                    retry_after=retry_after,
                    description=description,
                    method=method,
                )
            )

    # -- what the bot did ----------------------------------------------------------------

    def calls_to(self, method: str) -> list[ApiCall]:
        """The calls made to ``method`` so far, in order."""
        with self._lock:
            return [call for call in self.calls if call.method == method]

    def wait_for_calls(self, method: str, count: int, timeout: float = 10.0) -> list[ApiCall]:
        """The first ``count`` answered calls to ``method``, once there are that many."""

        def answered() -> list[ApiCall]:  # called with the records' lock held
            return [c for c in self.calls if c.method == method and c.status is not None]

        self.wait_until(
            lambda: len(answered()) >= count, timeout, what=f"{count} answered {method} call(s)"
        )
        with self._lock:
            return answered()[:count]

    def sent_messages(self, chat: Chat) -> list[dict[str, Any]]:
        """The messages the bot sent to ``chat``, as Telegram keeps them."""
        with self._lock:
            messages = self._messages.get(chat.id, {}).values()
            return [m for m in messages if m["from"]["id"] == self.bot.id]

    # -- chats, topics, files ------------------------------------------------------------

    def user(self, first_name: str, last_name: str | None = None, **fields: Any) -> User:
        """A new person (a fresh id), who has not started a private chat with the bot yet."""
        user = User(id=next(self._user_ids), first_name=first_name, last_name=last_name, **fields)
        with self._lock:
            self._users[user.id] = user
        return user

    def private_chat(self, user: User) -> Chat:
        """The private chat with ``user`` (its id is the user's)."""
        return self._register(Chat(id=user.id, type="private", user=user))

    def group(self, title: str, *, forum: bool = False, supergroup: bool = True) -> Chat:
        """A new group (a supergroup, ``-100…``, unless told otherwise); ``forum`` has topics."""
        number = next(self._group_ids)
        if supergroup:
            chat = Chat(
                id=-1_000_000_000_000 - number, type="supergroup", title=title, is_forum=forum
            )
        else:
            chat = Chat(id=-number, type="group", title=title)
        return self._register(chat)

    def channel(self, title: str) -> Chat:
        """A new channel."""
        return self._register(
            Chat(id=-1_000_000_000_000 - next(self._group_ids), type="channel", title=title)
        )

    def open_topic(self, chat: Chat, name: str, creator: User) -> int:
        """A new forum topic in ``chat``; its id is the id of its opening service message."""
        if not chat.is_forum:
            raise StandInError(f"{chat.title!r} is not a forum; make it with group(forum=True).")
        message = self._new_message(chat, creator)
        message["forum_topic_created"] = {"name": name, "icon_color": 7322096}
        message["message_thread_id"] = message["message_id"]
        message["is_topic_message"] = True
        with self._lock:
            self._topics.setdefault(chat.id, {})[message["message_id"]] = message
        return int(message["message_id"])

    def add_file(
        self,
        data: bytes,
        *,
        kind: MediaKind = "document",
        file_name: str | None = None,
        mime_type: str | None = None,
        declared_size: Any = _DEFAULT,
        width: int = 1280,
        height: int = 960,
    ) -> StoredFile:
        """Keep ``data`` as a file of ``kind``; messages then carry it."""
        number = next(self._file_numbers)
        folder, extension = {
            "document": ("documents", (file_name or "file.bin").rpartition(".")[2]),
            "photo": ("photos", "jpg"),
            "voice": ("voice", "oga"),
            "audio": ("music", "mp3"),
            "video": ("videos", "mp4"),
            "video_note": ("video_notes", "mp4"),
        }[kind]
        stored = StoredFile(
            file_id=f"BQACAgIAAxkBAAI{number:06d}{kind[:3]}",
            file_unique_id=f"AgAD{number:06d}",
            path=f"{folder}/file_{number}.{extension}",
            data=data,
            kind=kind,
            file_name=file_name,
            mime_type=mime_type,
            declared_size=len(data) if declared_size is _DEFAULT else declared_size,
            width=width,
            height=height,
        )
        with self._lock:
            self._files[stored.file_id] = stored
            self._paths[stored.path] = stored
        return stored

    def _register(self, chat: Chat) -> Chat:
        with self._lock:
            self._chats[chat.id] = chat
            self._messages.setdefault(chat.id, {})
        return chat

    def _new_message(self, chat: Chat, author: User, **fields: Any) -> dict[str, Any]:
        with self._lock:
            kept = self._messages.setdefault(chat.id, {})
            message_id = max(kept, default=0) + 1
            message = {
                "message_id": message_id,
                "from": author.to_json(),
                "chat": chat.to_json(),
                "date": int(time.time()),
                **fields,
            }
            kept[message_id] = message
        return message

    # -- updates -------------------------------------------------------------------------

    def message(
        self,
        chat: Chat,
        author: User,
        text: str | None = None,
        *,
        caption: str | None = None,
        topic: int | None = None,
        reply_to: int | None = None,
        text_mentions: Sequence[tuple[str, User]] = (),
        document: StoredFile | None = None,
        photo: StoredFile | None = None,
        voice: StoredFile | None = None,
        audio: StoredFile | None = None,
        video: StoredFile | None = None,
        video_note: StoredFile | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A ``message`` update: ``author`` writes ``text`` (or media with ``caption``) in
        ``chat``, in forum ``topic``, replying to message ``reply_to``.

        ``@username`` mentions become ``mention`` entities and each ``(text, user)`` of
        ``text_mentions`` a ``text_mention`` of its first occurrence, with UTF-16 offsets.
        """
        fields: dict[str, Any] = {}
        if topic is not None:
            opening = self._topics.get(chat.id, {}).get(topic)
            if opening is None:
                raise StandInError(f"Chat {chat.id} has no topic {topic}; open_topic first.")
            fields["message_thread_id"] = topic
            fields["is_topic_message"] = True
            # In a forum a message that replies to nothing replies to its topic's opening.
            fields["reply_to_message"] = opening
        if reply_to is not None:
            replied = self._messages.get(chat.id, {}).get(reply_to)
            if replied is None:
                raise StandInError(f"Chat {chat.id} has no message {reply_to} to reply to.")
            fields["reply_to_message"] = {
                k: v for k, v in replied.items() if k != "reply_to_message"
            }
        body = text if text is not None else caption
        if body is not None:
            entities = _entities(body, text_mentions)
            fields["text" if text is not None else "caption"] = body
            if entities:
                fields["entities" if text is not None else "caption_entities"] = entities
        for kind, stored in (
            ("document", document),
            ("voice", voice),
            ("audio", audio),
            ("video", video),
            ("video_note", video_note),
        ):
            if stored is not None:
                fields[kind] = stored.to_json()
        if photo is not None:
            fields["photo"] = self._photo_sizes(photo)
        fields.update(extra or {})
        return self._update("message", self._new_message(chat, author, **fields))

    def edited(self, update: dict[str, Any], text: str) -> dict[str, Any]:
        """An ``edited_message`` update: the message of ``update`` with ``text`` now."""
        message = {**update["message"], "text": text, "edit_date": int(time.time())}
        return self._update("edited_message", message)

    def channel_post(self, channel: Chat, text: str) -> dict[str, Any]:
        """A ``channel_post`` update (posts have a sender chat, not a user)."""
        post = {
            "message_id": max(self._messages.get(channel.id, {}), default=0) + 1,
            "sender_chat": channel.to_json(),
            "chat": channel.to_json(),
            "date": int(time.time()),
            "text": text,
        }
        return self._update("channel_post", post)

    def press(
        self, message: Mapping[str, Any], user: User, data: str | None = None
    ) -> dict[str, Any]:
        """A ``callback_query`` update: ``user`` presses the button of the bot's ``message``
        (as :meth:`sent_messages` lists it) whose ``callback_data`` is ``data`` (the first
        button's unless given). The message is as Telegram keeps it now."""
        chat_id = message["chat"]["id"]
        with self._lock:
            current = dict(self._messages.get(chat_id, {}).get(message["message_id"], message))
        if data is None:
            rows = current.get("reply_markup", {}).get("inline_keyboard", [])
            if not rows:
                raise StandInError("The message has no buttons to press.")
            data = rows[0][0]["callback_data"]
        query_id = str(next(self._query_ids))
        with self._lock:
            self._queries[query_id] = False
        query = {
            "id": query_id,
            "from": user.to_json(),
            "message": current,
            "chat_instance": str(-abs(chat_id) * 7919 % 10**18),
            "data": data,
        }
        return self._update("callback_query", query)

    def stop_draft(self, chat: Chat, draft_id: int, topic: int | None = None) -> dict[str, Any]:
        """A ``stopped_message_generation`` update: the person pressed a draft's stop button."""
        stopped: dict[str, Any] = {"chat": chat.to_json(), "draft_id": draft_id}
        if topic is not None:
            stopped["message_thread_id"] = topic
        return self._update("stopped_message_generation", stopped)

    def message_now(self, chat: Chat, message_id: int) -> dict[str, Any]:
        """The message as Telegram keeps it now (after edits)."""
        with self._lock:
            kept = self._messages.get(chat.id, {}).get(message_id)
            if kept is None:
                raise StandInError(f"Chat {chat.id} has no message {message_id}.")
            return dict(kept)

    def _update(self, kind: str, message: dict[str, Any]) -> dict[str, Any]:
        update = {"update_id": next(self._update_ids), kind: message}
        with self._lock:
            self.updates.append(update)
        return update

    def _photo_sizes(self, photo: StoredFile) -> list[dict[str, Any]]:
        thumbnail = self.add_file(
            photo.data[:64], kind="photo", width=90, height=90 * photo.height // photo.width
        )
        return [thumbnail.to_json(), photo.to_json()]

    # -- webhook deliveries --------------------------------------------------------------

    def delivery(
        self, update: Mapping[str, Any], *, secret: Any = _DEFAULT
    ) -> tuple[dict[str, str], bytes]:
        """The headers and body Telegram POSTs ``update`` with; ``secret=None`` sends none."""
        given = self.webhook_secret if secret is _DEFAULT else secret
        headers = {"Content-Type": "application/json"}
        if given is not None:
            headers[SECRET_HEADER] = given
        return headers, json.dumps(update, ensure_ascii=False).encode()

    async def deliver(
        self, update: Mapping[str, Any], *, url: str | None = None, secret: Any = _DEFAULT
    ) -> Delivered:
        """POST ``update`` to ``url`` (else the URL setWebhook gave); the webhook's answer.

        Awaitable from any event loop: the request runs on the stand-in's own.
        """
        target = url or self.webhook_url
        if target is None:
            raise StandInError("No webhook URL: give url= or have the bot call setWebhook.")
        headers, body = self.delivery(update, secret=secret)
        session = self.session

        async def post() -> Delivered:
            async with session.post(target, data=body, headers=headers) as answer:
                return Delivered(status=answer.status, body=await answer.read())

        return await self.in_loop(post())

    # -- the Bot API ---------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        token, method = request.match_info["token"], request.match_info["method"]
        call = ApiCall(method=method, params={}, token_ok=token == self.token)
        try:
            call.params, call.files = await _read_params(request)
        except ValueError:
            call.params = {}
        with self._lock:
            self.calls.append(call)
        try:
            if self.delay_s > 0:
                await asyncio.sleep(self.delay_s)
            self._check_token(token)
            self._scripted_failure(method)
            handler = _METHODS.get(method)
            if handler is None:
                raise _Refusal(404, "Not Found")
            status, body = 200, {"ok": True, "result": handler(self, call)}
        except _Refusal as refusal:
            status = refusal.status
            body = {"ok": False, "error_code": refusal.status, "description": refusal.description}
            if refusal.parameters:
                body["parameters"] = refusal.parameters
        with self._lock:
            call.status = status
        return web.json_response(body, status=status)

    async def _file(self, request: web.Request) -> web.Response:
        token, path = request.match_info["token"], request.match_info["path"]
        with self._lock:
            self.downloads.append(path)
        if self.delay_s > 0:
            await asyncio.sleep(self.delay_s)
        try:
            self._check_token(token)
            stored = self._paths.get(path)
            if stored is None:
                raise _Refusal(404, "Not Found")
        except _Refusal as refusal:
            body = {"ok": False, "error_code": refusal.status, "description": refusal.description}
            return web.json_response(body, status=refusal.status)
        return web.Response(body=stored.data, content_type="application/octet-stream")

    def _check_token(self, token: str) -> None:
        if token == self.token:
            return
        if _TOKEN_SHAPE.fullmatch(token):
            raise _Refusal(401, "Unauthorized")
        raise _Refusal(404, "Not Found")

    def _scripted_failure(self, method: str) -> None:
        with self._lock:
            failure = next(
                (f for f in self._failures if f.method in (None, method) and f.remaining > 0),
                None,
            )
            if failure is None:
                return
            failure.remaining -= 1
            if failure.remaining == 0:
                self._failures.remove(failure)
        if failure.status == 429:
            raise _Refusal(
                429,
                failure.description or f"Too Many Requests: retry after {failure.retry_after}",
                {"retry_after": failure.retry_after},
            )
        default = {500: "Internal Server Error", 502: "Bad Gateway"}.get(failure.status, "Error")
        raise _Refusal(failure.status, failure.description or default)

    # Each method takes the call and returns the result, or raises _Refusal.

    def _get_me(self, call: ApiCall) -> Any:
        return {
            **self.bot.to_json(),
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": False,
        }

    def _send_message(self, call: ApiCall) -> Any:
        chat = self._chat(call.params)
        text = call.params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _Refusal(400, "Bad Request: message text is empty")
        if _utf16_length(text) > 4096:
            raise _Refusal(400, "Bad Request: message is too long")
        markup = self._markup(call.params)
        fields: dict[str, Any] = {"text": text}
        if markup is not None:
            fields["reply_markup"] = markup
        return self._bot_message(chat, call.params, **fields)

    def _send_message_draft(self, call: ApiCall) -> Any:
        chat = self._chat(call.params)
        if chat.type != "private":
            raise _Refusal(400, "Bad Request: draft can be sent only to private chats")
        draft_id = call.params.get("draft_id")
        if not isinstance(draft_id, int) or draft_id == 0:
            raise _Refusal(400, "Bad Request: draft_id must be non-zero")
        text = call.params.get("text", "")
        if not isinstance(text, str):
            text = str(text)
        if _utf16_length(text) > 4096:
            raise _Refusal(400, "Bad Request: message is too long")
        topic = self._topic(chat, call.params)
        draft: dict[str, Any] = {"chat_id": chat.id, "draft_id": draft_id, "text": text}
        if topic is not None:
            draft["message_thread_id"] = topic
        for flag in ("can_stop", "keep_on_stop"):
            if call.params.get(flag):
                draft[flag] = True
        with self._lock:
            self.drafts.append(draft)
        return True

    def _edit_message_text(self, call: ApiCall) -> Any:
        message = self._editable(call.params)
        text = call.params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _Refusal(400, "Bad Request: message text is empty")
        if _utf16_length(text) > 4096:
            raise _Refusal(400, "Bad Request: MESSAGE_TOO_LONG")
        markup = self._markup(call.params)
        with self._lock:
            if message.get("text") == text and message.get("reply_markup") == markup:
                raise _Refusal(400, _NOT_MODIFIED)
            message["text"] = text
            self._set_markup(message, markup)
            message["edit_date"] = int(time.time())
            return dict(message)

    def _edit_message_reply_markup(self, call: ApiCall) -> Any:
        message = self._editable(call.params)
        markup = self._markup(call.params)
        with self._lock:
            if message.get("reply_markup") == markup:
                raise _Refusal(400, _NOT_MODIFIED)
            self._set_markup(message, markup)
            message["edit_date"] = int(time.time())
            return dict(message)

    def _delete_message(self, call: ApiCall) -> Any:
        chat = self._chat(call.params)
        with self._lock:
            kept = self._messages.get(chat.id, {})
            message_id = call.params.get("message_id")
            if not isinstance(message_id, int) or kept.pop(message_id, None) is None:
                raise _Refusal(400, "Bad Request: message to delete not found")
        return True

    def _answer_callback_query(self, call: ApiCall) -> Any:
        query_id = str(call.params.get("callback_query_id", ""))
        text = call.params.get("text")
        with self._lock:
            if self._queries.get(query_id, True):
                raise _Refusal(
                    400,
                    "Bad Request: query is too old and response timeout expired or query ID "
                    "is invalid",
                )
            if isinstance(text, str) and len(text) > 200:
                raise _Refusal(400, "Bad Request: MESSAGE_TOO_LONG")
            self._queries[query_id] = True
            self.answers.append(
                {
                    "callback_query_id": query_id,
                    "text": text,
                    "show_alert": bool(call.params.get("show_alert")),
                }
            )
        return True

    def _editable(self, params: Mapping[str, Any]) -> dict[str, Any]:
        if params.get("inline_message_id") is not None:
            raise _Refusal(400, "Bad Request: MESSAGE_ID_INVALID")
        chat = self._chat(params)
        message_id = params.get("message_id")
        message = None
        if isinstance(message_id, int):
            message = self._messages.get(chat.id, {}).get(message_id)
        if message is None:
            raise _Refusal(400, "Bad Request: message to edit not found")
        if message["from"]["id"] != self.bot.id:
            raise _Refusal(400, "Bad Request: message can't be edited")
        return message

    def _markup(self, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """The inline keyboard a call gives, checked as Telegram does; ``None`` for none."""
        markup = params.get("reply_markup")
        if markup is None:
            return None
        rows = markup.get("inline_keyboard") if isinstance(markup, Mapping) else None
        if not isinstance(rows, list):
            raise _Refusal(400, "Bad Request: can't parse reply keyboard markup JSON object")
        for row in rows:
            for button in row if isinstance(row, list) else [None]:
                if not isinstance(button, Mapping) or not button.get("text"):
                    raise _Refusal(400, "Bad Request: BUTTON_TEXT_INVALID")
                data = button.get("callback_data")
                if not isinstance(data, str) or not 1 <= len(data.encode()) <= 64:
                    raise _Refusal(400, "Bad Request: BUTTON_DATA_INVALID")
        return {"inline_keyboard": rows}

    @staticmethod
    def _set_markup(message: dict[str, Any], markup: dict[str, Any] | None) -> None:
        if markup is None:
            message.pop("reply_markup", None)
        else:
            message["reply_markup"] = markup

    def _send_document(self, call: ApiCall) -> Any:
        chat = self._chat(call.params)
        upload = call.files.get("document")
        if upload is not None:
            if len(upload.data) > self.upload_limit:
                raise _Refusal(413, "Request Entity Too Large")
            stored = self.add_file(
                upload.data,
                file_name=upload.filename,
                mime_type=upload.content_type,
            )
        else:
            stored_or_none = self._files.get(str(call.params.get("document", "")))
            if stored_or_none is None:
                raise _Refusal(400, "Bad Request: wrong file identifier/HTTP URL specified")
            stored = stored_or_none
        fields: dict[str, Any] = {"document": stored.to_json()}
        if call.params.get("caption"):
            fields["caption"] = call.params["caption"]
        return self._bot_message(chat, call.params, **fields)

    def _send_chat_action(self, call: ApiCall) -> Any:
        chat = self._chat(call.params)
        if call.params.get("action") not in _ACTIONS:
            raise _Refusal(400, "Bad Request: wrong parameter action in request")
        self._topic(chat, call.params)
        return True

    def _get_file(self, call: ApiCall) -> Any:
        stored = self._files.get(str(call.params.get("file_id", "")))
        if stored is None:
            raise _Refusal(400, "Bad Request: invalid file_id")
        if len(stored.data) > self.download_limit:
            raise _Refusal(400, "Bad Request: file is too big")
        answer: dict[str, Any] = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "file_path": stored.path,
        }
        if stored.declared_size is not None:
            answer["file_size"] = stored.declared_size
        return answer

    def _set_webhook(self, call: ApiCall) -> Any:
        url = call.params.get("url")
        if not isinstance(url, str) or not url.startswith("https://"):
            # The stand-in takes http:// on 127.0.0.1 as well; Telegram only https.
            if not (isinstance(url, str) and url.startswith("http://127.0.0.1")):
                raise _Refusal(400, "Bad Request: bad webhook: An HTTPS URL must be provided")
        self.webhook_url = url
        self.webhook_secret = call.params.get("secret_token")
        return True

    def _delete_webhook(self, call: ApiCall) -> Any:
        self.webhook_url = None
        return True

    def _get_webhook_info(self, call: ApiCall) -> Any:
        return {
            "url": self.webhook_url or "",
            "has_custom_certificate": False,
            "pending_update_count": 0,
        }

    def _chat(self, params: Mapping[str, Any]) -> Chat:
        chat_id = params.get("chat_id")
        if chat_id is None:
            raise _Refusal(400, "Bad Request: chat_id is empty")
        chat = self._chats.get(chat_id) if isinstance(chat_id, int) else None
        if chat is None:
            if isinstance(chat_id, int) and chat_id in self._users:
                # A person the bot knows of (from a group) who never started a chat with it.
                raise _Refusal(403, "Forbidden: bot can't initiate conversation with a user")
            raise _Refusal(400, "Bad Request: chat not found")
        return chat

    def _topic(self, chat: Chat, params: Mapping[str, Any]) -> int | None:
        topic = params.get("message_thread_id")
        if topic is None:
            return None
        if not isinstance(topic, int) or topic not in self._topics.get(chat.id, {}):
            raise _Refusal(400, "Bad Request: message thread not found")
        return topic

    def _bot_message(self, chat: Chat, params: Mapping[str, Any], **fields: Any) -> Any:
        topic = self._topic(chat, params)
        reply = params.get("reply_parameters")
        reply_to: Any = params.get("reply_to_message_id")
        without_reply = bool(params.get("allow_sending_without_reply"))
        if isinstance(reply, Mapping):
            reply_to = reply.get("message_id")
            without_reply = bool(reply.get("allow_sending_without_reply", without_reply))
        extra: dict[str, Any] = {}
        if topic is not None:
            extra["message_thread_id"] = topic
            extra["is_topic_message"] = True
            extra["reply_to_message"] = self._topics[chat.id][topic]
        if reply_to is not None:
            replied = self._messages.get(chat.id, {}).get(reply_to)
            if replied is None and not without_reply:
                raise _Refusal(400, "Bad Request: message to be replied not found")
            if replied is not None:
                extra["reply_to_message"] = {
                    k: v for k, v in replied.items() if k != "reply_to_message"
                }
        return self._new_message(chat, self.bot, **extra, **fields)


_METHODS: Final = {
    "getMe": TelegramStandIn._get_me,
    "sendMessage": TelegramStandIn._send_message,
    "sendDocument": TelegramStandIn._send_document,
    "sendChatAction": TelegramStandIn._send_chat_action,
    "getFile": TelegramStandIn._get_file,
    "setWebhook": TelegramStandIn._set_webhook,
    "deleteWebhook": TelegramStandIn._delete_webhook,
    "getWebhookInfo": TelegramStandIn._get_webhook_info,
    "sendMessageDraft": TelegramStandIn._send_message_draft,
    "editMessageText": TelegramStandIn._edit_message_text,
    "editMessageReplyMarkup": TelegramStandIn._edit_message_reply_markup,
    "deleteMessage": TelegramStandIn._delete_message,
    "answerCallbackQuery": TelegramStandIn._answer_callback_query,
}


async def _read_params(request: web.Request) -> tuple[dict[str, Any], dict[str, Upload]]:
    """The call's parameters from the query and the body (JSON, form or multipart), with
    form values decoded as the Bot API reads them (numbers, booleans, JSON objects)."""
    params: dict[str, Any] = {key: _form_value(key, value) for key, value in request.query.items()}
    files: dict[str, Upload] = {}
    if request.content_type == "application/json":
        body = await request.json()
        if not isinstance(body, dict):
            raise ValueError("a JSON body must be an object")
        params.update(body)
    elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.post()
        for key, value in form.items():
            if isinstance(value, web.FileField):
                files[key] = Upload(
                    filename=value.filename,
                    content_type=value.content_type,
                    data=value.file.read(),
                )
            else:
                params[key] = _form_value(key, str(value))
    return params, files


def _form_value(key: str, value: str) -> Any:
    if key in _INT_FIELDS and re.fullmatch(r"-?[0-9]+", value):
        return int(value)
    if value in ("true", "false"):
        return value == "true"
    if value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _entities(text: str, text_mentions: Sequence[tuple[str, User]]) -> list[dict[str, Any]]:
    entities = [
        {
            "type": "mention",
            "offset": _utf16_length(text[: m.start()]),
            "length": _utf16_length(m.group()),
        }
        for m in _MENTION.finditer(text)
    ]
    for shown, user in text_mentions:
        at = text.find(shown)
        if at < 0:
            raise StandInError(f"{shown!r} is not in the message's text.")
        entities.append(
            {
                "type": "text_mention",
                "offset": _utf16_length(text[:at]),
                "length": _utf16_length(shown),
                "user": user.to_json(),
            }
        )
    return sorted(entities, key=lambda e: e["offset"])


def _utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2
