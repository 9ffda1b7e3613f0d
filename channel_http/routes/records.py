"""What a person reads back: pending confirmations, the tool log, conversations, memory, the wiki.

Memory reads are bounded in time and degrade to empty: the store is enrichment.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from litestar import get

from channel_http.errors import BadRequest, NotFound
from channel_http.requests import (
    conversation_id,
    flag,
    limit,
    required_query,
)
from channel_http.routes.handling import AnyRequest, caller_of, services_of
from core.engine.sessions import ONE_OFF_PREFIX, SessionManager, conversation_of
from core.memory import COLLECTIONS, InvalidCursor, MemoryStoreError, Page
from core.workspace.wiki import InvalidPattern, WikiError

if TYPE_CHECKING:
    pass

log = logging.getLogger("mercury.http")


@get("/confirmations")
async def confirmations(request: AnyRequest) -> dict[str, Any]:
    caller = caller_of(request)
    wanted = conversation_id(request.query_params.get("conversationId"), caller.translator)
    with_settled = flag(request.query_params.get("settled"), "settled", caller.translator)
    store = services_of(request).manager.confirmations
    pending = await store.pending(caller.person.key)
    listed = []
    for item in pending:
        # An extension of contract v6: the id a UI knows the conversation by, or null for a
        # one-off turn's session (it has none).
        conversation = conversation_of(item.session_key, caller.person.key)
        if wanted is not None and conversation != wanted:
            continue
        listed.append(
            {
                "id": item.id,
                "sessionKey": item.session_key,
                "conversationId": conversation,
                "summary": item.summary,
                "expiresAt": int(item.expires_at.timestamp() * 1000),
                "choices": [
                    {"label": c.label, **({"kind": c.kind} if c.kind else {})} for c in item.choices
                ],
            }
        )
    if not with_settled:
        return {"ok": True, "pending": listed}
    settled = []
    for ended in await store.settled(caller.person.key):
        conversation = conversation_of(ended.session_key, caller.person.key)
        if wanted is not None and conversation != wanted:
            continue
        settled.append(
            {
                "id": ended.id,
                "conversationId": conversation,
                "summary": ended.summary,
                "outcome": ended.outcome,
                **({"choice": ended.choice} if ended.choice is not None else {}),
                "settledAt": int(ended.settled_at.timestamp() * 1000),
            }
        )
    return {"ok": True, "pending": listed, "settled": settled}


@get("/tool-log")
async def tool_log(request: AnyRequest) -> dict[str, Any]:
    caller = caller_of(request)
    entries = await services_of(request).manager.tool_log.recent(caller.person.key)
    return {
        "ok": True,
        "entries": [
            {
                "timestamp": entry.timestamp,
                "conversationId": entry.conversation_id,
                "toolName": entry.tool_name,
                "input": entry.input,
                "output": entry.output,
                "outcome": entry.outcome,
            }
            for entry in entries
        ],
    }


def _bad_offset(request: AnyRequest) -> BadRequest:
    return BadRequest(
        caller_of(request).translator.gettext(
            "The offset is not one this server gave; start again without it."
        )
    )


async def _read_memory(
    request: AnyRequest, read: Any, empty: Any, *, conversation: str | None = None
) -> Any:
    """A memory read, bounded in time; an unreachable store reads as empty.

    What the caller's turns archived (in ``conversation``, or anywhere) is stored first: the
    archive writes behind, a batch at a time, and a read right after a turn must show it.
    """
    services = services_of(request)
    if services.manager.memory is None:
        return empty
    archive = services.manager.archive
    person_key = caller_of(request).person.key
    try:
        async with asyncio.timeout(3.0):
            if archive is not None and (
                archive.holds_conversation(conversation)
                if conversation is not None
                else archive.holds_person(person_key)
            ):
                await archive.settled(1.0)
            return await read(services.manager.memory)
    except InvalidCursor:
        raise _bad_offset(request) from None
    except Exception as error:  # degrade to empty: the store is enrichment
        log.warning(
            "A memory read on %s failed (%s); the caller got an empty answer.",
            request.url.path,
            error if isinstance(error, MemoryStoreError) else type(error).__name__,
        )
        return empty


@get("/conversation")
async def conversation(request: AnyRequest) -> dict[str, Any]:
    caller = caller_of(request)
    tr = caller.translator
    query = request.query_params
    conversation = conversation_id(required_query(query.get("id"), "id", tr), tr)
    if conversation is None:
        raise BadRequest(tr.gettext('The query parameter "%(name)s" is required.') % {"name": "id"})
    size = limit(query.get("limit"), 200, tr)
    offset = query.get("offset") or None
    key = SessionManager.session_key(caller.person, conversation)
    transcript = services_of(request).transcript
    if transcript is not None:  # several instances: the transcript of record
        try:
            page = await transcript.conversation(caller.person.key, key, limit=size, after=offset)
        except InvalidCursor:
            raise _bad_offset(request) from None
    else:
        page = await _read_memory(
            request,
            lambda memory: memory.conversation(caller.person.key, key, limit=size, after=offset),
            Page(items=[], next_cursor=None),
            conversation=key,
        )
    return {
        "ok": True,
        "messages": [
            {"role": m.role, "content": m.content, "timestamp": m.timestamp}
            | ({"interrupted": True} if m.interrupted else {})
            for m in page.items
        ],
        "nextOffset": page.next_cursor,
    }


@get("/conversations")
async def conversations(request: AnyRequest) -> dict[str, Any]:
    caller = caller_of(request)
    size = limit(request.query_params.get("limit"), 50, caller.translator)
    prefix = caller.person.key + ":"
    transcript = services_of(request).transcript
    if transcript is not None:  # several instances: the transcript of record
        found = await transcript.conversations(caller.person.key, limit=size)
    else:
        found = await _read_memory(
            request, lambda memory: memory.conversations(caller.person.key, limit=size), []
        )
    return {
        "ok": True,
        "conversations": [
            {
                "conversationId": item.session_key[len(prefix) :],
                "lastTimestamp": item.last_timestamp,
                "preview": item.preview,
                "title": item.title,
            }
            for item in found
            if item.session_key.startswith(prefix)
            and not item.session_key.startswith(prefix + ONE_OFF_PREFIX)
        ],
    }


@get("/memory/scroll")
async def memory_scroll(request: AnyRequest) -> dict[str, Any]:
    caller = caller_of(request)
    tr = caller.translator
    query = request.query_params
    name = required_query(query.get("collection"), "collection", tr)
    names = services_of(request).collection_names
    collection = next((c for c in COLLECTIONS if names.of(c) == name), None)
    if collection is None:
        raise BadRequest(tr.gettext("Unknown collection: %(name)s.") % {"name": name[:100]})
    size = limit(query.get("limit"), 50, tr)
    offset = query.get("offset") or None
    page = await _read_memory(
        request,
        lambda memory: memory.scroll(collection, caller.person.key, limit=size, after=offset),
        Page(items=[], next_cursor=None),
    )
    return {
        "ok": True,
        "points": [{"id": p.id, "payload": p.payload} for p in page.items],
        "nextOffset": page.next_cursor,
    }


@get("/wiki/list")
async def wiki_list(request: AnyRequest) -> dict[str, Any]:
    caller = caller_of(request)
    return {"ok": True, "files": await services_of(request).vault.list(caller.person.key)}


@get("/wiki/read")
async def wiki_read(request: AnyRequest) -> dict[str, Any]:
    caller = caller_of(request)
    tr = caller.translator
    path = required_query(request.query_params.get("path"), "path", tr)
    try:
        content = await services_of(request).vault.read(caller.person.key, path)
    except WikiError:  # too large to serve, or unreadable: nothing the caller can read
        content = None
    if content is None:
        raise NotFound(tr.gettext("Not found."))
    return {"ok": True, "content": content}


@get("/wiki/grep")
async def wiki_grep(request: AnyRequest) -> dict[str, Any]:
    caller = caller_of(request)
    tr = caller.translator
    pattern = required_query(request.query_params.get("pattern"), "pattern", tr)
    try:
        matches = await services_of(request).vault.grep(caller.person.key, pattern)
    except InvalidPattern as error:
        raise BadRequest(
            tr.gettext("The pattern is not a valid regular expression: %(reason)s")
            % {"reason": str(error)}
        ) from None
    return {
        "ok": True,
        "matches": [{"path": m.path, "line": m.line, "text": m.text} for m in matches],
    }
