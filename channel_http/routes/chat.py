"""``POST /chat``: a turn answered at once in JSON, with files in and out, for scripts.

The same pipeline as ``POST /turn`` (the caller middleware, the rate limit, the engine's
confirmations and isolation); the route drains the turn's events itself and answers the
``final`` text, the files the model wrote to the person's outbox during the turn, and a
``pending`` or ``login`` when the turn produced one. A client that leaves cancels the turn;
a turn that runs past ``chat.timeout_s`` is cancelled and answered 504.

Acting for others: ``callerId``, ``authorName`` and ``spaceId`` are taken only from a
caller whose directory entry holds the bridge role (``chat.bridge_role``); the turn then
runs as the person the directory finds behind ``callerId``, admitted as any caller is.

In a space (a ``spaceId`` that names one, such as ``slack:C0123ABC``) the message goes
through the routing a bridge's message goes through (:mod:`core.spaces.routing`), always
addressed to the assistant: a muted person is refused, ``stop`` and ``compact`` are done at
once, the space's rate limit applies, and the turn runs in the space with its preferences,
its ambient talk, its files and its tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import msgspec
from litestar import Request, Response, post

from channel_http.errors import (
    BadGateway,
    BadRequest,
    Forbidden,
    GatewayTimeout,
    InternalError,
    PayloadTooLarge,
    TooManyRequests,
    Unavailable,
)
from channel_http.requests import ChatBody, conversation_id, decode_body
from core.engine import events
from core.engine.sessions import Turn, TurnInput
from core.people.i18n import choose_language
from core.people.people import Admitted, refusal_message
from core.people.principal import Principal
from core.people.timezones import choose_zone
from core.spaces import InvalidSpaceId, SpaceRef, SpaceTurn, area_key, parse_space_id
from core.spaces.routing import (
    AmbientKept,
    ChatMessage,
    Command,
    Muted,
    Refuse,
    Router,
    Run,
    Stranger,
    Withdraw,
)
from core.workspace.file_types import describe_size
from core.workspace.files import (
    FileTooLarge,
    IncomingFile,
    InvalidFileName,
    printable_name,
    refusal_text,
)

if TYPE_CHECKING:
    from channel_http.middleware import Caller
    from channel_http.services import Services
    from core.people.i18n import Translator
    from core.people.principal import Person

AnyRequest = Request[Any, Any, Any]

#: ``<platform>:<id>``: how a bridge names the person it acts for (a directory identity).
CALLER_ID: Final = re.compile(r"[a-z][a-z0-9_-]{0,31}:[^\s\x00-\x1f\x7f]{1,200}")
MAX_AUTHOR_CHARS: Final = 100
#: Files one request may carry: each is a write to the disk before the turn starts.
MAX_FILES: Final = 20
# The JSON around the files' base64: the text, the names, the punctuation.
_BODY_OVERHEAD: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Acting:
    """Who the turn runs as: the caller, or the person a bridge acts for."""

    principal: Principal
    person: Person
    language: str
    time_zone: str
    translator: Translator


class _Collected(msgspec.Struct, kw_only=True):
    final: events.Final | None = None
    pending: events.Pending | None = None
    login: events.Login | None = None
    error: events.Error | None = None


def _services(request: AnyRequest) -> Services:
    services: Services = request.app.state.services
    return services


def max_body_bytes(max_turn_bytes: int) -> int:
    """The largest body ``POST /chat`` reads: the files' base64 and room for the rest."""
    return math.ceil(max_turn_bytes / 3) * 4 + _BODY_OVERHEAD


async def _read_body(request: AnyRequest, limit: int, turn_limit: int, tr: Translator) -> bytes:
    """The body, read only up to ``limit`` bytes: a larger one is refused with 413."""
    declared = request.headers.get("content-length")
    too_large = PayloadTooLarge(
        tr.gettext("The request is larger than the limit of %(limit)s of files per turn.")
        % {"limit": describe_size(turn_limit)}
    )
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        parts.append(chunk)
    return b"".join(parts)


