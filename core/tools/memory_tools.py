"""The memory plugin: ``remember``, ``recall`` and ``forget`` over the person's memory.

``remember`` queues a fact through the archive writer; ``recall`` searches the person's
facts, episodes and archive; ``forget`` deletes facts on a topic once the person has
confirmed it, and hands the result back to the model.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import msgspec

from core.memory import Collection, MemoryStore
from core.memory.archive import ArchiveWriter
from core.memory.embedder import Embedder
from core.people.i18n import N_
from core.tools.registry import Plugin, Skill, Tool, ToolCallContext, ToolError
from core.version import PLUGIN_API_VERSION

log = logging.getLogger("mercury.memory")

MEMORY_SKILL = Skill(
    name="memory",
    text=(
        "You have a long-term memory of this person. When they ask you to remember "
        "something, save it with remember. Before answering about things they told you "
        "earlier, search with recall. When they ask you to forget a topic, call forget."
    ),
)


def _json(value: object) -> str:
    return msgspec.json.encode(value).decode()


def memory_plugin(memory: MemoryStore, archive: ArchiveWriter, embedder: Embedder) -> Plugin:
    async def remember(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        topic = str(arguments["topic"]).strip().lower()
        value = str(arguments["value"]).strip()
        if not topic or not value:
            raise ToolError("Both topic and value must be non-blank.")
        archive.submit("semantic", {"personKey": context.area, "topic": topic, "value": value})
        return _json({"saved": {"topic": topic, "value": value}})

    async def recall(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        query = str(arguments["query"]).strip()
        key = context.area
        try:
            async with asyncio.timeout(5.0):
                if archive.holds_person(key):
                    await archive.settled(1.0)  # what was just said or remembered is found too
                vector = (await embedder.embed([query]))[0]
                # The three collections are searched at once (each Edge shard has its own
                # thread; a Qdrant server answers them in parallel).
                names: tuple[Collection, ...] = ("semantic", "episodic", "verbatim")
                async with asyncio.TaskGroup() as group:  # one failing cancels the others
                    searches = [
                        group.create_task(memory.search(name, key, vector, limit=5))
                        for name in names
                    ]
                hits = [search.result() for search in searches]
                found = {
                    name: [
                        {"score": round(hit.score, 3), **_visible(hit.payload)} for hit in matched
                    ]
                    for name, matched in zip(names, hits, strict=True)
                }
        except Exception as error:
            log.warning("recall by similarity failed, falling back to known facts: %r", error)
            try:
                facts = await memory.facts(key, limit=50)
            except Exception:
                raise ToolError("The memory can't be searched right now.") from None
            words = query.lower().split()
            found = {
                "semantic": [
                    {"topic": f.topic, "value": f.value}
                    for f in facts
                    if any(w in f"{f.topic} {f.value}".lower() for w in words)
                ]
            }
        return _json(found)

    async def forget(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        topic = str(arguments["topic"]).strip().lower()
        if archive.holds_memory_of(context.area):
            await archive.settled(1.0)  # a fact still queued would outlive its deletion
        deleted = await memory.delete_facts(context.area, topic)
        return _json({"topic": topic, "deleted": deleted})

    def forget_summary(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        return context.translator.gettext("Forget what I know about %(topic)s") % {
            "topic": str(arguments.get("topic", ""))
        }

    topic_schema = {"type": "string", "minLength": 1, "maxLength": 100}
    return Plugin(
        name="memory",
        api_version=PLUGIN_API_VERSION,
        builtin=True,
        skills=(MEMORY_SKILL,),
        tools=(
            Tool(
                name="remember",
                description="Save a fact the person asked you to keep: a topic and its value.",
                parameters={
                    "type": "object",
                    "properties": {
                        "topic": topic_schema,
                        "value": {"type": "string", "minLength": 1, "maxLength": 1000},
                    },
                    "required": ["topic", "value"],
                    "additionalProperties": False,
                },
                run=remember,
                label=N_("Saving to memory…"),
                detail=lambda a: str(a.get("topic", "")),
            ),
            Tool(
                name="recall",
                description="Search the person's memory: saved facts, past summaries, messages.",
                parameters={
                    "type": "object",
                    "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 500}},
                    "required": ["query"],
                    "additionalProperties": False,
                },
                run=recall,
                label=N_("Consulting memory…"),
                detail=lambda a: str(a.get("query", "")),
            ),
            Tool(
                name="forget",
                description="Delete the facts saved on a topic (the person confirms first).",
                parameters={
                    "type": "object",
                    "properties": {"topic": topic_schema},
                    "required": ["topic"],
                    "additionalProperties": False,
                },
                run=forget,
                label=N_("Forgetting…"),
                detail=lambda a: str(a.get("topic", "")),
                confirm=True,
                summary=forget_summary,
                hands_back=True,
            ),
        ),
    )


def _visible(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A point's payload as the model reads it: without keys and ordering fields."""
    return {k: v for k, v in payload.items() if k not in ("personKey", "sessionKey", "ts")}
