"""A stand-in for Slack: its Web API, its file hosts and its Events API deliveries, on 127.0.0.1.

The real ``slack_sdk`` ``AsyncWebClient`` talks to it through ``base_url`` (the bridge's
``SLACK_API_URL``), so tests run the SDK's own requests, headers and error handling::

    with SlackStandIn() as slack:
        bridge = SlackBridge(slack.settings(), bot_name="Mercury")
        body, headers = slack.signed(slack.envelope(slack.message("C1", "U1", "hi <@UBOT>")))
        outcome = await bridge.receive("POST", {}, headers, body)
        ...
        await slack.deliver(server.url + "/webhooks/slack", envelope)   # through a real server
        await slack.redeliver(server.url + "/webhooks/slack")           # Slack's retry

What it serves, as Slack does:

* ``/api/<method>`` (GET or POST; parameters in the query, a form or a JSON body; the token as
  ``Authorization: Bearer`` or a ``token`` parameter): ``auth.test``, ``users.info``,
  ``chat.postMessage``, ``chat.update``, ``chat.postEphemeral``, the text stream
  (``chat.startStream``, ``chat.appendStream`` with the text to add, ``chat.stopStream``),
  ``assistant.threads.setStatus``, ``files.getUploadURLExternal``,
  ``files.completeUploadExternal``. Failures are HTTP 200 with ``{"ok": false, "error": code}``
  (``not_authed``, ``invalid_auth``, ``channel_not_found``, ``no_text``, ``msg_too_long``,
  ``invalid_blocks``, ``message_not_found``, ``message_not_in_streaming_state``,
  ``missing_recipient_user_id``, ``user_not_found``, ``file_not_found``, ``unknown_method``); a
  scripted 429 carries ``Retry-After`` (:meth:`SlackStandIn.fail_next`).
* ``POST /actions/<team>/<id>``: a press's ``response_url``; records what is answered there
  (:attr:`SlackStandIn.responses`).
* ``POST /upload/v1/<id>``: the upload URL ``files.getUploadURLExternal`` hands out (no token,
  as Slack's are presigned); answers ``text/plain`` ``OK - <length>``.
* ``GET /files-pri/<team>-<file>/<name>``: a file's ``url_private``; without the bot's token
  Slack answers a redirect to its sign-in page, and so does this.

Every call is recorded (:attr:`SlackStandIn.calls`), every posted message
(:attr:`SlackStandIn.messages`), every message as a person sees it now, posted, streamed or
updated (:attr:`SlackStandIn.live`, by ts), every ephemeral message
(:attr:`SlackStandIn.ephemerals`), thread status (:attr:`SlackStandIn.statuses`), completed
upload (:attr:`SlackStandIn.uploads`) and download (:attr:`SlackStandIn.downloads`).
:meth:`SlackStandIn.fail_next` scripts the next calls' failures, :attr:`SlackStandIn.delay_s`
makes every answer slow, :attr:`SlackStandIn.streaming_error` plays a workspace without text
streaming, :attr:`SlackStandIn.status_error` one that refuses thread statuses, and
:meth:`SlackStandIn.expire_streams` ends every stream as Slack does after a while.
:meth:`SlackStandIn.block_actions` writes a button press as Slack's interactivity payload,
:meth:`SlackStandIn.press` delivers it signed, form-encoded, as Slack does.

The server (``aiohttp.web``) runs in a thread with its own event loop.

Its start, stop, address, waits and errors (``StandInError``, ``StandInTimeoutError``) are
the stand-ins' base's, :mod:`tests.support.standin`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import quote, urlencode

import httpx
from aiohttp import web

from core.config.settings import SlackSettings
from tests.support.standin import StandInError, StandInTimeoutError, ThreadedStandIn

__all__ = [
    "ApiCall",
    "Delivery",
    "Download",
    "Ephemeral",
    "LiveMessage",
    "PostedMessage",
    "ResponseAnswer",
    "SlackStandIn",
    "StandInError",
    "StandInTimeoutError",
    "ThreadStatus",
    "Upload",
]

BOT_TOKEN: Final = "xoxb-standin-0000-bot-token"
SIGNING_SECRET: Final = "standin-signing-secret-8f3a"
BOT_USER_ID: Final = "UBOT0001"
BOT_ID: Final = "BBOT0001"
TEAM_ID: Final = "T0STANDIN"
APP_ID: Final = "A0STANDIN"


@dataclass(frozen=True, kw_only=True)
class ApiCall:
    """One Web API request: the method, its parameters (query, form and JSON merged)."""

    method: str
    params: dict[str, Any]
    http_method: str
    token: str | None


@dataclass(frozen=True, kw_only=True)
class PostedMessage:
    """A message ``chat.postMessage`` posted."""

    channel: str
    text: str
    thread_ts: str | None
    ts: str


@dataclass(kw_only=True)
class LiveMessage:
    """A bot message as it stands: posted (``chat.postMessage``), streamed (``chat.*Stream``)
    or updated (``chat.update``), with every change counted."""

    channel: str
    ts: str
    thread_ts: str | None
    #: The message's ``text`` (the notification fallback when it has blocks).
    text: str
    blocks: list[dict[str, Any]]
    #: The markdown a stream carried, all appends together.
    streamed: str = ""
    state: Literal["posted", "streaming", "stopped"] = "posted"
    #: How many times the message changed after it appeared (appends, stop, updates).
    changes: int = 0

    @property
    def sections(self) -> str:
        """The text of its ``section`` blocks, joined (Slack's escaping undone)."""
        return _unescape(
            "".join(
                block["text"]["text"]
                for block in self.blocks
                if block.get("type") == "section" and isinstance(block.get("text"), dict)
            )
        )

    @property
    def visible(self) -> str:
        """What a person reads as the message's text: its sections, else what was streamed,
        else its ``text`` (unescaped)."""
        if any(block.get("type") == "section" for block in self.blocks):
            return self.sections
        if self.state != "posted" or self.streamed:
            return _unescape(self.streamed)
        return _unescape(self.text)

    @property
    def buttons(self) -> list[tuple[str, str]]:
        """Its buttons as (label, value), in order."""
        return [
            (element["text"]["text"], element.get("value", ""))
            for block in self.blocks
            if block.get("type") == "actions"
            for element in block.get("elements", [])
            if element.get("type") == "button"
        ]

    @property
    def context(self) -> list[str]:
        """Its context lines (a status, what was chosen)."""
        return [
            element.get("text", "")
            for block in self.blocks
            if block.get("type") == "context"
            for element in block.get("elements", [])
        ]


@dataclass(frozen=True, kw_only=True)
class Ephemeral:
    """A message ``chat.postEphemeral`` showed one person."""

    channel: str
    user: str
    text: str
    thread_ts: str | None


@dataclass(frozen=True, kw_only=True)
class ThreadStatus:
    """A status ``assistant.threads.setStatus`` set ("" clears it)."""

    channel_id: str
    thread_ts: str
    status: str


@dataclass(frozen=True, kw_only=True)
class ResponseAnswer:
    """What was posted to a press's ``response_url``."""

    path: str
    body: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Upload:
    """A file shared through the upload URL and ``files.completeUploadExternal``."""

    file_id: str
    filename: str
    title: str | None
    data: bytes
    channel_id: str | None
    thread_ts: str | None


@dataclass(frozen=True, kw_only=True)
class Download:
    """A request for a file's ``url_private``, and whether it carried the bot's token."""

    path: str
    authorized: bool


@dataclass(frozen=True, kw_only=True)
class Delivery:
    """The webhook's answer to one delivery."""

    status: int
    body: bytes
    content_type: str


@dataclass(kw_only=True)
class _Failure:
    status: int
    error: str
    retry_after: int | None
    method: str | None


@dataclass(kw_only=True)
class _File:
    file_id: str
    name: str
    data: bytes
    mimetype: str
    title: str | None = None
    declared_length: int | None = None
    uploaded: bool = False
    served_as: str | None = None


class SlackStandIn(ThreadedStandIn):
    """Slack's Web API, file hosts and event deliveries for one workspace and one bot."""

    name = "Slack stand-in"
    wait_hint = "check that the bridge really made the call"
    wait_timeout = 10.0

    def __init__(
        self,
        *,
        bot_token: str = BOT_TOKEN,
        signing_secret: str = SIGNING_SECRET,
        bot_user_id: str = BOT_USER_ID,
        bot_id: str = BOT_ID,
        team_id: str = TEAM_ID,
    ) -> None:
        super().__init__()
        self.bot_token = bot_token
        self.signing_secret = signing_secret
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.team_id = team_id
        self.calls: list[ApiCall] = []
        self.messages: list[PostedMessage] = []
        self.uploads: list[Upload] = []
        self.downloads: list[Download] = []
        self.live: dict[str, LiveMessage] = {}
        self.ephemerals: list[Ephemeral] = []
        self.statuses: list[ThreadStatus] = []
        self.responses: list[ResponseAnswer] = []
        self.streaming_error: str | None = None
        """When set, ``chat.startStream`` answers this error (``unknown_method``: a workspace
        without text streaming)."""
        self.status_error: str | None = None
        """When set, ``assistant.threads.setStatus`` answers this error (``missing_scope``)."""
        self.delay_s = 0.0
        """Seconds every answer waits (API calls, uploads and downloads)."""
        self.users: dict[str, dict[str, Any]] = {}
        self._files: dict[str, _File] = {}
        self._failures: list[_Failure] = []
        self._ids = itertools.count(1)
        self._last_delivery: tuple[str, bytes, int] | None = None
        self._lock = threading.Lock()

    # -- where it is ---------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        """What ``SLACK_API_URL`` is set to."""
        return self.url + "/api/"

    def settings(self, **overrides: Any) -> SlackSettings:
        """The bridge's settings pointed at this stand-in, with its token and secret."""
        values: dict[str, Any] = {
            "enabled": True,
            "bot_token": self.bot_token,
            "signing_secret": self.signing_secret,
            "api_url": self.api_url,
        }
        return SlackSettings(**{**values, **overrides})

    def env(self) -> dict[str, str]:
        """The environment that turns a server's Slack bridge on against this stand-in."""
        return {
            "MERCURY_SLACK": "true",
            "SLACK_BOT_TOKEN": self.bot_token,
            "SLACK_SIGNING_SECRET": self.signing_secret,
            "SLACK_API_URL": self.api_url,
        }

    # -- the workspace -------------------------------------------------------------------

    def add_user(
        self, user_id: str, name: str, *, display_name: str = "", real_name: str = ""
    ) -> None:
        """A member ``users.info`` knows."""
        self.users[user_id] = {
            "id": user_id,
            "team_id": self.team_id,
            "name": name,
            "real_name": real_name,
            "is_bot": False,
            "profile": {"display_name": display_name, "real_name": real_name},
        }

    def add_file(
        self,
        name: str,
        data: bytes,
        *,
        mimetype: str = "application/octet-stream",
        served_as: str | None = None,
    ) -> dict[str, Any]:
        """A file shared in the workspace; its object as a message event's ``files`` lists it.

        ``served_as`` is the Content-Type its download answers with, when not ``mimetype``
        (``text/html`` plays Slack's sign-in page answering 200 to a token that can't read).
        """
        file = _File(file_id=self._new_id("F"), name=name, data=data, mimetype=mimetype)
        file.uploaded = True
        file.served_as = served_as
        self._files[file.file_id] = file
        return self._file_object(file)

    def _file_object(self, file: _File) -> dict[str, Any]:
        return {
            "id": file.file_id,
            "name": file.name,
            "title": file.title or file.name,
            "mimetype": file.mimetype,
            "filetype": file.name.rpartition(".")[2] if "." in file.name else "binary",
            "size": len(file.data),
            "mode": "hosted",
            "url_private": f"{self.url}/files-pri/{self.team_id}-{file.file_id}/{quote(file.name)}",
            "url_private_download": (
                f"{self.url}/files-pri/{self.team_id}-{file.file_id}/download/{quote(file.name)}"
            ),
        }

    # -- scripting -----------------------------------------------------------------------

    def fail_next(
        self,
        n: int = 1,
        *,
        status: int = 500,
        error: str = "internal_error",
        retry_after: int | None = None,
        method: str | None = None,
    ) -> None:
        """Fail the next ``n`` calls (of ``method`` only, if given; ``"download"`` for files).

        ``status`` 200 answers ``{"ok": false, "error": error}`` (Slack's way of refusing);
        429 adds ``Retry-After``; 5xx answers the same body with that status.
        """
        with self._lock:
            self._failures.extend(
                _Failure(status=status, error=error, retry_after=retry_after, method=method)
                for _ in range(n)
            )

    def reset(self) -> None:
        """Forget recorded calls, messages, uploads, users, files, failures and the delay."""
        with self._lock:
            self.calls.clear()
            self.messages.clear()
            self.uploads.clear()
            self.downloads.clear()
            self.live.clear()
            self.ephemerals.clear()
            self.statuses.clear()
            self.responses.clear()
            self.streaming_error = self.status_error = None
            self.users.clear()
            self._files.clear()
            self._failures.clear()
            self._last_delivery = None
            self.delay_s = 0.0

    def calls_of(self, method: str) -> list[ApiCall]:
        return [call for call in self.calls if call.method == method]

    def expire_streams(self) -> None:
        """End every stream, as Slack does after a while: their appends then answer
        ``message_not_in_streaming_state``."""
        with self._lock:
            for message in self.live.values():
                if message.state == "streaming":
                    message.state = "stopped"

    def thread_messages(self, channel: str, thread_ts: str | None) -> list[LiveMessage]:
        """The bot's messages in a thread (or at the channel's top level), oldest first."""
        return [
            message
            for message in self.live.values()
            if message.channel == channel and message.thread_ts == thread_ts
        ]

    # -- events, as Slack sends them -----------------------------------------------------

    def message(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        ts: str | None = None,
        thread_ts: str | None = None,
        files: Sequence[Mapping[str, Any]] = (),
        **fields: Any,
    ) -> dict[str, Any]:
        """A ``message`` event, as a person's message in ``channel`` arrives."""
        ts = ts or self._new_ts()
        event: dict[str, Any] = {
            "type": "message",
            "channel": channel,
            "user": user,
            "text": text,
            "ts": ts,
            "team": self.team_id,
            "channel_type": _channel_type(channel),
            "event_ts": ts,
        }
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
        if files:
            event["subtype"] = "file_share"
            event["files"] = list(files)
        event.update(fields)
        return event

    def envelope(
        self,
        event: Mapping[str, Any],
        *,
        event_id: str | None = None,
        authorizations: Sequence[Mapping[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """The ``event_callback`` envelope around ``event``; its ``authorizations`` name the
        bot user unless given (``[]``: an envelope naming none)."""
        bot = {
            "enterprise_id": None,
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "is_bot": True,
            "is_enterprise_install": False,
        }
        return {
            "token": "deprecated-verification-token",
            "team_id": self.team_id,
            "api_app_id": APP_ID,
            "event": dict(event),
            "type": "event_callback",
            "event_id": event_id or self._new_id("Ev"),
            "event_time": int(time.time()),
            "authorizations": [bot] if authorizations is None else list(authorizations),
            "is_ext_shared_channel": False,
        }

    def url_verification(self, challenge: str) -> dict[str, Any]:
        return {
            "token": "deprecated-verification-token",
            "challenge": challenge,
            "type": "url_verification",
        }

    def signed(
        self,
        payload: Mapping[str, Any] | bytes,
        *,
        timestamp: int | None = None,
        secret: str | None = None,
        retry_num: int | None = None,
    ) -> tuple[bytes, dict[str, str]]:
        """The body and the (lower-case) headers Slack would send ``payload`` with."""
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        stamp = str(int(time.time()) if timestamp is None else timestamp)
        digest = hmac.new(
            (secret or self.signing_secret).encode(),
            b"v0:" + stamp.encode() + b":" + body,
            hashlib.sha256,
        ).hexdigest()
        headers = {
            "content-type": "application/json",
            "x-slack-request-timestamp": stamp,
            "x-slack-signature": f"v0={digest}",
        }
        if retry_num is not None:
            headers["x-slack-retry-num"] = str(retry_num)
            headers["x-slack-retry-reason"] = "http_timeout"
        return body, headers

    async def deliver(
        self,
        url: str,
        payload: Mapping[str, Any] | bytes,
        *,
        timestamp: int | None = None,
        secret: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ) -> Delivery:
        """POST ``payload`` to the webhook at ``url``, signed (``headers`` replace Slack's)."""
        body, signed_headers = self.signed(payload, timestamp=timestamp, secret=secret)
        self._last_delivery = (url, body, 0)
        return await self._post(
            url, body, dict(headers) if headers is not None else signed_headers, timeout
        )

    async def redeliver(self, url: str | None = None, *, timeout: float = 10.0) -> Delivery:
        """Send the last delivery again as Slack's retry: same body, ``X-Slack-Retry-Num`` + 1,
        signed afresh."""
        if self._last_delivery is None:
            raise StandInError("Nothing was delivered yet; deliver() an event before redeliver().")
        last_url, body, retries = self._last_delivery
        self._last_delivery = (last_url, body, retries + 1)
        _, headers = self.signed(body, retry_num=retries + 1)
        return await self._post(url or last_url, body, headers, timeout)

    async def _post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> Delivery:
        async with httpx.AsyncClient(timeout=timeout) as client:
            answer = await client.post(url, content=body, headers=dict(headers))
        return Delivery(
            status=answer.status_code,
            body=answer.content,
            content_type=answer.headers.get("content-type", ""),
        )

    # -- interactivity, as Slack sends it ------------------------------------------------

    def block_actions(
        self,
        message_ts: str,
        user: str,
        action: str,
        *,
        user_name: str = "ada",
        trigger_id: str | None = None,
        response_id: str | None = None,
    ) -> dict[str, Any]:
        """The ``block_actions`` payload Slack posts when ``user`` presses the button whose
        value is ``action`` on the bot's message ``message_ts``."""
        message = self.live.get(message_ts)
        if message is None:
            raise StandInError(f"No bot message has ts {message_ts}; press a posted one.")
        block = next(
            (
                block
                for block in message.blocks
                if block.get("type") == "actions"
                and any(element.get("value") == action for element in block.get("elements", []))
            ),
            None,
        )
        if block is None:
            raise StandInError(f"The message {message_ts} has no button {action!r} to press.")
        element = next(e for e in block["elements"] if e.get("value") == action)
        container: dict[str, Any] = {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": message.channel,
            "is_ephemeral": False,
        }
        bot_message: dict[str, Any] = {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "text": message.text,
            "ts": message_ts,
            "blocks": message.blocks,
        }
        if message.thread_ts:
            container["thread_ts"] = message.thread_ts
            bot_message["thread_ts"] = message.thread_ts
        response = response_id or self._new_id("R")
        return {
            "type": "block_actions",
            "user": {"id": user, "username": user_name, "name": user_name, "team_id": self.team_id},
            "api_app_id": APP_ID,
            "token": "deprecated-verification-token",
            "container": container,
            "trigger_id": trigger_id or f"{next(self._ids)}.{self.team_id}.{self._new_id('t')}",
            "team": {"id": self.team_id, "domain": "standin"},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": {"id": message.channel, "name": "general"},
            "message": bot_message,
            "state": {"values": {}},
            "response_url": f"{self.url}/actions/{self.team_id}/{response}",
            "actions": [
                {
                    "type": "button",
                    "action_id": element["action_id"],
                    "block_id": block.get("block_id", ""),
                    "text": element["text"],
                    "value": element.get("value"),
                    "action_ts": f"{time.time():.6f}",
                }
            ],
        }

    def signed_form(
        self, payload: Mapping[str, Any], *, timestamp: int | None = None, secret: str | None = None
    ) -> tuple[bytes, dict[str, str]]:
        """The body and headers of an interactivity delivery: ``payload=<json>`` form-encoded,
        signed like events."""
        body = urlencode({"payload": json.dumps(payload)}).encode()
        body, headers = self.signed(body, timestamp=timestamp, secret=secret)
        headers["content-type"] = "application/x-www-form-urlencoded"
        return body, headers

    async def press(
        self,
        url: str,
        payload: Mapping[str, Any],
        *,
        timestamp: int | None = None,
        timeout: float = 10.0,
    ) -> Delivery:
        """POST a ``block_actions`` payload to the interactivity URL, signed, as Slack does."""
        body, headers = self.signed_form(payload, timestamp=timestamp)
        return await self._post(url, body, headers, timeout)

    # -- serving -------------------------------------------------------------------------

    def application(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/upload/v1/{upload_id}", self._upload)
        app.router.add_post("/actions/{team}/{response}", self._response_url)
        app.router.add_get("/files-pri/{team_file}/{name:.+}", self._file)
        app.router.add_get("/", self._sign_in)
        return app

    # -- the Web API ---------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            body = await request.json()
            if isinstance(body, dict):
                params.update(body)
        elif request.method == "POST" and request.can_read_body:
            params.update({key: value for key, value in (await request.post()).items()})
        token = _bearer(request.headers.get("Authorization")) or params.pop("token", None)
        with self._lock:
            self.calls.append(
                ApiCall(method=method, params=params, http_method=request.method, token=token)
            )
            failure = self._take_failure(method)
        await self._pause()
        if failure is not None:
            headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after else {}
            return web.json_response(
                {"ok": False, "error": failure.error}, status=failure.status, headers=headers
            )
        if token is None:
            return _refused("not_authed")
        if not hmac.compare_digest(token, self.bot_token):
            return _refused("invalid_auth")
        handler = _METHODS.get(method)
        if handler is None:
            return _refused("unknown_method")
        return web.json_response(handler(self, params))

    def _take_failure(self, method: str) -> _Failure | None:
        for index, failure in enumerate(self._failures):
            if failure.method in (None, method):
                return self._failures.pop(index)
        return None

    async def _pause(self) -> None:
        if self.delay_s > 0:
            await asyncio.sleep(self.delay_s)

    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://standin.slack.com/",
            "team": "Stand-in",
            "user": "mercury",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(str(params.get("user", "")))
        if user is None:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "user": user}

    def _chat_post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel") or "")
        text = params.get("text")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if not text and not params.get("blocks"):
            return {"ok": False, "error": "no_text"}
        if len(str(text)) > 40_000:
            return {"ok": False, "error": "msg_too_long"}
        blocks = _blocks(params.get("blocks"))
        if blocks is None:
            return {"ok": False, "error": "invalid_blocks"}
        thread_ts = params.get("thread_ts") or None
        ts = self._new_ts()
        with self._lock:
            self.messages.append(
                PostedMessage(channel=channel, text=str(text), thread_ts=thread_ts, ts=ts)
            )
            self.live[ts] = LiveMessage(
                channel=channel, ts=ts, thread_ts=thread_ts, text=str(text or ""), blocks=blocks
            )
        message = {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "text": text,
            "ts": ts,
            **({"thread_ts": thread_ts} if thread_ts else {}),
        }
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel") or "")
        message = self.live.get(str(params.get("ts") or ""))
        if message is None or message.channel != channel:
            return {"ok": False, "error": "message_not_found"}
        if message.state == "streaming":
            return {"ok": False, "error": "cant_update_message"}
        text = params.get("text")
        blocks = _blocks(params.get("blocks"))
        if blocks is None:
            return {"ok": False, "error": "invalid_blocks"}
        if not text and not blocks:
            return {"ok": False, "error": "no_text"}
        if len(str(text or "")) > 40_000:
            return {"ok": False, "error": "msg_too_long"}
        with self._lock:
            message.text = str(text or "")
            if "blocks" in params:
                message.blocks = blocks
            message.changes += 1
        return {"ok": True, "channel": channel, "ts": message.ts, "text": message.text}

    def _chat_post_ephemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel") or "")
        user = str(params.get("user") or "")
        text = params.get("text")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if not user:
            return {"ok": False, "error": "user_not_in_channel"}
        if not text and not params.get("blocks"):
            return {"ok": False, "error": "no_text"}
        with self._lock:
            self.ephemerals.append(
                Ephemeral(
                    channel=channel,
                    user=user,
                    text=str(text or ""),
                    thread_ts=params.get("thread_ts") or None,
                )
            )
        return {"ok": True, "message_ts": self._new_ts()}

    def _chat_start_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.streaming_error is not None:
            return {"ok": False, "error": self.streaming_error}
        channel = str(params.get("channel") or "")
        thread_ts = params.get("thread_ts") or None
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if not thread_ts:
            return {"ok": False, "error": "invalid_arguments"}
        if _channel_type(channel) != "im":
            # As Slack: outside a DM the stream names the person it answers, and their team.
            if not params.get("recipient_user_id"):
                return {"ok": False, "error": "missing_recipient_user_id"}
            if not params.get("recipient_team_id"):
                return {"ok": False, "error": "missing_recipient_team_id"}
        added = _streamed(params)
        if added is None:
            return {"ok": False, "error": "invalid_arguments"}
        text, blocks = added
        ts = self._new_ts()
        with self._lock:
            self.live[ts] = LiveMessage(
                channel=channel,
                ts=ts,
                thread_ts=str(thread_ts),
                text="",
                blocks=blocks,
                streamed=text,
                state="streaming",
            )
        return {"ok": True, "channel": channel, "ts": ts}

    def _streaming(self, params: dict[str, Any]) -> LiveMessage | dict[str, Any]:
        message = self.live.get(str(params.get("ts") or ""))
        if message is None or message.channel != str(params.get("channel") or ""):
            return {"ok": False, "error": "message_not_found"}
        if message.state != "streaming":
            return {"ok": False, "error": "message_not_in_streaming_state"}
        return message

    def _chat_append_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        message = self._streaming(params)
        if isinstance(message, dict):
            return message
        added = _streamed(params)
        if added is None or not (added[0] or added[1]):
            return {"ok": False, "error": "invalid_arguments"}
        with self._lock:
            message.streamed += added[0]
            message.blocks.extend(added[1])
            message.changes += 1
        return {"ok": True, "channel": message.channel, "ts": message.ts}

    def _chat_stop_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        message = self._streaming(params)
        if isinstance(message, dict):
            return message
        added = _streamed(params)
        blocks = _blocks(params.get("blocks"))
        if added is None or blocks is None:
            return {"ok": False, "error": "invalid_arguments"}
        with self._lock:
            message.streamed += added[0]
            message.blocks.extend([*added[1], *blocks])
            message.text = message.streamed
            message.state = "stopped"
            message.changes += 1
        return {
            "ok": True,
            "channel": message.channel,
            "ts": message.ts,
            "message": {
                "type": "message",
                "user": self.bot_user_id,
                "bot_id": self.bot_id,
                "text": message.streamed,
                "ts": message.ts,
                "thread_ts": message.thread_ts,
            },
        }

    def _assistant_threads_set_status(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.status_error is not None:
            return {"ok": False, "error": self.status_error}
        channel_id = str(params.get("channel_id") or "")
        thread_ts = str(params.get("thread_ts") or "")
        if not channel_id:
            return {"ok": False, "error": "channel_not_found"}
        if not _TS.fullmatch(thread_ts):
            return {"ok": False, "error": "invalid_thread_ts"}
        if "status" not in params:
            return {"ok": False, "error": "invalid_arguments"}
        with self._lock:
            self.statuses.append(
                ThreadStatus(
                    channel_id=channel_id, thread_ts=thread_ts, status=str(params["status"])
                )
            )
        return {"ok": True}

    async def _response_url(self, request: web.Request) -> web.Response:
        with self._lock:
            failure = self._take_failure("response_url")
        await self._pause()
        if failure is not None:
            return _failed_plainly(failure)
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"ok": False, "error": "invalid_payload"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"ok": False, "error": "invalid_payload"}, status=400)
        with self._lock:
            self.responses.append(ResponseAnswer(path=request.path, body=body))
        return web.json_response({"ok": True})

    def _files_get_upload_url_external(self, params: dict[str, Any]) -> dict[str, Any]:
        filename = params.get("filename")
        length = params.get("length")
        if not filename:
            return {"ok": False, "error": "invalid_arguments"}
        try:
            declared = int(length)
        except (TypeError, ValueError):
            return {"ok": False, "error": "invalid_arguments"}
        file = _File(
            file_id=self._new_id("F"),
            name=str(filename),
            data=b"",
            mimetype="",
            declared_length=declared,
        )
        self._files[file.file_id] = file
        return {
            "ok": True,
            "upload_url": f"{self.url}/upload/v1/{file.file_id}",
            "file_id": file.file_id,
        }

    def _files_complete_upload_external(self, params: dict[str, Any]) -> dict[str, Any]:
        try:
            listed = json.loads(str(params.get("files", "")))
        except json.JSONDecodeError:
            return {"ok": False, "error": "invalid_arguments"}
        if not isinstance(listed, list) or not listed:
            return {"ok": False, "error": "invalid_arguments"}
        shared: list[_File] = []
        for entry in listed:
            file = self._files.get(str(entry.get("id", "")))
            if file is None or not file.uploaded:
                return {"ok": False, "error": "file_not_found"}
            file.title = entry.get("title") or file.name
            shared.append(file)
        channel_id = params.get("channel_id") or None
        thread_ts = params.get("thread_ts") or None
        if thread_ts and not channel_id:
            return {"ok": False, "error": "invalid_arguments"}
        with self._lock:
            self.uploads.extend(
                Upload(
                    file_id=file.file_id,
                    filename=file.name,
                    title=file.title,
                    data=file.data,
                    channel_id=channel_id,
                    thread_ts=thread_ts,
                )
                for file in shared
            )
        return {"ok": True, "files": [self._file_object(file) for file in shared]}

    async def _upload(self, request: web.Request) -> web.Response:
        await self._pause()
        file = self._files.get(request.match_info["upload_id"])
        if file is None or file.uploaded:
            return web.Response(status=404, text="Not Found", content_type="text/plain")
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            part = form.get("file")
            data = part.file.read() if isinstance(part, web.FileField) else b""
        else:
            data = await request.read()
        if file.declared_length is not None and len(data) != file.declared_length:
            return web.Response(status=400, text="length mismatch", content_type="text/plain")
        file.data, file.uploaded = data, True
        file.mimetype = file.mimetype or "application/octet-stream"
        return web.Response(text=f"OK - {len(data)}", content_type="text/plain")

    # -- the file host -------------------------------------------------------------------

    async def _file(self, request: web.Request) -> web.StreamResponse:
        authorized = _bearer(request.headers.get("Authorization")) == self.bot_token
        with self._lock:
            self.downloads.append(Download(path=request.path, authorized=authorized))
            failure = self._take_failure("download")
        await self._pause()
        if failure is not None:
            return _failed_plainly(failure)
        if not authorized:
            # As Slack: a redirect to the workspace's sign-in page, never a 401.
            raise web.HTTPFound(f"/?redir={quote(request.path, safe='')}")
        _, _, file_id = request.match_info["team_file"].partition("-")
        file = self._files.get(file_id)
        if file is None or not file.uploaded:
            return web.Response(status=404, text="File not found", content_type="text/plain")
        return web.Response(
            body=file.data, headers={"Content-Type": file.served_as or file.mimetype}
        )

    async def _sign_in(self, request: web.Request) -> web.Response:
        return web.Response(
            text="<!DOCTYPE html><html><body>Sign in to Stand-in</body></html>",
            content_type="text/html",
        )

    # -- ids -----------------------------------------------------------------------------

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):08X}"

    def _new_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ids):06d}"


