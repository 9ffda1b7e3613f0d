"""The WhatsApp Cloud API's wire: webhook payloads and Graph's answers, as msgspec Structs.

Only the fields the bridge reads are declared; msgspec skips the rest, so a field Meta adds
changes nothing. The decoders are built once (:data:`DELIVERY`, …).
"""

from __future__ import annotations

from typing import Final

import msgspec

__all__ = [
    "DELIVERY",
    "GRAPH_ERROR",
    "MEDIA_INFO",
    "SEND_ANSWER",
    "UPLOAD_ANSWER",
    "Button",
    "Card",
    "CardName",
    "Change",
    "Choice",
    "Contact",
    "Context",
    "Delivery",
    "Entry",
    "ErrorData",
    "GraphError",
    "GraphErrorBody",
    "Interactive",
    "Location",
    "Media",
    "MediaInfo",
    "Message",
    "Metadata",
    "Profile",
    "SendAnswer",
    "SentMessage",
    "TextBody",
    "UploadAnswer",
    "Value",
]


# --- the webhook's payload, as Meta sends it ------------------------------------------------


class Metadata(msgspec.Struct):
    phone_number_id: str = ""
    display_phone_number: str = ""


class Profile(msgspec.Struct):
    name: str | None = None


class Contact(msgspec.Struct):
    wa_id: str = ""
    profile: Profile | None = None


class TextBody(msgspec.Struct):
    body: str = ""


class Media(msgspec.Struct):
    id: str
    mime_type: str | None = None
    caption: str | None = None
    filename: str | None = None


class Context(msgspec.Struct):
    sender: str | None = msgspec.field(default=None, name="from")
    id: str | None = None


class Location(msgspec.Struct):
    latitude: float | None = None
    longitude: float | None = None
    name: str | None = None
    address: str | None = None


class CardName(msgspec.Struct):
    formatted_name: str | None = None


class Card(msgspec.Struct):
    name: CardName | None = None


class Button(msgspec.Struct):
    text: str = ""


class Choice(msgspec.Struct):
    #: The ``id`` the business gave the button or list row (the bridge's action).
    id: str = ""
    title: str = ""


class Interactive(msgspec.Struct):
    type: str = ""
    button_reply: Choice | None = None
    list_reply: Choice | None = None


class Message(msgspec.Struct):
    id: str
    sender: str = msgspec.field(name="from")
    #: When the person sent it, in epoch seconds (Meta writes a string).
    timestamp: str | int | None = None
    type: str = ""
    group_id: str | None = None
    context: Context | None = None
    text: TextBody | None = None
    image: Media | None = None
    document: Media | None = None
    audio: Media | None = None
    video: Media | None = None
    voice: Media | None = None
    sticker: Media | None = None
    location: Location | None = None
    contacts: list[Card] = []
    button: Button | None = None
    interactive: Interactive | None = None


class Value(msgspec.Struct):
    metadata: Metadata | None = None
    contacts: list[Contact] = []
    messages: list[Message] = []
    statuses: list[msgspec.Raw] = []


class Change(msgspec.Struct):
    field: str = ""
    value: Value | None = None


class Entry(msgspec.Struct):
    changes: list[Change] = []


class Delivery(msgspec.Struct):
    object: str = ""
    entry: list[Entry] = []


# --- Graph's answers ----------------------------------------------------------------------------


class SentMessage(msgspec.Struct):
    id: str


class SendAnswer(msgspec.Struct):
    messages: list[SentMessage] = []


class UploadAnswer(msgspec.Struct):
    id: str


class MediaInfo(msgspec.Struct):
    url: str
    mime_type: str | None = None
    file_size: int | str | None = None


class ErrorData(msgspec.Struct):
    details: str | None = None


class GraphErrorBody(msgspec.Struct):
    message: str = ""
    code: int | None = None
    error_data: ErrorData | None = None


class GraphError(msgspec.Struct):
    error: GraphErrorBody


DELIVERY: Final = msgspec.json.Decoder(Delivery)
SEND_ANSWER: Final = msgspec.json.Decoder(SendAnswer)
UPLOAD_ANSWER: Final = msgspec.json.Decoder(UploadAnswer)
MEDIA_INFO: Final = msgspec.json.Decoder(MediaInfo)
GRAPH_ERROR: Final = msgspec.json.Decoder(GraphError)
