"""A stand-in for WhatsApp's Cloud API on 127.0.0.1: Graph's routes, and Meta's webhook calls.

The bridge's own ``httpx`` client talks to it over a socket through ``WHATSAPP_API_URL``
(:attr:`WhatsAppStandIn.api_url`), and the stand-in calls the server's webhook the way Meta
does (signed ``POST``, verification ``GET``)::

    with WhatsAppStandIn() as whatsapp:
        settings = whatsapp.settings()
        payload = whatsapp.event(whatsapp.text("15551230001", "hello", name="Ann"))
        delivery = await whatsapp.deliver(webhook_url, payload)
        ...
        assert whatsapp.sent_messages()[0]["text"]["body"] == "You said: hello"

Graph routes, each checking ``Authorization: Bearer <access_token>`` (else 401, code 190):

* ``POST /v21.0/<phone_number_id>/messages``: a message (text, image, document, …; text over
  4,096 characters is refused, code 100; a media id never uploaded, code 131053), an
  ``interactive`` message of reply buttons (``button``: 1 to 3, titles up to 20 characters and
  unique, ids up to 256, a body up to 1,024) or a ``list`` (up to 10 rows in all, row titles up
  to 24, ids up to 200, the list's button up to 20): outside those limits, or to a group
  (Meta's groups take no interactive messages), code 131009; or a read receipt, with the
  typing indicator or without (``{"status": "read", ...}`` answers ``{"success": true}``);
* ``POST /v21.0/<phone_number_id>/media``: a multipart upload (``messaging_product``, ``type``,
  ``file``) answering ``{"id"}``;
* ``GET /v21.0/<media_id>``: the media's ``url``, ``mime_type``, ``sha256`` and ``file_size``;
* ``GET /whatsapp_business/attachments/?mid=<id>``: the media's bytes (Meta's lookaside host),
  with the same bearer token.

Anything else is a Graph error (code 100). Every call is recorded (:attr:`calls`), the
refused ones too. :meth:`fail_next` makes the next calls fail (5xx, 429 with ``Retry-After``,
or any Graph error), :meth:`throttle_next` with one of Graph's rate-limit codes (130429,
131056, 80007, …); :meth:`slow_next` makes them wait first. A person's press of a reply button
or a list row is :meth:`press` (the ``interactive`` message Meta delivers) and
:meth:`deliver_press` (that message delivered, signed).

The server is aiohttp's, in a thread with its own event loop; deliveries to a webhook also
run there (:meth:`deliver` is awaited from any loop).

Its start, stop, address, waits and errors (``StandInError``, ``StandInTimeoutError``) are
the stand-ins' base's, :mod:`tests.support.standin`.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import hmac
import itertools
import secrets
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import aiohttp
import msgspec
from aiohttp import web
from yarl import URL

from core.config.settings import WhatsAppSettings
from tests.support.standin import StandInError, StandInTimeoutError, ThreadedStandIn

__all__ = [
    "ACCESS_TOKEN",
    "APP_SECRET",
    "VERIFY_TOKEN",
    "VERSION",
    "Delivery",
    "GraphCall",
    "Inbound",
    "StandInError",
    "StandInTimeoutError",
    "StoredMedia",
    "UploadedFile",
    "WhatsAppStandIn",
]

VERSION: Final = "v21.0"
ACCESS_TOKEN: Final = "EAAG-standin-access-token"
APP_SECRET: Final = "standin-app-secret"
VERIFY_TOKEN: Final = "standin-verify-token"
MAX_TEXT_CHARS: Final = 4096
#: Graph's limits on interactive messages (Meta's "Interactive reply buttons messages" and
#: "Interactive list messages" pages).
MAX_BODY_CHARS: Final = 1024
MAX_LIST_BODY_CHARS: Final = 4096
MAX_BUTTONS: Final = 3
MAX_BUTTON_TITLE_CHARS: Final = 20
MAX_BUTTON_ID_CHARS: Final = 256
MAX_ROWS: Final = 10
MAX_ROW_TITLE_CHARS: Final = 24
MAX_ROW_ID_CHARS: Final = 200
#: Graph's rate-limit codes and their messages.
THROTTLE_MESSAGES: Final = {
    4: "(#4) Application request limit reached",
    80007: "(#80007) Rate limit issues",
    130429: "(#130429) Rate limit hit",
    131048: "(#131048) Spam rate limit hit",
    131056: "(#131056) (Business Account, Consumer Account) pair rate limit hit",
}

_T = TypeVar("_T")
_JSON: Final = msgspec.json.Encoder()
_MEDIA_KINDS: Final = frozenset({"image", "document", "audio", "video", "sticker"})


@dataclass(frozen=True)
class UploadedFile:
    """One file part of a multipart upload."""

    field: str
    filename: str | None
    content_type: str | None
    data: bytes


@dataclass(frozen=True)
class GraphCall:
    """One request the stand-in answered, as it arrived."""

    method: str
    path: str
    """Without the version: ``/106540352242922/messages``; a download is ``/download/<id>``."""
    query: dict[str, str]
    json: Any
    form: dict[str, str]
    files: tuple[UploadedFile, ...]
    authorized: bool
    status: int = 0
    """The status the stand-in answered."""
    answer: Any = None
    """The JSON the stand-in answered (None for a download)."""


@dataclass(frozen=True)
class StoredMedia:
    """A media file the stand-in holds: uploaded by the bridge, or sent by a person."""

    id: str
    data: bytes
    mime_type: str
    filename: str | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass(frozen=True)
class Inbound:
    """A person's message as Meta writes it in a webhook, and its sender's contact."""

    message: dict[str, Any]
    contact: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.message["id"])


@dataclass(frozen=True)
class Delivery:
    """A webhook call the stand-in made, and what the server answered."""

    url: str
    method: str
    body: bytes
    headers: dict[str, str]
    status: int
    answer: bytes


@dataclass
class _Script:
    status: int | None = None
    code: int | None = None
    message: str | None = None
    details: str | None = None
    retry_after: int | None = None
    delay_s: float = 0.0


class WhatsAppStandIn(ThreadedStandIn):
    """WhatsApp's Cloud API on 127.0.0.1; a context manager running it in a thread."""

    name = "WhatsApp stand-in"
    wait_hint = "check that the bridge really sent them"
    wait_timeout = 10.0
    shutdown_timeout = 1.0

    def __init__(
        self,
        *,
        access_token: str = ACCESS_TOKEN,
        app_secret: str = APP_SECRET,
        verify_token: str = VERIFY_TOKEN,
        phone_number_id: str = "106540352242922",
        display_phone_number: str = "15550783881",
    ) -> None:
        super().__init__()
        self.access_token = access_token
        self.app_secret = app_secret
        self.verify_token = verify_token
        self.phone_number_id = phone_number_id
        self.display_phone_number = display_phone_number
        #: Omit ``file_size`` from media answers and stream downloads without a length.
        self.hide_media_size = False
        #: The address media answers name instead of the stand-in's own (a host gone astray).
        self.media_url_base: str | None = None
        self._media: dict[str, StoredMedia] = {}
        self._calls: list[GraphCall] = []
        self._scripts: deque[_Script] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    # --- serving ------------------------------------------------------------------------------

    def application(self) -> web.Application:
        app = web.Application(client_max_size=200 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def closing(self) -> None:
        # A handler still waiting (slow_next) or a delivery under way is cancelled rather
        # than left pending when the loop closes.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    @property
    def api_url(self) -> str:
        """Graph's base URL as ``WHATSAPP_API_URL`` takes it (the version included)."""
        return f"{self.url}/{VERSION}"

    def settings(self, **overrides: Any) -> WhatsAppSettings:
        """The bridge's settings, pointing at this stand-in."""
        values: dict[str, Any] = {
            "enabled": True,
            "access_token": self.access_token,
            "app_secret": self.app_secret,
            "verify_token": self.verify_token,
            "phone_number_id": self.phone_number_id,
            "api_url": self.api_url,
        }
        return WhatsAppSettings(**{**values, **overrides})

    def env(self) -> dict[str, str]:
        """The environment variables that turn the bridge on against this stand-in."""
        return {
            "MERCURY_WHATSAPP": "true",
            "WHATSAPP_ACCESS_TOKEN": self.access_token,
            "WHATSAPP_APP_SECRET": self.app_secret,
            "WHATSAPP_VERIFY_TOKEN": self.verify_token,
            "WHATSAPP_PHONE_NUMBER_ID": self.phone_number_id,
            "WHATSAPP_API_URL": self.api_url,
        }

    # --- scripting and records ----------------------------------------------------------------

    def fail_next(
        self,
        count: int = 1,
        *,
        status: int = 500,
        code: int | None = None,
        message: str | None = None,
        details: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        """The next ``count`` calls answer ``status`` with a Graph error (code and message
        as Graph gives them for that status unless told), and ``Retry-After`` if given."""
        with self._lock:
            for _ in range(count):
                self._scripts.append(
                    _Script(
                        status=status,
                        code=code,
                        message=message,
                        details=details,
                        retry_after=retry_after,
                    )
                )

    def throttle_next(
        self,
        count: int = 1,
        *,
        code: int = 131056,
        status: int = 400,
        retry_after: int | None = None,
    ) -> None:
        """The next ``count`` calls are refused with Graph's rate-limit ``code`` (its own
        message; HTTP 400 as Graph answers most of them, unless told)."""
        if code not in THROTTLE_MESSAGES:
            raise StandInError(
                f"{code} is not a Graph rate-limit code; give one of {sorted(THROTTLE_MESSAGES)}."
            )
        self.fail_next(
            count,
            status=status,
            code=code,
            message=THROTTLE_MESSAGES[code],
            retry_after=retry_after,
        )

    def slow_next(self, count: int = 1, *, delay_s: float = 2.0) -> None:
        """The next ``count`` calls wait ``delay_s`` before they are answered."""
        with self._lock:
            self._scripts.extend(_Script(delay_s=delay_s) for _ in range(count))

    def reset(self) -> None:
        """Forget every call, script and media file."""
        with self._lock:
            self._calls.clear()
            self._scripts.clear()
            self._media.clear()
        self.hide_media_size = False
        self.media_url_base = None

    @property
    def calls(self) -> list[GraphCall]:
        """Every request so far, oldest first."""
        with self._lock:
            return list(self._calls)

    def sent_messages(self) -> list[dict[str, Any]]:
        """The bodies of the messages the bridge sent (accepted ones; read receipts apart)."""
        return [
            call.json
            for call in self.calls
            if call.path.endswith("/messages")
            and call.status == 200
            and isinstance(call.json, dict)
            and "status" not in call.json
        ]

    def sent_message_ids(self) -> list[str]:
        """The ids Graph gave the messages the bridge sent, in order."""
        return [
            call.answer["messages"][0]["id"]
            for call in self.calls
            if call.path.endswith("/messages")
            and call.status == 200
            and isinstance(call.answer, dict)
            and "messages" in call.answer
        ]

    async def wait_for_messages(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """The first ``count`` messages the bridge sent, once it has sent that many (polled
        from the caller's loop)."""
        await self.wait_until_async(
            lambda: len(self.sent_messages()) >= count, timeout, what=f"{count} message(s)"
        )
        return self.sent_messages()[:count]

    def interactive_messages(self) -> list[dict[str, Any]]:
        """The bodies of the interactive messages (buttons, lists) the bridge sent."""
        return [m for m in self.sent_messages() if m.get("type") == "interactive"]

    def text_messages(self) -> list[dict[str, Any]]:
        """The bodies of the text messages the bridge sent."""
        return [m for m in self.sent_messages() if m.get("type", "text") == "text"]

    def sent(self, message_id: str) -> dict[str, Any]:
        """The body of the message Graph gave ``message_id`` (a message the bridge sent)."""
        for call in self.calls:
            answer = call.answer
            if isinstance(answer, dict) and any(
                m.get("id") == message_id for m in answer.get("messages", [])
            ):
                return dict(call.json)
        raise StandInError(f"The bridge sent no message {message_id!r}.")

    def read_receipts(self) -> list[dict[str, Any]]:
        """The bodies of every read receipt the bridge sent (with a typing indicator or not)."""
        return [
            call.json
            for call in self.calls
            if call.path.endswith("/messages")
            and call.status == 200
            and isinstance(call.json, dict)
            and call.json.get("status") == "read"
        ]

    def typing_indicators(self) -> list[dict[str, Any]]:
        """The bodies of the read receipts with a typing indicator the bridge sent."""
        return [
            call.json
            for call in self.calls
            if call.path.endswith("/messages")
            and isinstance(call.json, dict)
            and "typing_indicator" in call.json
        ]

    def media(self, media_id: str) -> StoredMedia:
        """The media file stored under ``media_id``."""
        with self._lock:
            return self._media[media_id]

    def add_media(self, data: bytes, mime_type: str, *, filename: str | None = None) -> str:
        """Keep a file as if a person had sent it; its media id."""
        media_id = str(10**15 + next(self._ids))
        with self._lock:
            self._media[media_id] = StoredMedia(media_id, data, mime_type, filename)
        return media_id

    # --- what people send -----------------------------------------------------------------------

    def message_id(self) -> str:
        """A fresh ``wamid.…`` message id."""
        raw = f"standin-{next(self._ids)}-{secrets.token_hex(4)}".encode()
        return "wamid." + base64.b64encode(raw).decode()

    def text(
        self,
        sender: str,
        body: str,
        *,
        name: str | None = None,
        group_id: str | None = None,
        reply_to: tuple[str, str] | None = None,
        message_id: str | None = None,
    ) -> Inbound:
        """A text message from ``sender`` (a wa_id); ``reply_to`` is the quoted message's
        id and its sender's number."""
        return self.inbound(
            sender,
            "text",
            {"body": body},
            name=name,
            group_id=group_id,
            reply_to=reply_to,
            message_id=message_id,
        )

    def press(
        self,
        sender: str,
        on: str,
        choice_id: str,
        *,
        title: str = "Yes",
        kind: str = "button_reply",
        name: str | None = None,
        group_id: str | None = None,
        message_id: str | None = None,
    ) -> Inbound:
        """``sender`` choosing the reply button (``kind="button_reply"``) or the list row
        (``"list_reply"``) whose id is ``choice_id`` on the business's message ``on``: the
        ``interactive`` message Meta delivers, quoting ``on``."""
        if kind not in ("button_reply", "list_reply"):
            raise StandInError(f"{kind!r} is no press; give 'button_reply' or 'list_reply'.")
        choice: dict[str, Any] = {"id": choice_id, "title": title}
        if kind == "list_reply":
            choice["description"] = ""
        return self.inbound(
            sender,
            "interactive",
            {"type": kind, kind: choice},
            name=name,
            group_id=group_id,
            reply_to=(on, self.display_phone_number),
            message_id=message_id,
        )

    def choices(self, message: dict[str, Any]) -> list[tuple[str, str]]:
        """The (id, title) of each reply button or list row of a message the bridge sent."""
        interactive = message["interactive"]
        if interactive["type"] == "button":
            return [
                (b["reply"]["id"], b["reply"]["title"]) for b in interactive["action"]["buttons"]
            ]
        return [
            (row["id"], row["title"])
            for section in interactive["action"]["sections"]
            for row in section["rows"]
        ]

    async def deliver_press(
        self,
        url: str,
        sender: str,
        on: str,
        choice_id: str,
        **options: Any,
    ) -> tuple[Inbound, Delivery]:
        """:meth:`press` delivered to ``url``, signed: the press and the delivery."""
        pressed = self.press(sender, on, choice_id, **options)
        return pressed, await self.deliver(url, self.event(pressed))

    def media_message(
        self,
        sender: str,
        kind: str,
        data: bytes,
        mime_type: str,
        *,
        caption: str | None = None,
        filename: str | None = None,
        name: str | None = None,
        group_id: str | None = None,
        voice: bool = False,
    ) -> Inbound:
        """An image, document, audio, video or sticker message; the file is kept for download."""
        media_id = self.add_media(data, mime_type, filename=filename)
        content: dict[str, Any] = {
            "mime_type": mime_type,
            "sha256": base64.b64encode(hashlib.sha256(data).digest()).decode(),
            "id": media_id,
        }
        if caption is not None:
            content["caption"] = caption
        if filename is not None:
            content["filename"] = filename
        if voice:
            content["voice"] = True
        return self.inbound(sender, kind, content, name=name, group_id=group_id)

    def inbound(
        self,
        sender: str,
        kind: str,
        content: dict[str, Any] | list[Any],
        *,
        name: str | None = None,
        group_id: str | None = None,
        reply_to: tuple[str, str] | None = None,
        message_id: str | None = None,
        timestamp: float | None = None,
    ) -> Inbound:
        """Any message: ``content`` goes under the key named ``kind``; sent now, or at
        ``timestamp`` (epoch seconds)."""
        message: dict[str, Any] = {
            "from": sender,
            "id": message_id or self.message_id(),
            "timestamp": str(int(time.time() if timestamp is None else timestamp)),
            "type": kind,
            kind: content,
        }
        if group_id is not None:
            message["group_id"] = group_id
        if reply_to is not None:
            message["context"] = {"from": reply_to[1], "id": reply_to[0]}
        contact = {"profile": {"name": name or f"User {sender[-4:]}"}, "wa_id": sender}
        return Inbound(message=message, contact=contact)

    def event(self, *messages: Inbound, phone_number_id: str | None = None) -> dict[str, Any]:
        """A ``messages`` webhook payload carrying ``messages`` (their contacts once each)."""
        contacts = list({m.contact["wa_id"]: m.contact for m in messages}.values())
        value = {
            "messaging_product": "whatsapp",
            "metadata": self._metadata(phone_number_id),
            "contacts": contacts,
            "messages": [m.message for m in messages],
        }
        return self._envelope(value)

    def status_event(
        self, message_id: str, recipient: str, status: str = "delivered"
    ) -> dict[str, Any]:
        """A delivery receipt for a message the bridge sent."""
        value = {
            "messaging_product": "whatsapp",
            "metadata": self._metadata(None),
            "statuses": [
                {
                    "id": message_id,
                    "status": status,
                    "timestamp": str(int(time.time())),
                    "recipient_id": recipient,
                }
            ],
        }
        return self._envelope(value)

    def _metadata(self, phone_number_id: str | None) -> dict[str, str]:
        return {
            "display_phone_number": self.display_phone_number,
            "phone_number_id": phone_number_id or self.phone_number_id,
        }

    def _envelope(self, value: dict[str, Any]) -> dict[str, Any]:
        change = {"value": value, "field": "messages"}
        return {
            "object": "whatsapp_business_account",
            "entry": [{"id": "102290129340398", "changes": [change]}],
        }

    # --- webhook calls --------------------------------------------------------------------------

    def sign(self, body: bytes, *, secret: str | None = None) -> str:
        """``X-Hub-Signature-256`` for ``body``: the app secret's HMAC-SHA256, hex."""
        key = (self.app_secret if secret is None else secret).encode()
        return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()

    def encode(self, payload: Mapping[str, Any]) -> bytes:
        """A payload's bytes as Meta sends them."""
        return _JSON.encode(payload)

    def signed_headers(self, body: bytes, *, secret: str | None = None) -> dict[str, str]:
        """The headers of a delivery of ``body``, lower-cased as a bridge receives them."""
        return {
            "content-type": "application/json",
            "x-hub-signature-256": self.sign(body, secret=secret),
        }

    async def deliver(
        self,
        url: str,
        payload: Mapping[str, Any] | bytes,
        *,
        secret: str | None = None,
        signature: str | None = None,
    ) -> Delivery:
        """``POST`` ``payload`` to ``url`` signed with the app secret (or ``secret``, or the
        ``signature`` header as given: ``""`` sends none)."""
        body = payload if isinstance(payload, bytes) else self.encode(payload)
        headers = {"Content-Type": "application/json", "User-Agent": "facebookexternalua"}
        header = self.sign(body, secret=secret) if signature is None else signature
        if header:
            headers["X-Hub-Signature-256"] = header
        return await self.in_loop(self._call_webhook("POST", url, body, headers))

    async def redeliver(self, delivery: Delivery) -> Delivery:
        """The same delivery again, byte for byte, as Meta retries one."""
        return await self.in_loop(
            self._call_webhook(delivery.method, delivery.url, delivery.body, delivery.headers)
        )

    async def verify(
        self,
        url: str,
        *,
        token: str | None = None,
        challenge: str = "1158201444",
        mode: str = "subscribe",
    ) -> Delivery:
        """Meta's verification ``GET`` of a callback URL."""
        query = {
            "hub.mode": mode,
            "hub.challenge": challenge,
            "hub.verify_token": self.verify_token if token is None else token,
        }
        target = str(URL(url).update_query(query))
        return await self.in_loop(self._call_webhook("GET", target, b"", {}))

    async def _call_webhook(
        self, method: str, url: str, body: bytes, headers: dict[str, str]
    ) -> Delivery:
        async with self.session.request(method, url, data=body or None, headers=headers) as r:
            answer = await r.read()
            return Delivery(url, method, body, dict(headers), r.status, answer)

    # --- Graph ----------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        call = await self._read(request)
        with self._lock:
            script = self._scripts.popleft() if self._scripts else None
        if script is not None and script.delay_s > 0:
            await asyncio.sleep(script.delay_s)
        response: web.StreamResponse
        if script is not None and script.status is not None:
            response = _scripted_failure(script)
        elif not call.authorized:
            response = _graph_error(
                401,
                190,
                "Invalid OAuth access token - Cannot parse access token",
                kind="OAuthException",
            )
        else:
            response = await self._route(request, call)
        with self._lock:
            self._calls.append(_answered(call, response))
        return response

    async def _read(self, request: web.Request) -> GraphCall:
        path = request.path
        if path.startswith(f"/{VERSION}/"):
            path = path.removeprefix(f"/{VERSION}")
        elif path == "/whatsapp_business/attachments/":
            path = f"/download/{request.query.get('mid', '')}"
        body: Any = None
        form: dict[str, str] = {}
        files: list[UploadedFile] = []
        if request.content_type.startswith("multipart/"):
            reader = await request.multipart()
            while (part := await reader.next()) is not None:
                if not isinstance(part, aiohttp.BodyPartReader):
                    continue
                data = await part.read()
                if part.filename is None:
                    form[part.name or ""] = data.decode()
                else:
                    files.append(
                        UploadedFile(
                            part.name or "", part.filename, part.headers.get("Content-Type"), data
                        )
                    )
        elif request.can_read_body:
            raw = await request.read()
            try:
                body = msgspec.json.decode(raw)
            except msgspec.DecodeError:
                body = raw
        expected = f"Bearer {self.access_token}"
        authorized = hmac.compare_digest(
            request.headers.get("Authorization", "").encode(), expected.encode()
        )
        return GraphCall(
            method=request.method,
            path=path,
            query=dict(request.query),
            json=body,
            form=form,
            files=tuple(files),
            authorized=authorized,
        )

    async def _route(self, request: web.Request, call: GraphCall) -> web.StreamResponse:
        parts = call.path.strip("/").split("/")
        if call.method == "POST" and parts == [self.phone_number_id, "messages"]:
            return self._messages(call)
        if call.method == "POST" and parts == [self.phone_number_id, "media"]:
            return self._upload(call)
        if call.method == "GET" and len(parts) == 2 and parts[0] == "download":
            return await self._download(request, parts[1])
        if call.method == "GET" and len(parts) == 1 and parts[0] in self._media:
            return self._media_info(parts[0])
        verb = "get" if call.method == "GET" else "post"
        return _graph_error(
            400,
            100,
            f"Unsupported {verb} request. Object with ID '{parts[0]}' does not exist, cannot be "
            "loaded due to missing permissions, or does not support this operation.",
            kind="GraphMethodException",
            subcode=33,
        )

    def _messages(self, call: GraphCall) -> web.Response:
        body = call.json
        if not isinstance(body, dict) or body.get("messaging_product") != "whatsapp":
            return _graph_error(400, 100, "(#100) The parameter messaging_product is required.")
        if "status" in body:
            if body["status"] != "read" or not isinstance(body.get("message_id"), str):
                return _graph_error(400, 100, "(#100) Invalid parameter")
            typing = body.get("typing_indicator")
            if typing is not None and (
                not isinstance(typing, dict) or typing.get("type") != "text"
            ):
                return _graph_error(400, 100, "(#100) Invalid parameter")
            return web.json_response({"success": True})
        to = body.get("to")
        if not isinstance(to, str) or not to:
            return _graph_error(400, 100, "(#100) The parameter to is required.")
        kind = body.get("type", "text")
        content = body.get(kind)
        if not isinstance(content, dict):
            return _graph_error(400, 100, f"(#100) The parameter {kind} is required.")
        if kind == "text":
            text = content.get("body")
            if not isinstance(text, str) or not text:
                return _graph_error(400, 100, "(#100) The parameter text['body'] is required.")
            if len(text) > MAX_TEXT_CHARS:
                return _graph_error(
                    400,
                    100,
                    f"(#100) Param text['body'] must be at most {MAX_TEXT_CHARS} characters long.",
                )
        elif kind == "interactive":
            if body.get("recipient_type") == "group":
                return _invalid("Interactive messages are not supported in groups.")
            refusal = _interactive_refusal(content)
            if refusal is not None:
                return _invalid(refusal)
        elif kind in _MEDIA_KINDS:
            if content.get("id") not in self._media:
                return _graph_error(
                    400,
                    131053,
                    "(#131053) Media upload error",
                    details=f"Media id {content.get('id')} was not found.",
                )
        else:
            return _graph_error(400, 100, "(#100) Invalid parameter")
        answer: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "messages": [{"id": self.message_id()}],
        }
        if body.get("recipient_type", "individual") == "individual":
            answer["contacts"] = [{"input": to, "wa_id": to}]
        return web.json_response(answer)

    def _upload(self, call: GraphCall) -> web.Response:
        if call.form.get("messaging_product") != "whatsapp":
            return _graph_error(400, 100, "(#100) The parameter messaging_product is required.")
        uploaded = [f for f in call.files if f.field == "file"]
        if not uploaded:
            return _graph_error(400, 100, "(#100) The parameter file is required.")
        mime_type = call.form.get("type") or uploaded[0].content_type or ""
        if not mime_type:
            return _graph_error(400, 100, "(#100) The parameter type is required.")
        media_id = self.add_media(uploaded[0].data, mime_type, filename=uploaded[0].filename)
        return web.json_response({"id": media_id})

    def _media_info(self, media_id: str) -> web.Response:
        media = self.media(media_id)
        answer: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "url": f"{self.media_url_base or self.url}/whatsapp_business/attachments/"
            f"?mid={media_id}&ext=1739321024"
            f"&hash={media.sha256[:16]}",
            "mime_type": media.mime_type,
            "sha256": media.sha256,
            "id": media_id,
        }
        if not self.hide_media_size:
            answer["file_size"] = len(media.data)
        return web.json_response(answer)

    async def _download(self, request: web.Request, media_id: str) -> web.StreamResponse:
        with self._lock:
            media = self._media.get(media_id)
        if media is None:
            return web.Response(status=404, text="Not Found")
        if not self.hide_media_size:
            return web.Response(body=media.data, content_type=media.mime_type)
        response = web.StreamResponse(headers={"Content-Type": media.mime_type})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(media.data), 65536):
            await response.write(media.data[start : start + 65536])
        await response.write_eof()
        return response


