"""Deferred tools and the search that loads them: many tools without every schema up front.

Past the registry's ``tool_budget`` tools in a turn (built-in ones counted), the tools marked
``deferrable`` (an MCP server's) are left out of the list the model is offered, and one
tool, ``search_tools``, is offered instead. Each search loads the schemas of the tools it
finds for the rest of the turn: the next model step is offered them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from core.model.port import ToolSpec
from core.people.i18n import N_
from core.tools.registry import Plugin, Skill, Tool, ToolCallContext
from core.version import PLUGIN_API_VERSION

__all__ = ["SEARCH_TOOL", "ToolSearch", "deferral"]

SEARCH_TOOL: Final = "search_tools"
#: Tools a search loads at most.
_FOUND_MAX: Final = 5
_WORD: Final = re.compile(r"[a-z0-9]+")
_SKILL: Final = Skill(
    name="tool_search",
    text=(
        "Not every tool is listed: when none of the listed tools fits, call search_tools "
        "with a few words for what you need; the tools it finds can be called from then on."
    ),
)


class ToolSearch:
    """One turn's deferred tools and those its searches loaded, in the order found."""

    def __init__(self, deferred: Mapping[str, Tool]) -> None:
        self.deferred = dict(deferred)
        self.loaded: list[str] = []
        self.plugin = Plugin(
            name="tool_search",
            api_version=PLUGIN_API_VERSION,
            tools=(self._tool(),),
            skills=(_SKILL,),
            builtin=True,
        )

    def specs(self) -> list[ToolSpec]:
        """The loaded tools' schemas, for the next model step."""
        return [self.deferred[name].spec for name in self.loaded]

    def _tool(self) -> Tool:
        return Tool(
            name=SEARCH_TOOL,
            description=(
                "Find tools that are not listed yet, by what they do; the tools found can be "
                "called afterwards in this turn."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": 200},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
            run=self._run,
            label=N_("Looking for tools…"),
            detail=lambda arguments: str(arguments.get("query", "")),
        )

    async def _run(self, context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        words = set(_WORD.findall(str(arguments.get("query", "")).lower()))
        scored = []
        for name, tool in self.deferred.items():
            text = f"{name} {tool.title or ''} {tool.description}".lower()
            found = set(_WORD.findall(text.replace("_", " ")))
            score = len(words & found)
            if score:
                scored.append((-score, name))
        found_names = [name for _, name in sorted(scored)[:_FOUND_MAX]]
        for name in found_names:
            if name not in self.loaded:
                self.loaded.append(name)
        return msgspec.json.encode(
            {
                "found": [
                    {"name": name, "description": self.deferred[name].description}
                    for name in found_names
                ]
            }
        ).decode()


def deferral(
    offered: Mapping[str, tuple[Plugin, Tool]], budget: int | None
) -> tuple[dict[str, tuple[Plugin, Tool]], ToolSearch | None]:
    """What a turn lists up front, and its search (None when everything fits the budget).

    The offered mapping keeps every tool, so a deferred tool stays callable by name; only
    the list the model reads leaves them out.
    """
    if budget is None or len(offered) <= budget:
        return dict(offered), None
    deferred = {name: tool for name, (_, tool) in offered.items() if tool.deferrable}
    if not deferred:
        return dict(offered), None
    search = ToolSearch(deferred)
    return {**offered, SEARCH_TOOL: (search.plugin, search.plugin.tools[0])}, search
