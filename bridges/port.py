"""The bridge port: what every chat platform's bridge does, and the messages it hands on.

The pipeline (:mod:`bridges.pipeline`) runs every platform the same way::

    platform ─► bridge.receive / gateway ─► Received ─► (answered) ─► bridge.complete
             ─► pre-route (cheap, no I/O)
             ─► bridge.normalize (media into the space's inbox) ─► IngressMessage
             ─► route (mute, trigger, command, rate limit) ─► queue ─► run
             ─► bridge.send_reply(text, files)

A bridge knows its platform and nothing of spaces' rules: it parses the platform's events
into :class:`Received` (mentions of the bot already written ``@<name>``, whether the message
replies to the bot, attachments not yet downloaded), downloads an attachment when asked,
shows a typing indicator, and sends a reply with files. A webhook bridge also checks each
delivery's signature (:meth:`WebhookBridge.receive`); a gateway bridge holds its own
connection (:meth:`GatewayBridge.run`).

Exception tree::

    BridgeError                  a platform call failed; the message says which and why
    └── PlatformUnavailable      the platform could not be reached or answered 5xx/429;
                                 the same call may succeed later
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

import msgspec

__all__ = [
    "Attachment",
    "BridgeError",
    "CompletingBridge",
    "EgressFile",
    "GatewayBridge",
    "IngressMessage",
    "PlatformBridge",
    "PlatformUnavailable",
    "Received",
    "ThreadInfo",
    "Verdict",
    "WebhookBridge",
    "WebhookOutcome",
]


class BridgeError(Exception):
    """A call to the platform failed."""


class PlatformUnavailable(BridgeError):
    """The platform could not be reached, or asked us to come back later."""


class Attachment(msgspec.Struct, frozen=True, kw_only=True):
    """A file that came with a message, not downloaded yet.

    ``ref`` is the platform's handle for it (Slack's ``url_private``, a Telegram
    ``file_id``, a WhatsApp media id, a Discord CDN URL): only its bridge reads it.
    """

    name: str
    ref: str
    mime_type: str | None = None
    size_bytes: int | None = None


class Received(msgspec.Struct, frozen=True, kw_only=True):
    """A platform message as its bridge parsed it: enough for the pre-route check.

    ``thread_id`` is the full platform thread (``slack:C123:1700000000.000100``,
    ``telegram:-100123:7``, ``discord:<guild>:<channel>[:<thread>]``, ``whatsapp:<jid>``):
    the bridge's :meth:`PlatformBridge.parse_thread` turns it into the space and the
    conversation. A reply goes where the bridge decides from the whole message (Slack
    threads a channel message's answer under it). ``delivery_id`` is what the platform
    re-sends a retried delivery under (Slack's ``event_id``, Telegram's ``update_id``, a
    WhatsApp message id, Discord's message id), so a retry runs nothing twice. ``sent_at``
    is when the platform says the message was sent (aware, UTC), None where it says nothing:
    a message older than the configured window runs nothing (:mod:`bridges.freshness`).
    """

    platform: str
    thread_id: str
    delivery_id: str
    message_id: str
    author_id: str
    author_name: str | None
    text: str
    is_dm: bool
    is_reply_to_bot: bool = False
    attachments: tuple[Attachment, ...] = ()
    sent_at: datetime | None = None


class ThreadInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Where a thread belongs: its space, the conversation inside it, DM or group."""

    space_id: str
    conversation_external_id: str
    is_dm: bool


class IngressMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message normalized for the core, the same from every platform (every field set).

    ``caller_id`` is the author as a directory identity (``slack:U123``); ``attachments``
    are the paths (``inbox/…``) the files were saved at in the space's inbox.
    """

    platform: str
    space_id: str
    conversation_external_id: str
    caller_id: str
    author_name: str | None
    text: str
    is_dm: bool
    is_reply_to_bot: bool
    attachments: tuple[str, ...]


class EgressFile(msgspec.Struct, frozen=True, kw_only=True):
    """A file the assistant wrote during the run, sent with its reply."""

    filename: str
    mime_type: str
    data: bytes


@runtime_checkable
class PlatformBridge(Protocol):
    """One chat platform: its threads, its media, its replies."""

    @property
    def platform(self) -> str: ...

    def parse_thread(self, thread_id: str) -> ThreadInfo:
        """The space and conversation of ``thread_id`` (as :class:`Received` carries it)."""
        ...

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The attachment's bytes, from the platform, with the bot's credentials.

        Raises :class:`BridgeError` when it is larger than ``max_bytes`` (read no further).
        """
        ...

    async def start_typing(self, message: Received) -> None:
        """Show that the assistant is writing a reply to ``message``; a no-op where the
        platform has no such indicator (Slack's Events API bots have none)."""
        ...

    async def send_reply(self, to: Received, text: str, files: Sequence[EgressFile] = ()) -> None:
        """Answer ``to`` with ``text`` (and ``files``), as the platform threads replies.

        Text longer than the platform takes in one message is split; files go as the
        platform sends them (in the message, or after the text).
        """
        ...

    async def close(self) -> None:
        """Release the bridge's clients."""
        ...


@runtime_checkable
class CompletingBridge(PlatformBridge, Protocol):
    """A bridge that learns some of a message after the platform was answered (#34).

    A webhook's answer never waits for a platform call, so what a delivery does not say (an
    author's name, the bot's own username) is asked in the background and filled in here.
    """

    async def complete(self, message: Received) -> Received:
        """``message`` with what was learned since it was received; waits a bounded time,
        never raises (what the platform can't tell in time is left out)."""
        ...


Verdict = Literal["accepted", "challenge", "forged", "malformed", "ignored"]


class WebhookOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a webhook delivery comes to: the verdict, and the messages it carries.

    ``accepted``: signed and parsed, ``messages`` run after the answer (ack first).
    ``challenge``: a verification request, answered ``body`` as it is (``content_type``).
    ``forged``: a missing, wrong or stale signature or secret; nothing runs.
    ``malformed``: signed but unreadable; nothing runs.
    ``ignored``: signed, nothing for the assistant (a bot's own message, an edit, a
    platform retry we already hold).
    """

    verdict: Verdict
    messages: tuple[Received, ...] = ()
    body: bytes = b""
    content_type: str = "text/plain"
    #: Why, for the log (never a secret).
    reason: str = ""


@runtime_checkable
class WebhookBridge(PlatformBridge, Protocol):
    """A platform that delivers events to a URL of ours (Slack, Telegram, WhatsApp)."""

    async def receive(
        self,
        method: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
    ) -> WebhookOutcome:
        """Check and parse one delivery; fast (the platform waits for the answer).

        ``headers`` are keyed in lower case. Never raises on bad input: a delivery that
        isn't the platform's is ``forged``, one that can't be read ``malformed``.
        """
        ...


#: How a gateway bridge hands on each message it reads.
Deliver = Callable[[Received], Awaitable[None]]


@runtime_checkable
class GatewayBridge(PlatformBridge, Protocol):
    """A platform we hold a connection to (Discord's gateway)."""

    async def run(self, deliver: Deliver) -> None:
        """Connect and hand every message to ``deliver`` until cancelled; reconnects."""
        ...
