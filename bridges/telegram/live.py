"""A Telegram reply written live (#37): a draft in a private chat, else a message posted
and edited."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Protocol, TypeVar

from telegram import (
    Bot,
    InlineKeyboardMarkup,
    InputFile,
    ReplyParameters,
)

from bridges.port import (
    BridgeError,
    EgressFile,
    Received,
    ReplyButton,
)
from bridges.telegram.text import _keyboard, _preview, quiet, split_text

#: How long a reply's status is kept alive at most (a reply never finished stops there).
_KEEPALIVE_MAX_S: Final = 15 * 60.0


log = logging.getLogger("mercury.bridges.telegram")

_T = TypeVar("_T")


class _Kept(Protocol):
    """Where the bridge keeps the texts of the messages it wrote (to settle a press on one)."""

    def keep(self, key: tuple[int, int], value: str) -> None: ...


class _ReplyHost(Protocol):
    """What a live reply asks of the bridge that opened it
    (:class:`bridges.telegram.TelegramBridge`): its Bot API calls and the texts it keeps."""

    @property
    def _bot(self) -> Bot: ...

    @property
    def _texts(self) -> _Kept: ...

    async def _call(self, method: str, call: Awaitable[_T]) -> _T: ...

    async def _edit(
        self, chat_id: int, message_id: int, text: str, markup: InlineKeyboardMarkup | None
    ) -> None: ...

    async def _type(
        self, chat_id: int, topic: int | None, *, unless_shown: bool = False
    ) -> None: ...


class _LiveReply:
    """One reply being written: a draft in a private chat, else a message posted then edited.

    Calls come one at a time (the pacer's), so the state needs no lock.
    """

    def __init__(
        self,
        bridge: _ReplyHost,
        to: Received,
        chat_id: int,
        topic: int | None,
        buttons: Sequence[ReplyButton],
        *,
        message_id: int | None = None,
    ) -> None:
        """``message_id``: a group's message an earlier run posted, edited from the first
        update on."""
        self._bridge = bridge
        self._to = to
        self._chat_id = chat_id
        self._topic = topic
        self._stop = _keyboard(buttons)
        self._can_stop = bool(buttons)
        #: Nonzero, random: a new draft for every reply (the same id would animate from the
        #: last reply's text).
        self.draft_id = secrets.randbelow(2**31 - 1) + 1
        self._message_id = message_id
        self._shown: str | None = None
        #: How many steps of ``finish`` are done (a retried finish goes on from there).
        self._done = 0
        #: The task keeping the status alive (see :meth:`keep_alive`); set by the bridge.
        self.keeping: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._last_call = time.monotonic()

    @property
    def message_id(self) -> str | None:
        """The message posted in a group, once posted; None in a private chat (a draft)."""
        if self._to.is_dm or self._message_id is None:
            return None
        return str(self._message_id)

    @property
    def _bot(self) -> Bot:
        return self._bridge._bot

    async def type(self, *, unless_shown: bool = False) -> None:
        """``typing…`` in the reply's chat and topic (see :meth:`TelegramBridge._type`)."""
        await self._bridge._type(self._chat_id, self._topic, unless_shown=unless_shown)
        self._last_call = time.monotonic()

    async def keep_alive(self, every_s: float) -> None:
        """Until the reply ends: a draft unchanged for ``every_s`` is sent again; in a group,
        ``typing…`` again every ``every_s`` until the message is posted. Best effort: a
        refused refresh is only logged."""
        until = time.monotonic() + _KEEPALIVE_MAX_S
        while time.monotonic() < until:
            await asyncio.sleep(max(self._last_call + every_s - time.monotonic(), 0.05))
            if time.monotonic() - self._last_call < every_s:
                continue
            if not self._to.is_dm and self._message_id is not None:
                return
            try:
                async with self._lock:
                    if self._to.is_dm:
                        await self._draft(self._shown or "")
                    else:
                        await self.type()
            except BridgeError as exc:
                log.info("A Telegram status was not kept alive: %s", exc)
                self._last_call = time.monotonic()

    async def _settled(self) -> None:
        """The keep-alive stopped, and any refresh it had under way done with."""
        if self.keeping is not None:
            self.keeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.keeping

    async def _draft(self, shown: str) -> None:
        # An empty draft is Telegram's own "Thinking…" placeholder.
        extra = {"can_stop": True} if self._can_stop else None
        await self._bridge._call(
            "sendMessageDraft",
            self._bot.send_message_draft(
                self._chat_id,
                self.draft_id,
                shown,
                message_thread_id=self._topic,
                api_kwargs=extra,
            ),
        )
        self._last_call = time.monotonic()

    async def show(self, text: str, status: str | None) -> None:
        async with self._lock:
            await self._show(text, status)

    async def _show(self, text: str, status: str | None) -> None:
        shown = _preview(quiet(text), status)
        if shown == self._shown:
            return
        if self._to.is_dm:
            await self._draft(shown)
        elif not shown:
            return  # nothing to post yet (the chat shows typing), or to edit a message into
        elif self._message_id is None:
            self._message_id = await self._post(shown, self._stop)
        else:
            await self._bridge._edit(self._chat_id, self._message_id, shown, self._stop)
        self._shown = shown

    async def finish(
        self, text: str, buttons: Sequence[ReplyButton] = (), files: Sequence[EgressFile] = ()
    ) -> None:
        """The text (in more messages past 4,096 units, the buttons under the last), then the
        files. Tried again after a 429 with the same arguments, it goes on where it stopped:
        nothing is sent twice."""
        await self._settled()
        parts = split_text(quiet(text))
        markup = _keyboard(buttons)
        steps: list[Callable[[], Awaitable[None]]] = []
        for index, part in enumerate(parts):
            keys = markup if index == len(parts) - 1 else None
            steps.append(functools.partial(self._leave, index, part, keys))
        if not parts and self._message_id is not None:
            steps.append(self._remove)  # files alone: the status shown so far goes
        steps.extend(functools.partial(self._send_file, file) for file in files)
        for step in steps[self._done :]:
            await step()
            self._done += 1

    async def _leave(self, index: int, part: str, markup: InlineKeyboardMarkup | None) -> None:
        """Part ``index`` of the final text, in the message shown so far for the first."""
        if index == 0 and self._message_id is not None:
            await self._bridge._edit(self._chat_id, self._message_id, part, markup)
            message_id = self._message_id
        else:
            message_id = await self._post(part, markup)
        if markup is not None:
            self._bridge._texts.keep((self._chat_id, message_id), part)

    async def _remove(self) -> None:
        if self._message_id is not None:
            await self._bridge._call(
                "deleteMessage", self._bot.delete_message(self._chat_id, self._message_id)
            )

    async def _send_file(self, file: EgressFile) -> None:
        document = InputFile(file.data, filename=file.filename)
        document.mimetype = file.mime_type
        await self._bridge._call(
            "sendDocument",
            self._bot.send_document(self._chat_id, document, message_thread_id=self._topic),
        )

    async def fail(self, text: str) -> None:
        await self._settled()
        for index, part in enumerate(split_text(text) or [text]):
            if index == 0 and self._message_id is not None:
                await self._bridge._edit(self._chat_id, self._message_id, part, None)
            else:
                await self._post(part, None)

    async def _post(self, text: str, markup: InlineKeyboardMarkup | None) -> int:
        """A new message in the reply's chat and topic; the first answers ``to`` in a group."""
        answer = None
        if not self._to.is_dm and self._message_id is None:
            answer = ReplyParameters(int(self._to.message_id), allow_sending_without_reply=True)
        sent = await self._bridge._call(
            "sendMessage",
            self._bot.send_message(
                self._chat_id,
                text,
                message_thread_id=self._topic,
                reply_parameters=answer,
                reply_markup=markup,
            ),
        )
        if self._message_id is None:
            self._message_id = sent.message_id
        return sent.message_id