def _name_refusal(error: InvalidFileName, tr: Translator) -> BadRequest:
    return BadRequest(refusal_text(error, tr))


def _size_refusal(error: FileTooLarge, name: str, tr: Translator) -> PayloadTooLarge:
    limit = describe_size(error.limit)
    if error.per == "file":
        return PayloadTooLarge(
            tr.gettext('The file "%(name)s" is larger than the limit of %(limit)s per file.')
            % {"name": printable_name(name), "limit": limit}
        )
    return PayloadTooLarge(
        tr.gettext("The files are larger together than the limit of %(limit)s per turn.")
        % {"limit": limit}
    )


async def _acting(
    request: AnyRequest, caller: Caller, body: ChatBody, services: Services
) -> _Acting:
    """The caller, or (for a bridge) the person named by ``callerId``."""
    tr = caller.translator
    bridged = body.caller_id is not None or body.author_name is not None
    if not bridged and body.space_id is None:
        return _Acting(caller.principal, caller.person, caller.language, caller.time_zone, tr)
    role = services.settings.chat.bridge_role
    if role not in caller.person.roles:
        raise Forbidden(
            tr.gettext(
                'Only a bridge may send "callerId", "authorName" or "spaceId": '
                "the directory must give the caller the role %(role)s."
            )
            % {"role": role}
        )
    if not bridged:
        return _Acting(caller.principal, caller.person, caller.language, caller.time_zone, tr)
    caller_id = (body.caller_id or "").strip()
    if CALLER_ID.fullmatch(caller_id) is None:
        raise BadRequest(
            tr.gettext('The "callerId" must be a platform and an id, such as discord:1234.')
        )
    provider, _, identity = caller_id.partition(":")
    if provider in services.settings.auth.providers:
        # Those identities sign in here themselves: a bridge never speaks for them.
        raise Forbidden(
            tr.gettext(
                'A bridge can\'t act for "%(provider)s" identities: they sign in themselves.'
            )
            % {"provider": provider}
        )
    author = (body.author_name or "").strip()[:MAX_AUTHOR_CHARS] or None
    principal = Principal(id=identity, provider=provider, display_name=author)
    identification = await services.people.identify(principal)
    if not isinstance(identification, Admitted):
        reason = identification.reason
        error_type = Forbidden if reason == "unknown" else Unavailable
        raise error_type(refusal_message(reason, tr), extra={"reason": reason})
    person = identification.person
    saved = await services.person_settings.get(person.key)
    default = services.settings.defaults
    language = choose_language(
        saved.language, request.headers.get("accept-language"), default.language
    )
    zone = choose_zone(saved.time_zone, None, default.time_zone)
    return _Acting(principal, person, language, zone, services.catalogs.translator(language))


async def _collect(turn: Turn) -> _Collected:
    collected = _Collected()
    take = turn.events.take
    while True:
        for event in await take():
            if event is None:
                return collected
            if isinstance(event, events.Final):
                collected.final = event
            elif isinstance(event, events.Pending):
                collected.pending = event
            elif isinstance(event, events.Login):
                collected.login = event
            elif isinstance(event, events.Error):
                collected.error = event


