"""What the bot posts to Teams: message activities, with buttons as an Adaptive Card whose
``Action.Submit`` hands the button's action back, and small images inline."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any, Final

from microsoft_agents.activity import Activity, Attachment, ChannelAccount, StreamInfo

from bridges.port import EgressFile, ReplyButton
from bridges.teams.wire import ACTION_KEY

__all__ = [
    "ADAPTIVE_CARD",
    "FILE_CONSENT",
    "FILE_INFO",
    "FILE_KEY",
    "INLINE_IMAGE_MAX_BYTES",
    "MAX_MESSAGE_CHARS",
    "consent",
    "file_info",
    "message",
    "streaming",
    "typing",
    "with_file_names",
]

#: The most one message's text holds here: Teams refuses a message past about 28 KB, and a
#: character may take four bytes.
MAX_MESSAGE_CHARS: Final = 6_000
#: Images up to this size go inline (a ``data:`` URL) with the message; Teams has no other
#: way for a bot to post a file into a group chat or a channel.
INLINE_IMAGE_MAX_BYTES: Final = 16 * 1024
ADAPTIVE_CARD: Final = "application/vnd.microsoft.card.adaptive"
#: A file offered in a personal chat: the person accepts (Teams then hands an upload URL in
#: their OneDrive) or declines.
FILE_CONSENT: Final = "application/vnd.microsoft.teams.card.file.consent"
#: A file in the person's OneDrive, shown in the chat.
FILE_INFO: Final = "application/vnd.microsoft.teams.card.file.info"
#: The key of a consent card's context that names the offered file.
FILE_KEY: Final = "mercuryFile"
_INLINE_TYPES: Final = frozenset({"image/png", "image/jpeg", "image/gif"})
_STYLES: Final = {"primary": "positive", "danger": "destructive"}
_LABEL_MAX_CHARS: Final = 80


def _sender(bot: tuple[str, str | None] | None) -> dict[str, Any]:
    """The activity's ``from`` (the bot), where it is known."""
    if bot is None:
        return {}
    account = {"id": bot[0], **({"name": bot[1]} if bot[1] else {})}
    return {"from_property": ChannelAccount(**account)}


def message(
    text: str,
    *,
    bot: tuple[str, str | None] | None = None,
    buttons: Sequence[ReplyButton] = (),
    files: Sequence[EgressFile] = (),
    note: str | None = None,
    stream_id: str | None = None,
) -> Activity:
    """A message: ``text`` as Teams' markdown, ``buttons`` (and ``note``, a line in small
    print) in an Adaptive Card under it, the images of ``files`` small enough inline.
    ``stream_id`` makes it the final message of that stream."""
    attachments: list[Attachment] = []
    if buttons or note:
        attachments.append(card(buttons, note))
    attachments.extend(inline_images(files))
    extra: dict[str, Any] = {"attachments": attachments} if attachments else {}
    activity = Activity(type="message", text=text, text_format="markdown", **_sender(bot), **extra)
    if stream_id is not None:
        activity.entities = [StreamInfo(stream_type="final", stream_id=stream_id)]
    return activity


def typing(
    *, bot: tuple[str, str | None] | None = None, informative: str | None = None, sequence: int = 0
) -> Activity:
    """The typing indicator; with ``informative``, a stream's first activity showing it."""
    activity = Activity(type="typing", **_sender(bot))
    if informative is not None:
        activity.text = informative
        activity.entities = [StreamInfo(stream_type="informative", stream_sequence=sequence)]
    return activity


def streaming(
    text: str, *, stream_id: str | None, sequence: int, bot: tuple[str, str | None] | None = None
) -> Activity:
    """A stream's update: the whole text so far, numbered."""
    info = StreamInfo(stream_type="streaming", stream_sequence=sequence)
    if stream_id:
        info.stream_id = stream_id
    return Activity(type="typing", text=text, entities=[info], **_sender(bot))


def card(buttons: Sequence[ReplyButton], note: str | None = None) -> Attachment:
    """An Adaptive Card with ``note`` in small print and one ``Action.Submit`` a button."""
    body: list[dict[str, Any]] = []
    if note:
        body.append({"type": "TextBlock", "text": note, "wrap": True, "isSubtle": True})
    actions: list[dict[str, Any]] = []
    for button in buttons:
        action: dict[str, Any] = {
            "type": "Action.Submit",
            "title": button.label[:_LABEL_MAX_CHARS] or "…",
            "data": {ACTION_KEY: button.action},
        }
        if button.style in _STYLES:
            action["style"] = _STYLES[button.style]
        actions.append(action)
    content = {
        "type": "AdaptiveCard",
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "version": "1.4",
        "body": body,
        "actions": actions,
    }
    return Attachment(content_type=ADAPTIVE_CARD, content=content)


def inline_images(files: Sequence[EgressFile]) -> list[Attachment]:
    """The images of ``files`` small enough to go inline, as ``data:`` URLs."""
    return [
        Attachment(
            content_type=file.mime_type,
            content_url=f"data:{file.mime_type};base64,{base64.b64encode(file.data).decode()}",
            name=file.filename,
        )
        for file in files
        if is_inline(file)
    ]


def is_inline(file: EgressFile) -> bool:
    """Whether ``file`` goes inline with the message (a small PNG, JPEG or GIF)."""
    return file.mime_type in _INLINE_TYPES and len(file.data) <= INLINE_IMAGE_MAX_BYTES


def with_file_names(text: str, files: Sequence[EgressFile]) -> str:
    """``text`` with a line naming each file that can't go with a Teams message (in a
    channel or a group chat, where no file consent card can be offered)."""
    named = [f"📎 {file.filename}" for file in files if not is_inline(file)]
    return "\n\n".join([text, *named]) if named else text


def consent(file: EgressFile, token: str, *, bot: tuple[str, str | None] | None = None) -> Activity:
    """A message offering ``file`` (a file consent card); ``token`` comes back with the
    person's answer."""
    card = Attachment(
        content_type=FILE_CONSENT,
        name=file.filename,
        content={
            "description": file.filename,
            "sizeInBytes": len(file.data),
            "acceptContext": {FILE_KEY: token},
            "declineContext": {FILE_KEY: token},
        },
    )
    return Activity(type="message", attachments=[card], **_sender(bot))


def file_info(
    *,
    name: str,
    content_url: str,
    unique_id: str,
    file_type: str,
    bot: tuple[str, str | None] | None,
) -> Activity:
    """A message showing a file uploaded to the person's OneDrive (a file info card)."""
    card = Attachment(
        content_type=FILE_INFO,
        name=name,
        content_url=content_url,
        content={"uniqueId": unique_id, "fileType": file_type},
    )
    return Activity(type="message", attachments=[card], **_sender(bot))
