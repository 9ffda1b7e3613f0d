"""The plugins every person is offered: the wiki, their own settings, and ``present``.

Each wraps a module's functions as :class:`~core.tools.registry.Tool` values; the texts given
to the model (descriptions, skills) are English, the status lines are catalog msgids.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from core.people.i18n import N_
from core.people.person_settings import InvalidSetting, PersonSettings
from core.tools import wiki_tools
from core.tools.display_tools import present_plugin
from core.tools.registry import Plugin, Skill, Tool, ToolCallContext, ToolError
from core.version import PLUGIN_API_VERSION
from core.workspace.wiki import Vault

_LABELS = {
    wiki_tools.WIKI_LIST: N_("Reading the wiki…"),
    wiki_tools.WIKI_READ: N_("Reading the wiki…"),
    wiki_tools.WIKI_GREP: N_("Searching the wiki…"),
    wiki_tools.WIKI_WRITE: N_("Writing to the wiki…"),
    wiki_tools.PROMOTE_NOTE: N_("Writing to the wiki…"),
}

WIKI_SKILL = Skill(
    name="wiki",
    text=(
        "The wiki holds the team's shared notes under curated/ and this person's own notes "
        "under personal/notes/. Look things up with wiki_list, wiki_grep and wiki_read before "
        "answering questions about the team's work. Write only under personal/notes/."
    ),
)

SETTINGS_SKILL = Skill(
    name="settings",
    text=(
        "When the person tells you how they want to be called, save it with set_name. When "
        "they ask you to use another language, call set_language. When they tell you their "
        "time zone, save it with set_time_zone (an IANA name such as Europe/Rome)."
    ),
)


def _checked(result: str) -> str:
    """A wiki function's answer; its ``{"error": …}`` answers become tool failures."""
    try:
        decoded = msgspec.json.decode(result)
    except msgspec.DecodeError:
        return result
    if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
        raise ToolError(decoded["error"])
    return result


def wiki_plugin(vault: Vault) -> Plugin:
    def wrap(spec: wiki_tools.WikiTool) -> Tool:
        async def run(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
            return _checked(await spec.run(vault, context.area, arguments))

        def detail(arguments: Mapping[str, Any], name: str = spec.name) -> str:
            return wiki_tools.detail_for(name, arguments)

        extra: dict[str, Any] = {}
        if spec.name == wiki_tools.WIKI_WRITE:

            async def needs(context: ToolCallContext, arguments: Mapping[str, Any]) -> bool:
                return await wiki_tools.wiki_write_needs_confirmation(
                    vault, context.area, arguments
                )

            def summary(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
                return context.translator.gettext("Overwrite the note %(path)s") % {
                    "path": arguments.get("path", "")
                }

            def choices(
                context: ToolCallContext, arguments: Mapping[str, Any]
            ) -> list[tuple[str, str]]:
                tr = context.translator
                return [
                    (tr.gettext("Replace the note"), "replace"),
                    (tr.gettext("Append to the note"), "append"),
                ]

            extra = {
                "confirm": needs,
                "summary": summary,
                "choices": choices,
                "choice_argument": "mode",
            }
        elif spec.name == wiki_tools.PROMOTE_NOTE:

            def promote_summary(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
                path = str(arguments.get("path", ""))
                target = arguments.get("curated_path") or "curated/" + path.rsplit("/", 1)[-1]
                return context.translator.gettext(
                    "Promote %(path)s to the shared wiki as %(target)s"
                ) % {"path": path, "target": target}

            extra = {"confirm": True, "summary": promote_summary}
        return Tool(
            name=spec.name,
            description=spec.description,
            parameters=spec.parameters,
            run=run,
            label=_LABELS[spec.name],
            detail=detail,
            **extra,
        )

    return Plugin(
        name="wiki",
        api_version=PLUGIN_API_VERSION,
        tools=tuple(wrap(spec) for spec in wiki_tools.WIKI_TOOLS),
        skills=(WIKI_SKILL,),
        builtin=True,
    )


def settings_plugin(person_settings: PersonSettings) -> Plugin:
    def setter(field: str, description: str, schema: Mapping[str, Any]) -> Tool:
        async def run(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
            value = str(arguments["value"])
            key = context.person.key
            try:
                if field == "name":
                    saved = await person_settings.set_name(key, value)
                elif field == "language":
                    saved = await person_settings.set_language(key, value)
                else:
                    saved = await person_settings.set_time_zone(key, value)
            except InvalidSetting as error:
                raise ToolError(str(error)) from None
            return msgspec.json.encode({"saved": saved}).decode()

        return Tool(
            name=f"set_{field}",
            description=description,
            parameters={
                "type": "object",
                "properties": {"value": dict(schema)},
                "required": ["value"],
                "additionalProperties": False,
            },
            run=run,
            label=N_("Saving to memory…"),
            detail=lambda arguments: str(arguments.get("value", "")),
        )

    return Plugin(
        name="settings",
        api_version=PLUGIN_API_VERSION,
        tools=(
            setter(
                "name",
                "Save how the person wants to be called.",
                {"type": "string", "minLength": 1, "maxLength": 100},
            ),
            setter(
                "language",
                "Save the language the person wants you to use: en, it, de, fr or es.",
                {"type": "string", "enum": ["en", "it", "de", "fr", "es"]},
            ),
            setter(
                "time_zone",
                "Save the person's time zone, an IANA name such as Europe/Rome.",
                {"type": "string", "minLength": 1, "maxLength": 64},
            ),
        ),
        skills=(SETTINGS_SKILL,),
        builtin=True,
    )


def builtin_plugins(*, vault: Vault, person_settings: PersonSettings) -> tuple[Plugin, ...]:
    return (wiki_plugin(vault), settings_plugin(person_settings), present_plugin())
