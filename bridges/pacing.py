"""The pacer: one answer written onto a platform's messages, as fast as the platform allows.

A renderer (:mod:`bridges.live`) offers the whole answer so far, as often as it likes;
the pacer sends the newest state at most once per ``edit_interval_s`` of the platform
(:class:`~bridges.port.LiveLimits`), so a model writing 50 tokens a second costs one
platform call a second, not 50. Opening the reply posts it and is not an edit: the first
words may follow it at once::

    offer(text, status)*  ─► [newest state kept] ─► show(text, status)  once an interval
    end(final)            ─► the rest of the text ─► finish(…, buttons, files)
                             split at max_chars on a paragraph, line, sentence or word

When the answer outgrows one message, the part that fits (cut at the best boundary,
:func:`split_point`) is finished in place and a new message is opened for the rest: the
messages, read in order, are exactly the answer, nothing lost or repeated. A platform that
can't show partial text (``partial=False``) gets each finished paragraph as a message of
its own. A platform that says "come back later" (:class:`~bridges.port.PlatformUnavailable`,
a 429's ``retry_after_s``) is waited for and the same state sent again: a delay, never a
loss. Calls to one reply are never concurrent: the pacer's own task makes them all.

An answer whose delivery was taken over from an earlier run cut short (``resume``: the
message that run posted) is written into that message (:class:`~bridges.port.ResumingBridge`),
or into a new one where it can't be written any more (deleted). The first message's reference
is handed to ``posted`` once, as soon as it is posted, for a run that takes this one over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import unicodedata
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, TypeVar

from bridges.port import BridgeError, PlatformUnavailable, ResumingBridge

if TYPE_CHECKING:
    from bridges.port import EgressFile, LiveBridge, LiveLimits, LiveReply, Received, ReplyButton

__all__ = ["MIN_FRAGMENT", "Pacer", "Units", "measure", "split", "split_point"]

log = logging.getLogger("mercury.bridges")

T = TypeVar("T")

#: How many times one call is tried while the platform keeps saying "later".
MAX_TRIES: Final = 8
#: The longest wait between two tries, whatever the platform asks (seconds).
MAX_BACKOFF_S: Final = 30.0
#: A boundary cut is taken only when it keeps at least this share of the message.
_MIN_SHARE: Final = 3
#: No message is left holding fewer characters than this (a lone emoji, a word's end) when
#: a cut a little earlier can give it more.
MIN_FRAGMENT: Final = 8
_SENTENCE_ENDS: Final = (". ", "! ", "? ", "… ", "。", "！", "？")

#: How a platform counts a message's length: code points, or UTF-16 code units (Telegram).
Units = Literal["chars", "utf16"]


def measure(text: str, units: Units = "chars") -> int:
    """``text``'s length as a platform counting ``units`` counts it."""
    if units == "chars":
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def _fitting(text: str, limit: int, units: Units) -> int:
    """How many characters of ``text`` fit in ``limit`` ``units``."""
    if units == "chars":
        return min(len(text), limit)
    used = 0
    for index, char in enumerate(text):
        used += 2 if ord(char) > 0xFFFF else 1
        if used > limit:
            return index
    return len(text)


def _extends(char: str) -> bool:
    """Whether ``char`` belongs to the grapheme before it: a combining mark, a joiner, a
    variation selector, an emoji modifier or tag (Unicode's extending characters)."""
    code = ord(char)
    return (
        unicodedata.category(char) in ("Mn", "Me", "Mc")
        or code in (0x200C, 0x200D)
        or 0xFE00 <= code <= 0xFE0F
        or 0x1F3FB <= code <= 0x1F3FF
        or 0xE0020 <= code <= 0xE007F
        or 0xE0100 <= code <= 0xE01EF
    )


def _regional(char: str) -> bool:
    return 0x1F1E6 <= ord(char) <= 0x1F1FF


def _grapheme_start(text: str, at: int) -> bool:
    """Whether a cut before ``text[at]`` falls between two graphemes (never inside an
    emoji sequence, a flag, a letter with its accents, or a CR LF)."""
    if at <= 0 or at >= len(text):
        return True
    before, after = text[at - 1], text[at]
    if _extends(after) or before == "\u200d" or (before, after) == ("\r", "\n"):
        return False
    if _regional(before) and _regional(after):
        run = 0
        while at - run - 1 >= 0 and _regional(text[at - run - 1]):
            run += 1
        return run % 2 == 0  # between two flags, never inside one
    return True


