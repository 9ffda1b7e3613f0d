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
connection (:meth:`GatewayBridge.run`). A connection only one instance may hold at a time
(Discord's gateway) is a :class:`HeldBridge`: it runs while its instance holds the
connection's lease (:mod:`bridges.holding`); its :meth:`~HeldBridge.checkpoint`, saved with
each renewal, is what the next holder resumes from (:meth:`~HeldBridge.restore`, before
``run``): ``connection_name`` names the lease (``discord``), ``checkpoint`` is cheap and
synchronous (``None``: nothing to resume from yet).

Live answers and buttons (#37): a bridge that can show a reply as it is written is a
:class:`LiveBridge`. The pipeline renders a turn's events through one small contract, the
same for every platform::

    open_reply(to) ─► LiveReply ─► show(text, status)* ─► finish(text, buttons, files)
                                                       └► fail(text)

Pacing (how often ``show`` may reach the platform, backing off on 429, splitting at the
platform's limit) lives once beside the port (:mod:`bridges.pacing`), so a platform file
only says how one message is posted, edited or streamed. Buttons carry an ``action`` the
platform hands back when pressed: a :class:`Pressed`, taken like a message (once, across
instances) and routed by the pipeline (a confirmation's choice, a stop). Presses come in a
webhook delivery's :attr:`WebhookOutcome.presses`, through a gateway's ``deliver``, or, for a
platform that sends them to a URL of their own (Slack's interactivity), through
:meth:`InteractionsBridge.receive_interactions` at ``/webhooks/{platform}/interactions``.

Exception tree::

    BridgeError                  a platform call failed; the message says which and why
    └── PlatformUnavailable      the platform could not be reached or answered 5xx/429;
                                 the same call may succeed later
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Final, Literal, Protocol, runtime_checkable

import msgspec

if TYPE_CHECKING:
    from core.clock import Clock
    from core.state import Database

__all__ = [
    "ACTION_MAX_BYTES",
    "Admission",
    "Admits",
    "Attachment",
    "BridgeError",
    "CompletingBridge",
    "EgressFile",
    "GatewayBridge",
    "HeldBridge",
    "IngressMessage",
    "InteractionsBridge",
    "InvitedBridge",
    "LiveBridge",
    "LiveLimits",
    "LiveReply",
    "PlatformBridge",
    "PlatformUnavailable",
    "Pressed",
    "Received",
    "ReplyButton",
    "ResumingBridge",
    "SharedStateBridge",
    "ThreadInfo",
    "Verdict",
    "WebhookBridge",
    "WebhookOutcome",
]


class BridgeError(Exception):
    """A call to the platform failed."""


class PlatformUnavailable(BridgeError):
    """The platform could not be reached, or asked us to come back later.

    ``retry_after_s`` is the wait the platform asked for (a 429's ``Retry-After``), when it
    said; the pacer waits that long before the next call to the same chat.
    """

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


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
    #: The author's language as the platform tells it (Telegram's ``language_code``), for
    #: someone the instance has no saved language for yet; None where it says nothing.
    language: str | None = None
    #: The platform (or the deployment's list of bots) says a program wrote it: never a
    #: turn of its own, only ambient context (:mod:`core.spaces.bot_turns`).
    from_bot: bool = False
    #: The platform's own opening of a private chat, not words for the assistant: Telegram's
    #: Start (``/start``), with its deep link's payload (``"sign-in"``; ``""`` for none).
    #: None for every other message. The pipeline answers it and never runs it.
    opening: str | None = None
    #: For a reply inside a thread that hangs under a conversation of its own (a Slack
    #: thread under the author's own channel message, or one the bot started): that
    #: conversation's thread, where a question the author was asked may be answered from
    #: the thread. None everywhere else.
    parent_thread_id: str | None = None


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
    #: The conversation the message's thread hangs under (:attr:`Received.parent_thread_id`).
    parent_conversation: str | None = None


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
    #: Buttons pressed (an interactivity delivery), run after the answer like messages.
    presses: tuple[Pressed, ...] = ()
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


#: How a gateway bridge hands on each message it reads, and each button pressed (#37).
Deliver = Callable[["Received | Pressed"], Awaitable[None]]


@runtime_checkable
class InteractionsBridge(WebhookBridge, Protocol):
    """A webhook platform that delivers button presses to a route of their own
    (``/webhooks/{platform}/interactions``: Slack's interactivity request URL)."""

    async def receive_interactions(
        self,
        method: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
    ) -> WebhookOutcome:
        """What :meth:`WebhookBridge.receive` does, for a delivery of presses: checked as
        strictly, answered fast, never raises on bad input."""
        ...


@runtime_checkable
class GatewayBridge(PlatformBridge, Protocol):
    """A platform we hold a connection to (Discord's gateway)."""

    async def run(self, deliver: Deliver) -> None:
        """Connect and hand every message (and every button press) to ``deliver`` until
        cancelled; reconnects."""
        ...


@runtime_checkable
class HeldBridge(GatewayBridge, Protocol):
    """A connection exactly one live instance holds at a time; another takes it over from a
    checkpoint."""

    @property
    def connection_name(self) -> str: ...

    def checkpoint(self) -> bytes | None: ...

    def restore(self, checkpoint: bytes) -> None: ...


#: Whether the instance talks to a platform account (its id and its name: a Matrix inviter):
#: ``admitted``; ``pairing``, a stranger who may ask for a code in a DM; else ``refused``.
Admission = Literal["admitted", "pairing", "refused"]
Admits = Callable[[str, "str | None"], Awaitable[Admission]]


@runtime_checkable
class InvitedBridge(GatewayBridge, Protocol):
    """A platform whose bot is invited into rooms (Matrix): it joins when the inviter is
    someone the instance talks to, which the composition root tells it through ``admits``,
    and, for a stranger under ``pairing``, only into a DM (where they are given a code)."""

    def admit_by(self, admits: Admits) -> None:
        """Ask ``admits`` about each inviter from now on (called before :meth:`run`)."""
        ...


@runtime_checkable
class SharedStateBridge(PlatformBridge, Protocol):
    """A platform whose bridge learns from its deliveries what answering needs (Teams: the
    connector to answer through): kept in the state store every instance shares, so any
    instance answers a delivery another one received."""

    async def share_state(self, db: Database, *, clock: Clock) -> None:
        """Keep that state in ``db`` from now on (called once, before the first delivery)."""
        ...


# ---------------------------------------------------------------- live answers and buttons (#37)

#: The most an action may hold, in UTF-8 bytes: Telegram's ``callback_data`` limit, the
#: smallest of the platforms'.
ACTION_MAX_BYTES: Final = 64


class ReplyButton(msgspec.Struct, frozen=True, kw_only=True):
    """A button under a reply. Pressing it hands ``action`` back as a :class:`Pressed`.

    ``action`` is opaque to the bridge, at most :data:`ACTION_MAX_BYTES` bytes (``c:<token>:
    <owner>`` for a confirmation's choice, ``s:<turn>`` for stop: the pipeline writes and
    reads them). ``style`` is a hint a platform may ignore.
    """

    label: str
    action: str
    style: Literal["primary", "danger", "default"] = "default"


class Pressed(msgspec.Struct, frozen=True, kw_only=True):
    """A button pressed: who pressed which action, on which message, in which thread.

    ``thread_id`` and ``message_id`` are those of the message the button is on (the bot's);
    ``delivery_id`` is what the platform re-sends a retried press under (Slack's trigger id,
    Telegram's ``callback_query.id``, Discord's interaction id, WhatsApp's message id), so a
    press runs once across instances. ``reply_to`` is the message the button's reply
    answered, for threading what the press starts; ``respond`` is the platform's handle for
    answering the press privately (a Slack ``response_url``, a Telegram callback id, a Discord
    interaction id and token): only its bridge reads it.
    """

    platform: str
    thread_id: str
    delivery_id: str
    message_id: str
    author_id: str
    author_name: str | None
    action: str
    is_dm: bool
    respond: str = ""
    sent_at: datetime | None = None


class LiveLimits(msgspec.Struct, frozen=True, kw_only=True):
    """What a platform allows a reply being written; the pacer keeps to it.

    ``max_chars``: the most one message holds (longer answers go on in new messages).
    ``edit_interval_s``: the least time between two updates of one chat's message.
    ``max_buttons``: how many buttons a message can carry (more choices fall back to text).
    ``partial``: whether the platform can show partial text at all (WhatsApp can't: it gets
    finished paragraphs as new messages). ``units``: how ``max_chars`` counts, in code points
    or in UTF-16 code units (Telegram's, where an emoji counts two).
    """

    max_chars: int
    edit_interval_s: float
    max_buttons: int = 5
    partial: bool = True
    units: Literal["chars", "utf16"] = "chars"


@runtime_checkable
class LiveReply(Protocol):
    """One reply message being written. Calls come one at a time, paced (never concurrent)."""

    async def show(self, text: str, status: str | None) -> None:
        """Show ``text`` (the answer so far, within ``max_chars``) and ``status`` (a short
        line such as "Searching the web…", or ``None``) as the message's current state."""
        ...

    async def finish(
        self, text: str, buttons: Sequence[ReplyButton] = (), files: Sequence[EgressFile] = ()
    ) -> None:
        """Leave ``text`` (within ``max_chars``) as the message for good, with ``buttons``
        and then ``files``; the status line and any stop button go."""
        ...

    async def fail(self, text: str) -> None:
        """Replace whatever was shown with ``text`` (an error's sentence), for good."""
        ...


@runtime_checkable
class LiveBridge(PlatformBridge, Protocol):
    """A platform whose replies can be written live and carry buttons."""

    @property
    def live_limits(self) -> LiveLimits: ...

    async def open_reply(
        self, to: Received, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> LiveReply:
        """Start a reply to ``to`` showing ``status`` ("Thinking…") and ``buttons`` (stop),
        as the platform shows it (a posted message, a native stream, a draft, a thread
        status); nothing is posted yet where the platform can't show a status."""
        ...

    async def send_private(self, to: Received, text: str) -> None:
        """Send ``text`` to ``to``'s author alone (a sign-in link): an ephemeral message
        or a direct message, never into the group."""
        ...

    async def answer_press(self, press: Pressed, text: str) -> None:
        """Tell the presser alone ``text`` ("This isn't yours", "Already answered")."""
        ...

    async def settle_press(self, press: Pressed, text: str) -> None:
        """Update the pressed message: its buttons go and ``text`` says what was chosen."""
        ...


@runtime_checkable
class ResumingBridge(LiveBridge, Protocol):
    """A live platform whose answer a later run of the same delivery can write on: the run
    that takes over a delivery cut short (a dead or frozen instance) edits the message the
    earlier run posted instead of leaving it half-written above a second answer."""

    def reply_ref(self, reply: LiveReply) -> str | None:
        """The platform's reference to ``reply``'s message once it is posted (a Slack ``ts``,
        a Discord message id, a Matrix event id); None while nothing is posted."""
        ...

    async def reopen_reply(
        self, to: Received, ref: str, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> LiveReply:
        """What :meth:`LiveBridge.open_reply` gives, writing into the message ``ref`` names
        (posted by an earlier run of the answer to ``to``). Raises :class:`BridgeError` when
        that message can't be written (deleted): the answer is then posted anew."""
        ...
