"""A Matrix reply written live (#37): one message posted with the first words, then edited
(``m.replace``) until its last edit is the final answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from bridges.port import EgressFile, Received, ReplyButton

__all__ = ["LiveMatrixReply"]


class _ReplyHost(Protocol):
    """What a live reply asks of the bridge that opened it (:class:`MatrixBridge`)."""

    async def post(self, to: Received, text: str, *, answering: bool = True) -> str: ...

    async def edit(self, to: Received, event_id: str, text: str) -> None: ...

    async def send_file(self, to: Received, file: EgressFile) -> None: ...

    async def stop_typing(self, to: Received) -> None: ...


def _preview(text: str, status: str | None) -> str:
    """The text so far, and the status line under it."""
    return f"{text}\n\n{status}" if status else text


class LiveMatrixReply:
    """One reply being written: posted when it has words, edited after.

    The room shows "is typing…" (the pipeline's) until the first words; a status alone is
    not posted. Calls come one at a time (the pacer's), so the state needs no lock.
    """

    def __init__(self, bridge: _ReplyHost, to: Received, *, event_id: str | None = None) -> None:
        """``event_id``: the message an earlier run posted, replaced from the first update."""
        self._bridge = bridge
        self._to = to
        self._event_id = event_id
        self._shown: str | None = None
        #: How many steps of ``finish`` are done (a retried finish goes on from there).
        self._done = 0

    @property
    def event_id(self) -> str | None:
        """The reply's event id, once posted."""
        return self._event_id

    async def show(self, text: str, status: str | None) -> None:
        if not text:
            return  # nothing to post yet: the room shows typing
        shown = _preview(text, status)
        if shown == self._shown:
            return
        await self._put(shown)
        self._shown = shown

    async def _put(self, text: str) -> None:
        if self._event_id is None:
            self._event_id = await self._bridge.post(self._to, text)
            await self._bridge.stop_typing(self._to)
        elif text != self._shown:
            await self._bridge.edit(self._to, self._event_id, text)
        self._shown = text

    async def finish(
        self, text: str, buttons: Sequence[ReplyButton] = (), files: Sequence[EgressFile] = ()
    ) -> None:
        """The final text (its one message), then the files; tried again after a 429, it
        goes on where it stopped."""
        steps = 0
        if text:
            steps += 1
            if self._done < steps:
                await self._put(text)
                self._done += 1
        for file in files:
            steps += 1
            if self._done < steps:
                await self._bridge.send_file(self._to, file)
                self._done += 1
        if not text and not files and self._event_id is None:
            await self._bridge.stop_typing(self._to)

    async def fail(self, text: str) -> None:
        await self._put(text)