_METHODS: Final[dict[str, Callable[[SlackStandIn, dict[str, Any]], dict[str, Any]]]] = {
    "auth.test": SlackStandIn._auth_test,
    "users.info": SlackStandIn._users_info,
    "chat.postMessage": SlackStandIn._chat_post_message,
    "chat.update": SlackStandIn._chat_update,
    "chat.postEphemeral": SlackStandIn._chat_post_ephemeral,
    "chat.startStream": SlackStandIn._chat_start_stream,
    "chat.appendStream": SlackStandIn._chat_append_stream,
    "chat.stopStream": SlackStandIn._chat_stop_stream,
    "assistant.threads.setStatus": SlackStandIn._assistant_threads_set_status,
    "files.getUploadURLExternal": SlackStandIn._files_get_upload_url_external,
    "files.completeUploadExternal": SlackStandIn._files_complete_upload_external,
}


def _bearer(header: str | None) -> str | None:
    if header and header.startswith("Bearer "):
        return header.removeprefix("Bearer ").strip() or None
    return None


def _refused(error: str) -> web.Response:
    return web.json_response({"ok": False, "error": error})


def _failed_plainly(failure: _Failure) -> web.Response:
    """A scripted failure of a URL outside the Web API (a download, a ``response_url``)."""
    headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after else {}
    return web.Response(
        status=failure.status, text=failure.error, headers=headers, content_type="text/plain"
    )