def split_point(text: str, limit: int, *, units: Units = "chars") -> int:
    """Where to cut ``text`` so that the first part holds at most ``limit`` ``units``.

    The last paragraph break in reach, else the last line break, else the last sentence
    end, else the last space; a hard cut, between two graphemes, only for a word longer than
    a message. The rest is never left under :data:`MIN_FRAGMENT` characters when a cut a
    little earlier gives it more. The boundary's own characters stay with the first part,
    so ``text[:cut] + text[cut:] == text``. ``len(text)`` when it all fits.
    """
    if limit < 1:
        raise ValueError(f"A message limit of {limit} characters holds nothing; give 1 or more.")
    fit = _fitting(text, limit, units)
    if fit >= len(text):
        return len(text)
    cut = _boundary(text, fit)
    if cut is None:
        return fit  # one grapheme longer than a message: cut it where the limit falls
    if len(text) - cut < MIN_FRAGMENT:
        least = max(MIN_FRAGMENT, fit // _MIN_SHARE)
        earlier = (
            _boundary(text, len(text) - MIN_FRAGMENT) if len(text) > 2 * MIN_FRAGMENT else None
        )
        if earlier is not None and earlier >= least:
            cut = earlier
    return cut


def _boundary(text: str, fit: int) -> int | None:
    """The best cut of ``text`` at or before ``fit`` characters (see :func:`split_point`);
    None when every cut there falls inside a grapheme."""
    head = text[:fit]
    least = max(1, fit // _MIN_SHARE)
    for mark in ("\n\n", "\n"):
        at = head.rfind(mark)
        if at >= 0 and at + len(mark) >= least:
            return at + len(mark)
    best = -1
    for mark in _SENTENCE_ENDS:
        at = head.rfind(mark)
        if at >= 0:
            best = max(best, at + len(mark))
    if best >= least:
        return best
    for at in range(fit - 1, 0, -1):
        if head[at].isspace():
            return at + 1
    for at in range(fit, 0, -1):
        if _grapheme_start(text, at):
            return at
    return None


def split(text: str, limit: int, *, units: Units = "chars") -> list[str]:
    """``text`` in messages of at most ``limit`` ``units``, cut at :func:`split_point`;
    joined they are ``text`` exactly. An empty text is one empty message."""
    parts: list[str] = []
    while measure(text, units) > limit:
        cut = split_point(text, limit, units=units)
        parts.append(text[:cut])
        text = text[cut:]
    parts.append(text)
    return parts


@dataclass(frozen=True, slots=True)
class _End:
    kind: Literal["finish", "fail"]
    text: str
    buttons: Sequence[ReplyButton] = ()
    files: Sequence[EgressFile] = ()


class Pacer:
    """One answer to ``to``, paced onto ``bridge``'s messages (see the module docstring).

    ``open`` first; then ``offer`` any number of times (it never waits); then ``end`` or
    ``fail`` once, which wait until the platform has the last word. ``clock`` and ``sleep``
    are injected for tests.
    """

    def __init__(
        self,
        bridge: LiveBridge,
        to: Received,
        *,
        limits: LiveLimits,
        status: str | None,
        buttons: Sequence[ReplyButton] = (),
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        resume: str | None = None,
        posted: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self._bridge = bridge
        #: The bridge as one whose messages a later run can write on (None where it can't).
        self._resuming = bridge if isinstance(bridge, ResumingBridge) else None
        self._resume = resume
        self._posted = posted
        self._to = to
        self.limits = limits
        self._buttons = tuple(buttons)
        self._clock = clock
        self._sleep = sleep
        #: The answer so far and the status line, as last offered.
        self._text = ""
        self._status = status
        #: Characters of the answer left for good in earlier messages.
        self._committed = 0
        #: What the current reply shows: (text, status).
        self._shown: tuple[str, str | None] = ("", status)
        self._reply: LiveReply | None = None
        self._next_at = 0.0
        self._wake = asyncio.Event()
        self._end: _End | None = None
        self._task: asyncio.Task[None] | None = None
        #: Platform calls made (a figure for the bench and the tests).
        self.calls = 0
        #: The answer's first message (the one whose reference ``posted`` is given), and the
        #: message an earlier run left while it is not written yet.
        self._head: LiveReply | None = None
        self._resumed: LiveReply | None = None
        self._noted = False
        #: Whether the answer's last word (``end`` or ``fail``) reached the platform.
        self.delivered = False

    @property
    def shown_text(self) -> str:
        """The answer as far as the platform has it (earlier messages and the current one)."""
        return self._text[: self._committed] + self._shown[0]

    async def open(self) -> None:
        """Open the first reply (showing the status) and start pacing."""
        try:
            self._reply = await self._first()
            await self._note_posted(self._reply)
        except BridgeError as error:
            log.warning("a live %s answer was not opened: %s", self._to.platform, error)
        except Exception:
            log.exception("a live %s answer failed to open", self._to.platform)
        else:
            # Opening posts the message (or the status); the first words are its first
            # edit, due at once: the first words show as soon as the model writes them.
            self._next_at = self._clock()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def offer(self, text: str, status: str | None) -> None:
        """The answer so far is ``text`` (it only grows), with ``status``; never waits."""
        if text == self._text and status == self._status:
            return
        self._text, self._status = text, status
        self._wake.set()

    async def end(
        self, text: str, buttons: Sequence[ReplyButton] = (), files: Sequence[EgressFile] = ()
    ) -> None:
        """Leave ``text`` as the answer for good, with ``buttons`` and ``files``."""
        await self._close(_End("finish", text, tuple(buttons), tuple(files)))

    async def fail(self, text: str) -> None:
        """Replace what is shown with ``text`` (an error's sentence), for good."""
        await self._close(_End("fail", text))

    async def _close(self, end: _End) -> None:
        self._end = end
        self._wake.set()
        if self._task is None:
            await self._last(end)
            return
        try:
            await asyncio.shield(self._task)
        except asyncio.CancelledError:
            self._task.cancel()
            raise

    async def cancel(self) -> None:
        """Stop pacing without a last word (a shutdown)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    # ---------------------------------------------------------------- the pacer's task

    async def _run(self) -> None:
        while self._end is None:
            await self._wake.wait()
            self._wake.clear()
            await self._wait_turn()
            if self._end is not None:
                break
            try:
                await self._flush()
            except BridgeError as error:
                # Nothing is lost: the next update carries the whole answer so far.
                log.warning("a live %s update was not shown: %s", self._to.platform, error)
            except Exception:
                # A platform file's mistake must not fail the delivery: it would run the
                # whole turn again.
                log.exception("a live %s update failed", self._to.platform)
        try:
            await self._last(self._end)
        except BridgeError as error:
            # The answer is in the conversation's history on our side.
            log.warning("a live %s answer was not finished: %s", self._to.platform, error)
        except Exception:
            log.exception("a live %s answer failed to finish", self._to.platform)

    async def _flush(self) -> None:
        """Send the newest state: finished parts in messages of their own, the rest shown."""
        limits = self.limits
        if not limits.partial:
            rest = self._text[self._committed :]
            at = rest.rfind("\n\n")
            if at >= 0:
                for part in split(rest[: at + 2], limits.max_chars, units=limits.units):
                    await self._finish_part(part)
            return
        while measure(self._text[self._committed :], limits.units) > limits.max_chars:
            rest = self._text[self._committed :]
            await self._finish_part(rest[: split_point(rest, limits.max_chars, units=limits.units)])
        state = (self._text[self._committed :], self._status)
        if state != self._shown:
            await self._write(lambda reply: reply.show(*state))
            self._shown = state

    async def _finish_part(self, part: str) -> None:
        """Leave ``part`` in the current message for good, and start a new one."""
        await self._write(lambda reply: reply.finish(part))
        self._committed += len(part)
        self._reply = None
        self._shown = ("", None)

    async def _current(self) -> LiveReply:
        if self._reply is None:
            self._reply = await self._call(self._open)
            if self._head is None:
                self._head = self._reply
        return self._reply

    async def _first(self) -> LiveReply:
        """The answer's first reply: the message an earlier run left where there is one
        and the platform can still write on it, else a new one."""
        bridge, ref = self._resuming, self._resume
        if ref is not None and bridge is not None:
            try:
                reply = await self._call(
                    lambda: bridge.reopen_reply(
                        self._to, ref, status=self._status, buttons=self._buttons
                    )
                )
            except BridgeError as error:
                self._anew(error)
            else:
                self._head = self._resumed = reply
                return reply
        self._head = await self._call(self._open)
        return self._head

    def _anew(self, error: BridgeError) -> None:
        log.info("a %s answer left by an earlier run is posted anew: %s", self._to.platform, error)

    async def _write(self, act: Callable[[LiveReply], Awaitable[None]]) -> None:
        """``act`` on the current reply; where that is the message an earlier run left and it
        can't be written any more (deleted), on a new one."""
        reply = await self._current()
        try:
            await self._call(lambda: act(reply))
        except BridgeError as error:
            if reply is not self._resumed:
                raise
            self._anew(error)
            self._resumed = self._head = self._reply = None
            reply = await self._current()
            await self._call(lambda: act(reply))
        self._resumed = None
        await self._note_posted(reply)

    async def _note_posted(self, reply: LiveReply) -> None:
        """Hand the first message's reference to ``posted``, once, as soon as it is posted."""
        bridge = self._resuming
        if self._noted or self._posted is None or bridge is None or reply is not self._head:
            return
        ref = bridge.reply_ref(reply)
        if ref is None:
            return
        self._noted = True
        if ref == self._resume:
            return  # kept with the delivery already
        try:
            await self._posted(ref)
        except Exception:
            # Only a takeover's help: the answer goes on without it.
            log.warning(
                "a live %s answer's message was not noted", self._to.platform, exc_info=True
            )

    def _open(self) -> Awaitable[LiveReply]:
        status = self._status if self._text == "" and self._committed == 0 else None
        return self._bridge.open_reply(self._to, status=status, buttons=self._buttons)

    async def _last(self, end: _End) -> None:
        if end.kind == "fail":
            await self._write(lambda reply: reply.fail(end.text))
            self.delivered = True
            return
        done = self._text[: self._committed]
        if end.text.startswith(done):
            rest = end.text[self._committed :]
        else:
            # The answer changed under a message already left for good (it never does:
            # ``final`` extends what streamed); what is in it stays, the answer follows whole.
            log.warning("a live %s answer changed after it was split", self._to.platform)
            rest = end.text
        *parts, last = split(rest, self.limits.max_chars, units=self.limits.units)
        for part in parts:
            await self._finish_part(part)
        await self._write(lambda reply: reply.finish(last, end.buttons, end.files))
        self.delivered = True
        self._shown = (last, None)
        self._text, self._committed = end.text, len(end.text) - len(last)

    # ---------------------------------------------------------------- one call, paced

    async def _wait_turn(self) -> None:
        delay = self._next_at - self._clock()
        if delay > 0:
            await self._sleep(delay)

    async def _call(self, make: Callable[[], Awaitable[T]]) -> T:
        """``make()`` awaited in its turn; tried again while the platform says "later"."""
        for attempt in range(1, MAX_TRIES + 1):
            await self._wait_turn()
            self.calls += 1
            try:
                result = await make()
            except PlatformUnavailable as error:
                wait = error.retry_after_s
                if wait is None:
                    wait = min(MAX_BACKOFF_S, self.limits.edit_interval_s * 2**attempt)
                self._next_at = self._clock() + min(max(wait, 0.0), MAX_BACKOFF_S)
                if attempt == MAX_TRIES:
                    raise
                if error.retry_after_s is not None:  # the platform answered: a rate limit
                    log.info("%s asked to wait %.1f s: %s", self._to.platform, wait, error)
                elif attempt == 1:  # it didn't answer: said once, not at every try
                    log.info(
                        "%s can't be reached now (%s); trying again, the first time in %.1f s",
                        self._to.platform,
                        str(error).rstrip("."),
                        wait,
                    )
                continue
            self._next_at = self._clock() + self.limits.edit_interval_s
            return result
        raise BridgeError("unreachable")  # pragma: no cover
