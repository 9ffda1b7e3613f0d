"""``POST /ui-stream`` and ``GET /ui-stream/{chatId}/stream``: turns for the AI SDK's ``useChat``.

``POST /ui-stream`` takes ``DefaultChatTransport``'s body (``{id, messages, trigger}``): the
chat id is the conversation id, and the server's transcript is the source of truth, so of
the messages only the last is read. A person's message runs a turn, exactly as ``POST /turn``
does (:func:`~channel_http.routes.turn.start_turn`: the rate limit, the conversation's order,
the turn's log), streamed as the UI message stream
(:class:`~channel_http.protocols.ai_sdk.UiMessageStream`). An assistant message whose tool
parts carry answered approvals (the automatic re-post of
``lastAssistantMessageIsCompleteWithApprovalResponses``) confirms each approved one through
``/confirm``'s code (:func:`~channel_http.routes.turn.confirm_token`) and continues the same
message: the call's output, then the resumed turn when the action hands its result back to
the model, or the confirmation's reply.

``GET /ui-stream/{chatId}/stream`` is ``useChat``'s resume: 204 when no turn of that chat
runs on this instance, else the running turn replayed from its start and followed live (the
turn's log, :mod:`~channel_http.protocols.rejoin`; only with ``HTTP_SURFACE_REJOIN_S`` > 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from litestar import Response, get, post
from litestar.response import Stream

from channel_http.errors import BadRequest
from channel_http.protocols import ai_sdk, rejoin, sse
from channel_http.requests import (
    UiApproval,
    UiMessage,
    UiStreamBody,
    conversation_id,
    decode_body,
)
from channel_http.routes.handling import AnyRequest, caller_of, services_of
from channel_http.routes.turn import confirm_token, start_turn, stream_of
from core.turn_logs import TurnLog

if TYPE_CHECKING:
    from channel_http.middleware import Caller
    from channel_http.services import Services

#: Where the app keeps the last turn of each (person, chat) started here, for the resume.
_RUNNING: Final = "ui_stream_turns"
#: How many (person, chat) pairs it remembers; the oldest are forgotten first.
_REMEMBERED: Final = 10_000


@post("/ui-stream", status_code=200)
async def ui_stream(request: AnyRequest) -> Response[Any] | Stream:
    caller = caller_of(request)
    services = services_of(request)
    tr = caller.translator
    body = decode_body(UiStreamBody, await request.body(), tr)
    chat = conversation_id(body.id, tr)
    if chat is None:
        raise BadRequest(tr.gettext('The field "%(field)s" is required.') % {"field": "id"})
    if body.trigger not in (None, "submit-message"):
        raise BadRequest(
            # Shown: the refusal (400) of a useChat request asking to regenerate an answer.
            tr.gettext(
                "Only a new message can be sent here (trigger submit-message); to have an "
                "answer again, send the message again."
            )
        )
    last = body.messages[-1] if body.messages else None
    if last is not None and last.role == "user":
        text = "".join(part.text or "" for part in last.parts if part.type == "text")
        if text.strip():
            running = await start_turn(request, caller, services, chat, text=text)
            return _streamed(request, services, caller, chat, running, ai_sdk.UiMessageStream(tr))
    elif last is not None and last.role == "assistant":
        answered = [
            (part.tool_call_id, part.approval)
            for part in last.parts
            if part.state == "approval-responded"
            and part.tool_call_id is not None
            and part.approval is not None
            and part.approval.approved is not None
        ]
        if answered:
            return await _answered(request, services, caller, chat, last, answered)
    raise BadRequest(
        # Shown: the refusal (400) of a useChat request with nothing to answer in its last
        # message (no text, no approval answered).
        tr.gettext(
            "The last message must be the person's, with some text, or the assistant's, "
            "with a tool approval answered."
        )
    )


async def _answered(
    request: AnyRequest,
    services: Services,
    caller: Caller,
    chat: str,
    message: UiMessage,
    answered: list[tuple[str, UiApproval]],
) -> Response[Any] | Stream:
    """The approvals of ``message`` confirmed or declined, and the same message continued."""
    tr = caller.translator
    lead: list[bytes] = []
    replies: list[str] = []
    resume = False
    for call, approval in answered:
        yes, no = ai_sdk.approval_tokens(approval.id)
        if not approval.approved:
            lead.append(ai_sdk.chunk({"type": "tool-output-denied", "toolCallId": call}))
            if no is not None:  # a Cancel choice: pressed, so the staging is settled now
                await confirm_token(services, caller, chat, no)
            # Shown: the answer after a person declined a tool call's approval in a useChat UI.
            replies.append(tr.gettext("Not confirmed: nothing was done."))
            continue
        result = await confirm_token(services, caller, chat, yes)
        if not result.resolved:
            no_longer = tr.gettext(
                "There is no pending confirmation for this token: it may have expired, "
                "been used already, or never existed."
            )
            lead.append(
                ai_sdk.chunk(
                    {"type": "tool-output-error", "toolCallId": call, "errorText": no_longer}
                )
            )
            replies.append(no_longer)
            continue
        output: dict[str, Any] = {"outcome": "confirmed"}
        if result.text is not None:
            output["text"] = result.text
            replies.append(result.text)
        resume |= result.resume
        lead.append(
            ai_sdk.chunk({"type": "tool-output-available", "toolCallId": call, "output": output})
        )
    rendering = ai_sdk.UiMessageStream(tr, message_id=message.id or None, lead=b"".join(lead))
    if resume:
        running = await start_turn(request, caller, services, chat, resume=True)
        return _streamed(request, services, caller, chat, running, rendering)
    return Response(
        rendering.settled("\n\n".join(replies)),
        media_type=sse.MEDIA_TYPE,
        headers={**ai_sdk.HEADERS, "content-language": caller.language},
    )


def _streamed(
    request: AnyRequest,
    services: Services,
    caller: Caller,
    chat: str,
    running: Any,
    rendering: ai_sdk.UiMessageStream,
) -> Stream:
    turn_id, frames = stream_of(running, services, caller, rendering)
    if services.turn_logs is not None:
        remembered = _remembered(request)
        key = (caller.person.key, chat)
        remembered.pop(key, None)
        remembered[key] = turn_id
        while len(remembered) > _REMEMBERED:
            del remembered[next(iter(remembered))]
    return sse.EventStream(
        sse.Opening(frames),
        media_type=sse.MEDIA_TYPE,
        headers={**ai_sdk.HEADERS, "content-language": caller.language},
    )


def _remembered(request: AnyRequest) -> dict[tuple[str, str], str]:
    state = request.app.state
    remembered: dict[tuple[str, str], str] | None = state.get(_RUNNING)
    if remembered is None:
        remembered = state[_RUNNING] = {}
    return remembered


@get("/ui-stream/{chatId:str}/stream", status_code=200)
async def ui_stream_resume(request: AnyRequest) -> Response[Any] | Stream:
    caller = caller_of(request)
    services = services_of(request)
    tr = caller.translator
    chat = conversation_id(request.path_params["chatId"], tr)
    turn_id = None if chat is None else _remembered(request).get((caller.person.key, chat))
    logs = services.turn_logs
    log = None if turn_id is None or logs is None else await logs.find(turn_id, caller.person.key)
    if log is None or (isinstance(log, TurnLog) and log.done):
        return Response(None, status_code=204)
    heartbeat_s = services.settings.http.heartbeat_s
    frames = rejoin.follow(log, 0, heartbeat_s, services.metrics, ai_sdk.UiMessageStream(tr))
    return sse.EventStream(
        sse.Opening(frames),
        media_type=sse.MEDIA_TYPE,
        headers={**ai_sdk.HEADERS, "content-language": caller.language},
    )
