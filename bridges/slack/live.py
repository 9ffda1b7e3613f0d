"""A Slack reply written live (#37): streamed natively in its thread, or posted and edited."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Final, Literal, Protocol

from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bridges.port import (
    EgressFile,
    ReplyButton,
)
from bridges.slack.blocks import _button, _context, _escape, _sections
from bridges.slack.wire import _Refused

#: What ``chat.startStream`` answers where the workspace has no streaming for this app: the
#: method unknown or retired there, a token type it does not take, arguments it does not know.
#: Remembered for the workspace: its replies go by ``chat.postMessage`` + ``chat.update``.
_NO_STREAMING: Final = frozenset(
    {
        "unknown_method",
        "method_deprecated",
        "deprecated_endpoint",
        "not_allowed_token_type",
        "invalid_arguments",
        "feature_not_enabled",
        "not_allowed",
        # The app without the Agents & AI Apps feature (its assistant:write scope).
        "missing_scope",
    }
)
#: What ``chat.startStream`` answers where this one conversation can't stream (a channel type
#: it does not serve): that reply goes by post and edit, the workspace keeps streaming.
_NO_STREAMING_HERE: Final = frozenset(
    {"channel_type_not_supported", "missing_recipient_user_id", "missing_recipient_team_id"}
)


class _ReplyHost(Protocol):
    """What a live reply asks of the bridge that opened it (:class:`bridges.slack.SlackBridge`):
    its client, its Web API calls and what it remembers of the workspace and its threads."""

    _client: AsyncWebClient

    async def _call(
        self, method: str, call: Callable[[], Awaitable[AsyncSlackResponse]]
    ) -> AsyncSlackResponse: ...

    async def _set_status(self, channel: str, thread_ts: str, status: str) -> bool: ...

    async def _upload(
        self, channel: str, thread_ts: str | None, files: Sequence[EgressFile]
    ) -> None: ...

    def _wrote(self, channel: str, ts: str, thread_ts: str | None) -> None: ...

    def _streaming_refused(self, code: str) -> None: ...


class _SlackReply:
    """One live reply: a native stream in its thread, or a message posted and edited.

    Streaming (``chat.startStream`` → ``chat.appendStream`` with the new text only →
    ``chat.stopStream``): the stream only grows, so the status goes to the thread's status
    (``assistant.threads.setStatus``) and the stop button rides at the stream's head as a
    blocks chunk; the end replaces the whole message (``chat.update``) with the final text
    and its buttons, so the stop button goes. Where the workspace has no streaming, or the
    stream ended under us (``message_not_in_streaming_state``), the message is posted once
    and edited (``chat.update``), the status a line under the text.
    """

    def __init__(
        self,
        bridge: _ReplyHost,
        *,
        channel: str,
        thread_ts: str | None,
        conversation: str,
        recipient_user: str,
        recipient_team: str | None,
        stream: bool,
        stop: tuple[ReplyButton, ...],
    ) -> None:
        self._bridge = bridge
        self._client = bridge._client
        self._channel = channel
        self._thread_ts = thread_ts
        self._block_id = conversation
        self._recipient_user = recipient_user
        self._recipient_team = recipient_team
        self._mode: Literal["stream", "edit"] = "stream" if stream else "edit"
        self._stop = stop
        #: The message's ts, once posted or started.
        self._ts: str | None = None
        #: The text the message shows (as given, unescaped) and its status line.
        self._shown = ""
        self._status: str | None = None
        #: Whether the thread's status was set (and so must be cleared at the end).
        self._thread_status = False
        #: Whether the stream carries the stop button (the end then rewrites the message).
        self._stream_has_stop = False

    @property
    def ts(self) -> str | None:
        """The message's ``ts``, once posted or started."""
        return self._ts

    async def resume(self, ts: str, status: str | None) -> None:
        """Write on in the message ``ts`` an earlier run left: its stream ended (when it still
        is one), then edited to show ``status`` and the stop button."""
        self._ts = ts
        await self._stop_stream(ts, "")
        await self._update(ts, "", status, self._stop)

    # -- the contract ---------------------------------------------------------------------

    async def begin(self, status: str | None) -> None:
        """Show ``status`` and the stop button, as the mode can."""
        if self._mode == "stream":
            self._status = status
            if status and self._thread_ts is not None:
                self._thread_status = await self._bridge._set_status(
                    self._channel, self._thread_ts, status
                )
            if self._stop:
                await self._start("")
            return
        if status or self._stop:
            await self._edit("", status, self._stop)

    async def show(self, text: str, status: str | None) -> None:
        if self._mode == "stream" and not text.startswith(self._shown):
            await self._leave_stream()
        if self._mode == "edit":
            if self._ts is None or (text, status) != (self._shown, self._status):
                await self._edit(text, status, self._stop)
            return
        if self._ts is None:
            if text:
                await self._start(text)
        elif len(text) > len(self._shown):
            await self._append(self._ts, text)
        if self._mode == "stream" and status != self._status and self._thread_ts is not None:
            if status or self._thread_status:
                self._thread_status = await self._bridge._set_status(
                    self._channel, self._thread_ts, status or ""
                ) and bool(status)
            self._status = status

    async def finish(
        self, text: str, buttons: Sequence[ReplyButton] = (), files: Sequence[EgressFile] = ()
    ) -> None:
        if self._mode == "stream" and self._ts is not None:
            grows = text.startswith(self._shown)
            await self._stop_stream(self._ts, text[len(self._shown) :] if grows else "")
            if self._stream_has_stop or buttons or not grows:
                await self._update(self._ts, text, None, buttons)
        elif self._ts is None:
            await self._post(text, None, buttons)
        else:
            await self._update(self._ts, text, None, buttons)
        self._shown = text
        await self._clear_status()
        await self._bridge._upload(self._channel, self._thread_ts, files)

    async def fail(self, text: str) -> None:
        if self._mode == "stream" and self._ts is not None:
            await self._stop_stream(self._ts, "")
        if self._ts is None:
            await self._post(text, None, ())
        else:
            await self._update(self._ts, text, None, ())
        self._shown = text
        await self._clear_status()

    # -- streaming ------------------------------------------------------------------------

    async def _start(self, text: str) -> None:
        """``chat.startStream`` in the thread with ``text`` (and the stop button at its head);
        where the workspace has no streaming, the post-and-edit message instead."""
        if self._thread_ts is None:  # never: a stream is only chosen in a thread
            self._mode = "edit"
            await self._edit(text, self._status, self._stop)
            return
        chunks: list[dict[str, Any]] = []
        if self._stop:
            chunks.append({"type": "blocks", "blocks": [self._actions(self._stop)]})
        if text:
            chunks.append({"type": "markdown_text", "text": _escape(text)})
        try:
            answer = await self._bridge._call(
                "chat.startStream",
                partial(
                    self._client.chat_startStream,
                    channel=self._channel,
                    thread_ts=self._thread_ts,
                    recipient_user_id=self._recipient_user,
                    recipient_team_id=self._recipient_team,
                    chunks=chunks,
                ),
            )
        except _Refused as refused:
            if refused.code not in _NO_STREAMING | _NO_STREAMING_HERE:
                raise
            self._bridge._streaming_refused(refused.code)
            self._mode = "edit"
            await self._edit(text, self._status, self._stop)
            return
        self._ts = str(answer["ts"])
        self._shown = text
        self._stream_has_stop = bool(self._stop)
        self._bridge._wrote(self._channel, self._ts, self._thread_ts)

    async def _append(self, ts: str, text: str) -> None:
        """``chat.appendStream`` with what ``text`` adds to what is shown."""
        try:
            await self._bridge._call(
                "chat.appendStream",
                partial(
                    self._client.chat_appendStream,
                    channel=self._channel,
                    ts=ts,
                    markdown_text=_escape(text[len(self._shown) :]),
                ),
            )
        except _Refused as refused:
            if refused.code != "message_not_in_streaming_state":
                raise
            # Slack ended the stream (it does after a while): the message goes on by edits.
            self._mode = "edit"
            await self._update(ts, text, self._status, self._stop)
            return
        self._shown = text

    async def _stop_stream(self, ts: str, delta: str) -> None:
        try:
            await self._bridge._call(
                "chat.stopStream",
                partial(
                    self._client.chat_stopStream,
                    channel=self._channel,
                    ts=ts,
                    markdown_text=_escape(delta) if delta else None,
                ),
            )
        except _Refused as refused:
            if refused.code != "message_not_in_streaming_state":
                raise
            # Already ended by Slack: the update that follows writes the whole text.
            self._stream_has_stop = True
            return
        self._shown += delta

    async def _leave_stream(self) -> None:
        """Go on by edits (the text changed where a stream can only grow)."""
        if self._ts is not None:
            await self._stop_stream(self._ts, "")
            self._stream_has_stop = True
        self._mode = "edit"

    # -- post and edit --------------------------------------------------------------------

    async def _edit(self, text: str, status: str | None, buttons: Sequence[ReplyButton]) -> None:
        if self._ts is None:
            await self._post(text, status, buttons)
        else:
            await self._update(self._ts, text, status, buttons)

    async def _post(self, text: str, status: str | None, buttons: Sequence[ReplyButton]) -> None:
        answer = await self._bridge._call(
            "chat.postMessage",
            partial(
                self._client.chat_postMessage,
                channel=self._channel,
                thread_ts=self._thread_ts,
                text=_escape(text or status or "…"),
                blocks=self._blocks(text, status, buttons),
            ),
        )
        self._ts = str(answer["ts"])
        self._shown, self._status = text, status
        self._bridge._wrote(self._channel, self._ts, self._thread_ts)

    async def _update(
        self, ts: str, text: str, status: str | None, buttons: Sequence[ReplyButton]
    ) -> None:
        await self._bridge._call(
            "chat.update",
            partial(
                self._client.chat_update,
                channel=self._channel,
                ts=ts,
                text=_escape(text or status or "…"),
                blocks=self._blocks(text, status, buttons),
            ),
        )
        self._shown, self._status = text, status

    async def _clear_status(self) -> None:
        if self._thread_status and self._thread_ts is not None:
            await self._bridge._set_status(self._channel, self._thread_ts, "")
            self._thread_status = False

    # -- Block Kit ------------------------------------------------------------------------

    def _blocks(
        self, text: str, status: str | None, buttons: Sequence[ReplyButton]
    ) -> list[dict[str, Any]]:
        blocks = _sections(text)
        if status:
            blocks.append(_context(status))
        if buttons:
            blocks.append(self._actions(buttons))
        return blocks

    def _actions(self, buttons: Sequence[ReplyButton]) -> dict[str, Any]:
        """An ``actions`` block, its ``block_id`` the conversation the reply belongs to (read
        back when a button is pressed)."""
        return {
            "type": "actions",
            "block_id": self._block_id,
            "elements": [_button(button) for button in buttons],
        }
