"""Request bodies and query rules, decoded at the edge with decoders built once."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

import msgspec

from bridges.json_body import decode as bounded_decode
from channel_http.errors import BadRequest

if TYPE_CHECKING:
    from core.people.i18n import Translator

CONVERSATION_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")
MAX_BODY: Final = 1024 * 1024


class TurnBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    text: str | None = None
    conversation_id: str | None = None
    opening: bool | None = None
    resume: bool | None = None


class ConfirmBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    token: str | None = None
    conversation_id: str | None = None


class AnswerBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /confirmations/{id}``: the choice taken (its place, from 0), or a cancel."""

    choice: int | None = None
    cancel: bool | None = None


class FileBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A file sent to ``POST /chat``: its name and its bytes (base64 on the wire)."""

    name: str
    data: bytes


class ChatBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    text: str | None = None
    conversation_id: str | None = None
    files: list[FileBody] | None = None
    caller_id: str | None = None
    author_name: str | None = None
    space_id: str | None = None


class MeBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    # Left out: unchanged; null: the saved value is forgotten.
    time_zone: str | msgspec.UnsetType | None = msgspec.UNSET
    language: str | msgspec.UnsetType | None = msgspec.UNSET  # an extension of contract v6


class PreferenceBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    value: str


class MuteBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    person: str
    duration: str
    reason: str | None = None
    confirm: bool = False


class SettingBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """A space setting's new value, as JSON types it (checked by core/spaces/settings.py)."""

    value: Any


class UiApproval(msgspec.Struct, frozen=True):
    """A tool part's approval in a ``useChat`` message: its id (the token) and the answer."""

    id: str
    approved: bool | None = None


class UiPart(msgspec.Struct, frozen=True, rename="camel"):
    """The fields of a ``useChat`` message part that ``/ui-stream`` reads; others are ignored."""

    type: str
    text: str | None = None
    tool_call_id: str | None = None
    state: str | None = None
    approval: UiApproval | None = None


class UiMessage(msgspec.Struct, frozen=True):
    role: str
    id: str = ""
    parts: tuple[UiPart, ...] = ()


class UiStreamBody(msgspec.Struct, frozen=True, rename="camel"):
    """``useChat``'s ``DefaultChatTransport`` body; fields a client adds are ignored."""

    id: str | None = None
    messages: tuple[UiMessage, ...] = ()
    trigger: str | None = None
    message_id: str | None = None


class AgUiMessage(msgspec.Struct, frozen=True, rename="camel"):
    """A message of AG-UI's ``RunAgentInput``; only the last user message's text is read."""

    role: str
    id: str | None = None
    content: str | list[dict[str, Any]] | None = None


class AgUiResume(msgspec.Struct, frozen=True, rename="camel"):
    """An answer to an interrupt: ``payload`` is ``{"choice": <choice token>}`` when resolved."""

    interrupt_id: str
    status: Literal["resolved", "cancelled"]
    payload: Any = None


class AgUiInput(msgspec.Struct, frozen=True, rename="camel"):
    """AG-UI's ``RunAgentInput`` (``POST /ag-ui``). Unknown fields are ignored, as a newer
    protocol version may add some; ``state``, ``tools``, ``context`` and ``forwardedProps``
    are accepted and unused."""

    thread_id: str
    run_id: str
    messages: list[AgUiMessage] = msgspec.field(default_factory=list)
    resume: list[AgUiResume] | None = None
    parent_run_id: str | None = None
    protocol_version: str | None = None
    state: Any = None
    tools: Any = None
    context: Any = None
    forwarded_props: Any = None


_T = TypeVar("_T", bound=msgspec.Struct)

_DECODERS: dict[type[Any], msgspec.json.Decoder[Any]] = {
    body_type: msgspec.json.Decoder(body_type)
    for body_type in (
        TurnBody,
        ConfirmBody,
        AnswerBody,
        ChatBody,
        MeBody,
        PreferenceBody,
        MuteBody,
        SettingBody,
        UiStreamBody,
        AgUiInput,
    )
}
_EXPECTED: Final = {
    "str": "a string",
    "int": "a whole number",
    "bool": "true or false",
    "object": "a JSON object",
    "array": "a JSON array",
}
_TYPE_ERROR = re.compile(
    r"Expected `(?P<expected>[^`]+)`, got `[^`]+`(?: - at `\$\.(?P<field>[^`]+)`)?"
)
_UNKNOWN_FIELD = re.compile(r"Object contains unknown field `(?P<field>[^`]+)`")
_BASE64 = re.compile(r"Invalid base64 encoded string - at `\$\.(?P<field>[^`]+)`")
_MISSING = re.compile(
    r"Object missing required field `(?P<field>[^`]+)`(?: - at `\$\.(?P<at>[^`]+)`)?"
)


def decode_body(body_type: type[_T], raw: bytes, translator: Translator) -> _T:
    """The body as ``body_type``, or a 400 naming what is wrong, in the caller's language."""
    if not raw.strip():
        raise BadRequest(translator.gettext("The request body must be JSON."))
    try:
        # The webhooks' one bounded decoder: JSON nested too deep is unreadable, never a 500.
        value: _T = bounded_decode(_DECODERS[body_type], raw)
    except msgspec.ValidationError as error:
        raise BadRequest(_describe(str(error), translator)) from None
    except msgspec.DecodeError:
        raise BadRequest(translator.gettext("The request body must be JSON.")) from None
    keys = _KEYS.get(body_type)
    if keys is not None and _may_repeat(raw, keys) and (repeated := _repeated_key(raw)):
        raise BadRequest(
            translator.gettext('The field "%(field)s" appears more than once; send it once.')
            % {"field": repeated[:64]}
        )
    return value