_TS: Final = re.compile(r"[0-9]{1,12}\.[0-9]{1,8}")
_BLOCK_TYPES: Final = frozenset(
    {"section", "context", "actions", "markdown", "divider", "header", "rich_text", "image"}
)


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _blocks(value: Any) -> list[dict[str, Any]] | None:
    """A message's ``blocks`` (a list, or its JSON as a form gives it) checked as Slack
    checks them; None where Slack answers ``invalid_blocks``."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if not isinstance(value, list) or len(value) > 50:
        return None
    block_ids: set[str] = set()
    action_ids: set[str] = set()
    for block in value:
        if not isinstance(block, dict) or block.get("type") not in _BLOCK_TYPES:
            return None
        block_id = block.get("block_id")
        if block_id is not None:
            if not isinstance(block_id, str) or len(block_id) > 255 or block_id in block_ids:
                return None
            block_ids.add(block_id)
        kind = block["type"]
        if kind == "section":
            text = block.get("text")
            if not isinstance(text, dict) or text.get("type") not in ("mrkdwn", "plain_text"):
                return None
            if not str(text.get("text", "")).strip() or len(str(text["text"])) > 3_000:
                return None
        elif kind == "context":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= 10:
                return None
        elif kind == "actions":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= 25:
                return None
            for element in elements:
                if not isinstance(element, dict) or element.get("type") != "button":
                    return None
                label = element.get("text")
                action_id = element.get("action_id")
                if (
                    not isinstance(label, dict)
                    or label.get("type") != "plain_text"
                    or not 1 <= len(str(label.get("text", ""))) <= 75
                    or not isinstance(action_id, str)
                    or not 1 <= len(action_id) <= 255
                    or action_id in action_ids
                    or len(str(element.get("value", ""))) > 2_000
                    or element.get("style") not in (None, "primary", "danger")
                ):
                    return None
                action_ids.add(action_id)
    return list(value)


def _streamed(params: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]] | None:
    """The markdown and the blocks a stream call adds (``markdown_text`` and ``chunks``);
    None where Slack answers ``invalid_arguments``."""
    text = params.get("markdown_text") or ""
    chunks = params.get("chunks") or []
    if isinstance(chunks, str):
        try:
            chunks = json.loads(chunks)
        except json.JSONDecodeError:
            return None
    if not isinstance(text, str) or not isinstance(chunks, list) or len(text) > 12_000:
        return None
    blocks: list[dict[str, Any]] = []
    for chunk in chunks:
        if not isinstance(chunk, dict):
            return None
        if chunk.get("type") == "markdown_text" and isinstance(chunk.get("text"), str):
            text += chunk["text"]
        elif chunk.get("type") == "blocks":
            checked = _blocks(chunk.get("blocks"))
            if checked is None:
                return None
            blocks.extend(checked)
        elif chunk.get("type") not in ("task_update", "plan_update"):
            return None
    return text, blocks


def _channel_type(channel: str) -> str:
    return {"D": "im", "G": "mpim", "C": "channel"}.get(channel[:1], "channel")
