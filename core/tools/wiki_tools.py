"""The wiki as model tools: list, read, grep, write and promote notes in the person's view.

Each tool has a JSON-schema parameters constant, a one-line English description (it goes
to the model, so it is not translated) and ``run_<name>(vault, person_key, arguments)``
answering the text handed back to the model: JSON, ``{"error": sentence}`` when the call
could not be done. The engine wraps them as tools and stages confirmations:
``wiki_write`` asks when it would overwrite a note without a ``mode``
(:func:`wiki_write_needs_confirmation`), ``promote_note`` always.

These functions raise nothing of their own: wiki errors and unfit arguments become an
``error`` answer the model can act on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal, TypeVar

import msgspec

from core.workspace.wiki import MAX_PATTERN_CHARS, Vault, WikiError

WIKI_LIST: Final = "wiki_list"
WIKI_READ: Final = "wiki_read"
WIKI_GREP: Final = "wiki_grep"
WIKI_WRITE: Final = "wiki_write"
PROMOTE_NOTE: Final = "promote_note"

TOOL_MAX_MATCHES: Final = 50
_DETAIL_CHARS: Final = 120

WIKI_LIST_DESCRIPTION: Final = (
    "List the wiki notes you can read: the team's curated/ ones and this person's personal/ ones."
)
WIKI_READ_DESCRIPTION: Final = "Read one wiki note, given its path exactly as wiki_list shows it."
WIKI_GREP_DESCRIPTION: Final = (
    "Search the readable wiki notes line by line with a case-insensitive RE2 regular expression."
)
WIKI_WRITE_DESCRIPTION: Final = (
    "Write a markdown note under personal/notes/, replacing it or appending to it (mode)."
)
PROMOTE_NOTE_DESCRIPTION: Final = (
    "Copy one of this person's personal/ notes into the team's curated/ notes."
)

_PATH_PROPERTY: Final[dict[str, Any]] = {
    "type": "string",
    "description": "A wiki path as wiki_list shows it, e.g. curated/design/api.md.",
}

WIKI_LIST_PARAMETERS: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {},
    "additionalProperties": False,
}
WIKI_READ_PARAMETERS: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"path": _PATH_PROPERTY},
    "required": ["path"],
    "additionalProperties": False,
}
WIKI_GREP_PARAMETERS: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "pattern": {
            "type": "string",
            "maxLength": MAX_PATTERN_CHARS,
            "description": "An RE2 regular expression, matched case-insensitively on each line.",
        }
    },
    "required": ["pattern"],
    "additionalProperties": False,
}
WIKI_WRITE_PARAMETERS: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "description": "Where to write, under personal/notes/ and ending in .md.",
        },
        "content": {"type": "string", "description": "The markdown to write."},
        "mode": {
            "type": "string",
            "enum": ["replace", "append"],
            "description": "replace the note, or append to it; leave out for a new note.",
        },
    },
    "required": ["path", "content"],
    "additionalProperties": False,
}
PROMOTE_NOTE_PARAMETERS: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "description": "The personal note to promote, e.g. personal/notes/api.md.",
        },
        "curated_path": {
            "type": "string",
            "description": "Where it goes under curated/; curated/<its file name> if left out.",
        },
    },
    "required": ["path"],
    "additionalProperties": False,
}


class _PathArguments(msgspec.Struct):
    path: str


class _GrepArguments(msgspec.Struct):
    pattern: str


class _WriteArguments(msgspec.Struct):
    path: str
    content: str
    mode: Literal["replace", "append"] | None = None


class _PromoteArguments(msgspec.Struct):
    path: str
    curated_path: str | None = None


def _answer(value: object) -> str:
    return msgspec.json.encode(value).decode()


def _error(message: str) -> str:
    return _answer({"error": message})


_S = TypeVar("_S", bound=msgspec.Struct)


def _arguments(tool_name: str, arguments: Mapping[str, Any], kind: type[_S]) -> _S | str:
    """The arguments as ``kind``, or the error answer saying why they don't fit."""
    try:
        return msgspec.convert(dict(arguments), kind)
    except (msgspec.ValidationError, TypeError, ValueError) as error:
        return _error(
            f"The arguments of {tool_name} don't fit its parameters ({error}); "
            "call it again with arguments matching them."
        )


async def run_wiki_list(vault: Vault, person_key: str, arguments: Mapping[str, Any]) -> str:
    """``{"files": [...]}``: every note the person can read."""
    return _answer({"files": await vault.list(person_key)})


