"""The files plugin: the model lists and reads the person's inbox and writes to their outbox.

Every tool reaches only the calling person's own folders (:class:`core.workspace.files.PersonFiles`
keys them by the person). Text comes back as text; an image goes to a model that sees
images through Ollama's ``images`` field, and is described to one that doesn't.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import msgspec

from core.people.i18n import N_
from core.tools.registry import Plugin, Skill, Tool, ToolCallContext, ToolError, ToolReply
from core.version import PLUGIN_API_VERSION
from core.workspace.file_types import describe_size, is_textual
from core.workspace.files import INBOX, FileError, PersonFiles

__all__ = ["INBOX_LIST", "INBOX_READ", "MAX_TEXT_CHARS", "OUTBOX_WRITE", "files_plugin"]

INBOX_LIST: Final = "inbox_list"
INBOX_READ: Final = "inbox_read"
OUTBOX_WRITE: Final = "outbox_write"
#: Characters of a text file the model is given at once.
MAX_TEXT_CHARS: Final = 100_000
# Types Ollama's vision models read from the ``images`` field.
_IMAGE_TYPES: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})

FILES_SKILL = Skill(
    name="files",
    text=(
        "Files the person sends arrive in their inbox; the message names them. List the inbox "
        "with inbox_list and read a file with inbox_read. To give the person a file (a table, "
        "a document, a drawing), write it with outbox_write: it is sent along with your answer."
    ),
)

AcceptsImages = Callable[[], Awaitable[bool]]


def files_plugin(files: PersonFiles, accepts_images: AcceptsImages) -> Plugin:
    async def inbox_list(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        found = await files.list(context.area, INBOX)
        return msgspec.json.encode(
            {
                "files": [
                    {"path": f.path, "type": f.mime_type, "size": describe_size(f.size_bytes)}
                    for f in found
                ]
            }
        ).decode()

    async def inbox_read(context: ToolCallContext, arguments: Mapping[str, Any]) -> str | ToolReply:
        try:
            stored, data = await files.read(context.area, str(arguments["path"]))
        except FileError as error:
            raise ToolError(str(error)) from None
        size = describe_size(stored.size_bytes)
        if is_textual(stored.mime_type):
            text = data.decode("utf-8", "replace")
            if len(text) > MAX_TEXT_CHARS:
                text = text[:MAX_TEXT_CHARS] + f"\n[… cut at {MAX_TEXT_CHARS} characters]"
            return text
        if stored.mime_type in _IMAGE_TYPES:
            if await accepts_images():
                return ToolReply(
                    text=f"The image {stored.path} ({stored.mime_type}, {size}) is attached.",
                    images=(base64.b64encode(data).decode("ascii"),),
                )
            return (
                f"{stored.path} is an image ({stored.mime_type}, {size}), and this model "
                "can't see images; tell the person so."
            )
        return (
            f"{stored.path} is a {stored.mime_type} file of {size}; its content can't be read "
            "as text here."
        )

    async def outbox_write(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        content = str(arguments["content"])
        if arguments.get("encoding") == "base64":
            try:
                data = base64.b64decode(content, validate=True)
            except (binascii.Error, ValueError):
                raise ToolError("The content is not valid base64.") from None
        else:
            data = content.encode("utf-8")
        try:
            stored = await files.write_outbox(context.area, str(arguments["filename"]), data)
        except FileError as error:
            raise ToolError(str(error)) from None
        if context.written is not None:
            context.written.append(stored.name)
        return msgspec.json.encode(
            {"written": stored.path, "type": stored.mime_type, "size": stored.size_bytes}
        ).decode()

    return Plugin(
        name="files",
        api_version=PLUGIN_API_VERSION,
        tools=(
            Tool(
                name=INBOX_LIST,
                description="List the files in the person's inbox, newest first.",
                parameters={"type": "object", "properties": {}, "additionalProperties": False},
                run=inbox_list,
                label=N_("Looking at your files…"),
                detail=lambda arguments: "inbox/",
            ),
            Tool(
                name=INBOX_READ,
                description=(
                    "Read a file of the person's inbox: text as text, an image as an image."
                ),
                parameters={
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": 300,
                            "description": "The file, as inbox_list names it (inbox/...).",
                        }
                    },
                    "required": ["path"],
                    "additionalProperties": False,
                },
                run=inbox_read,
                label=N_("Reading your file…"),
                detail=lambda arguments: str(arguments.get("path", "")),
            ),
            Tool(
                name=OUTBOX_WRITE,
                description=(
                    "Write a file to the person's outbox; it is sent with your answer. "
                    "Writing a name again replaces that file."
                ),
                parameters={
                    "type": "object",
                    "properties": {
                        "filename": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": 200,
                            "description": "The file's name, such as report.csv (no folders).",
                        },
                        "content": {"type": "string"},
                        "encoding": {
                            "type": "string",
                            "enum": ["text", "base64"],
                            "description": "How content is written; text unless given.",
                        },
                    },
                    "required": ["filename", "content"],
                    "additionalProperties": False,
                },
                run=outbox_write,
                label=N_("Writing a file for you…"),
                detail=lambda arguments: str(arguments.get("filename", "")),
            ),
        ),
        skills=(FILES_SKILL,),
        builtin=True,
    )
