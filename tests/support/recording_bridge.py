"""A chat platform of the tests' own: a real implementation of the bridge port, in process.

It speaks Slack-shaped ids (``slack:C…`` spaces, ``U…`` people) so the pipeline treats it as
any platform, keeps what it would have sent (replies, typing) for the test to read, serves
attachments from memory, and takes webhook deliveries signed with an HMAC of the body, so
the webhook route's refusals can be shown without a platform's SDK::

    bridge = RecordingBridge()
    server = make_server({"bridges": [bridge]})
    bridge.post(server, bridge.message("C1", "U1", "@Mercury hi"))
    replies = bridge.wait_for_replies(1)
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
    Received,
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
