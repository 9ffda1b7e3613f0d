"""The Discord bridge: a gateway connection held by discord.py, replies over Discord's REST API.

Discord delivers messages over a websocket the bot holds (the gateway), not to a URL of ours,
so this is a :class:`~bridges.port.GatewayBridge`: :meth:`DiscordBridge.run` logs in, asks
``GET /gateway/bot`` where the gateway is, connects, and hands every message a person posts
to ``deliver``; discord.py resumes or reconnects a dropped connection itself, and ``run``
logs in again after a failed login with a growing pause.

One gateway session serves the bot, whatever the number of instances: the bridge is a
:class:`~bridges.port.HeldBridge` (#39), run by the instance holding the ``discord``
connection's lease. Its checkpoint is the session to resume (``session_id``, the sequence
number of the last event handed on in full, ``resume_gateway_url``); an instance taking the
connection over restores it and its first connection sends RESUME instead of IDENTIFY, so
Discord replays what was sent meanwhile (a replayed message already taken is dropped as a
duplicate). A session Discord won't resume (INVALID_SESSION) is started afresh (IDENTIFY). A
holder told to let go closes the gateway with a code that keeps the session resumable.

Where a message lives, as :attr:`~bridges.port.Received.thread_id` carries it::

    discord:<guild>:<channel>              a guild text (or voice, news) channel
    discord:<guild>:<channel>:<thread>     a thread or forum post, under its parent channel
    discord:@me:<channel>                  a direct message: the bot and one person
    discord:@group:<channel>               a group DM of several people

Each of them is a space of its own (the thread id is the space id). A private channel is a
DM only while the bot and one person are its only members
(:func:`~bridges.sign_in.is_direct`): a group DM (``GroupChannel``) of several people is a
group, judged from its recipients as Discord describes them at each message (the gateway's
message names no channel type), so a sign-in link goes to a DM the bot opens and unmentioned
messages don't run there as in a DM. Mentions of the bot
(``<@id>``, ``<@!id>``) read ``@<bot_name>``; other people ``@<their display name>``, roles
``@<role>``, channels ``#<channel>``, custom emoji ``:name:``. A reply goes to the message's
channel or thread as a Discord reply to it (in guilds; a DM needs none), text over 2,000
characters split, files in the last message (ten a message).

Live answers and buttons (#37): the bridge is a :class:`~bridges.port.LiveBridge`. A reply
being written shows "<bot> is typing…" until it has words (or a tool's status line) to show,
then is posted as the Discord reply it is today and edited as it grows (Discord allows five
edits per five seconds per channel: the pacer keeps a second between them); its last edit
leaves the final text with the buttons (an action row, each button's ``custom_id`` the
action) and the files. A button pressed reaches the bot as a gateway
``INTERACTION_CREATE`` (a message component: no privileged intent); it is handed on as a
:class:`~bridges.port.Pressed` and answered through the interaction: privately (an
ephemeral message) or by updating the pressed message. Discord wants an answer within three
seconds: a press not answered by then is acknowledged (a deferred update) and answered later
through the interaction's webhook.

Back-pressure: discord.py reads the gateway in one loop and runs each event's handler in a
task of its own; a handler waits for room while the pipeline is full. The gateway's reading
is never held up (its heartbeats' acknowledgements come over it: discord.py closes a
connection whose acknowledgements it has not read for a minute), so the bridge bounds what it
holds instead: at most :data:`HANDLING_MAX` messages and presses are being handed on at once,
and one past that is dropped as it comes, with a log line; Discord sends nothing again.

Errors are :mod:`bridges.port`'s::

    BridgeError                  Discord refused the call (403, 404, 400, a bad token)
    └── PlatformUnavailable      Discord could not be reached, answered 5xx or 429 (its
                                 ``retry_after_s`` the wait Discord asked for)
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import re
import time
import warnings
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
import msgspec
import yarl

from bridges.downloads import read_capped, refuse_past
from bridges.hosts import on_platform
from bridges.pacing import split
from bridges.port import (
    Attachment,
    BridgeError,
    Deliver,
    EgressFile,
    LiveLimits,
    LiveReply,
    PlatformUnavailable,
    Pressed,
    Received,
    ReplyButton,
    ThreadInfo,
)
from bridges.sign_in import is_direct
from core.config.settings import ConfigurationError, DiscordSettings
from core.spaces import parse_space_id

with warnings.catch_warnings():
    # discord.py imports audioop for voice, which Python 3.11 deprecates (PEP 594); the bridge
    # sends no voice, and the warning would fail every test run (filterwarnings = error).
    warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
    import discord
    import discord.gateway
    import discord.http

__all__ = [
    "BUTTONS_PER_ROW",
    "FILES_PER_MESSAGE",
    "HANDLING_MAX",
    "LIVE_LIMITS",
    "MESSAGE_LIMIT",
    "PLATFORM",
    "DiscordBridge",
]

PLATFORM: Final = "discord"
#: The most characters Discord takes in one message.
MESSAGE_LIMIT: Final = 2000
#: The most files Discord takes in one message.
FILES_PER_MESSAGE: Final = 10
#: The guild part of a DM's thread id.
DM_GUILD: Final = "@me"
#: The guild part of a group DM's thread id (several people: a group space).
GROUP_DM_GUILD: Final = "@group"
#: The most buttons one action row holds (the bridge sends one row).
BUTTONS_PER_ROW: Final = 5
#: Discord allows 5 edits per 5 s per channel: one a second keeps inside it (and discord.py
#: waits for a bucket Discord's rate-limit headers say is empty, rather than be refused).
LIVE_LIMITS: Final = LiveLimits(
    max_chars=MESSAGE_LIMIT, edit_interval_s=1.0, max_buttons=BUTTONS_PER_ROW
)

#: Messages and presses being handed on at once (read, waiting for room in a full pipeline:
#: as many as the pipeline holds); one more is dropped as the gateway dispatches it.
HANDLING_MAX: Final = 1000

log = logging.getLogger(__name__)

_MENTION: Final = re.compile(r"<(@!?|@&|#)(\d+)>")
_CUSTOM_EMOJI: Final = re.compile(r"<a?:(\w+):\d+>")
_COMMAND: Final = re.compile(r"</([\w -]+):\d+>")
# Message types a person writes; the rest are Discord's system messages (joins, pins, ...).
_PERSON_TYPES: Final = frozenset({discord.MessageType.default, discord.MessageType.reply})
_FIRST_RETRY_S: Final = 1.0
_LAST_RETRY_S: Final = 60.0
_KNOWN_PARENTS: Final = 1024
#: Where Discord serves attachments (cdn.discordapp.com, media.discordapp.net), besides
#: DISCORD_API_URL's host.
_CDN_DOMAINS: Final = ("discordapp.com", "discordapp.net", "discord.com")
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_REDIRECTS_FOLLOWED: Final = 3
#: Discord's "is typing…" lasts ten seconds; a reply still thinking renews it this often.
_TYPING_EVERY_S: Final = 8.0
#: A reply that never shows words stops renewing its typing after this long.
_TYPING_AT_MOST_S: Final = 600.0
#: The most characters of a button's label.
_LABEL_LIMIT: Final = 80
#: The most characters of a button's ``custom_id``.
_CUSTOM_ID_LIMIT: Final = 100
#: A press's token answers for 15 minutes; presses are remembered that long, this many at most.
_PRESS_LIFETIME_S: Final = 15 * 60.0
_KNOWN_PRESSES: Final = 1024
#: Discord's error codes: an interaction already answered; one unknown (expired after 3 s
#: unanswered, or 15 min); a user who takes no direct messages from the bot.
_ALREADY_ACKNOWLEDGED: Final = 40060
_UNKNOWN_INTERACTION: Final = 10062
_CANNOT_MESSAGE_USER: Final = 50007
#: Seconds between two log lines saying messages were dropped.
_DROPS_LOG_EVERY_S: Final = 60.0
#: The close code a holder letting go of the gateway uses: not 1000 or 1001, which end the
#: session on Discord's side, so the next holder can resume it.
_RESUMABLE_CLOSE: Final = 4000
_STYLES: Final = {
    "primary": discord.ButtonStyle.primary,
    "danger": discord.ButtonStyle.danger,
    "default": discord.ButtonStyle.secondary,
}


@dataclass(kw_only=True)
class _Press:
    """A press this instance received: its interaction, answered one call at a time."""

    interaction: discord.Interaction[Any]
    received_at: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    acknowledging: asyncio.Task[None] | None = None


class DiscordBridge:
    """Discord through discord.py: one gateway connection, REST replies, CDN downloads.

    Nothing touches the network until :meth:`run` or the first call that needs Discord;
    the bot's own id comes from its login then. ``request_timeout`` bounds every call to
    Discord (discord.py waits out a 429 itself, up to 30 s, within it). A button press not
    answered within ``press_ack_after_s`` is acknowledged (Discord gives three seconds).
    """

    def __init__(
        self,
        settings: DiscordSettings,
        *,
        bot_name: str,
        request_timeout: float = 60.0,
        reply_lookup_timeout: float = 5.0,
        press_ack_after_s: float = 2.0,
        handling_max: int = HANDLING_MAX,
    ) -> None:
        if not settings.bot_token:
            raise ConfigurationError(
                "The Discord bridge needs DISCORD_BOT_TOKEN; copy it from the Bot page of the "
                "application in Discord's developer portal."
            )
        self._token = settings.bot_token
        self._api_url = settings.api_url.rstrip("/")
        self._bot_name = bot_name
        self._request_timeout = request_timeout
        self._reply_lookup_timeout = reply_lookup_timeout
        self._press_ack_after_s = press_ack_after_s
        self._client: _Client | None = None
        self._login_lock = asyncio.Lock()
        self._downloads: aiohttp.ClientSession | None = None
        self._deliver: Deliver | None = None
        self._presses: OrderedDict[int, _Press] = OrderedDict()
        self._handlers: set[asyncio.Task[object]] = set()
        #: The typing indicators live replies keep alive (cancelled on close).
        self._typers: set[asyncio.Task[None]] = set()
        #: When "is typing…" was last shown in a channel (monotonic), so a live reply opened
        #: right after the pipeline's start_typing does not show it again.
        self._typed: OrderedDict[int, float] = OrderedDict()
        self._parents: OrderedDict[int, int | None] = OrderedDict()
        # One-to-one DM channels seen: they never gain a member (a group DM is judged anew).
        self._direct_channels: OrderedDict[int, None] = OrderedDict()
        self._closed = False
        self._closing = asyncio.Event()
        #: The session the next connection resumes (a checkpoint restored), once.
        self._resume: _ResumePoint | None = None
        #: The last session known: the one restored, then the live one's.
        self._session: _ResumePoint | None = None
        #: The sequence numbers of the events being handed on (their handlers running).
        self._in_flight: dict[int, int] = {}
        #: The messages and presses being handed on (their ids): at most ``handling_max``.
        self._handling: set[int] = set()
        self._handling_max = handling_max
        #: Those dropped since the last log line said so, and when it did (monotonic).
        self._dropped = 0
        self._drops_logged_at: float | None = None

    @property
    def platform(self) -> str:
        return PLATFORM

    # -- the connection one instance holds (#39) -------------------------------------------

    @property
    def connection_name(self) -> str:
        return PLATFORM

    def checkpoint(self) -> bytes | None:
        """The gateway session to resume: its id, the sequence number up to which every
        event was handed on, and where to resume it; None before the first session."""
        client = self._client
        ws = client.ws if client is not None else None
        session_id = getattr(ws, "session_id", None)
        sequence = getattr(ws, "sequence", None)
        if ws is not None and session_id and sequence is not None:
            if self._in_flight:
                sequence = min(min(self._in_flight.values()) - 1, sequence)
            self._session = _ResumePoint(
                session_id=session_id, sequence=sequence, gateway=str(ws.gateway)
            )
        if self._session is None:
            return None
        return msgspec.json.encode(self._session)

    def restore(self, checkpoint: bytes) -> None:
        """Resume the session ``checkpoint`` names at the next connection (an unreadable
        one is ignored: the connection starts a session afresh)."""
        try:
            point = msgspec.json.decode(checkpoint, type=_ResumePoint)
        except msgspec.DecodeError:
            log.warning("The saved Discord session can't be read; a new one is started.")
            return
        self._resume = self._session = point
        self._in_flight.clear()

    def _take_resume(self) -> _ResumePoint | None:
        point, self._resume = self._resume, None
        return point

    def _dispatched(self, event: str, args: tuple[Any, ...]) -> bool:
        """Note a message or interaction as it is dispatched (its handler runs later, in a
        task of its own): its sequence number, and that it is being handed on. False when
        ``handling_max`` are already: it is dropped (and logged), no handler runs."""
        if event not in ("message", "interaction") or not args:
            return True
        if len(self._handling) >= self._handling_max:
            self._drop()
            return False
        self._handling.add(id(args[0]))
        client = self._client
        sequence = getattr(client.ws, "sequence", None) if client is not None else None
        if isinstance(sequence, int):
            self._in_flight[id(args[0])] = sequence
        return True

    def _drop(self) -> None:
        self._dropped += 1
        now = time.monotonic()
        logged = self._drops_logged_at
        if logged is None or now - logged >= _DROPS_LOG_EVERY_S:
            self._drops_logged_at = now
            log.warning(
                "The Discord bridge is handing on %d messages and presses, the most it holds at "
                "once (the pipeline is full, or slow to take them): %d more dropped (Discord "
                "does not send them again).",
                len(self._handling),
                self._dropped,
            )
            self._dropped = 0

    def _handed_on(self, item: object) -> None:
        self._in_flight.pop(id(item), None)
        self._let_go(item)

    def _let_go(self, item: object) -> None:
        """``item``'s handler ended: handed on, or not (cancelled)."""
        self._handling.discard(id(item))
        if not self._handling and self._dropped:
            log.warning(
                "The Discord bridge dropped %d more messages while it held the most it holds.",
                self._dropped,
            )
            self._dropped = 0

    # -- the gateway -----------------------------------------------------------------------

    @property
    def live_limits(self) -> LiveLimits:
        return LIVE_LIMITS

    async def run(self, deliver: Deliver) -> None:
        """Hold the gateway connection and hand on every message and every press of one of
        the bot's buttons, until cancelled or closed.

        Raises :class:`BridgeError` when Discord refuses the bot for good (a wrong token, the
        MESSAGE CONTENT intent not enabled); a login that fails for a while is tried again.
        """
        self._deliver = deliver
        self._handling.clear()  # what an earlier run left counted (handlers never begun)
        pause = _FIRST_RETRY_S
        try:
            while not self._closed:
                try:
                    client = await self._logged_in()
                    await self._point_at_gateway(client)
                    await client.connect(reconnect=True)
                except PlatformUnavailable as exc:
                    if self._closed:
                        return
                    log.warning("Discord is unavailable (%s); trying again in %.0f s.", exc, pause)
                    await self._discard_client()
                    with contextlib.suppress(TimeoutError):  # close() ends the pause
                        await asyncio.wait_for(self._closing.wait(), pause)
                    pause = min(pause * 2, _LAST_RETRY_S)
                    continue
                except discord.PrivilegedIntentsRequired as exc:
                    raise BridgeError(
                        "Discord refused the gateway connection because the MESSAGE CONTENT "
                        "intent is not enabled; turn on Message Content Intent on the Bot page "
                        "of the application in Discord's developer portal."
                    ) from exc
                except discord.ConnectionClosed as exc:
                    raise BridgeError(_closed_reason(exc.code)) from exc
                return
        except asyncio.CancelledError:
            self.checkpoint()  # the session as it is now, for the lease's last save
            await self._discard_client(keep_session=True)
            raise
        finally:
            self._deliver = None
            await self._stop_handlers()

    async def _point_at_gateway(self, client: _Client) -> None:
        # discord.py's plain Client connects to the class attribute DEFAULT_GATEWAY and only
        # its sharded client asks GET /gateway/bot; asking ourselves keeps DISCORD_API_URL the
        # one address to set. Like Route.BASE, it is process-wide: one Discord per process.
        async with self._platform_call("the gateway's address"):
            _, url, _ = await client.http.get_bot_gateway()
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)

    async def _on_message(self, message: discord.Message) -> None:
        # discord.py runs every event handler in a task of its own, so a slow deliver never
        # holds up the gateway (at most handling_max of them run: _dispatched); the tasks are
        # kept to be cancelled when the bridge stops.
        deliver = self._deliver
        task = asyncio.current_task()
        if deliver is None or task is None:
            self._handed_on(message)
            return
        self._handlers.add(task)
        try:
            received = await self._received(message)
            if received is not None:
                await deliver(received)
        except asyncio.CancelledError:
            raise  # not handed on: the checkpoint stays before it, a resumed session replays it
        except Exception:
            log.exception("The Discord bridge could not hand on message %s.", message.id)
            self._handed_on(message)
        else:
            self._handed_on(message)
        finally:
            self._handlers.discard(task)
            self._let_go(message)

    async def _on_interaction(self, interaction: discord.Interaction[Any]) -> None:
        # Like _on_message: each in a task of its own, kept to be cancelled on stop.
        deliver = self._deliver
        task = asyncio.current_task()
        if deliver is None or task is None:
            self._handed_on(interaction)
            return
        self._handlers.add(task)
        try:
            if _button_action(interaction) is None:
                self._handed_on(interaction)
                return
            self._remember(interaction)  # the three seconds run from now
            pressed = await self._pressed(interaction)
            if pressed is None:
                self._forget(interaction.id)
                self._handed_on(interaction)
                return
            await deliver(pressed)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("The Discord bridge could not hand on interaction %s.", interaction.id)
            self._handed_on(interaction)
        else:
            self._handed_on(interaction)
        finally:
            self._handlers.discard(task)
            self._let_go(interaction)

    def _remember(self, interaction: discord.Interaction[Any]) -> None:
        """Keep ``interaction`` to answer it, and acknowledge it if nothing did in time."""
        now = time.monotonic()
        press = _Press(interaction=interaction, received_at=now)
        press.acknowledging = asyncio.get_running_loop().create_task(self._acknowledge(press))
        self._presses[interaction.id] = press
        while self._presses:
            oldest = next(iter(self._presses.values()))
            if len(self._presses) <= _KNOWN_PRESSES and now - oldest.received_at < (
                _PRESS_LIFETIME_S
            ):
                break
            self._presses.popitem(last=False)
            if oldest.acknowledging is not None:
                oldest.acknowledging.cancel()

    def _forget(self, interaction_id: int) -> None:
        press = self._presses.pop(interaction_id, None)
        if press is not None and press.acknowledging is not None:
            press.acknowledging.cancel()

    async def _acknowledge(self, press: _Press) -> None:
        """A deferred update, unless the press was answered within ``press_ack_after_s``."""
        await asyncio.sleep(self._press_ack_after_s)
        async with press.lock:
            if press.interaction.response.is_done():
                return
            try:
                await press.interaction.response.defer()
            except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
                # Another instance answered it, or it expired: the answer falls back.
                log.info("Discord did not take the acknowledgement of a press (%s).", exc)

    async def _stop_handlers(self) -> None:
        current = asyncio.current_task()
        pending = [t for t in self._handlers if t is not current and not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    # -- parsing ---------------------------------------------------------------------------

    async def _received(self, message: discord.Message) -> Received | None:
        """``message`` as the pipeline takes it, or None when it is nothing for the assistant."""
        client = self._client
        me = client.user if client is not None else None
        author = message.author
        if me is None or author.bot or author.id == me.id or message.webhook_id is not None:
            return None
        if message.type not in _PERSON_TYPES:
            return None
        text = self._readable(message, me.id)
        attachments = tuple(
            Attachment(name=a.filename, ref=a.url, mime_type=a.content_type, size_bytes=a.size)
            for a in message.attachments
        )
        if not text.strip() and not attachments:
            return None
        thread_id = await self._thread_id(message, author.id)
        return Received(
            platform=PLATFORM,
            thread_id=thread_id,
            delivery_id=str(message.id),
            message_id=str(message.id),
            author_id=str(author.id),
            author_name=author.display_name,
            text=text,
            is_dm=thread_id.startswith(f"{PLATFORM}:{DM_GUILD}:"),
            is_reply_to_bot=await self._replies_to(message, me.id),
            attachments=attachments,
            # From the message's snowflake id: when Discord took it.
            sent_at=message.created_at,
        )

    async def _pressed(self, interaction: discord.Interaction[Any]) -> Pressed | None:
        """A button press as the pipeline takes it, or None when it is nothing of ours."""
        action = _button_action(interaction)
        client = self._client
        me = client.user if client is not None else None
        user = interaction.user
        message = interaction.message
        if action is None or me is None or message is None or not user or user.bot:
            return None
        if message.author.id != me.id:
            return None  # a button on another application's message
        channel = interaction.channel
        channel_id = channel.id if channel is not None else message.channel.id
        if interaction.guild_id is None:
            thread_id = await self._private_space(channel_id, user.id)
        else:
            if isinstance(channel, discord.Thread):
                parent_id: int | None = channel.parent_id
            elif channel is None or isinstance(channel, discord.PartialMessageable):
                parent_id = await self._parent_of(channel_id)
            else:
                parent_id = None
            thread_id = f"{PLATFORM}:{interaction.guild_id}:" + (
                f"{channel_id}" if parent_id is None else f"{parent_id}:{channel_id}"
            )
        return Pressed(
            platform=PLATFORM,
            thread_id=thread_id,
            delivery_id=str(interaction.id),
            message_id=str(message.id),
            author_id=str(user.id),
            author_name=user.display_name,
            action=action,
            is_dm=thread_id.startswith(f"{PLATFORM}:{DM_GUILD}:"),
            respond=f"{interaction.application_id}:{interaction.id}:{interaction.token}",
            sent_at=interaction.created_at,
        )

    def _readable(self, message: discord.Message, bot_id: int) -> str:
        """The text with mentions, emoji and commands written the way a person reads them."""
        guild = message.guild
        people = {m.id: m.display_name for m in message.mentions}

        def mention(match: re.Match[str]) -> str:
            kind, ident = match.group(1), int(match.group(2))
            if kind in ("@", "@!"):
                if ident == bot_id:
                    return f"@{self._bot_name}"
                member = guild.get_member(ident) if guild is not None else None
                name = people.get(ident) or (member.display_name if member else None)
                return f"@{name}" if name else "@unknown-user"
            if kind == "@&":
                role = guild.get_role(ident) if guild is not None else None
                return f"@{role.name}" if role is not None else "@unknown-role"
            channel = guild.get_channel_or_thread(ident) if guild is not None else None
            return f"#{channel.name}" if channel is not None else "#unknown-channel"

        text = _MENTION.sub(mention, message.content)
        text = _CUSTOM_EMOJI.sub(r":\1:", text)
        return _COMMAND.sub(r"/\1", text)

    async def _thread_id(self, message: discord.Message, author_id: int) -> str:
        channel = message.channel
        if isinstance(channel, discord.DMChannel | discord.GroupChannel):
            return await self._private_space(channel.id, author_id)
        guild_id = message.guild.id if message.guild is not None else None
        if isinstance(channel, discord.PartialMessageable):
            guild_id = guild_id or channel.guild_id
            if guild_id is None:
                return await self._private_space(channel.id, author_id)
        if isinstance(channel, discord.Thread):
            parent_id: int | None = channel.parent_id
        elif isinstance(channel, discord.PartialMessageable):
            # A channel the gateway never announced (a thread opened while we were away).
            parent_id = await self._parent_of(channel.id)
        else:
            parent_id = None
        if parent_id is None:
            return f"{PLATFORM}:{guild_id}:{channel.id}"
        return f"{PLATFORM}:{guild_id}:{parent_id}:{channel.id}"

    async def _private_space(self, channel_id: int, person_id: int) -> str:
        """The space of a private channel ``person_id`` wrote in: their DM (``@me``) while the
        bot and they are its only members, else a group DM's (``@group``).

        discord.py makes every private channel of a message a ``DMChannel`` (the gateway's
        message names no channel type), so the channel is asked of Discord: a one-to-one DM
        once (remembered), a group DM at every message (its recipients change). A channel
        Discord won't describe is taken for a group: a link never goes where others may read.
        """
        if channel_id in self._direct_channels:
            self._direct_channels.move_to_end(channel_id)
            return f"{PLATFORM}:{DM_GUILD}:{channel_id}"
        client = self._client
        me = client.user if client is not None else None
        channel: object = client.get_channel(channel_id) if client is not None else None
        if not isinstance(channel, discord.DMChannel) and client is not None:
            try:
                async with asyncio.timeout(self._reply_lookup_timeout):
                    channel = await client.fetch_channel(channel_id)
            except (discord.DiscordException, aiohttp.ClientError, OSError, TimeoutError) as exc:
                log.warning(
                    "Discord did not describe private channel %s (%s); taken as a group DM.",
                    channel_id,
                    exc,
                )
                channel = None
        if isinstance(channel, discord.DMChannel):
            self._direct_channels[channel_id] = None
            while len(self._direct_channels) > _KNOWN_PARENTS:
                self._direct_channels.popitem(last=False)
            return f"{PLATFORM}:{DM_GUILD}:{channel_id}"
        if isinstance(channel, discord.GroupChannel) and me is not None:
            members = {str(me.id)} | {str(user.id) for user in channel.recipients}
            if is_direct(members, bot=str(me.id), person=str(person_id)):
                return f"{PLATFORM}:{DM_GUILD}:{channel_id}"
        return f"{PLATFORM}:{GROUP_DM_GUILD}:{channel_id}"

    async def _parent_of(self, channel_id: int) -> int | None:
        """The parent of a thread discord.py has not cached (None for a plain channel)."""
        if channel_id in self._parents:
            self._parents.move_to_end(channel_id)
            return self._parents[channel_id]
        client = self._client
        if client is None:
            return None
        try:
            async with asyncio.timeout(self._reply_lookup_timeout):
                channel = await client.fetch_channel(channel_id)
        except (discord.DiscordException, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning(
                "Discord did not describe channel %s (%s); taken as a channel.", channel_id, exc
            )
            return None
        parent = channel.parent_id if isinstance(channel, discord.Thread) else None
        self._parents[channel_id] = parent
        while len(self._parents) > _KNOWN_PARENTS:
            self._parents.popitem(last=False)
        return parent

    async def _replies_to(self, message: discord.Message, bot_id: int) -> bool:
        """Whether ``message`` is a reply to one of the bot's (looked up if Discord left it out)."""
        reference = message.reference
        if reference is None or reference.message_id is None:
            return False
        if reference.type is not discord.MessageReferenceType.reply:
            return False  # a forward quotes a message; it does not answer it
        resolved = reference.resolved or reference.cached_message
        if isinstance(resolved, discord.Message):
            return resolved.author.id == bot_id
        if isinstance(resolved, discord.DeletedReferencedMessage) or self._client is None:
            return False
        channel = self._client.get_partial_messageable(reference.channel_id)
        try:
            async with asyncio.timeout(self._reply_lookup_timeout):
                replied = await channel.fetch_message(reference.message_id)
        except (discord.DiscordException, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning(
                "Discord did not give message %s that %s replies to (%s); taken as no reply "
                "to the bot.",
                reference.message_id,
                message.id,
                exc,
            )
            return False
        return replied.author.id == bot_id

    def parse_thread(self, thread_id: str) -> ThreadInfo:
        """Each channel, thread and DM is a space of its own: the thread id is the space id.

        Raises :class:`ValueError` (``InvalidSpaceId``) when ``thread_id`` is not Discord's.
        """
        space = parse_space_id(thread_id)
        if space.platform != PLATFORM:
            raise ValueError(
                f"{thread_id!r} is not a Discord thread id; the Discord bridge reads "
                "discord:<guild>:<channel>[:<thread>], discord:@me:<channel> and "
                "discord:@group:<channel>."
            )
        return ThreadInfo(space_id=thread_id, conversation_external_id=thread_id, is_dm=space.is_dm)

    # -- calls to Discord ------------------------------------------------------------------

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The attachment from Discord's CDN (its link is signed; no token goes with it).

        Only Discord's hosts (or ``DISCORD_API_URL``'s) are asked, a redirect included: a
        link or a redirect to any other host is a :class:`BridgeError`.
        """
        refuse_past(attachment.name, max_bytes, attachment.size_bytes)
        if self._downloads is None or self._downloads.closed:
            self._downloads = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
        what = f"the attachment {attachment.name!r}"
        url = attachment.ref
        for _ in range(_REDIRECTS_FOLLOWED + 1):
            if not on_platform(url, api_url=self._api_url, domains=_CDN_DOMAINS):
                raise BridgeError(
                    f"The attachment {attachment.name!r} is not on Discord's CDN "
                    f"({yarl.URL(url).host or url[:80]!r}); it was not downloaded."
                )
            async with (
                self._platform_call(what),
                self._downloads.get(yarl.URL(url), allow_redirects=False) as response,
            ):
                if response.status in _REDIRECTS:
                    location = response.headers.get("Location", "")
                    url = str(response.url.join(yarl.URL(location))) if location else ""
                    continue
                if response.status != 200:
                    raise _status_error(what, response.status, response.reason or "")
                refuse_past(attachment.name, max_bytes, response.content_length)
                return await read_capped(
                    response.content.iter_chunked(64 * 1024), attachment.name, max_bytes
                )
        raise BridgeError(
            f"Discord redirected the download of {attachment.name!r} more than "
            f"{_REDIRECTS_FOLLOWED} times; it was not downloaded."
        )

    async def start_typing(self, message: Received) -> None:
        """Discord shows "<bot> is typing…" for ten seconds, or until the bot's next message."""
        client = await self._logged_in()
        channel = client.get_partial_messageable(_channel_id(message.thread_id))
        # Marked as asked before the call: a live reply opened while it is on its way must
        # not ask for the indicator a second time.
        self._typed_in(channel.id)
        async with self._platform_call("the typing indicator"):
            await channel.typing()

    def _typed_in(self, channel_id: int) -> None:
        self._typed[channel_id] = time.monotonic()
        self._typed.move_to_end(channel_id)
        while len(self._typed) > _KNOWN_PARENTS:
            self._typed.popitem(last=False)

    def _typing_left(self, channel_id: int) -> float:
        """Seconds before "is typing…" shown in the channel needs renewing (0: not shown)."""
        shown = self._typed.get(channel_id)
        if shown is None:
            return 0.0
        return max(0.0, _TYPING_EVERY_S - (time.monotonic() - shown))

    async def send_reply(self, to: Received, text: str, files: Sequence[EgressFile] = ()) -> None:
        """Reply in ``to``'s channel or thread; text over 2,000 characters in several messages,
        the files (ten a message) with the last of them, the first a Discord reply to ``to``
        in a guild (a DM is one conversation and needs none)."""
        client = await self._logged_in()
        channel = client.get_partial_messageable(_channel_id(to.thread_id))
        reference: discord.MessageReference | None = None
        if not to.is_dm:
            reference = channel.get_partial_message(int(to.message_id)).to_reference(
                fail_if_not_exists=False
            )
        chunks = _chunks(text, MESSAGE_LIMIT) if text else []
        batches = [
            files[i : i + FILES_PER_MESSAGE] for i in range(0, len(files), FILES_PER_MESSAGE)
        ]
        messages: list[tuple[str | None, Sequence[EgressFile]]] = [(c, ()) for c in chunks[:-1]]
        messages.append((chunks[-1] if chunks else None, batches[0] if batches else ()))
        messages.extend((None, batch) for batch in batches[1:])
        for content, batch in messages:
            if content is None and not batch:
                continue
            options: dict[str, Any] = {"allowed_mentions": _addressed(to)}
            if batch:
                options["files"] = [discord.File(io.BytesIO(f.data), f.filename) for f in batch]
            if reference is not None:
                options["reference"] = reference
            async with self._platform_call("the reply"):
                await channel.send(content, **options)
            reference = None

    # -- live replies (#37) ----------------------------------------------------------------

    async def open_reply(
        self, to: Received, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> LiveReply:
        """A reply to ``to`` that shows "<bot> is typing…" (renewed) for ``status`` until it
        has text or a tool's status line; it is posted then, as :meth:`send_reply` posts,
        with ``buttons`` (stop) while it runs. Opened without a status (the pacer's
        continuation of a long answer), it is a plain message, as send_reply's later parts."""
        client = await self._logged_in()
        channel = client.get_partial_messageable(_channel_id(to.thread_id))
        reference: discord.MessageReference | None = None
        if not to.is_dm and status is not None:  # a continuation is no second reply (ping)
            reference = channel.get_partial_message(int(to.message_id)).to_reference(
                fail_if_not_exists=False
            )
        reply = _LiveReply(
            self, channel, reference, _addressed(to), thinking=status, buttons=tuple(buttons)
        )
        if status is not None:  # a continuation of a long answer opens without one
            await reply.start()
        return reply

    def reply_ref(self, reply: LiveReply) -> str | None:
        """The reply's message id, once posted."""
        return reply.message_id if isinstance(reply, _LiveReply) else None

    async def reopen_reply(
        self, to: Received, ref: str, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> LiveReply:
        """The message ``ref`` (its id) an earlier run posted, edited from its next update
        on; "<bot> is typing…" until then."""
        if not ref.isdigit():
            raise BridgeError(f"{ref!r} is no Discord message id; the answer is posted anew.")
        client = await self._logged_in()
        channel = client.get_partial_messageable(_channel_id(to.thread_id))
        reply = _LiveReply(
            self, channel, None, _addressed(to), thinking=status, buttons=tuple(buttons)
        )
        reply.resume(channel.get_partial_message(int(ref)))
        await reply.start()
        return reply

    async def send_private(self, to: Received, text: str) -> None:
        """A direct message to ``to``'s author (in a DM, that DM).

        Raises :class:`BridgeError` when Discord refuses it: the person takes no direct
        messages from the server's members, or blocked the bot.
        """
        client = await self._logged_in()
        # Into the conversation only while it is the person's DM, judged again now (a group
        # DM of two gains a third; a one-to-one DM never does).
        here = _channel_id(to.thread_id)
        if to.is_dm and await self._private_space(here, int(to.author_id)) == to.thread_id:
            channel: discord.abc.Messageable = client.get_partial_messageable(here)
        else:
            async with self._platform_call("the direct message channel"):
                channel = await client.create_dm(discord.Object(id=int(to.author_id)))
        for chunk in _chunks(text, MESSAGE_LIMIT):
            async with self._platform_call("a direct message"):
                try:
                    await channel.send(chunk)
                except discord.Forbidden as exc:
                    if exc.code != _CANNOT_MESSAGE_USER:
                        raise
                    raise BridgeError(
                        f"Discord refused a direct message to {to.author_name or to.author_id!r} "
                        f"(403, code {exc.code}): they take no direct messages from this "
                        "server's members, or blocked the bot; nothing was sent to them."
                    ) from exc

    async def answer_press(self, press: Pressed, text: str) -> None:
        """An ephemeral message only the presser sees (a follow-up once acknowledged)."""
        async with self._press(press) as interaction:
            if not interaction.response.is_done():
                try:
                    async with self._platform_call("the answer to a button"):
                        await interaction.response.send_message(
                            text[:MESSAGE_LIMIT], ephemeral=True
                        )
                    return
                except BridgeError as exc:
                    if not _already_acknowledged(exc):
                        raise
            async with self._platform_call("the answer to a button"):
                await interaction.followup.send(text[:MESSAGE_LIMIT], ephemeral=True)

    async def settle_press(self, press: Pressed, text: str) -> None:
        """The pressed message says ``text`` and loses its buttons (an update of the message;
        once acknowledged, an edit of the original; once the interaction expired, an edit of
        the bot's message)."""
        async with self._press(press) as interaction:
            if not interaction.response.is_done():
                try:
                    async with self._platform_call("the pressed message"):
                        await interaction.response.edit_message(
                            content=text[:MESSAGE_LIMIT], view=None
                        )
                    return
                except BridgeError as exc:
                    if _unknown_interaction(exc):
                        await self._edit_pressed(press, text)
                        return
                    if not _already_acknowledged(exc):
                        raise
            try:
                async with self._platform_call("the pressed message"):
                    await interaction.edit_original_response(
                        content=text[:MESSAGE_LIMIT], view=None
                    )
            except BridgeError as exc:
                if not _unknown_interaction(exc):
                    raise
                await self._edit_pressed(press, text)

    async def _edit_pressed(self, press: Pressed, text: str) -> None:
        client = await self._logged_in()
        channel = client.get_partial_messageable(_channel_id(press.thread_id))
        async with self._platform_call("the pressed message"):
            await channel.get_partial_message(int(press.message_id)).edit(
                content=text[:MESSAGE_LIMIT], view=None
            )

    @contextlib.asynccontextmanager
    async def _press(self, press: Pressed) -> AsyncIterator[discord.Interaction[Any]]:
        """The press's interaction (as received, or rebuilt from ``respond``), held alone."""
        try:
            application_id, interaction_id, token = press.respond.split(":", 2)
            known = self._presses.get(int(interaction_id))
            int(application_id)
        except ValueError:
            raise BridgeError(
                f"The press {press.delivery_id!r} carries no Discord interaction to answer "
                "(respond is not <application>:<interaction>:<token>)."
            ) from None
        if known is None:
            # Taken over from another instance: answered through the same endpoints, with
            # what Discord needs to know of it (its id, token and application).
            client = await self._logged_in()
            payload: Any = {
                "id": interaction_id,
                "application_id": application_id,
                "type": discord.InteractionType.component.value,
                "token": token,
                "version": 1,
                "attachment_size_limit": 0,
            }
            interaction: discord.Interaction[Any] = discord.Interaction(
                data=payload, state=client._connection
            )
            # The channel as discord.py knows one it was not told of (it reads Discord's
            # answer, the pressed message, against it).
            channel: Any = client.get_partial_messageable(_channel_id(press.thread_id))
            interaction.channel = channel
            known = _Press(interaction=interaction, received_at=time.monotonic())
        async with known.lock:
            yield known.interaction

    async def close(self) -> None:
        """Leave the gateway, close the REST and CDN sessions, stop the handlers in flight."""
        self._closed = True
        self._closing.set()
        for typer in list(self._typers):
            typer.cancel()
        for press in self._presses.values():
            if press.acknowledging is not None:
                press.acknowledging.cancel()
        self._presses.clear()
        await self._discard_client()
        if self._downloads is not None:
            await self._downloads.close()
            self._downloads = None
        await self._stop_handlers()

    # -- the client ------------------------------------------------------------------------

    async def _logged_in(self) -> _Client:
        """The discord.py client, logged in (once; the bot's own id comes with it)."""
        async with self._login_lock:
            if self._closed:
                raise BridgeError("The Discord bridge is closed; build a new one.")
            client = self._client
            if client is not None and not client.is_closed():
                return client
            # Route.BASE is a class attribute: every discord.py client in this process talks
            # to DISCORD_API_URL. Mercury runs one Discord bridge per process.
            discord.http.Route.BASE = self._api_url
            client = _Client(self)
            try:
                async with self._platform_call("the login"):
                    await client.login(self._token)
            except BaseException:
                await client.close()
                raise
            self._client = client
            return client

    async def _discard_client(self, *, keep_session: bool = False) -> None:
        """Close the client; with ``keep_session``, first close the gateway with a code that
        leaves the session resumable (discord.py's own close ends it: 1000)."""
        client, self._client = self._client, None
        if client is None:
            return
        if keep_session and client.ws is not None and client.ws.open:
            with contextlib.suppress(Exception):
                await client.ws.close(code=_RESUMABLE_CLOSE)
        await client.close()

    @contextlib.asynccontextmanager
    async def _platform_call(self, what: str) -> AsyncIterator[None]:
        """Turn discord.py's and aiohttp's failures of ``what`` into the port's errors."""
        try:
            async with asyncio.timeout(self._request_timeout):
                yield
        except discord.LoginFailure as exc:
            raise BridgeError(
                "Discord refused DISCORD_BOT_TOKEN (401); copy the token again from the Bot "
                "page of the application in Discord's developer portal."
            ) from exc
        except discord.HTTPException as exc:
            raise _status_error(
                what, exc.status, exc.text, code=exc.code, retry_after_s=_retry_after(exc)
            ) from exc
        except discord.RateLimited as exc:
            raise PlatformUnavailable(
                f"Discord rate-limits {what} for {exc.retry_after:.0f} s; try again later.",
                retry_after_s=exc.retry_after,
            ) from exc
        except discord.GatewayNotFound as exc:
            raise PlatformUnavailable(
                f"Discord did not say where its gateway is ({exc}); try again later."
            ) from exc
        except TimeoutError as exc:
            raise PlatformUnavailable(
                f"Discord did not answer {what} within {self._request_timeout:g} s; try again "
                "later."
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise PlatformUnavailable(
                f"Discord could not be reached for {what} ({type(exc).__name__}: {exc}); check "
                "DISCORD_API_URL and the network, or try again later."
            ) from exc
        except RuntimeError as exc:  # aiohttp's "Session is closed": close() came first
            if not self._closed:
                raise
            raise BridgeError(
                f"The Discord bridge was closed while it sent {what}; it was not sent."
            ) from exc


def _addressed(to: Received) -> discord.AllowedMentions:
    """What an answer to ``to`` may ping: its author alone (as the reply and by a mention),
    never anyone else the model wrote ``<@id>``, a role or ``@everyone`` for."""
    author = [discord.Object(id=int(to.author_id))] if to.author_id.isdigit() else False
    return discord.AllowedMentions(everyone=False, roles=False, users=author, replied_user=True)


class _LiveReply:
    """One reply being written: typing, then one posted message edited as it grows."""

    def __init__(
        self,
        bridge: DiscordBridge,
        channel: discord.PartialMessageable,
        reference: discord.MessageReference | None,
        mentions: discord.AllowedMentions,
        *,
        thinking: str | None,
        buttons: tuple[ReplyButton, ...],
    ) -> None:
        self._bridge = bridge
        self._channel = channel
        self._reference = reference
        self._mentions = mentions
        self._thinking = thinking
        self._buttons = buttons
        self._message: discord.Message | discord.PartialMessage | None = None
        self._shown: tuple[str, tuple[ReplyButton, ...]] | None = None
        self._typing: asyncio.Task[None] | None = None

    @property
    def message_id(self) -> str | None:
        """The posted message's id; None until it is posted."""
        return str(self._message.id) if self._message is not None else None

    def resume(self, message: discord.PartialMessage) -> None:
        """Write on in ``message``, an earlier run's: edited, never posted again."""
        self._message = message

    async def start(self) -> None:
        """Show "<bot> is typing…" (unless it shows already), and keep showing it until
        there is something to post."""
        first = self._bridge._typing_left(self._channel.id)
        if not first:
            try:
                await self._type()
            except PlatformUnavailable as exc:  # only a sign: the reply itself may still go
                log.info("Discord did not show the typing indicator (%s).", exc)
            first = _TYPING_EVERY_S
        self._typing = asyncio.get_running_loop().create_task(self._keep_typing(first))
        self._bridge._typers.add(self._typing)
        self._typing.add_done_callback(self._bridge._typers.discard)

    async def show(self, text: str, status: str | None) -> None:
        if self._message is None and not text and status in (None, self._thinking):
            return  # still thinking: the typing indicator says so
        content = _with_status(text, status)
        if not content and not self._buttons:
            return  # Discord shows no empty message
        await self._put(content, self._buttons)

    async def finish(
        self, text: str, buttons: Sequence[ReplyButton] = (), files: Sequence[EgressFile] = ()
    ) -> None:
        self._stop_typing()
        chunks = _chunks(text, MESSAGE_LIMIT) if text else []
        batches = [
            files[i : i + FILES_PER_MESSAGE] for i in range(0, len(files), FILES_PER_MESSAGE)
        ]
        if not chunks and not batches and not buttons:
            if self._message is not None:  # nothing to leave: the status line goes too
                async with self._bridge._platform_call("the reply"):
                    await self._message.delete()
                self._message = None
            return
        first = chunks[0] if chunks else ""
        rest = chunks[1:]
        # The buttons go with the last part of the text; the files with it, or after it.
        if not rest:
            await self._put(first, tuple(buttons), batches[0] if batches else ())
            batches = batches[1:]
        else:
            await self._put(first, ())
        for i, chunk in enumerate(rest):
            last = i == len(rest) - 1
            await self._send_new(
                chunk,
                tuple(buttons) if last else (),
                batches[0] if last and batches else (),
            )
            if last and batches:
                batches = batches[1:]
        for batch in batches:
            await self._send_new(None, (), batch)

    async def fail(self, text: str) -> None:
        self._stop_typing()
        if text:
            await self._put(text[:MESSAGE_LIMIT], ())
        elif self._message is not None:
            async with self._bridge._platform_call("the reply"):
                await self._message.delete()
            self._message = None

    async def _put(
        self, content: str, buttons: tuple[ReplyButton, ...], files: Sequence[EgressFile] = ()
    ) -> None:
        """Post the reply (the first time) or edit it (when it changed)."""
        if self._message is None:
            self._message = await self._send_new(content, buttons, files, reply=True)
            self._stop_typing()
            return
        if not files and self._shown == (content, buttons):
            return
        options: dict[str, Any] = {
            "content": content,
            "view": _view(buttons),
            "allowed_mentions": self._mentions,
        }
        if files:
            options["attachments"] = [discord.File(io.BytesIO(f.data), f.filename) for f in files]
        async with self._bridge._platform_call("the reply's edit"):
            self._message = await self._message.edit(**options)
        self._shown = (content, buttons)

    async def _send_new(
        self,
        content: str | None,
        buttons: tuple[ReplyButton, ...],
        files: Sequence[EgressFile] = (),
        *,
        reply: bool = False,
    ) -> discord.Message:
        options: dict[str, Any] = {"allowed_mentions": self._mentions}
        if buttons:
            options["view"] = _view(buttons)
        if files:
            options["files"] = [discord.File(io.BytesIO(f.data), f.filename) for f in files]
        if reply and self._reference is not None:
            options["reference"] = self._reference
        async with self._bridge._platform_call("the reply"):
            message = await self._channel.send(content or None, **options)
        if reply:
            self._shown = (content or "", buttons)
        return message

    async def _type(self) -> None:
        self._bridge._typed_in(self._channel.id)  # asked for, as in start_typing
        async with self._bridge._platform_call("the typing indicator"):
            await self._channel.typing()

    async def _keep_typing(self, first: float) -> None:
        started = time.monotonic()
        pause = first
        while time.monotonic() - started < _TYPING_AT_MOST_S:
            await asyncio.sleep(pause)
            pause = _TYPING_EVERY_S
            try:
                await self._type()
            except BridgeError as exc:
                log.info("Discord did not renew the typing indicator (%s).", exc)

    def _stop_typing(self) -> None:
        if self._typing is not None:
            self._typing.cancel()
            self._typing = None


class _ResumePoint(msgspec.Struct, frozen=True, kw_only=True):
    """A gateway session to resume: the bridge's checkpoint."""

    session_id: str
    sequence: int
    gateway: str


class _Client(discord.Client):
    """discord.py's client with the intents the bridge needs, handing messages to it.

    Its first connection RESUMEs the session the bridge restored, if any; every later one,
    and a session Discord won't resume, goes through discord.py's own loop (IDENTIFY, then
    RESUME after a drop).
    """

    def __init__(self, bridge: DiscordBridge) -> None:
        intents = discord.Intents.default()
        intents.guilds = True
        intents.messages = True
        intents.dm_messages = True
        intents.message_content = True  # privileged: enabled in the developer portal
        super().__init__(
            intents=intents,
            # The model's text pings nobody; a reply pings its author alone (_addressed).
            allowed_mentions=discord.AllowedMentions.none(),
            max_ratelimit_timeout=30.0,
            chunk_guilds_at_startup=False,
        )
        self._bridge = bridge

    def dispatch(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        if self._bridge._dispatched(event, args):
            super().dispatch(event, *args, **kwargs)

    async def connect(self, *, reconnect: bool = True) -> None:
        point = self._bridge._take_resume()
        while point is not None and not self.is_closed():
            point = await self._resumed(point)
        if not self.is_closed():
            await super().connect(reconnect=reconnect)

    async def _resumed(self, point: _ResumePoint) -> _ResumePoint | None:
        """Hold a connection that RESUMEd ``point`` until it drops; the session to resume
        next, or None when Discord won't resume it (then a session starts afresh)."""
        try:
            connecting = discord.gateway.DiscordWebSocket.from_client(
                self,
                initial=True,
                gateway=yarl.URL(point.gateway),
                session=point.session_id,
                sequence=point.sequence,
                resume=True,
            )
            self.ws = await asyncio.wait_for(connecting, timeout=60.0)
            log.info("The Discord gateway session is resumed from event %d.", point.sequence)
            while True:
                await self.ws.poll_event()
        except discord.gateway.ReconnectWebSocket as exc:
            if not exc.resume:
                log.info("Discord did not resume the saved session; a new one is started.")
                return None
        except discord.ConnectionClosed:
            if self.is_closed():
                return None
            raise  # a close no session survives (a bad token, intents): as discord.py's loop
        except (OSError, discord.HTTPException, aiohttp.ClientError, TimeoutError):
            if self.is_closed():
                return None
            await asyncio.sleep(_FIRST_RETRY_S)
        ws = self.ws
        if ws is None or not ws.session_id or ws.sequence is None:
            return point
        return _ResumePoint(session_id=ws.session_id, sequence=ws.sequence, gateway=str(ws.gateway))

    async def on_message(self, message: discord.Message) -> None:
        await self._bridge._on_message(message)

    async def on_interaction(self, interaction: discord.Interaction[Any]) -> None:
        await self._bridge._on_interaction(interaction)


def _button_action(interaction: discord.Interaction[Any]) -> str | None:
    """The ``custom_id`` of a pressed button (a message component of type 2), else None."""
    if interaction.type is not discord.InteractionType.component:
        return None
    data: Any = interaction.data or {}
    action = data.get("custom_id")
    if data.get("component_type") != discord.ComponentType.button.value:
        return None
    return action if isinstance(action, str) and action else None


def _channel_id(thread_id: str) -> int:
    """The channel (or thread) a thread id's messages are sent to: its last part."""
    parse_space_id(thread_id)
    return int(thread_id.rsplit(":", 1)[1])


def _with_status(text: str, status: str | None) -> str:
    """``text`` with ``status`` under it as Discord's small grey subtext (``-# ``), if it fits."""
    text = text[:MESSAGE_LIMIT]
    if not status:
        return text
    line = "-# " + " ".join(status.split())
    shown = f"{text}\n\n{line}" if text else line
    return shown if len(shown) <= MESSAGE_LIMIT else text


def _view(buttons: Sequence[ReplyButton]) -> discord.ui.View | None:
    """One action row of ``buttons`` (``custom_id`` = the action), or None for no buttons.

    The view is stopped before it is sent: discord.py then only writes its components and
    keeps no callbacks for them (a press comes back as ``on_interaction``).
    """
    if not buttons:
        return None
    view = discord.ui.View(timeout=None)
    for button in buttons[:BUTTONS_PER_ROW]:
        view.add_item(
            discord.ui.Button(
                label=button.label[:_LABEL_LIMIT] or "…",
                custom_id=button.action[:_CUSTOM_ID_LIMIT],
                style=_STYLES[button.style],
                row=0,
            )
        )
    view.stop()
    return view


def _already_acknowledged(exc: BaseException) -> bool:
    cause = exc.__cause__
    if isinstance(cause, discord.InteractionResponded):
        return True
    return isinstance(cause, discord.HTTPException) and cause.code == _ALREADY_ACKNOWLEDGED


def _unknown_interaction(exc: BaseException) -> bool:
    cause = exc.__cause__
    return isinstance(cause, discord.HTTPException) and cause.code == _UNKNOWN_INTERACTION


def _chunks(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut as every platform's answer is
    (:func:`bridges.pacing.split`); blank pieces dropped, an empty text one empty piece."""
    return [part for part in split(text, limit) if part.strip()] or [text]


def _retry_after(exc: discord.HTTPException) -> float | None:
    """The wait a 429 asked for (its ``Retry-After`` header), if it said."""
    if exc.status != 429:
        return None
    try:
        return float(exc.response.headers.get("Retry-After", ""))
    except (AttributeError, ValueError):
        return None


def _status_error(
    what: str, status: int, text: str, *, code: int = 0, retry_after_s: float | None = None
) -> BridgeError:
    detail = f"{status}, {text}" + (f", code {code}" if code else "") if text else str(status)
    if status == 429 or status >= 500:
        return PlatformUnavailable(
            f"Discord answered {what} with {detail}; try again later.",
            retry_after_s=retry_after_s,
        )
    if status == 401:
        return BridgeError(
            f"Discord refused DISCORD_BOT_TOKEN for {what} ({detail}); copy the token again from "
            "the developer portal."
        )
    if status == 403:
        return BridgeError(
            f"Discord refused {what} ({detail}); give the bot View Channels, Send Messages, Send "
            "Messages in Threads, Attach Files and Read Message History in that channel."
        )
    if status == 404:
        return BridgeError(f"Discord does not know {what} ({detail}); it may have been deleted.")
    return BridgeError(f"Discord refused {what} ({detail}).")


def _closed_reason(code: int | None) -> str:
    if code == 4004:
        return (
            "Discord closed the gateway because DISCORD_BOT_TOKEN is wrong (4004); copy the token "
            "again from the developer portal."
        )
    return (
        f"Discord closed the gateway with code {code} and discord.py cannot reconnect; see "
        "Discord's gateway close codes."
    )
