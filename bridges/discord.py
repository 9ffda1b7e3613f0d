"""The Discord bridge: a gateway connection held by discord.py, replies over Discord's REST API.

Discord delivers messages over a websocket the bot holds (the gateway), not to a URL of ours,
so this is a :class:`~bridges.port.GatewayBridge`: :meth:`DiscordBridge.run` logs in, asks
``GET /gateway/bot`` where the gateway is, connects, and hands every message a person posts
to ``deliver``; discord.py resumes or reconnects a dropped connection itself, and ``run``
logs in again after a failed login with a growing pause.

Where a message lives, as :attr:`~bridges.port.Received.thread_id` carries it::

    discord:<guild>:<channel>              a guild text (or voice, news) channel
    discord:<guild>:<channel>:<thread>     a thread or forum post, under its parent channel
    discord:@me:<channel>                  a direct message

Each of them is a space of its own (the thread id is the space id). Mentions of the bot
(``<@id>``, ``<@!id>``) read ``@<bot_name>``; other people ``@<their display name>``, roles
``@<role>``, channels ``#<channel>``, custom emoji ``:name:``. A reply goes to the message's
channel or thread as a Discord reply to it (in guilds; a DM needs none), text over 2,000
characters split, files in the last message (ten a message).

Errors are :mod:`bridges.port`'s::

    BridgeError                  Discord refused the call (403, 404, 400, a bad token)
    └── PlatformUnavailable      Discord could not be reached, answered 5xx or 429
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import re
import warnings
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

import aiohttp
import yarl

from bridges.hosts import on_platform
from bridges.port import (
    Attachment,
    BridgeError,
    Deliver,
    EgressFile,
    PlatformUnavailable,
    Received,
    ThreadInfo,
)
from core.config.settings import ConfigurationError, DiscordSettings
from core.spaces import parse_space_id

with warnings.catch_warnings():
    # discord.py imports audioop for voice, which Python 3.11 deprecates (PEP 594); the bridge
    # sends no voice, and the warning would fail every test run (filterwarnings = error).
    warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
    import discord
    import discord.gateway
    import discord.http

__all__ = ["FILES_PER_MESSAGE", "MESSAGE_LIMIT", "PLATFORM", "DiscordBridge"]

PLATFORM: Final = "discord"
#: The most characters Discord takes in one message.
MESSAGE_LIMIT: Final = 2000
#: The most files Discord takes in one message.
FILES_PER_MESSAGE: Final = 10
#: The guild part of a DM's thread id.
DM_GUILD: Final = "@me"

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


class DiscordBridge:
    """Discord through discord.py: one gateway connection, REST replies, CDN downloads.

    Nothing touches the network until :meth:`run` or the first call that needs Discord;
    the bot's own id comes from its login then. ``request_timeout`` bounds every call to
    Discord (discord.py waits out a 429 itself, up to 30 s, within it).
    """

    def __init__(
        self,
        settings: DiscordSettings,
        *,
        bot_name: str,
        request_timeout: float = 60.0,
        reply_lookup_timeout: float = 5.0,
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
        self._client: _Client | None = None
        self._login_lock = asyncio.Lock()
        self._downloads: aiohttp.ClientSession | None = None
        self._deliver: Deliver | None = None
        self._handlers: set[asyncio.Task[object]] = set()
        self._parents: OrderedDict[int, int | None] = OrderedDict()
        self._closed = False
        self._closing = asyncio.Event()

    @property
    def platform(self) -> str:
        return PLATFORM

    # -- the gateway -----------------------------------------------------------------------

    async def run(self, deliver: Deliver) -> None:
        """Hold the gateway connection and hand on every message, until cancelled or closed.

        Raises :class:`BridgeError` when Discord refuses the bot for good (a wrong token, the
        MESSAGE CONTENT intent not enabled); a login that fails for a while is tried again.
        """
        self._deliver = deliver
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
            await self._discard_client()
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
        # holds up the gateway; the tasks are kept to be cancelled when the bridge stops.
        deliver = self._deliver
        task = asyncio.current_task()
        if deliver is None or task is None:
            return
        self._handlers.add(task)
        try:
            received = await self._received(message)
            if received is not None:
                await deliver(received)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("The Discord bridge could not hand on message %s.", message.id)
        finally:
            self._handlers.discard(task)

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
        thread_id = await self._thread_id(message)
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

    async def _thread_id(self, message: discord.Message) -> str:
        channel = message.channel
        if isinstance(channel, discord.DMChannel | discord.GroupChannel):
            return f"{PLATFORM}:{DM_GUILD}:{channel.id}"
        guild_id = message.guild.id if message.guild is not None else None
        if isinstance(channel, discord.PartialMessageable):
            guild_id = guild_id or channel.guild_id
            if guild_id is None:
                return f"{PLATFORM}:{DM_GUILD}:{channel.id}"
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
                "discord:<guild>:<channel>[:<thread>] and discord:@me:<channel>."
            )
        return ThreadInfo(space_id=thread_id, conversation_external_id=thread_id, is_dm=space.is_dm)

    # -- calls to Discord ------------------------------------------------------------------

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The attachment from Discord's CDN (its link is signed; no token goes with it).

        Only Discord's hosts (or ``DISCORD_API_URL``'s) are asked, a redirect included: a
        link or a redirect to any other host is a :class:`BridgeError`.
        """
        if attachment.size_bytes is not None and attachment.size_bytes > max_bytes:
            raise BridgeError(_too_large(attachment.name, max_bytes, attachment.size_bytes))
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
                if response.content_length is not None and response.content_length > max_bytes:
                    raise BridgeError(
                        _too_large(attachment.name, max_bytes, response.content_length)
                    )
                data = bytearray()
                async for chunk in response.content.iter_chunked(64 * 1024):
                    data += chunk
                    if len(data) > max_bytes:
                        raise BridgeError(_too_large(attachment.name, max_bytes, None))
                return bytes(data)
        raise BridgeError(
            f"Discord redirected the download of {attachment.name!r} more than "
            f"{_REDIRECTS_FOLLOWED} times; it was not downloaded."
        )

    async def start_typing(self, message: Received) -> None:
        """Discord shows "<bot> is typing…" for ten seconds, or until the bot's next message."""
        client = await self._logged_in()
        channel = client.get_partial_messageable(_channel_id(message.thread_id))
        async with self._platform_call("the typing indicator"):
            await channel.typing()

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
            options: dict[str, Any] = {}
            if batch:
                options["files"] = [discord.File(io.BytesIO(f.data), f.filename) for f in batch]
            if reference is not None:
                options["reference"] = reference
            async with self._platform_call("the reply"):
                await channel.send(content, **options)
            reference = None

    async def close(self) -> None:
        """Leave the gateway, close the REST and CDN sessions, stop the handlers in flight."""
        self._closed = True
        self._closing.set()
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

    async def _discard_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
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
            raise _status_error(what, exc.status, exc.text, code=exc.code) from exc
        except discord.RateLimited as exc:
            raise PlatformUnavailable(
                f"Discord rate-limits {what} for {exc.retry_after:.0f} s; try again later."
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


class _Client(discord.Client):
    """discord.py's client with the intents the bridge needs, handing messages to it."""

    def __init__(self, bridge: DiscordBridge) -> None:
        intents = discord.Intents.default()
        intents.guilds = True
        intents.messages = True
        intents.dm_messages = True
        intents.message_content = True  # privileged: enabled in the developer portal
        super().__init__(
            intents=intents,
            # The model's text never pings @everyone or a role; a reply pings its author.
            allowed_mentions=discord.AllowedMentions(everyone=False, roles=False, users=True),
            max_ratelimit_timeout=30.0,
            chunk_guilds_at_startup=False,
        )
        self._bridge = bridge

    async def on_message(self, message: discord.Message) -> None:
        await self._bridge._on_message(message)


def _channel_id(thread_id: str) -> int:
    """The channel (or thread) a thread id's messages are sent to: its last part."""
    parse_space_id(thread_id)
    return int(thread_id.rsplit(":", 1)[1])


def _chunks(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut at a line or word where one is
    near the end (the separator dropped), else hard."""
    chunks: list[str] = []
    rest = text
    while len(rest) > limit:
        window = rest[:limit]
        cut = window.rfind("\n")
        if cut < limit // 2:
            cut = window.rfind(" ")
        if cut < limit // 2:
            chunks.append(window)
            rest = rest[limit:]
        else:
            chunks.append(rest[:cut])
            rest = rest[cut + 1 :]
    chunks.append(rest)
    return chunks


def _status_error(what: str, status: int, text: str, *, code: int = 0) -> BridgeError:
    detail = f"{status}, {text}" + (f", code {code}" if code else "") if text else str(status)
    if status == 429 or status >= 500:
        return PlatformUnavailable(f"Discord answered {what} with {detail}; try again later.")
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


def _too_large(name: str, max_bytes: int, size: int | None) -> str:
    size_text = f"is {size} bytes" if size is not None else "goes on"
    return (
        f"The attachment {name!r} {size_text}, over the cap of {max_bytes} bytes; it was not "
        "downloaded."
    )
