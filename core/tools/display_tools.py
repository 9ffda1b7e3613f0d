"""The ``present`` tool: the model shows the person a display verbatim (see
:mod:`core.tools.displays`).

The tool writes into the turn's :class:`~core.tools.displays.Displays`, which the engine hands
over in the call's context; by ``toolCallId`` it shows a result the session's
:class:`~core.tools.displays.ToolResults` kept, without the model retyping it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from core.people.i18n import N_
from core.tools.registry import Plugin, Skill, Tool, ToolCallContext, ToolError
from core.version import PLUGIN_API_VERSION

#: The tool's name, as the model calls it.
PRESENT: Final = "present"
#: The longest display the model may write itself.
CONTENT_MAX_CHARS: Final = 20_000
#: The longest title line.
TITLE_MAX_CHARS: Final = 200


PRESENT_SKILL: Final = Skill(
    name="present",
    text=(
        "To show the person a list, a table or a block of text exactly as it is, call "
        "present instead of retyping it: with content for something you write, or with "
        "toolCallId to show a tool's result as the tool returned it (each tool result "
        "starts with its [toolCallId: …]). Presented displays appear after your answer; "
        "don't repeat them in it."
    ),
)


def _detail(arguments: Mapping[str, Any]) -> str:
    for key in ("title", "toolCallId", "content"):
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip().splitlines()[0]
    return ""


async def _present(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
    displays = context.displays
    if displays is None:
        raise ToolError("Nothing can be shown here: this turn has no person to show it to.")
    content = arguments.get("content")
    reference = arguments.get("toolCallId")
    if (content is None) == (reference is None):
        raise ToolError("Give either content or toolCallId, exactly one of them.")
    if reference is not None:
        body = displays.results.get(str(reference).strip())
        if body is None:
            raise ToolError(
                f"There is no tool result with toolCallId {str(reference)[:64]!r} in this "
                "conversation; use the id written at the start of the result."
            )
    else:
        body = str(content)
    if not body.strip():
        raise ToolError("The display is empty; there is nothing to show.")
    title = str(arguments.get("title") or "").strip()
    displays.show(f"{title}\n{body}" if title else body)
    return (
        f"Shown to the person after your answer ({len(body)} characters). "
        "Don't repeat it; say what it is in a sentence if that helps."
    )


def present_plugin() -> Plugin:
    """The built-in plugin offering ``present``."""
    return Plugin(
        name="displays",
        api_version=PLUGIN_API_VERSION,
        builtin=True,
        skills=(PRESENT_SKILL,),
        tools=(
            Tool(
                name=PRESENT,
                description=(
                    "Show the person a display verbatim after your answer: a list, a table "
                    "or a block of text. Give content (what to show) or toolCallId (show "
                    "that tool call's result as it came back), and optionally a title."
                ),
                parameters={
                    "type": "object",
                    "properties": {
                        "content": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": CONTENT_MAX_CHARS,
                        },
                        "toolCallId": {"type": "string", "minLength": 1, "maxLength": 64},
                        "title": {"type": "string", "maxLength": TITLE_MAX_CHARS},
                    },
                    "additionalProperties": False,
                },
                run=_present,
                label=N_("Showing…"),
                detail=_detail,
            ),
        ),
    )
