"""A chat platform of the tests' own: a real implementation of the bridge port, in process.

It speaks Slack-shaped ids (``slack:C…`` spaces, ``U…`` people) so the pipeline treats it as
any platform, keeps what it would have sent (replies, typing) for the test to read, serves
attachments from memory, and takes webhook deliveries signed with an HMAC of the body, so
the webhook route's refusals can be shown without a platform's SDK::

    bridge = RecordingBridge()
    server = make_server({"bridges": [bridge]})
    bridge.post(server, bridge.message("C1", "U1", "@Mercury hi"))
    replies = bridge.wait_for_replies(1)

:class:`LiveRecordingBridge` is the same platform writing answers live (#37): it records
every call on a reply with its time, raises a 429 when told, and takes button presses.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec

from bridges.port import (
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

SECRET = b"recording-bridge-secret"
_ids = itertools.count(1)


@dataclass
class Reply:
    to: Received
    text: str
    files: list[EgressFile]


@dataclass
class RecordingBridge:
    platform: str = "slack"
    replies: list[Reply] = field(default_factory=list)
    typing: list[Received] = field(default_factory=list)
    media: dict[str, bytes] = field(default_factory=dict)
    closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- the port -------------------------------------------------------------------------

    def parse_thread(self, thread_id: str) -> ThreadInfo:
        parts = thread_id.split(":")
        space = ":".join(parts[:2])
        return ThreadInfo(
            space_id=space, conversation_external_id=thread_id, is_dm=parts[1].startswith("D")
        )

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        data = self.media.get(attachment.ref)
        if data is None:
            raise BridgeError(f"No file {attachment.ref} on the platform.")
        if len(data) > max_bytes:
            raise BridgeError(f"{attachment.name} is larger than {max_bytes} bytes.")
        return data

    async def start_typing(self, message: Received) -> None:
        with self._lock:
            self.typing.append(message)

    async def send_reply(self, to: Received, text: str, files: Sequence[EgressFile] = ()) -> None:
        with self._lock:
            self.replies.append(Reply(to, text, list(files)))

    async def close(self) -> None:
        self.closed = True

    async def receive(
        self, method: str, query: Mapping[str, str], headers: Mapping[str, str], body: bytes
    ) -> WebhookOutcome:
        signature = headers.get("x-test-signature", "")
        expected = hmac.new(SECRET, body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(signature, expected):
            return WebhookOutcome(verdict="forged", reason="bad signature")
        try:
            message = msgspec.json.decode(body, type=Received)
        except msgspec.DecodeError:
            return WebhookOutcome(verdict="malformed", reason="not a message")
        return WebhookOutcome(verdict="accepted", messages=(message,))

    # -- for the tests --------------------------------------------------------------------

    def message(
        self,
        channel: str,
        author: str,
        text: str,
        *,
        name: str | None = None,
        thread: str | None = None,
        reply_to_bot: bool = False,
        attachments: tuple[Attachment, ...] = (),
        delivery_id: str | None = None,
    ) -> Received:
        number = next(_ids)
        thread_id = f"slack:{channel}" + (f":{thread}" if thread else "")
        return Received(
            platform=self.platform,
            thread_id=thread_id,
            delivery_id=delivery_id or f"Ev{number}",
            message_id=f"{number}.000",
            author_id=author,
            author_name=name or author,
            text=text,
            is_dm=channel.startswith("D"),
            is_reply_to_bot=reply_to_bot,
            attachments=attachments,
        )

    def post(self, server: Any, message: Received, *, sign: bool = True) -> httpx.Response:
        body = msgspec.json.encode(message)
        signature = hmac.new(SECRET if sign else b"wrong", body, hashlib.sha256).hexdigest()
        return httpx.post(
            f"{server.url}/webhooks/{self.platform}",
            content=body,
            headers={"x-test-signature": signature, "content-type": "application/json"},
            timeout=10,
        )

    def wait_for_replies(self, count: int, timeout: float = 20.0) -> list[Reply]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.replies) >= count:
                    return list(self.replies)
            time.sleep(0.02)
        raise AssertionError(f"expected {count} replies, got {self.replies!r}")


# ---------------------------------------------------------------- live answers and buttons (#37)


@dataclass
class Call:
    """One call the pipeline made on a live reply, and when (``time.monotonic()``)."""

    kind: str  # open, show, finish, fail
    reply: int
    text: str = ""
    status: str | None = None
    buttons: tuple[ReplyButton, ...] = ()
    files: tuple[EgressFile, ...] = ()
    at: float = 0.0


@dataclass
class LiveMessage:
    """A message as the platform would show it now."""

    number: int
    to: Received
    text: str = ""
    status: str | None = None
    buttons: tuple[ReplyButton, ...] = ()
    files: tuple[EgressFile, ...] = ()
    state: str = "open"  # open, finished, failed


class _Reply:
    def __init__(self, bridge: LiveRecordingBridge, message: LiveMessage) -> None:
        self._bridge = bridge
        self._message = message
        #: Whether the platform's client went under this reply (every call refused).
        self.cut = False

    def _check(self) -> None:
        if self.cut:
            raise BridgeError("The client was closed while it sent the reply; it was not sent.")

    async def show(self, text: str, status: str | None) -> None:
        self._check()
        self._bridge._record(Call("show", self._message.number, text, status))
        self._message.text, self._message.status = text, status

    async def finish(
        self, text: str, buttons: Sequence[ReplyButton] = (), files: Sequence[EgressFile] = ()
    ) -> None:
        self._check()
        self._bridge._record(
            Call("finish", self._message.number, text, None, tuple(buttons), tuple(files))
        )
        message = self._message
        message.text, message.status, message.state = text, None, "finished"
        message.buttons, message.files = tuple(buttons), tuple(files)

    async def fail(self, text: str) -> None:
        self._check()
        self._bridge._record(Call("fail", self._message.number, text))
        message = self._message
        message.text, message.status, message.state, message.buttons = text, None, "failed", ()


@dataclass
class LiveRecordingBridge(RecordingBridge):
    """The recording bridge, able to write answers live and carry buttons (LiveBridge).

    Every call on a reply is recorded with its time (:attr:`calls`); :attr:`unavailable`
    makes the next calls of a reply raise :class:`PlatformUnavailable` (a 429), one per
    entry, with that ``retry_after_s``. Presses come in as webhook deliveries
    (:meth:`press`) or straight from a test.
    """

    limits: LiveLimits = field(
        default_factory=lambda: LiveLimits(max_chars=400, edit_interval_s=0.2)
    )
    calls: list[Call] = field(default_factory=list)
    live: list[LiveMessage] = field(default_factory=list)
    privates: list[tuple[Received, str]] = field(default_factory=list)
    answered: list[tuple[Pressed, str]] = field(default_factory=list)
    settled: list[tuple[Pressed, str]] = field(default_factory=list)
    unavailable: list[float | None] = field(default_factory=list)
    #: Whether a private message is refused (a person who takes none from the bot).
    private_refused: bool = False
    #: 429s raised so far.
    refused: int = 0
    #: The replies opened so far (:meth:`cut_open` cuts them).
    opened: list[_Reply] = field(default_factory=list)

    @property
    def live_limits(self) -> LiveLimits:
        return self.limits

    def _record(self, call: Call) -> None:
        with self._lock:
            call.at = time.monotonic()
            if self.unavailable and call.kind != "open":
                retry_after_s = self.unavailable.pop(0)
                self.refused += 1
                raise PlatformUnavailable("429 Too Many Requests", retry_after_s=retry_after_s)
            self.calls.append(call)

    async def open_reply(
        self, to: Received, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> LiveReply:
        with self._lock:
            message = LiveMessage(len(self.live) + 1, to, status=status, buttons=tuple(buttons))
            self.live.append(message)
        self._record(Call("open", message.number, "", status, tuple(buttons)))
        reply = _Reply(self, message)
        self.opened.append(reply)
        return reply

    def reply_ref(self, reply: LiveReply) -> str | None:
        return str(reply._message.number) if isinstance(reply, _Reply) else None

    async def reopen_reply(
        self, to: Received, ref: str, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> LiveReply:
        """The live message numbered ``ref`` written on (a :class:`BridgeError` for one
        that isn't there: deleted)."""
        with self._lock:
            found = [m for m in self.live if str(m.number) == ref]
        if not found:
            raise BridgeError(f"No message {ref} on the platform (deleted).")
        [message] = found
        message.status, message.buttons, message.state = status, tuple(buttons), "open"
        self._record(Call("reopen", message.number, message.text, status, tuple(buttons)))
        reply = _Reply(self, message)
        self.opened.append(reply)
        return reply

    def cut_open(self) -> None:
        """The platform's client goes under the replies opened so far: a frozen instance's,
        closed as it woke up (every call on them refused from now on)."""
        for reply in self.opened:
            reply.cut = True

    async def send_private(self, to: Received, text: str) -> None:
        if self.private_refused:
            raise BridgeError(f"{to.author_id} takes no private messages from the bot (403).")
        with self._lock:
            self.privates.append((to, text))

    async def answer_press(self, press: Pressed, text: str) -> None:
        with self._lock:
            self.answered.append((press, text))

    async def settle_press(self, press: Pressed, text: str) -> None:
        with self._lock:
            self.settled.append((press, text))
            for message in self.live:
                if str(message.number) == press.message_id:
                    message.buttons = ()

    async def receive(
        self, method: str, query: Mapping[str, str], headers: Mapping[str, str], body: bytes
    ) -> WebhookOutcome:
        outcome = await super().receive(method, query, headers, body)
        if outcome.verdict != "malformed":
            return outcome
        try:
            press = msgspec.json.decode(body, type=Pressed)
        except msgspec.DecodeError:
            return outcome
        return WebhookOutcome(verdict="accepted", presses=(press,))

    async def receive_interactions(
        self, method: str, query: Mapping[str, str], headers: Mapping[str, str], body: bytes
    ) -> WebhookOutcome:
        """Presses alone, at ``/webhooks/{platform}/interactions`` (as Slack sends them)."""
        outcome = await self.receive(method, query, headers, body)
        if outcome.verdict == "accepted" and outcome.messages:
            return WebhookOutcome(verdict="malformed", reason="a message, not a press")
        return outcome

    # -- for the tests --------------------------------------------------------------------

    def pressed(
        self,
        message: LiveMessage,
        author: str,
        action: str,
        *,
        name: str | None = None,
        delivery_id: str | None = None,
    ) -> Pressed:
        """A press of ``action`` on ``message`` by ``author``."""
        return Pressed(
            platform=self.platform,
            thread_id=message.to.thread_id,
            delivery_id=delivery_id or f"Pr{next(_ids)}",
            message_id=str(message.number),
            author_id=author,
            author_name=name or author,
            action=action,
            is_dm=message.to.is_dm,
        )

    def press(
        self, server: Any, press: Pressed, *, path: str = "", sign: bool = True
    ) -> httpx.Response:
        body = msgspec.json.encode(press)
        signature = hmac.new(SECRET if sign else b"wrong", body, hashlib.sha256).hexdigest()
        return httpx.post(
            f"{server.url}/webhooks/{self.platform}{path}",
            content=body,
            headers={"x-test-signature": signature, "content-type": "application/json"},
            timeout=10,
        )

    def wait_for(self, what: str, check: Any, timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = check()  # not under the lock: a check may read through calls_to
            if found:
                return found
            time.sleep(0.02)
        raise AssertionError(f"expected {what}; calls: {self.calls!r}")

    def wait_for_answer(self, count: int = 1, timeout: float = 20.0) -> list[LiveMessage]:
        """The live messages once ``count`` of them are finished or failed, and none is open."""
        return list(
            self.wait_for(
                f"{count} finished live messages",
                lambda: (
                    self.live
                    if sum(m.state != "open" for m in self.live) >= count
                    and all(m.state != "open" for m in self.live)
                    else None
                ),
                timeout,
            )
        )

    def calls_to(self, number: int) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.reply == number]
