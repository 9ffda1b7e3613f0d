"""The WhatsApp bridge: Cloud API webhooks in, Graph API calls out.

WhatsApp's Cloud API has no official Python SDK (and Baileys, the unofficial WhatsApp Web
client, has no Python counterpart), so this bridge speaks the Graph API itself over one
``httpx.AsyncClient``: ``POST /<phone_number_id>/messages`` for replies and the typing
indicator, ``POST /<phone_number_id>/media`` for files, ``GET /<media_id>`` and the URL it
names for downloads. Meta delivers events to ``/webhooks/whatsapp``: a ``GET`` verifies the
callback (``hub.verify_token``), every ``POST`` is signed with the app secret
(``X-Hub-Signature-256``).

Threads: a person's chat with the business is ``whatsapp:<wa_id>`` (a DM); a Cloud API
group is ``whatsapp:<group_id>@g.us``. The bot's number written ``@<digits>`` in a group
becomes ``@<bot_name>``.

Live answers (#37, a :class:`bridges.port.LiveBridge`): WhatsApp edits no message, so the
pacer hands each finished paragraph over as a message of its own (``partial=False``), the
typing indicator standing for "Thinking…". A confirmation's choices are ``interactive``
reply buttons (up to three) or a list (up to ten rows), their ids the actions; a person's
choice comes back as an ``interactive`` message quoting the buttons (a :class:`Pressed`).
Meta's groups take no interactive messages and mark nothing read: there the buttons go to
the asking person's own chat, their ids naming the group (``<action>|<group_id>@g.us``) so
that a press on any instance belongs to the group's conversation.

Exception tree (from :mod:`bridges.port`)::

    BridgeError                  Graph refused a call (its message and code are quoted),
    │                            or a file is over the size cap
    └── PlatformUnavailable      Graph could not be reached, timed out, answered 5xx or 429,
                                 or a rate-limit code; the same call may succeed later
    ConfigurationError           (core.config.settings) the bridge was built without its secrets
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import mimetypes
import re
import urllib.parse
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any, Final

import httpx
import msgspec

from bridges import whatsapp_wire as wire
from bridges.downloads import read_capped, refuse_past
from bridges.freshness import epoch
from bridges.hosts import on_platform
from bridges.json_body import decode
from bridges.pacing import split
from bridges.port import (
    ACTION_MAX_BYTES,
    Attachment,
    BridgeError,
    EgressFile,
    LiveLimits,
    PlatformUnavailable,
    Pressed,
    Received,
    ReplyButton,
    ThreadInfo,
    WebhookOutcome,
)
from core.config.settings import ConfigurationError, WhatsAppSettings
from core.spaces import InvalidSpaceId, parse_space_id

__all__ = ["MAX_BUTTONS", "MAX_TEXT_CHARS", "WhatsAppBridge"]

#: The longest text body one WhatsApp message takes.
MAX_TEXT_CHARS: Final = 4096
#: Reply buttons one interactive message carries; more choices go as a list's rows.
MAX_BUTTONS: Final = 3
#: The longest body of an interactive message, and its buttons' and rows' titles.
MAX_BODY_CHARS: Final = 1024
MAX_BUTTON_TITLE_CHARS: Final = 20
MAX_ROW_TITLE_CHARS: Final = 24
#: Rows one list message holds (all its sections together).
MAX_ROWS: Final = 10
#: How many incoming messages are remembered as quoted by their answer's first message.
QUOTED_KEPT: Final = 1024
#: The least time between two messages of one live answer (finished paragraphs).
LIVE_INTERVAL_S: Final = 1.0
#: WhatsApp's caps on what it accepts from a business (images over 5 MB go as documents).
MAX_IMAGE_BYTES: Final = 5 * 1024 * 1024
MAX_DOCUMENT_BYTES: Final = 100 * 1024 * 1024
#: How many ids of messages we sent are remembered, to tell a reply to the bot.
SENT_IDS_KEPT: Final = 1024

_GROUP_SUFFIX: Final = "@g.us"
#: Between a button's action and the group it belongs to, in the id of a group's buttons
#: sent to their owner's own chat (``c:…|<group_id>@g.us``).
_GROUP_MARK: Final = "|"
#: The label of the button that opens a list's rows (no words: no language to choose).
_LIST_BUTTON: Final = "☰"
#: Hosts the access token may be sent to for a media download, besides the Graph API's own.
_MEDIA_DOMAINS: Final = ("fbsbx.com", "facebook.com", "whatsapp.net")
_IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png"})
_MEDIA_KINDS: Final = ("image", "document", "audio", "video", "voice", "sticker")
_MENTION: Final = re.compile(r"@\+?(\d{5,15})\b")
# Graph error codes that mean "too many calls, come back later" (app, account, throughput,
# pair rate limits), whatever the HTTP status they come with.
_THROTTLED: Final = frozenset({4, 80007, 130429, 131048, 131056})
#: What Meta documents as the wait for a code when no Retry-After comes with it: the pair
#: rate limit allows one message every 6 seconds to one person.
_THROTTLE_WAIT_S: Final[Mapping[int, float]] = {131056: 6.0}
_HINTS: Final[Mapping[int, str]] = {
    190: " The access token (WHATSAPP_ACCESS_TOKEN) is invalid or expired; give the bridge "
    "a system user's permanent token.",
    131047: " More than 24 hours have passed since the person last wrote; WhatsApp only "
    "delivers free-form replies inside that window.",
}


class WhatsAppBridge:
    """The WhatsApp Cloud API as a :class:`bridges.port.WebhookBridge`."""

    def __init__(
        self, settings: WhatsAppSettings, *, bot_name: str, timeout_s: float = 10.0
    ) -> None:
        access_token, app_secret = settings.access_token, settings.app_secret
        verify_token, phone_number_id = settings.verify_token, settings.phone_number_id
        if not access_token or not app_secret or not verify_token or not phone_number_id:
            missing = [
                variable
                for variable, value in (
                    ("WHATSAPP_ACCESS_TOKEN", access_token),
                    ("WHATSAPP_APP_SECRET", app_secret),
                    ("WHATSAPP_VERIFY_TOKEN", verify_token),
                    ("WHATSAPP_PHONE_NUMBER_ID", phone_number_id),
                )
                if not value
            ]
            raise ConfigurationError(
                f"The WhatsApp bridge needs {', '.join(missing)}; set them in the environment."
            )
        self._bot_name = bot_name
        self._app_secret = app_secret.encode()
        self._verify_token = verify_token.encode()
        self._phone_number_id = phone_number_id
        self._api_url = settings.api_url
        self._timeout_s = timeout_s
        self._client = httpx.AsyncClient(
            base_url=settings.api_url + "/",
            headers={"Authorization": f"Bearer {access_token}"},
            timeout=httpx.Timeout(timeout_s),
        )
        # Ids of the messages we sent, newest last: a quote of one is a reply to the bot.
        self._sent = _Recent(SENT_IDS_KEPT)
        # Incoming messages a live answer has quoted already: only its first message quotes.
        self._quoted = _Recent(QUOTED_KEPT)
        # Incoming messages shown "typing…" for already: once is enough (25 s, or the reply).
        self._typing = _Recent(QUOTED_KEPT)

    @property
    def platform(self) -> str:
        return "whatsapp"

    @property
    def live_limits(self) -> LiveLimits:
        """WhatsApp has no edits: an answer comes as finished paragraphs, each a message."""
        return LiveLimits(
            max_chars=MAX_TEXT_CHARS,
            edit_interval_s=LIVE_INTERVAL_S,
            # Up to three reply buttons; four to ten choices are a list's rows.
            max_buttons=MAX_ROWS,
            partial=False,
        )

    # --- webhooks -----------------------------------------------------------------------------

    async def receive(
        self,
        method: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
    ) -> WebhookOutcome:
        """Answer the callback's verification, or check and parse one signed delivery."""
        if method.upper() == "GET":
            return self._verification(query)
        if method.upper() != "POST":
            return WebhookOutcome(verdict="malformed", reason=f"a {method} request")
        if not self._is_signed(headers.get("x-hub-signature-256", ""), body):
            return WebhookOutcome(
                verdict="forged", reason="X-Hub-Signature-256 is missing or does not match"
            )
        try:
            delivery = decode(wire.DELIVERY, body)
        except msgspec.DecodeError as exc:
            return WebhookOutcome(verdict="malformed", reason=f"unreadable event: {exc}")
        return self._outcome(delivery)

    def _verification(self, query: Mapping[str, str]) -> WebhookOutcome:
        token = query.get("hub.verify_token", "").encode()
        if not hmac.compare_digest(token, self._verify_token):
            return WebhookOutcome(verdict="forged", reason="hub.verify_token does not match")
        challenge = query.get("hub.challenge")
        if query.get("hub.mode") != "subscribe" or challenge is None:
            return WebhookOutcome(
                verdict="malformed", reason="a verification without hub.mode=subscribe"
            )
        return WebhookOutcome(verdict="challenge", body=challenge.encode(), reason="verified")

    def _is_signed(self, header: str, body: bytes) -> bool:
        scheme, _, given = header.partition("=")
        if scheme != "sha256" or not given:
            return False
        expected = hmac.new(self._app_secret, body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(given.lower().encode(), expected.encode())

    def _outcome(self, delivery: wire.Delivery) -> WebhookOutcome:
        if delivery.object != "whatsapp_business_account":
            return WebhookOutcome(verdict="ignored", reason=f"an event about {delivery.object!r}")
        received: list[Received] = []
        presses: list[Pressed] = []
        skipped: list[str] = []
        for entry in delivery.entry:
            for change in entry.changes:
                value = change.value
                if change.field != "messages" or value is None:
                    skipped.append(f"a {change.field!r} change")
                    continue
                if value.metadata is None or value.metadata.phone_number_id != (
                    self._phone_number_id
                ):
                    skipped.append("another phone number's event")
                    continue
                if value.statuses:
                    skipped.append("delivery receipts")
                business = _digits(value.metadata.display_phone_number)
                names = {c.wa_id: c.profile.name for c in value.contacts if c.profile}
                only_name = value.contacts[0].profile if len(value.contacts) == 1 else None
                for message in value.messages:
                    try:
                        parsed, why = self._parse(message, business, names)
                    except InvalidSpaceId:
                        # Refused before it is taken: past the answer the pipeline could only
                        # fail on it, and Meta signs no such id.
                        return WebhookOutcome(
                            verdict="malformed",
                            reason="a chat or sender id that can't be a space id",
                        )
                    if parsed is None:
                        skipped.append(why)
                        continue
                    if parsed.author_name is None and only_name and len(value.messages) == 1:
                        parsed = msgspec.structs.replace(parsed, author_name=only_name.name)
                    if isinstance(parsed, Pressed):
                        presses.append(parsed)
                    else:
                        received.append(parsed)
        if received or presses:
            return WebhookOutcome(
                verdict="accepted", messages=tuple(received), presses=tuple(presses)
            )
        reason = "; ".join(dict.fromkeys(skipped)) or "no messages"
        return WebhookOutcome(verdict="ignored", reason=reason)

    def _parse(
        self, message: wire.Message, business: str, names: Mapping[str, str | None]
    ) -> tuple[Received | Pressed | None, str]:
        """The message as the pipeline takes it (a press of one of our buttons is a
        :class:`Pressed`), or None and why it is skipped; raises :class:`InvalidSpaceId` for
        a chat or sender id that can't be a space's."""
        author = message.sender.removeprefix("+")
        if (business and _digits(author) == business) or message.id in self._sent:
            return None, "the bot's own message"
        if message.group_id is not None:
            thread_id = f"whatsapp:{message.group_id}{_GROUP_SUFFIX}"
        else:
            thread_id = f"whatsapp:{author}"
        choice = _choice(message)
        if choice is not None:
            return self._press(message, choice, author, thread_id, names)
        content = _content(message)
        if content is None:
            return None, f"a {message.type!r} message"
        text, attachments = content
        # The sender is a person of a space (whatsapp:<id>) as well as, in a DM, the chat:
        # both must be ids a space can have (InvalidSpaceId otherwise).
        parse_space_id(f"whatsapp:{author}")
        is_dm = parse_space_id(thread_id).is_dm
        if business:
            text = _MENTION.sub(lambda m: f"@{self._bot_name}" if m[1] == business else m[0], text)
        context = message.context
        is_reply_to_bot = context is not None and (
            (bool(business) and _digits(context.sender or "") == business)
            or (context.id is not None and context.id in self._sent)
        )
        received = Received(
            platform="whatsapp",
            thread_id=thread_id,
            delivery_id=message.id,
            message_id=message.id,
            author_id=author,
            author_name=names.get(author),
            text=text,
            is_dm=is_dm,
            is_reply_to_bot=is_reply_to_bot,
            attachments=attachments,
            sent_at=epoch(message.timestamp),
        )
        return received, ""

    def _press(
        self,
        message: wire.Message,
        choice: wire.Choice,
        author: str,
        thread_id: str,
        names: Mapping[str, str | None],
    ) -> tuple[Pressed | None, str]:
        """A reply button or list row of ours, pressed: the message it was on is the one
        the person's reply quotes (``context.id``)."""
        parse_space_id(f"whatsapp:{author}")
        action, respond = choice.id, ""
        head, separator, group = action.rpartition(_GROUP_MARK)
        if separator and group.endswith(_GROUP_SUFFIX):
            # A group's buttons, sent to their owner's own chat (Meta's groups take no
            # interactive messages): the press belongs to the group's conversation.
            if message.group_id is not None:
                return None, "a private chat's button pressed in a group"
            action, respond, thread_id = head, thread_id, f"whatsapp:{group}"
        is_dm = parse_space_id(thread_id).is_dm
        if message.context is None or not message.context.id:
            return None, "a button press without the message it was on"
        size = len(action.encode())
        if not 0 < size <= ACTION_MAX_BYTES:
            return None, "a press of a button the bridge didn't send"
        pressed = Pressed(
            platform="whatsapp",
            thread_id=thread_id,
            delivery_id=message.id,
            message_id=message.context.id,
            author_id=author,
            author_name=names.get(author),
            action=action,
            is_dm=is_dm,
            respond=respond,
            sent_at=epoch(message.timestamp),
        )
        return pressed, ""

    # --- threads ------------------------------------------------------------------------------

    def parse_thread(self, thread_id: str) -> ThreadInfo:
        """The space of ``thread_id``, which is the thread itself: a WhatsApp chat has no
        sub-threads. Raises :class:`core.spaces.InvalidSpaceId` for a thread not WhatsApp's."""
        space = parse_space_id(thread_id)
        if space.platform != "whatsapp":
            raise InvalidSpaceId(f"{thread_id!r} is not a WhatsApp chat (whatsapp:<id>).")
        return ThreadInfo(space_id=space.id, conversation_external_id=space.id, is_dm=space.is_dm)

    # --- media --------------------------------------------------------------------------------

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The media's bytes: its URL from Graph, then the file, both with the access token."""
        refuse_past(attachment.name, max_bytes, attachment.size_bytes)
        answer = await self._call("GET", urllib.parse.quote(attachment.ref, safe=""), "find a file")
        try:
            info = decode(wire.MEDIA_INFO, answer)
            size = None if info.file_size is None else int(info.file_size)
        except (msgspec.DecodeError, ValueError) as exc:
            raise BridgeError(
                f"WhatsApp's answer about the file {attachment.name} could not be read: {exc}."
            ) from exc
        refuse_past(attachment.name, max_bytes, size)
        if not on_platform(info.url, api_url=self._api_url, domains=_MEDIA_DOMAINS):
            raise BridgeError(
                f"The WhatsApp bridge does not send its access token to "
                f"{urllib.parse.urlsplit(info.url).netloc[:80]!r} for the file "
                f"{attachment.name}; Meta serves media from lookaside.fbsbx.com."
            )
        what = f"download the file {attachment.name}"
        try:
            # httpx follows no redirect: the token goes to the checked host alone.
            async with self._client.stream("GET", info.url) as response:
                if response.status_code >= 300:
                    await response.aread()
                    raise _failure(response, what)
                length = response.headers.get("content-length", "")
                refuse_past(attachment.name, max_bytes, int(length) if length.isdigit() else None)
                return await read_capped(response.aiter_bytes(), attachment.name, max_bytes)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc, what) from exc

    # --- replies ------------------------------------------------------------------------------

    async def start_typing(self, message: Received) -> None:
        """Mark ``message`` read and show "typing…" (WhatsApp drops it after 25 s or a reply);
        nothing in a group, where Meta marks no message read."""
        if _recipient(message.thread_id)["recipient_type"] == "group":
            return
        # The person's own message: for the answer to a press, the press (its message id is
        # the delivery's), not the bot's message of buttons it names.
        read = message.delivery_id
        if read in self._typing:
            return  # shown already for this message (the pipeline's, then the answer's)
        self._typing.add(read)
        await self._call(
            "POST",
            f"{self._phone_number_id}/messages",
            "show the typing indicator",
            json={
                "messaging_product": "whatsapp",
                "status": "read",
                "message_id": read,
                "typing_indicator": {"type": "text"},
            },
        )

    async def send_reply(self, to: Received, text: str, files: Sequence[EgressFile] = ()) -> None:
        """The text (in pieces of at most 4,096 characters), then each file as its own
        message; the first message quotes ``to``."""
        recipient = _recipient(to.thread_id)
        quote: dict[str, Any] | None = {"message_id": to.message_id} if _quotable(to) else None
        for piece in _split_text(text, MAX_TEXT_CHARS):
            await self._send({**recipient, **_text(piece)}, quote, "send a reply")
            quote = None
        for file in files:
            kind, media = await self._upload(file)
            await self._send({**recipient, "type": kind, kind: media}, quote, "send a file")
            quote = None

    # --- live answers and buttons (#37) -------------------------------------------------------

    async def open_reply(
        self, to: Received, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> _LiveReply:
        """The typing indicator while ``status`` is shown: WhatsApp can show no status line
        nor a message that is not finished, so nothing is posted (nor a stop button)."""
        if status is not None:
            await self.start_typing(to)
        return _LiveReply(self, to)

    async def send_private(self, to: Received, text: str) -> None:
        """``text`` in the author's own chat with the business: the same chat in a DM."""
        await self._send_text(_recipient(f"whatsapp:{to.author_id}"), text, None, "send a message")

    async def answer_press(self, press: Pressed, text: str) -> None:
        """``text`` in the presser's own chat with the business."""
        recipient = _recipient(f"whatsapp:{press.author_id}")
        await self._send_text(recipient, text, None, "answer a button press")

    async def settle_press(self, press: Pressed, text: str) -> None:
        """WhatsApp edits nothing: ``text`` (what was chosen) goes to the chat as a message
        quoting the pressed one, where that message is in the chat."""
        quote = None if press.respond else {"message_id": press.message_id}
        await self._send_text(_recipient(press.thread_id), text, quote, "settle a button press")

    def _quote_of(self, to: Received) -> dict[str, Any] | None:
        """A quote of ``to`` until one of its answer's messages has quoted it, then None."""
        if to.message_id in self._quoted or not _quotable(to):
            return None
        return {"message_id": to.message_id}

    def _mark_quoted(self, to: Received) -> None:
        self._quoted.add(to.message_id)

    async def _send_text(
        self, recipient: dict[str, str], text: str, quote: dict[str, Any] | None, what: str
    ) -> None:
        """``text`` as it is (in pieces where over the limit); nothing when it is blank."""
        for piece in _pieces(text):
            await self._send({**recipient, **_text(piece)}, quote, what)
            quote = None

    async def _send(self, message: dict[str, Any], quote: dict[str, Any] | None, what: str) -> None:
        body = {"messaging_product": "whatsapp", **message}
        if quote is not None:
            body["context"] = quote
        answer = await self._call("POST", f"{self._phone_number_id}/messages", what, json=body)
        try:
            sent = decode(wire.SEND_ANSWER, answer).messages
        except msgspec.DecodeError:
            sent = []  # sent all the same; only the reply-to-bot memory misses it
        for item in sent:
            self._sent.add(item.id)

    async def _upload(self, file: EgressFile) -> tuple[str, dict[str, str]]:
        if len(file.data) > MAX_DOCUMENT_BYTES:
            raise BridgeError(
                f"The file {file.filename} is {len(file.data)} bytes, over WhatsApp's "
                f"{MAX_DOCUMENT_BYTES}-byte limit; it was not sent."
            )
        answer = await self._call(
            "POST",
            f"{self._phone_number_id}/media",
            f"upload the file {file.filename}",
            data={"messaging_product": "whatsapp", "type": file.mime_type},
            files={"file": (file.filename, file.data, file.mime_type)},
        )
        try:
            media_id = decode(wire.UPLOAD_ANSWER, answer).id
        except msgspec.DecodeError as exc:
            raise BridgeError(
                f"WhatsApp's answer to the upload of {file.filename} could not be read: {exc}."
            ) from exc
        if file.mime_type in _IMAGE_TYPES and len(file.data) <= MAX_IMAGE_BYTES:
            return "image", {"id": media_id}
        return "document", {"id": media_id, "filename": file.filename}

    # --- Graph --------------------------------------------------------------------------------

    async def _call(self, method: str, path: str, what: str, **options: Any) -> bytes:
        """One Graph call's body; :class:`BridgeError` (or its subclass) when it failed."""
        try:
            response = await self._client.request(method, path, **options)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc, what) from exc
        if response.status_code >= 300:
            raise _failure(response, what)
        return response.content

    def _unreachable(self, exc: httpx.HTTPError, what: str) -> PlatformUnavailable:
        if isinstance(exc, httpx.TimeoutException):
            return PlatformUnavailable(
                f"WhatsApp did not answer within {self._timeout_s:g} s when asked to {what}; "
                "try again later."
            )
        return PlatformUnavailable(
            f"WhatsApp could not be reached to {what} ({type(exc).__name__}: {exc}); "
            "try again later."
        )

    async def close(self) -> None:
        """Close the Graph client."""
        await self._client.aclose()