def _may_repeat(raw: bytes, keys: tuple[bytes, ...]) -> bool:
    """Whether ``raw`` could repeat a key: the exact check below is needed only then.

    Once msgspec has accepted the body every key is one of the struct's fields. Without a
    backslash each key is written out literally, quotes included, so a repeated key shows
    as its quoted name at least twice; a name seen once at most rules a repeat out. The
    exact parse then runs for a handful of bodies (a field's name quoted in a value, several
    files to ``/chat``) instead of every turn.
    """
    return b"\\" in raw or any(raw.count(key) > 1 for key in keys)


def _quoted_keys(body_type: type[Any]) -> tuple[bytes, ...]:
    """Every key ``body_type`` accepts, nested structs' too, as it appears quoted in JSON."""
    keys: list[bytes] = []
    types: list[msgspec.inspect.Type] = [msgspec.inspect.type_info(body_type)]
    while types:
        info = types.pop()
        if isinstance(info, msgspec.inspect.StructType):
            for field in info.fields:
                keys.append(msgspec.json.encode(field.encode_name))
                types.append(field.type)
        elif isinstance(info, msgspec.inspect.UnionType):
            types.extend(info.types)
        elif isinstance(info, msgspec.inspect.ListType):
            types.append(info.item_type)
    return tuple(dict.fromkeys(keys))


#: The keys to look for repeats of, for the bodies whose every key is a field of theirs; a
#: body that ignores fields it doesn't know (``UiStreamBody``: a client library's, which may
#: carry anything) reads as any JSON parser reads it, the last of repeated keys winning.
_KEYS: Final = {
    body_type: _quoted_keys(body_type)
    for body_type in _DECODERS
    if getattr(msgspec.inspect.type_info(body_type), "forbid_unknown_fields", False)
}


def _repeated_key(raw: bytes) -> str | None:
    """The first key a JSON object of ``raw`` repeats, or None.

    msgspec keeps the last of repeated keys without a word; the standard parser hands every
    pair to a hook. Only called once msgspec has accepted the body, so it is flat JSON of
    known fields and scalar values; json.loads serves only this check (never the stream).
    """
    repeated: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and not repeated:
                repeated.append(key)
            seen.add(key)
        return dict(items)

    try:
        json.loads(raw, object_pairs_hook=pairs)
    except (ValueError, RecursionError):  # msgspec accepted it: the standard parser has no say
        return None
    return repeated[0] if repeated else None


def _describe(message: str, translator: Translator) -> str:
    if match := _UNKNOWN_FIELD.search(message):
        return translator.gettext('The field "%(field)s" is not allowed here.') % {
            "field": match["field"]
        }
    if match := _BASE64.search(message):
        return translator.gettext('The field "%(field)s" must be base64.') % {
            "field": match["field"]
        }
    if match := _MISSING.search(message):
        field = f"{match['at']}.{match['field']}" if match["at"] else match["field"]
        return translator.gettext('The field "%(field)s" is required.') % {"field": field}
    match = _TYPE_ERROR.search(message)
    if match is None or match["field"] is None:
        return translator.gettext("The request body must be a JSON object.")
    expected = match["expected"].split(" | ")[0]
    return translator.gettext('The field "%(field)s" must be %(expected)s.') % {
        "field": match["field"],
        "expected": _EXPECTED.get(expected, expected),
    }


def conversation_id(raw: str | None, translator: Translator) -> str | None:
    """The trimmed conversation id, None when absent, or a 400 when it breaks the rule."""
    if raw is None or not raw.strip():
        return None
    trimmed = raw.strip()
    if CONVERSATION_ID.fullmatch(trimmed) is None:
        raise BadRequest(
            translator.gettext(
                "The conversationId may contain only letters, digits, - and _, "
                "up to 128 characters."
            )
        )
    return trimmed


def limit(raw: str | None, default: int, translator: Translator) -> int:
    """A page size from 1 to 500, or a 400."""
    if raw is None:
        return default
    # int() refuses more than 4,300 digits with a ValueError: look at the length first
    # (leading zeros don't make the number larger).
    digits = raw.lstrip("0")
    if (
        not raw.isascii()
        or not raw.isdigit()
        or len(digits) > 3
        or not 1 <= int(digits or 0) <= 500
    ):
        raise BadRequest(translator.gettext("The limit must be a whole number from 1 to 500."))
    return int(digits)


def flag(raw: str | None, name: str, translator: Translator) -> bool:
    """A query parameter that is ``true`` or ``false`` (false when absent), or a 400."""
    if raw is None or raw == "false":
        return False
    if raw == "true":
        return True
    raise BadRequest(translator.gettext("%(key)s is true or false.") % {"key": name})


def required_query(value: str | None, name: str, translator: Translator) -> str:
    if value is None or value == "":
        raise BadRequest(
            translator.gettext('The query parameter "%(name)s" is required.') % {"name": name}
        )
    return value