async def run_wiki_read(vault: Vault, person_key: str, arguments: Mapping[str, Any]) -> str:
    """``{"path", "content"}`` of one note, or an error when it isn't in the view."""
    parsed = _arguments(WIKI_READ, arguments, _PathArguments)
    if isinstance(parsed, str):
        return parsed
    try:
        content = await vault.read(person_key, parsed.path)
    except WikiError as error:
        return _error(str(error))
    if content is None:
        return _error(
            f"There is no wiki note {parsed.path!r} you can read; "
            "call wiki_list to see the paths there are."
        )
    return _answer({"path": parsed.path, "content": content})


async def run_wiki_grep(vault: Vault, person_key: str, arguments: Mapping[str, Any]) -> str:
    """``{"matches": [{path, line, text}], "truncated"}``, at most 50 lines."""
    parsed = _arguments(WIKI_GREP, arguments, _GrepArguments)
    if isinstance(parsed, str):
        return parsed
    try:
        matches = await vault.grep(person_key, parsed.pattern, max_matches=TOOL_MAX_MATCHES)
    except WikiError as error:
        return _error(str(error))
    return _answer({"matches": matches, "truncated": len(matches) >= TOOL_MAX_MATCHES})


async def wiki_write_needs_confirmation(
    vault: Vault, person_key: str, arguments: Mapping[str, Any]
) -> bool:
    """Whether the write would overwrite an existing note without the model saying how."""
    parsed = _arguments(WIKI_WRITE, arguments, _WriteArguments)
    if isinstance(parsed, str) or parsed.mode is not None:
        return False
    return await vault.note_exists(person_key, parsed.path)


async def run_wiki_write(vault: Vault, person_key: str, arguments: Mapping[str, Any]) -> str:
    """``{"path", "created"}`` after writing; without ``mode`` the note is replaced."""
    parsed = _arguments(WIKI_WRITE, arguments, _WriteArguments)
    if isinstance(parsed, str):
        return parsed
    try:
        if parsed.mode == "append":
            result = await vault.append_note(person_key, parsed.path, parsed.content)
        else:
            result = await vault.write_note(person_key, parsed.path, parsed.content)
    except WikiError as error:
        return _error(str(error))
    return _answer(result)


async def run_promote_note(vault: Vault, person_key: str, arguments: Mapping[str, Any]) -> str:
    """``{"path": <curated path>}`` after copying the personal note into curated/."""
    parsed = _arguments(PROMOTE_NOTE, arguments, _PromoteArguments)
    if isinstance(parsed, str):
        return parsed
    try:
        path = await vault.promote(person_key, parsed.path, parsed.curated_path)
    except WikiError as error:
        return _error(str(error))
    return _answer({"path": path})


def detail_for(tool_name: str, arguments: Mapping[str, Any]) -> str:
    """The salient argument of a wiki call for its status line: the pattern or the path."""
    key = "pattern" if tool_name == WIKI_GREP else "path"
    value = arguments.get(key) if tool_name != WIKI_LIST else None
    if not isinstance(value, str):
        return ""
    return value if len(value) <= _DETAIL_CHARS else value[:_DETAIL_CHARS] + "…"


ToolRunner = Callable[[Vault, str, Mapping[str, Any]], Awaitable[str]]


class WikiTool(msgspec.Struct, frozen=True, kw_only=True):
    """One wiki tool as the engine wraps it."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    run: ToolRunner


WIKI_TOOLS: Final[tuple[WikiTool, ...]] = (
    WikiTool(
        name=WIKI_LIST,
        description=WIKI_LIST_DESCRIPTION,
        parameters=WIKI_LIST_PARAMETERS,
        run=run_wiki_list,
    ),
    WikiTool(
        name=WIKI_READ,
        description=WIKI_READ_DESCRIPTION,
        parameters=WIKI_READ_PARAMETERS,
        run=run_wiki_read,
    ),
    WikiTool(
        name=WIKI_GREP,
        description=WIKI_GREP_DESCRIPTION,
        parameters=WIKI_GREP_PARAMETERS,
        run=run_wiki_grep,
    ),
    WikiTool(
        name=WIKI_WRITE,
        description=WIKI_WRITE_DESCRIPTION,
        parameters=WIKI_WRITE_PARAMETERS,
        run=run_wiki_write,
    ),
    WikiTool(
        name=PROMOTE_NOTE,
        description=PROMOTE_NOTE_DESCRIPTION,
        parameters=PROMOTE_NOTE_PARAMETERS,
        run=run_promote_note,
    ),
)
