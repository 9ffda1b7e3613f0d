"""A Teams reply written live (#37): streamed in a personal chat, else typing and one message.

Teams' streaming (personal chats only): the first activity is a ``typing`` activity with a
``streaminfo`` entity of type ``informative`` (the status, "Thinking…"); Teams answers it with
the stream's id. Each update is a ``typing`` activity carrying the whole text so far, of type
``streaming``, numbered by ``streamSequence``; the end is a ``message`` whose ``streaminfo``
is ``final``, which may carry the buttons' card. A connector that refuses a stream (a chat
that can't stream, a person who pressed Teams' own stop) gets the answer as one message.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Final, Literal, Protocol

from microsoft_agents.activity import Activity

from bridges.port import BridgeError, EgressFile, PlatformUnavailable, ReplyButton
from bridges.teams.cards import message, streaming, typing, with_file_names
from bridges.teams.wire import Route

__all__ = ["TeamsReply"]

#: Teams shows a typing indicator for about three seconds: it is sent again after that.
_TYPING_EVERY_S: Final = 3.0


class _ReplyHost(Protocol):
    """What a live reply asks of :class:`bridges.teams.TeamsBridge`."""

    async def reply(
        self, route: Route, conversation: str, reply_to: str, activity: Activity
    ) -> str | None: ...

    async def wrote(self, message_id: str, text: str, *, pressable: bool) -> None: ...

    async def offer(
        self, route: Route, conversation: str, reply_to: str, files: Sequence[EgressFile]
    ) -> None: ...


class TeamsReply:
    """One live reply in a Teams conversation."""

    def __init__(
        self,
        bridge: _ReplyHost,
        *,
        route: Route,
        conversation: str,
        reply_to: str,
        stream: bool,
        personal: bool,
    ) -> None:
        self._bridge = bridge
        self._route = route
        self._bot = (route.bot_id, route.bot_name)
        self._conversation = conversation
        self._reply_to = reply_to
        self._personal = personal
        self._mode: Literal["stream", "single"] = "stream" if stream else "single"
        self._stream_id: str | None = None
        self._sequence = 0
        self._shown = ""
        self._typed_at = float("-inf")

    async def _post(self, activity: Activity) -> str | None:
        return await self._bridge.reply(self._route, self._conversation, self._reply_to, activity)

    async def begin(self, status: str | None) -> None:
        """Open the stream with ``status`` (personal chats), else show the typing indicator."""
        if self._mode == "stream":
            await self._streamed(typing(bot=self._bot, informative=status or "…", sequence=1))
            return
        await self._typing()

    async def show(self, text: str, status: str | None) -> None:
        if self._mode == "stream":
            if text and text != self._shown:
                activity = streaming(
                    text, stream_id=self._stream_id, sequence=self._sequence + 1, bot=self._bot
                )
                if await self._streamed(activity):
                    self._shown = text
            elif status and not self._shown:
                await self._streamed(
                    typing(bot=self._bot, informative=status, sequence=self._sequence + 1)
                )
            return
        await self._typing()

    async def finish(
        self, text: str, buttons: Sequence[ReplyButton] = (), files: Sequence[EgressFile] = ()
    ) -> None:
        final = message(
            text if self._personal else with_file_names(text, files),
            bot=self._bot,
            buttons=buttons,
            files=files,
            stream_id=self._stream_id if self._mode == "stream" else None,
        )
        posted = await self._post(final)
        message_id = self._stream_id if self._mode == "stream" and self._stream_id else posted
        if message_id:
            await self._bridge.wrote(message_id, text, pressable=bool(buttons))
        self._shown = text
        if self._personal:
            await self._bridge.offer(self._route, self._conversation, self._reply_to, files)

    async def fail(self, text: str) -> None:
        await self.finish(text)

    async def _streamed(self, activity: Activity) -> bool:
        """Send one of the stream's activities; False (and one message from now on) where
        Teams refuses the stream. "Later" is the pacer's to wait for."""
        self._sequence += 1
        try:
            posted = await self._post(activity)
        except PlatformUnavailable:
            self._sequence -= 1
            raise
        except BridgeError:
            # A chat that can't stream, or a person who pressed Teams' own stop: the rest
            # goes as one message (the turn's own stop is the ``stop`` command).
            self._mode = "single"
            self._stream_id = None
            return False
        if self._stream_id is None and posted:
            self._stream_id = posted
        return True

    async def _typing(self) -> None:
        now = time.monotonic()
        if now - self._typed_at >= _TYPING_EVERY_S:
            self._typed_at = now
            with contextlib.suppress(BridgeError):  # a nicety: the answer goes on without it
                await self._post(typing(bot=self._bot))
