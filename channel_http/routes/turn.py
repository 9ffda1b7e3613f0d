"""``POST /turn``, its rejoining (``GET /turn/events``), ``POST /confirm`` and its by-id twin
``POST /confirmations/{id}``.

A turn streams as Server-Sent Events (:mod:`channel_http.protocols.sse`), straight from the
engine or through its log when turns may be rejoined (:mod:`channel_http.protocols.rejoin`).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from litestar import Response, get, post
from litestar.params import FromPath
from litestar.response import Stream

from channel_http.access_log import mark
from channel_http.errors import BadRequest, NotFound, TooManyRequests
from channel_http.middleware import Caller
from channel_http.protocols import rejoin, sse
from channel_http.requests import (
    AnswerBody,
    ConfirmBody,
    TurnBody,
    conversation_id,
    decode_body,
    required_query,
)
from channel_http.routes.handling import AnyRequest, caller_of, ok, services_of
from core.engine.confirmations import ChoiceRef
from core.engine.events import TurnStarted
from core.engine.sessions import ConfirmResult, Turn, TurnInput

if TYPE_CHECKING:
    from channel_http.services import Services


@post("/turn", status_code=200)
async def turn(request: AnyRequest) -> Stream:
    caller = caller_of(request)
    services = services_of(request)
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
    running = await start_turn(
        request, caller, services, conversation, text=text, opening=opening, resume=resume
    )
    headers = {**sse.HEADERS, "content-language": caller.language}
    _, frames = stream_of(running, services, caller)
    return sse.EventStream(sse.Opening(frames), media_type=sse.MEDIA_TYPE, headers=headers)


async def start_turn(
    request: AnyRequest,
    caller: Caller,
    services: Services,
    conversation: str | None,
    *,
    text: str = "",
    opening: bool = False,
    resume: bool = False,
) -> Turn:
    """What every route streaming a turn does before its first byte: a new message checked
    against the rate limit (a 429 over it), the turn opened, a brief wait for its admission.
    """
    tr = caller.translator
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
    await _admitted(request, running, min(QUEUE_REPORT_S, services.settings.http.heartbeat_s))
    return running


def stream_of(
    running: Turn, services: Services, caller: Caller, render: rejoin.Render | None = None
) -> tuple[str, AsyncGenerator[bytes, None]]:
    """The turn's id and its stream body: logged (to be rejoined) when turns may be.

    Mercury's own frames, or with ``render`` another protocol's rendering of the same events.
    Either body yields its ``turn`` event before any wait: sent with the headers
    (:class:`~channel_http.protocols.sse.Opening`).
    """
    heartbeat_s = services.settings.http.heartbeat_s
    metrics = services.metrics
    if services.turn_logs is not None:
        log = rejoin.start_logged(running, services.turn_logs, caller.person.key, metrics)
        return log.turn_id, rejoin.follow(log, 0, heartbeat_s, metrics, render)
    turn_id = secrets.token_urlsafe(18)
    if render is None:
        return turn_id, sse.event_stream(running, heartbeat_s, turn_id, metrics)
    opening = render([TurnStarted(turn_id=turn_id)])
    return turn_id, sse.forward(running, heartbeat_s, opening, render, metrics)


@get("/turn/events")
async def turn_events(request: AnyRequest) -> Stream:
    """Rejoin a turn (an extension of contract 6): its events after Last-Event-ID, then live."""
    caller = caller_of(request)
    turn_id = required_query(request.query_params.get("turnId"), "turnId", caller.translator)
    return await _rejoin(
        services_of(request), caller, turn_id, request.headers.get("last-event-id")
    )


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
    caller = caller_of(request)
    tr = caller.translator
    body = decode_body(ConfirmBody, await request.body(), tr)
    token = (body.token or "").strip()
    conversation = conversation_id(body.conversation_id, tr)
    if not token or conversation is None:
        raise BadRequest(tr.gettext("Both token and conversationId are required."))
    result = await confirm_token(services_of(request), caller, conversation, token)
    return _confirmed(result, caller)


@post("/confirmations/{confirmation:str}", status_code=200)
async def answer_confirmation(request: AnyRequest, confirmation: FromPath[str]) -> Response[Any]:
    """Answer one's own pending confirmation by its id (from ``GET /confirmations`` or the
    ``pending`` event): a choice, the same way ``/confirm`` takes a token, or a cancel."""
    caller = caller_of(request)
    tr = caller.translator
    body = decode_body(AnswerBody, await request.body(), tr)
    if (body.choice is None) == (body.cancel is not True):
        raise BadRequest(
            tr.gettext(
                'Say how to answer: "choice" (the number of a choice, from 0) or "cancel": true.'
            )
        )
    services = services_of(request)
    manager = services.manager
    gone = NotFound(
        tr.gettext(
            "No confirmation with that id waits for you: it was answered, it expired, or "
            "there never was one."
        )
    )
    known = CONFIRMATION_ID.fullmatch(confirmation) and 0 <= (body.choice or 0) < 2**31
    conversation = (
        await manager.pending_conversation(caller.person, confirmation) if known else None
    )
    if conversation is None:
        raise gone
    if body.choice is None:
        cancelled = await manager.cancel(
            caller.principal, caller.person, conversation, confirmation, caller.language
        )
        if not cancelled:
            raise gone
        content = {"resolved": True, "cancelled": True, "text": tr.gettext("Cancelled.")}
        return ok(content, headers={"content-language": caller.language})
    choice = ChoiceRef(confirmation, body.choice)
    result = await confirm_token(services, caller, conversation, choice)
    if not result.resolved:
        raise gone
    return _confirmed(result, caller)


#: The shape of a staging's id (:attr:`core.engine.confirmations.Staging.id`).
CONFIRMATION_ID: Final = re.compile(r"[0-9a-f]{32}")


def _confirmed(result: ConfirmResult, caller: Caller) -> Response[Any]:
    """What ``/confirm`` and ``/confirmations/{id}`` answer: the reply, or a resume."""
    content: dict[str, Any] = {"resolved": result.resolved}
    if result.resume:
        content["resume"] = True
    elif result.text is not None:
        content["text"] = result.text
    return ok(content, headers={"content-language": caller.language})


async def confirm_token(
    services: Services, caller: Caller, conversation: str, token: str | ChoiceRef
) -> ConfirmResult:
    """Confirm a staged action by its token (or, for its owner, by its id and a choice):
    ``/confirm``, ``/confirmations/{id}`` and ``/ui-stream``."""
    return await services.manager.confirm(
        caller.principal, caller.person, conversation, token, caller.language
    )