class _Recent:
    """The last ``size`` ids added, for ``in`` (the oldest forgotten first)."""

    def __init__(self, size: int) -> None:
        self._order: deque[str] = deque(maxlen=size)
        self._ids: set[str] = set()

    def __contains__(self, item: object) -> bool:
        return item in self._ids

    def add(self, item: str) -> None:
        if item in self._ids:
            return
        if len(self._order) == self._order.maxlen:
            self._ids.discard(self._order[0])
        self._order.append(item)
        self._ids.add(item)


class _LiveReply:
    """One answer's part in a chat, sent when finished: WhatsApp shows no partial text.

    A call the pacer tries again (after a 429) goes on from the first message not yet sent,
    so nothing is sent twice.
    """

    def __init__(self, bridge: WhatsAppBridge, to: Received) -> None:
        self._bridge = bridge
        self._to = to
        #: How many of the messages of ``finish`` or ``fail`` are sent.
        self._done = 0

    async def show(self, text: str, status: str | None) -> None:
        """Nothing: the pacer gives a ``partial=False`` platform no partial text."""

    async def finish(
        self, text: str, buttons: Sequence[ReplyButton] = (), files: Sequence[EgressFile] = ()
    ) -> None:
        """The text, then the buttons (under the text when it fits their body, else under
        its last paragraph), then each file; in a group the buttons go to the author's own
        chat, as Meta's groups take no interactive messages."""
        await self._run(self._steps(text, buttons, files))

    async def fail(self, text: str) -> None:
        """The error's sentence, as a message."""
        await self._run(self._steps(text, (), ()))

    async def _run(self, steps: list[Callable[[], Awaitable[None]]]) -> None:
        for step in steps[self._done :]:
            await step()
            self._done += 1

    def _steps(
        self, text: str, buttons: Sequence[ReplyButton], files: Sequence[EgressFile]
    ) -> list[Callable[[], Awaitable[None]]]:
        chat = _recipient(self._to.thread_id)
        group = chat["to"] + _GROUP_SUFFIX if chat["recipient_type"] == "group" else None
        steps: list[Callable[[], Awaitable[None]]] = []
        if buttons and group is None and text.strip() and len(text) <= MAX_BODY_CHARS:
            for message in _choices(text, buttons, None):
                steps.append(functools.partial(self._post, chat, message, "send buttons"))
        else:
            for piece in _pieces(text):
                steps.append(functools.partial(self._post, chat, _text(piece), "send a reply"))
            if buttons:
                owner = chat if group is None else _recipient(f"whatsapp:{self._to.author_id}")
                for message in _choices(_choices_body(text, buttons), buttons, group):
                    steps.append(
                        functools.partial(
                            self._post, owner, message, "send buttons", quote=group is None
                        )
                    )
        for file in files:
            steps.append(functools.partial(self._post_file, chat, file))
        return steps

    async def _post(
        self, recipient: dict[str, str], message: dict[str, Any], what: str, quote: bool = True
    ) -> None:
        bridge = self._bridge
        quoted = bridge._quote_of(self._to) if quote else None
        await bridge._send({**recipient, **message}, quoted, what)
        if quoted is not None:
            bridge._mark_quoted(self._to)

    async def _post_file(self, recipient: dict[str, str], file: EgressFile) -> None:
        kind, media = await self._bridge._upload(file)
        await self._post(recipient, {"type": kind, kind: media}, "send a file")