def _answered(call: GraphCall, response: web.StreamResponse) -> GraphCall:
    answer: Any = None
    if (
        isinstance(response, web.Response)
        and response.content_type == "application/json"
        and isinstance(response.body, bytes)
    ):
        answer = msgspec.json.decode(response.body)
    return dataclasses.replace(call, status=response.status, answer=answer)


def _invalid(details: str) -> web.Response:
    return _graph_error(400, 131009, "(#131009) Parameter value is not valid", details=details)


def _text_within(value: Any, limit: int) -> bool:
    return isinstance(value, str) and 0 < len(value) <= limit


def _interactive_refusal(content: dict[str, Any]) -> str | None:
    """Why Graph refuses an ``interactive`` message of reply buttons or a list, or None."""
    kind, action = content.get("type"), content.get("action")
    body = content.get("body")
    text = body.get("text") if isinstance(body, dict) else None
    if not isinstance(action, dict):
        return "The parameter interactive['action'] is required."
    if kind == "button":
        if not _text_within(text, MAX_BODY_CHARS):
            return f"The body must be 1 to {MAX_BODY_CHARS} characters long."
        buttons = action.get("buttons")
        if not isinstance(buttons, list) or not 0 < len(buttons) <= MAX_BUTTONS:
            return f"A message carries 1 to {MAX_BUTTONS} reply buttons."
        pairs = []
        for button in buttons:
            reply = button.get("reply") if isinstance(button, dict) else None
            if not isinstance(reply, dict) or button.get("type") != "reply":
                return "Each button is {'type': 'reply', 'reply': {'id', 'title'}}."
            if not _text_within(reply.get("title"), MAX_BUTTON_TITLE_CHARS):
                return f"A button's title must be 1 to {MAX_BUTTON_TITLE_CHARS} characters long."
            if not _text_within(reply.get("id"), MAX_BUTTON_ID_CHARS):
                return f"A button's id must be 1 to {MAX_BUTTON_ID_CHARS} characters long."
            pairs.append((reply["id"], reply["title"]))
    elif kind == "list":
        if not _text_within(text, MAX_LIST_BODY_CHARS):
            return f"The body must be 1 to {MAX_LIST_BODY_CHARS} characters long."
        if not _text_within(action.get("button"), MAX_BUTTON_TITLE_CHARS):
            return f"The list's button must be 1 to {MAX_BUTTON_TITLE_CHARS} characters long."
        sections = action.get("sections")
        if not isinstance(sections, list) or not 0 < len(sections) <= MAX_ROWS:
            return f"A list has 1 to {MAX_ROWS} sections."
        pairs = []
        for section in sections:
            rows = section.get("rows") if isinstance(section, dict) else None
            if not isinstance(rows, list) or not rows:
                return "Each section has rows."
            for row in rows:
                if not isinstance(row, dict):
                    return "Each row is {'id', 'title'}."
                if not _text_within(row.get("title"), MAX_ROW_TITLE_CHARS):
                    return f"A row's title must be 1 to {MAX_ROW_TITLE_CHARS} characters long."
                if not _text_within(row.get("id"), MAX_ROW_ID_CHARS):
                    return f"A row's id must be 1 to {MAX_ROW_ID_CHARS} characters long."
                pairs.append((row["id"], row["title"]))
        if len(pairs) > MAX_ROWS:
            return f"A list has at most {MAX_ROWS} rows in all."
    else:
        return "The interactive type must be button or list here."
    if len({i for i, _ in pairs}) < len(pairs):
        return "Each button or row must have an id of its own."
    if kind == "button" and len({t for _, t in pairs}) < len(pairs):
        return "Each button must have a title of its own."
    return None


def _scripted_failure(script: _Script) -> web.Response:
    status = script.status or 500
    if status == 429:
        code, message = 130429, "(#130429) Rate limit hit"
    elif status >= 500:
        code, message = 2, "An unexpected error has occurred. Please retry your request later."
    else:
        code, message = 100, "(#100) Invalid parameter"
    response = _graph_error(
        status,
        script.code if script.code is not None else code,
        script.message if script.message is not None else message,
        details=script.details,
    )
    if script.retry_after is not None:
        response.headers["Retry-After"] = str(script.retry_after)
    return response


def _graph_error(
    status: int,
    code: int,
    message: str,
    *,
    kind: str = "OAuthException",
    subcode: int | None = None,
    details: str | None = None,
) -> web.Response:
    error: dict[str, Any] = {
        "message": message,
        "type": kind,
        "code": code,
        "fbtrace_id": "A" + secrets.token_hex(8),
    }
    if subcode is not None:
        error["error_subcode"] = subcode
    if details is not None:
        error["error_data"] = {"messaging_product": "whatsapp", "details": details}
    return web.json_response({"error": error}, status=status)