async def _disconnected(request: AnyRequest) -> None:
    """Returns once the client has gone (the body is read: only a disconnect is left)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _run(
    request: AnyRequest, turn: Turn, timeout_s: float, tr: Translator
) -> _Collected | None:
    """The turn's outcome; None when the client left first (the turn is then cancelled)."""
    collecting = asyncio.ensure_future(_collect(turn))
    watching = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait(
            {collecting, watching}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if collecting in done:
            return collecting.result()
        if watching in done:
            return None
        raise GatewayTimeout(
            tr.ngettext(
                "The turn took longer than %(seconds)d second and was stopped; "
                "ask something shorter or try again.",
                "The turn took longer than %(seconds)d seconds and was stopped; "
                "ask something shorter or try again.",
                math.ceil(timeout_s),
            )
            % {"seconds": math.ceil(timeout_s)}
        )
    finally:
        turn.cancel()  # a finished turn ignores it; otherwise the model request closes
        for task in (collecting, watching):
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(collecting, watching, return_exceptions=True)


def _space_named(space_id: str | None) -> SpaceRef | None:
    """The space ``spaceId`` names; None for no ``spaceId``, or one that names a conversation
    of the person's own rather than a platform's space (how ``/chat`` took it before #40)."""
    if space_id is None:
        return None
    try:
        return parse_space_id(space_id)
    except InvalidSpaceId:
        return None


def _too_many(seconds: int, acting: _Acting) -> TooManyRequests:
    return TooManyRequests(
        acting.translator.ngettext(
            "Too many messages: wait %(seconds)d second before sending another.",
            "Too many messages: wait %(seconds)d seconds before sending another.",
            seconds,
        )
        % {"seconds": seconds},
        headers={"retry-after": str(seconds), "content-language": acting.language},
    )


async def _routed(
    services: Services,
    router: Router,
    space: SpaceRef,
    conversation: str,
    acting: _Acting,
    text: str,
    incoming: list[IncomingFile],
) -> Run | Response[Any]:
    """The space's routing for the message: the turn to run, or the answer without one."""
    tr = acting.translator
    message = ChatMessage(
        space=space,
        conversation=conversation,
        is_dm=space.is_dm,
        principal=acting.principal,
        text=text,
        is_reply_to_bot=True,  # a bridge calls /chat for what is addressed to the assistant
        attachment_names=tuple(f.name for f in incoming),
    )
    decision = await router.route(message)
    if isinstance(decision, Run):
        return decision
    if isinstance(decision, Muted):
        raise Forbidden(
            tr.gettext(
                "You are muted in this space: the assistant reads nothing you send here "
                "until the mute ends or an admin of the space lifts it."
            ),
            extra={"reason": "muted"},
        )
    if isinstance(decision, Withdraw) and decision.hint is not None:
        raise BadRequest(decision.hint)
    if isinstance(decision, Withdraw | AmbientKept | Stranger):
        # Only a person the directory stopped admitting since the caller's admission.
        raise Unavailable(tr.gettext("Something went wrong on our side. Try again in a moment."))
    if isinstance(decision, Refuse):
        raise _too_many(decision.retry_after_s, acting)
    return Response(
        {"ok": True, "reply": await _command(services, decision, tr), "files": []},
        headers={"content-language": acting.language, "cache-control": "no-store"},
    )


async def _command(services: Services, command: Command, tr: Translator) -> str:
    """Do ``stop`` or ``compact`` at once, as a bridge's pipeline does; what to answer."""
    if command.kind == "compact":
        await services.manager.compact(command.who.key)
        return tr.gettext("Done: this conversation starts afresh from a summary.")
    if services.bridging is None:
        return tr.gettext("Nothing is running here.")
    return await services.bridging.pipeline.stop(command, tr)


@post("/chat", status_code=200, request_max_body_size=None)
async def chat(request: AnyRequest) -> Response[Any]:
    caller: Caller = request.scope["state"]["caller"]
    services = _services(request)
    tr = caller.translator
    files = services.files
    limits = files.limits
    raw = await _read_body(
        request, max_body_bytes(limits.max_turn_bytes), limits.max_turn_bytes, tr
    )
    body = decode_body(ChatBody, raw, tr)
    acting = await _acting(request, caller, body, services)
    tr = acting.translator
    conversation = conversation_id(body.conversation_id, tr)
    ref = _space_named(body.space_id)
    if ref is not None:
        # A platform's space: ``conversationId``, when given, is a conversation inside it
        # (a thread), as a bridge's message has one.
        conversation = conversation or ref.id
    elif body.space_id is not None:
        space = conversation_id(body.space_id, tr)
        if conversation is not None and space is not None and space != conversation:
            raise BadRequest(
                tr.gettext('Give "spaceId" or "conversationId", or the same value in both.')
            )
        conversation = conversation or space
    text = body.text or ""
    incoming = [IncomingFile(f.name, f.data) for f in body.files or ()]
    if len(incoming) > MAX_FILES:
        raise BadRequest(
            tr.gettext("Send at most %(count)d files with one message.") % {"count": MAX_FILES}
        )
    if not text.strip() and not incoming:
        raise BadRequest(tr.gettext('Write some text: "text" is missing or blank.'))
    manager = services.manager
    in_space: SpaceTurn | None = None
    run: Run | None = None
    area = acting.person.key
    if ref is not None and services.router is not None:
        routed = await _routed(
            services, services.router, ref, conversation or ref.id, acting, text, incoming
        )
        if isinstance(routed, Response):
            return routed
        run, text = routed, routed.text  # a token said with the trigger is the token alone
        in_space = await services.router.space_turn(
            routed, is_dm=ref.is_dm, author_name=acting.principal.display_name
        )
        area = area_key(ref.id)
    else:
        decision = await manager.check_rate(acting.person, text)
        if decision is not None and not decision.allowed:
            raise _too_many(decision.retry_after_s, acting)
    try:
        saved = await files.receive(area, incoming)
    except InvalidFileName as error:
        raise _name_refusal(error, tr) from None
    except FileTooLarge as error:
        largest = max(incoming, key=lambda f: len(f.data))
        raise _size_refusal(error, largest.name, tr) from None
    turn = manager.open_turn(
        TurnInput(
            principal=acting.principal,
            person=acting.person,
            conversation_id=conversation,
            text=text,
            language=acting.language,
            time_zone=acting.time_zone,
            received_at=datetime.now(UTC),
            attachments=tuple(f.path for f in saved),
            space=in_space,
            said=run.said if run is not None else None,
        )
    )
    headers = {"content-language": acting.language, "cache-control": "no-store"}
    with contextlib.ExitStack() as held:
        if run is not None and services.bridging is not None:
            # Known as the conversation's running turn, as a bridge's is: a ``stop`` sent
            # through a bridge or /chat, on this instance or another, reaches it.
            held.enter_context(services.bridging.pipeline.running(run.who, turn))
        collected = await _run(request, turn, services.settings.chat.timeout_s, tr)
    if collected is None:  # the client left: nobody reads this
        return Response(b"", status_code=204, headers=headers)
    if turn.outcome == "cancelled" and collected.final is None and collected.error is None:
        return Response({"ok": True, "reply": tr.gettext("Stopped."), "files": []}, headers=headers)
    if collected.error is not None or collected.final is None:
        message = (
            collected.error.message
            if collected.error is not None
            else tr.gettext("Something went wrong on our side. Try again in a moment.")
        )
        if turn.failure == "model":
            raise BadGateway(message, headers=headers)
        if turn.failure == "budget" and turn.refusal is not None:
            wait = turn.refusal.seconds_left(datetime.now(UTC))
            raise TooManyRequests(message, headers={**headers, "retry-after": str(wait)})
        if turn.failure == "stopping":
            raise Unavailable(message, headers={**headers, "retry-after": "5"})
        raise InternalError(message, headers=headers)  # the engine logged it
    content: dict[str, Any] = {
        "ok": True,
        "reply": collected.final.text,
        "files": [
            {
                "filename": found.name,
                "mimeType": found.mime_type,
                "sizeBytes": len(data),
                "data": data,
            }
            for found, data in await files.written(area, turn.written)
        ],
    }
    usage = collected.final.usage
    if usage is not None:
        content["usage"] = msgspec.to_builtins(usage)
    # The events as /turn's stream encodes them: one shape, whatever fields they grow.
    if collected.pending is not None:
        content["pending"] = msgspec.to_builtins(collected.pending)
    if collected.login is not None:
        content["login"] = msgspec.to_builtins(collected.login)
    return Response(content, headers=headers)