# --- helpers ------------------------------------------------------------------------------------


def _text(body: str) -> dict[str, Any]:
    return {"type": "text", "text": {"body": body, "preview_url": False}}


def _pieces(text: str) -> list[str]:
    """``text`` as it is when it fits one message (nothing when blank), else split."""
    if not text.strip():
        return []
    return [text] if len(text) <= MAX_TEXT_CHARS else _split_text(text, MAX_TEXT_CHARS)


def _shorten(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, an ellipsis ending what was cut."""
    text = text.strip() or "…"
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _choices_body(text: str, buttons: Sequence[ReplyButton]) -> str:
    """The body of buttons sent after their text: its last paragraph (the pending note),
    else the buttons' labels."""
    last = text.strip().rsplit("\n\n", 1)[-1].strip()
    return _shorten(last or " · ".join(b.label for b in buttons), MAX_BODY_CHARS)


def _choices(body: str, buttons: Sequence[ReplyButton], group: str | None) -> list[dict[str, Any]]:
    """Interactive messages for ``buttons`` under ``body``: reply buttons up to three, else
    lists of up to ten rows. The ids are the actions (with ``group`` appended, for a group's
    buttons sent to a person's own chat)."""

    def choice_id(action: str) -> str:
        return action if group is None else f"{action}{_GROUP_MARK}{group}"

    if len(buttons) <= MAX_BUTTONS:
        replies = [
            {
                "type": "reply",
                "reply": {
                    "id": choice_id(b.action),
                    "title": _shorten(b.label, MAX_BUTTON_TITLE_CHARS),
                },
            }
            for b in buttons
        ]
        interactive = {"type": "button", "body": {"text": body}, "action": {"buttons": replies}}
        return [{"type": "interactive", "interactive": interactive}]
    messages: list[dict[str, Any]] = []
    for start in range(0, len(buttons), MAX_ROWS):
        rows = [
            {"id": choice_id(b.action), "title": _shorten(b.label, MAX_ROW_TITLE_CHARS)}
            for b in buttons[start : start + MAX_ROWS]
        ]
        interactive = {
            "type": "list",
            "body": {"text": body},
            "action": {"button": _LIST_BUTTON, "sections": [{"rows": rows}]},
        }
        messages.append({"type": "interactive", "interactive": interactive})
    return messages


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


def _content(message: wire.Message) -> tuple[str, tuple[Attachment, ...]] | None:
    """The message's text and files, or None for a type the assistant doesn't read."""
    kind = message.type
    if kind == "text" and message.text is not None:
        return message.text.body, ()
    if kind in _MEDIA_KINDS:
        media: wire.Media | None = getattr(message, kind)
        if media is None:
            return None
        return media.caption or "", (_attachment(kind, media),)
    if kind == "location" and message.location is not None:
        place = message.location
        where = ", ".join(p for p in (place.name, place.address) if p)
        at = f"{place.latitude}, {place.longitude}"
        return f"[shared a location: {where} ({at})]" if where else f"[shared a location: {at}]", ()
    if kind == "contacts" and message.contacts:
        names = [
            c.name.formatted_name for c in message.contacts if c.name and c.name.formatted_name
        ]
        return f"[shared a contact: {', '.join(names) or 'no name'}]", ()
    if kind == "button" and message.button is not None:
        return message.button.text, ()
    return None


def _choice(message: wire.Message) -> wire.Choice | None:
    """The reply button or list row a person chose, for an ``interactive`` reply."""
    interactive = message.interactive
    if message.type != "interactive" or interactive is None:
        return None
    return interactive.button_reply or interactive.list_reply


def _attachment(kind: str, media: wire.Media) -> Attachment:
    mime = (media.mime_type or "").split(";", 1)[0].strip() or None
    if media.filename:
        # A document's name is the sender's to choose: keep only its last part.
        name = PurePosixPath(media.filename.replace("\\", "/")).name or kind
    else:
        extension = (mimetypes.guess_extension(mime) if mime else None) or ""
        name = f"{kind}-{media.id}{extension}"
    return Attachment(name=name, ref=media.id, mime_type=mime)


def _quotable(to: Received) -> bool:
    """Whether ``to`` is in its own chat: not so for the answer to a group's button pressed
    in the owner's own chat (the message it names, the buttons', is in that other chat)."""
    return to.delivery_id == to.message_id or not to.thread_id.endswith(_GROUP_SUFFIX)


def _recipient(thread_id: str) -> dict[str, str]:
    chat = thread_id.removeprefix("whatsapp:")
    if chat.endswith(_GROUP_SUFFIX):
        return {"recipient_type": "group", "to": chat.removesuffix(_GROUP_SUFFIX)}
    return {"recipient_type": "individual", "to": chat}


def _split_text(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut as every platform's answer is
    (:func:`bridges.pacing.split`), each without the blank lines around it."""
    return [part.strip() for part in split(text.strip(), limit) if part.strip()]


def _seconds(retry_after: str | None, code: int | None) -> float | None:
    """The wait a throttled call asked for: its Retry-After in seconds, else what Meta
    documents for its code, else None (the caller backs off as it sees fit)."""
    try:
        wait = float(retry_after) if retry_after else None
    except ValueError:
        wait = None
    if wait is not None and 0 <= wait < float("inf"):
        return wait
    return _THROTTLE_WAIT_S.get(code or 0)


def _failure(response: httpx.Response, what: str) -> BridgeError:
    """The error a Graph answer other than 2xx comes to, quoting Graph's own message."""
    status = response.status_code
    try:
        error: wire.GraphErrorBody | None = decode(wire.GRAPH_ERROR, response.content).error
    except msgspec.DecodeError:
        error = None
    said = ""
    if error is not None:
        details = error.error_data.details if error.error_data else None
        said = error.message + (f" ({details})" if details and details != error.message else "")
    if status == 429 or status >= 500 or (error is not None and error.code in _THROTTLED):
        wait = response.headers.get("retry-after")
        asked = f"; it asked us to wait {wait} s" if wait else ""
        because = f": {said}" if said else ""
        return PlatformUnavailable(
            f"WhatsApp could not {what} just now (HTTP {status}{because}{asked}); try again later.",
            retry_after_s=_seconds(wait, None if error is None else error.code),
        )
    if error is None:
        return BridgeError(f"WhatsApp answered HTTP {status} when asked to {what}.")
    hint = _HINTS.get(error.code or 0, "")
    return BridgeError(f"WhatsApp refused to {what}: {said} (code {error.code}).{hint}")
