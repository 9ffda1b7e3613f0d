"""What an MCP tool answered, as the model reads it: text, structured content, images, links.

The server's words are data: they reach the model as a tool result, cut at
:data:`RESULT_MAX_CHARS`, never as instructions.
"""

from __future__ import annotations

from typing import Final

import mcp_types as types
import msgspec

from core.tools.registry import ToolError, ToolReply

__all__ = ["RESULT_MAX_CHARS", "reply_of"]

#: How much of a result the model reads.
RESULT_MAX_CHARS: Final = 16_000
#: Images passed to the model per result.
_MAX_IMAGES: Final = 4
_ENCODER: Final = msgspec.json.Encoder()


def reply_of(server_title: str, result: types.CallToolResult) -> ToolReply:
    """The model's view of ``result``; an ``isError`` result raises ToolError with its text."""
    parts: list[str] = []
    images: list[str] = []
    for item in result.content:
        if isinstance(item, types.TextContent):
            parts.append(item.text)
        elif isinstance(item, types.ImageContent):
            if len(images) < _MAX_IMAGES:
                images.append(item.data)
            parts.append(f"[image, {item.mime_type}]")
        elif isinstance(item, types.ResourceLink):
            name = item.title or item.name
            parts.append(f"[resource link: {name} <{item.uri}>]")
        elif isinstance(item, types.EmbeddedResource):
            resource = item.resource
            if isinstance(resource, types.TextResourceContents):
                parts.append(f"[resource {resource.uri}]\n{resource.text}")
            else:
                parts.append(f"[binary resource {resource.uri}]")
        elif isinstance(item, types.AudioContent):
            parts.append(f"[audio, {item.mime_type}, not shown]")
    structured = result.structured_content
    if structured is not None and not any(parts):
        parts.append(_ENCODER.encode(structured).decode())
    elif structured is not None and not _restates(parts, structured):
        parts.append("Structured content: " + _ENCODER.encode(structured).decode())
    text = "\n".join(parts).strip()
    if len(text) > RESULT_MAX_CHARS:
        text = text[:RESULT_MAX_CHARS] + "…"
    if result.is_error:
        raise ToolError(f"{server_title} answered with an error: {text or 'no details'}")
    return ToolReply(text=text or "(no content)", images=tuple(images))


def _restates(parts: list[str], structured: object) -> bool:
    """Whether the text already says what the structured content holds (the spec's fallback)."""
    joined = "\n".join(parts)
    if isinstance(structured, dict) and set(structured) == {"result"}:
        value = structured["result"]
        return (value if isinstance(value, str) else _ENCODER.encode(value).decode()) in joined
    return _ENCODER.encode(structured).decode() in joined.replace(" ", "") or bool(joined)
