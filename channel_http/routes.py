"""The routes of the surface. Each handler reads the caller the middleware settled,
decodes its input at the edge, asks the core, and answers JSON (or the event stream).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import secrets
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import msgspec
from litestar import Request, Response, Router, get, patch, post
from litestar.response import Stream

from channel_http import rejoin, sse
from channel_http.access_log import mark
from channel_http.errors import BadRequest, NotFound, TooManyRequests
from channel_http.middleware import Caller, CallerMiddleware
from channel_http.requests import (
    ConfirmBody,
    MeBody,
    TurnBody,
    conversation_id,
    decode_body,
    limit,
    required_query,
)
from core.engine.sessions import ONE_OFF_PREFIX, SessionManager, Turn, TurnInput
from core.memory import COLLECTIONS, InvalidCursor, MemoryStoreError, Page
from core.people.i18n import SUPPORTED_LANGUAGES
from core.people.person_settings import InvalidSetting
from core.version import PLUGIN_API_VERSION, core_version
from core.workspace.wiki import InvalidPattern, WikiError

if TYPE_CHECKING:
    from channel_http.services import Services

AnyRequest = Request[Any, Any, Any]
log = logging.getLogger("mercury.http")


def _services(request: AnyRequest) -> Services:
    services: Services = request.app.state.services
    return services


def _caller(request: AnyRequest) -> Caller:
    caller: Caller = request.scope["state"]["caller"]
    return caller


def _ok(content: dict[str, Any], *, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response({"ok": True, **content}, headers=headers)


# ------------------------------------------------------------------ public


@get("/version", sync_to_thread=False)
def version() -> dict[str, Any]:
    return {"ok": True, "version": core_version()}


@get("/openapi.yaml", sync_to_thread=False)
def openapi_document(request: AnyRequest) -> Response[bytes]:
    # Litestar appends the charset to a text/ media type itself: naming it here doubled it.
    return Response(_services(request).openapi, media_type="text/yaml")


# ------------------------------------------------------------------- turns


@post("/turn", status_code=200)
async def turn(request: AnyRequest) -> Stream:
    caller = _caller(request)
    services = _services(request)
    tr = caller.translator
    last_event_id = request.headers.get("last-event-id")
    if last_event_id is not None:
        # A client reconnecting by sending its request again (fetch-event-source does): the
        # id names the turn, which is rejoined rather than run twice.
        return await _rejoin(services, caller, None, last_event_id)
    reading = time.perf_counter()
    body = decode_body(TurnBody, await request.body(), tr)
    mark(request.scope, "body", time.perf_counter() - reading)
    conversation = conversation_id(body.conversation_id, tr)
    opening, resume = bool(body.opening), bool(body.resume)
    if opening and conversation is None:
        raise BadRequest(tr.gettext("An opening turn needs a conversationId."))
    if resume and conversation is None:
        raise BadRequest(tr.gettext("A resumed turn needs a conversationId."))
    text = body.text or ""
    if not (opening or resume) and not text.strip():
        raise BadRequest(tr.gettext('Write some text: "text" is missing or blank.'))
    manager = services.manager
    if not resume:
        checking = time.perf_counter()
        decision = await manager.check_rate(caller.person, text, opening=opening)
        mark(request.scope, "rate", time.perf_counter() - checking)
        if decision is not None and not decision.allowed:
            seconds = decision.retry_after_s
            raise TooManyRequests(
                tr.ngettext(
                    "Too many messages: wait %(seconds)d second before sending another.",
                    "Too many messages: wait %(seconds)d seconds before sending another.",
                    seconds,
                )
                % {"seconds": seconds},
                headers={"retry-after": str(seconds), "content-language": caller.language},
            )
    running = manager.open_turn(
        TurnInput(
            principal=caller.principal,
            person=caller.person,
            conversation_id=conversation,
            text=text,
            opening=opening,
            resume=resume,
            language=caller.language,
            time_zone=caller.time_zone,
            received_at=datetime.now(UTC),
        )
    )
    request.scope["state"]["turn"] = running
    heartbeat_s = services.settings.http.heartbeat_s
    await _admitted(request, running, min(QUEUE_REPORT_S, heartbeat_s))
    headers = {**sse.HEADERS, "content-language": caller.language}
    metrics = services.metrics
    # Either body yields its `turn` frame before any wait: sent with the headers (sse.Opening).
    if services.turn_logs is None:
        frames = sse.event_stream(running, heartbeat_s, secrets.token_urlsafe(18), metrics)
    else:
        log = rejoin.start_logged(running, services.turn_logs, caller.person.key, metrics)
        frames = rejoin.follow(log, 0, heartbeat_s, metrics)
    return sse.EventStream(sse.Opening(frames), media_type=sse.MEDIA_TYPE, headers=headers)


@get("/turn/events")
async def turn_events(request: AnyRequest) -> Stream:
    """Rejoin a turn (an extension of contract 6): its events after Last-Event-ID, then live."""
    caller = _caller(request)
    turn_id = required_query(request.query_params.get("turnId"), "turnId", caller.translator)
    return await _rejoin(_services(request), caller, turn_id, request.headers.get("last-event-id"))


async def _rejoin(
    services: Services, caller: Caller, turn_id: str | None, last_event_id: str | None
) -> Stream:
    tr = caller.translator
    start = 0
    if last_event_id is not None:
        parsed = rejoin.parse_event_id(last_event_id)
        if parsed is None or (turn_id is not None and parsed[0] != turn_id):
            raise BadRequest(
                tr.gettext(
                    "Last-Event-ID is not an id of this turn; leave it out to read the turn "
                    "from its start."
                )
            )
        turn_id, start = parsed[0], parsed[1] + 1
    logs = services.turn_logs
    log = None if logs is None or turn_id is None else await logs.find(turn_id, caller.person.key)
    if log is None:
        raise NotFound(
            tr.gettext(
                "That turn can't be rejoined: it ended too long ago, or it isn't yours. "
                "Send your message again."
            )
        )
    return sse.EventStream(
        rejoin.follow(log, start, services.settings.http.heartbeat_s, services.metrics),
        media_type=sse.MEDIA_TYPE,
        headers={**sse.HEADERS, "content-language": caller.language},
    )


#: How long ``/turn`` may hold its headers back to report the wait behind earlier turns.
QUEUE_REPORT_S: Final = 0.05


async def _admitted(request: AnyRequest, running: Turn, bound: float) -> None:
    """Wait (briefly) until the turn holds its conversation, for ``Server-Timing: queue``.

    A turn behind a longer one doesn't hold its headers: a client sees its 200 at once and
    can leave before the turn starts. Its ``queue`` then says ``waiting``, with the wait so
    far.
    """
    if running.admitted.is_set():  # most turns: nothing to wait for, no timer to arm
        mark(request.scope, "queue", running.queue_s)
        return
    started = time.perf_counter()
    try:
        async with asyncio.timeout(bound):
            await running.admitted.wait()
    except TimeoutError:
        mark(request.scope, "queue", time.perf_counter() - started, "waiting")
        return
    except asyncio.CancelledError:
        running.cancel()
        raise
    mark(request.scope, "queue", running.queue_s)


@post("/confirm", status_code=200)
async def confirm(request: AnyRequest) -> Response[Any]:
    caller = _caller(request)
    tr = caller.translator
    body = decode_body(ConfirmBody, await request.body(), tr)
    token = (body.token or "").strip()
    conversation = conversation_id(body.conversation_id, tr)
    if not token or conversation is None:
        raise BadRequest(tr.gettext("Both token and conversationId are required."))
    result = await _services(request).manager.confirm(
        caller.principal, caller.person, conversation, token, caller.language
    )
    content: dict[str, Any] = {"resolved": result.resolved}
    if result.resume:
        content["resume"] = True
    elif result.text is not None:
        content["text"] = result.text
    return _ok(content, headers={"content-language": caller.language})


# ---------------------------------------------------------------- the person


@get("/me")
async def me(request: AnyRequest) -> dict[str, Any]:
    caller = _caller(request)
    saved = caller.saved
    return {
        "ok": True,
        "name": saved.name,
        "language": saved.language,
        "timeZone": saved.time_zone,
    }


@patch("/me")
async def patch_me(request: AnyRequest) -> dict[str, Any]:
    """Save the caller's time zone and/or language (the language is an extension of v6).

    Both are checked before either is saved, so a refused body changes nothing.
    """
    caller = _caller(request)
    tr = caller.translator
    body = decode_body(MeBody, await request.body(), tr)
    if body.time_zone is None and body.language is None:
        raise BadRequest(tr.gettext('The body must contain "timeZone" or "language".'))
    language = None
    if body.language is not None:
        language = body.language.strip().lower()
        if language not in SUPPORTED_LANGUAGES:
            raise BadRequest(
                tr.gettext('The field "%(field)s" must be one of %(choices)s, not "%(value)s".')
                % {
                    "field": "language",
                    "choices": ", ".join(SUPPORTED_LANGUAGES),
                    "value": body.language[:64],
                }
            )
    settings = _services(request).person_settings
    saved: dict[str, Any] = {"ok": True}
    if body.time_zone is not None:
        try:
            saved["timeZone"] = await settings.set_time_zone(caller.person.key, body.time_zone)
        except InvalidSetting:
            raise BadRequest(
                tr.gettext(
                    'The field "%(field)s" must be a time zone name such as Europe/Rome, '
                    'not "%(value)s".'
                )
                % {"field": "timeZone", "value": body.time_zone[:64]}
            ) from None
    if language is not None:
        saved["language"] = await settings.set_language(caller.person.key, language)
    return saved


@post("/link", status_code=200)
async def link(request: AnyRequest) -> Response[Any]:
    caller = _caller(request)
    services = _services(request)
    code = await services.linking.start(caller.principal, caller.person)
    return _ok(
        {"code": code.code, "expiresAt": code.expires_at.isoformat(timespec="seconds")},
        headers={"cache-control": "no-store"},
    )


# -------------------------------------------------------------------- reads


@get("/health")
async def health(request: AnyRequest) -> dict[str, Any]:
    services = _services(request)
    ollama_ok, qdrant_ok = await asyncio.gather(
        services.manager.model.reachable(), services.memory_reachable()
    )
    usage = resource.getrusage(resource.RUSAGE_SELF)
    body: dict[str, Any] = {
        "ok": True,
        "uptimeSeconds": round(time.monotonic() - services.started, 3),
        "memory": {"rss": _rss_bytes(usage.ru_maxrss)},
        "qdrantReachable": qdrant_ok,
        "ollamaReachable": ollama_ok,
    }
    if services.mcp is not None:
        body["mcpServers"] = [msgspec.to_builtins(s) for s in services.mcp.health()]
    return body


def _rss_bytes(fallback_kib: int) -> int:
    try:
        with open("/proc/self/statm", "rb") as statm:  # current, not peak
            pages = int(statm.read().split()[1])
        return pages * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return fallback_kib * 1024


@get("/manifest")
async def manifest(request: AnyRequest) -> dict[str, Any]:
    caller = _caller(request)
    registry = _services(request).manager.registry
    return {"ok": True, "manifest": registry.manifest(caller.person, PLUGIN_API_VERSION)}


@get("/confirmations")
async def confirmations(request: AnyRequest) -> dict[str, Any]:
    caller = _caller(request)
    pending = await _services(request).manager.confirmations.pending(caller.person.key)
    return {
        "ok": True,
        "pending": [
            {
                "sessionKey": item.session_key,
                # An extension of contract v6: the id a UI knows the conversation by, or
                # null for a one-off turn's session (it has none).
                "conversationId": _conversation_of(item.session_key, caller.person.key),
                "summary": item.summary,
                "expiresAt": int(item.expires_at.timestamp() * 1000),
            }
            for item in pending
        ],
    }


def _conversation_of(session_key: str, person_key: str) -> str | None:
    conversation = session_key.removeprefix(person_key + ":")
    if conversation == session_key or conversation.startswith(ONE_OFF_PREFIX):
        return None
    return conversation


@get("/tool-log")
async def tool_log(request: AnyRequest) -> dict[str, Any]:
    caller = _caller(request)
    entries = await _services(request).manager.tool_log.recent(caller.person.key)
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
        _caller(request).translator.gettext(
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
    services = _services(request)
    if services.manager.memory is None:
        return empty
    archive = services.manager.archive
    person_key = _caller(request).person.key
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
    caller = _caller(request)
    tr = caller.translator
    query = request.query_params
    conversation = conversation_id(required_query(query.get("id"), "id", tr), tr)
    if conversation is None:
        raise BadRequest(tr.gettext('The query parameter "%(name)s" is required.') % {"name": "id"})
    size = limit(query.get("limit"), 200, tr)
    offset = query.get("offset") or None
    key = SessionManager.session_key(caller.person, conversation)
    transcript = _services(request).transcript
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
    caller = _caller(request)
    size = limit(request.query_params.get("limit"), 50, caller.translator)
    prefix = caller.person.key + ":"
    transcript = _services(request).transcript
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
    caller = _caller(request)
    tr = caller.translator
    query = request.query_params
    name = required_query(query.get("collection"), "collection", tr)
    names = _services(request).collection_names
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
    caller = _caller(request)
    return {"ok": True, "files": await _services(request).vault.list(caller.person.key)}


@get("/wiki/read")
async def wiki_read(request: AnyRequest) -> dict[str, Any]:
    caller = _caller(request)
    tr = caller.translator
    path = required_query(request.query_params.get("path"), "path", tr)
    try:
        content = await _services(request).vault.read(caller.person.key, path)
    except WikiError:  # too large to serve, or unreadable: nothing the caller can read
        content = None
    if content is None:
        raise NotFound(tr.gettext("Not found."))
    return {"ok": True, "content": content}


@get("/wiki/grep")
async def wiki_grep(request: AnyRequest) -> dict[str, Any]:
    caller = _caller(request)
    tr = caller.translator
    pattern = required_query(request.query_params.get("pattern"), "pattern", tr)
    try:
        matches = await _services(request).vault.grep(caller.person.key, pattern)
    except InvalidPattern as error:
        raise BadRequest(
            tr.gettext("The pattern is not a valid regular expression: %(reason)s")
            % {"reason": str(error)}
        ) from None
    return {
        "ok": True,
        "matches": [{"path": m.path, "line": m.line, "text": m.text} for m in matches],
    }


def authenticated_router(routes: list[Any]) -> Router:
    return Router(path="/", route_handlers=routes, middleware=[CallerMiddleware()])
