"""What Teams sends, read into the port's messages: an activity (the Agents SDK's own
:class:`~microsoft_agents.activity.Activity` model) as a :class:`Received` or a
:class:`Pressed`, and the thread ids the bridge writes.

A thread is ``teams:<tenant>:<conversation id>``, the conversation id as Teams gives it: a
personal chat's ``a:…``, a group chat's ``19:…@thread.v2``, a channel thread's
``19:…@thread.tacv2;messageid=<root>``. The space is the thread without its
``;messageid=…``, so a channel's threads are conversations of the channel's space.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Final

from microsoft_agents.activity import Activity

from bridges.port import Attachment, Pressed, Received
from core.spaces.ids import InvalidSpaceId, parse_space_id

__all__ = [
    "ACTION_KEY",
    "FILE_DOWNLOAD_INFO",
    "Route",
    "delivery_of",
    "read_activity",
    "split_thread",
]

#: The key of an Adaptive Card's ``Action.Submit`` data that carries a button's action.
ACTION_KEY: Final = "mercuryAction"
#: The attachment Teams sends for a file shared in a chat: a pre-authorized download URL.
FILE_DOWNLOAD_INFO: Final = "application/vnd.microsoft.teams.file.download.info"
#: What separates a channel thread's root message from the channel in a conversation id.
_THREAD_MARK: Final = ";messageid="
_AT_TAGS: Final = re.compile(r"</?at>", re.IGNORECASE)
_IMAGE_EXTENSIONS: Final = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
}


@dataclass(frozen=True, slots=True)
class Route:
    """Where replies to a conversation go: the connector's ``serviceUrl`` (checked against
    the token's claim) and the bot's own account there."""

    service_url: str
    bot_id: str
    bot_name: str | None


def split_thread(thread_id: str) -> tuple[str, str, str]:
    """``teams:<tenant>:<conversation>`` → (tenant, the conversation id as Teams writes it,
    the space id); :class:`ValueError` for anything else."""
    platform, _, rest = thread_id.partition(":")
    tenant, _, conversation = rest.partition(":")
    channel, mark, root = conversation.partition(_THREAD_MARK)
    space_id = f"teams:{tenant}:{channel}"
    try:
        space = parse_space_id(space_id)
    except InvalidSpaceId:
        space = None
    if (
        platform != "teams"
        or space is None
        or (mark and not (root.isascii() and root.isdigit() and len(root) <= 24))
    ):
        raise ValueError(
            f"{thread_id[:120]!r} is not a Teams thread id; one reads "
            "teams:<tenant>:<conversation>, as the Teams bridge writes them."
        )
    return tenant, conversation, space.id


def tenant_of(activity: Activity) -> str | None:
    """The tenant the activity comes from: its channel data's, else its conversation's."""
    data = activity.channel_data
    if isinstance(data, dict):
        tenant = data.get("tenant")
        if isinstance(tenant, dict) and isinstance(tenant.get("id"), str) and tenant["id"]:
            return str(tenant["id"])
    conversation = activity.conversation
    return conversation.tenant_id if conversation is not None else None


def read_activity(activity: Activity, *, bot_name: str) -> Received | Pressed | str:
    """``activity`` as a message or a press; a sentence (why it is ignored) otherwise.

    Raises :class:`ValueError` for an activity that can't be read (no conversation, a
    conversation id Teams never writes).
    """
    author = activity.from_property
    bot = activity.recipient
    conversation = activity.conversation
    if author is None or bot is None or conversation is None or not conversation.id:
        raise ValueError("the activity names no author, recipient or conversation")
    if author.id == bot.id:
        return "the bot's own activity"
    tenant = tenant_of(activity)
    if not tenant:
        raise ValueError("the activity names no tenant")
    thread_id = f"teams:{tenant}:{conversation.id}"
    _, _, space_id = split_thread(thread_id)
    is_dm = parse_space_id(space_id).is_dm
    author_id = author.aad_object_id or author.id
    sent_at = activity.timestamp
    if sent_at is not None and sent_at.tzinfo is None:
        sent_at = sent_at.replace(tzinfo=UTC)
    if not activity.id:
        raise ValueError("the activity has no id")
    delivery_id = delivery_of(activity.id, thread_id)
    action = _action_of(activity)
    if action is not None:
        if not activity.reply_to_id:
            return "a card's submit without the message it came from"
        return Pressed(
            platform="teams",
            thread_id=thread_id,
            delivery_id=delivery_id,
            message_id=activity.reply_to_id,
            author_id=author_id,
            author_name=author.name or None,
            action=action,
            is_dm=is_dm,
            sent_at=sent_at,
        )
    if activity.type != "message":
        return f"a {str(activity.type)[:40]} activity"
    attachments = _attachments(activity)
    text = readable(activity, bot_name)
    if not text.strip() and not attachments:
        return "a message with nothing to read"
    return Received(
        platform="teams",
        thread_id=thread_id,
        delivery_id=delivery_id,
        message_id=activity.id,
        author_id=author_id,
        author_name=author.name or None,
        text=text,
        is_dm=is_dm,
        attachments=attachments,
        sent_at=sent_at,
    )


def delivery_of(activity_id: str, thread_id: str) -> str:
    """What a retried activity is known by: its id, which Teams repeats on a retry, and its
    conversation (a message id is a time in milliseconds, unique only inside its chat)."""
    conversation = hashlib.sha256(thread_id.partition(_THREAD_MARK)[0].encode()).hexdigest()
    return f"{activity_id[:120]}@{conversation[:20]}"


def readable(activity: Activity, bot_name: str) -> str:
    """The message's text as a person reads it: the bot's ``<at>`` mention written
    ``@<bot_name>``, another person's ``@<their name>``."""
    text = activity.text or ""
    bot_id = activity.recipient.id if activity.recipient is not None else None
    for mention in activity.get_mentions():
        if not mention.text:
            continue
        mentioned = mention.mentioned
        if mentioned is not None and mentioned.id == bot_id:
            written = f"@{bot_name}"
        else:
            name = mentioned.name if mentioned is not None and mentioned.name else None
            written = "@" + (name or _AT_TAGS.sub("", mention.text))
        text = text.replace(mention.text, written)
    return _AT_TAGS.sub("", text).strip()


def _action_of(activity: Activity) -> str | None:
    """The action of a pressed button: an ``Action.Submit`` (a message whose ``value``
    carries it) or an ``Action.Execute`` (an ``adaptiveCard/action`` invoke)."""
    value: Any = activity.value
    if activity.type == "invoke" and activity.name == "adaptiveCard/action":
        action = value.get("action") if isinstance(value, dict) else None
        value = action.get("data") if isinstance(action, dict) else None
    elif activity.type != "message":
        return None
    if isinstance(value, dict):
        action = value.get(ACTION_KEY)
        if isinstance(action, str) and action:
            return action
    return None


def _attachments(activity: Activity) -> tuple[Attachment, ...]:
    """The files of a message: a shared file (its pre-authorized ``downloadUrl``) or an
    image pasted in (on the connector, fetched with the bot's token); the message's own
    HTML rendering and cards are not files."""
    found: list[Attachment] = []
    service_url = activity.service_url or ""
    for attachment in activity.attachments or ():
        kind = attachment.content_type or ""
        content: Any = attachment.content
        if kind == FILE_DOWNLOAD_INFO and isinstance(content, dict):
            url = content.get("downloadUrl")
            if isinstance(url, str) and url.startswith(("https://", "http://")):
                found.append(
                    Attachment(
                        name=attachment.name or f"file.{content.get('fileType') or 'bin'}",
                        ref="direct:" + url,
                    )
                )
        elif kind.startswith("image/") and attachment.content_url:
            url = attachment.content_url
            if not url.startswith(("https://", "http://")):
                continue
            # The connector's own URLs need the bot's token; nothing else gets it.
            scheme = "bearer:" if service_url and url.startswith(service_url) else "direct:"
            extension = _IMAGE_EXTENSIONS.get(kind, "img")
            found.append(
                Attachment(
                    name=attachment.name or f"image.{extension}",
                    ref=scheme + url,
                    mime_type=kind,
                )
            )
    return tuple(found)
