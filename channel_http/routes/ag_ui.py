"""``POST /ag-ui``: a run of the AG-UI 1.0 protocol, streamed over SSE.

The body is AG-UI's ``RunAgentInput``: ``threadId`` is the conversation, and the last user
message of ``messages`` is the new one (what the client sends of earlier history is ignored:
the server's transcript is the truth). A run whose ``resume`` answers the interrupts of the
last one confirms or cancels each through the same code as ``POST /confirm`` and streams the
resumed turn. The turn itself starts as ``POST /turn``'s does (:func:`turn.start_turn`); its
events are rendered by :mod:`channel_http.protocols.ag_ui`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from litestar import post
from litestar.response import Stream

from channel_http.errors import BadRequest
from channel_http.protocols import ag_ui, sse
from channel_http.requests import CONVERSATION_ID, AgUiInput, AgUiResume, decode_body
from channel_http.routes.handling import AnyRequest, caller_of, services_of
from channel_http.routes.turn import start_turn
from core.engine import events
from core.people.messages import NO_PENDING_CONFIRMATION

if TYPE_CHECKING:
    from channel_http.middleware import Caller
    from channel_http.services import Services


@post("/ag-ui", status_code=200)
async def ag_ui_run(request: AnyRequest) -> Stream:
    caller = caller_of(request)
    services = services_of(request)
    tr = caller.translator
    body = decode_body(AgUiInput, await request.body(), tr)
    conversation = body.thread_id.strip()
    if CONVERSATION_ID.fullmatch(conversation) is None:
        raise BadRequest(
            tr.gettext(
                "The threadId names the conversation: it may contain only letters, digits, "
                "- and _, up to 128 characters."
            )
        )
    manager = services.manager
    run = ag_ui.AgUiRun(
        conversation,
        body.run_id,
        link=lambda service, url: (
            tr.gettext("Sign in to %(service)s: %(url)s") % {"service": service, "url": url}
        ),
        expires_in=manager.confirmations.ttl,
        clock=manager.clock,
    )
    headers = {**sse.HEADERS, "content-language": caller.language}
    if body.resume:
        answered, resumed = await _answer(services, caller, conversation, body, run)
        if not resumed:
            return sse.EventStream(
                _once(run.started() + answered + run.finished()),
                media_type=sse.MEDIA_TYPE,
                headers=headers,
            )
        running = await start_turn(request, caller, services, conversation, resume=True)
    else:
        text = _new_message(body)
        if text is None:
            raise BadRequest(
                tr.gettext(
                    "The last message must be the person's: send a new user message, or "
                    "answer the interrupts with resume."
                )
            )
        answered = b""
        running = await start_turn(request, caller, services, conversation, text=text)
    calls, person = services.interrupt_calls, caller.person.key

    def render(batch: list[events.Event]) -> bytes:
        frames = run.render_batch(batch)
        if run.tool_calls:  # a staging: its interrupt's call, for the run that answers it
            calls.remember(person, run)
            run.tool_calls.clear()
        return frames

    frames = sse.forward(
        running,
        services.settings.http.heartbeat_s,
        run.started() + answered,
        render,
        services.metrics,
        run.ended,
    )
    return sse.EventStream(sse.Opening(frames), media_type=sse.MEDIA_TYPE, headers=headers)


def _new_message(body: AgUiInput) -> str | None:
    """The text of the last message when it is the person's (and has text), else None."""
    if not body.messages or body.messages[-1].role != "user":
        return None
    content = body.messages[-1].content
    if isinstance(content, str):
        text = content
    else:
        text = "\n".join(
            str(part.get("text") or "") for part in content or () if part.get("type") == "text"
        )
    return text if text.strip() else None


async def _answer(
    services: Services, caller: Caller, conversation: str, body: AgUiInput, run: ag_ui.AgUiRun
) -> tuple[bytes, bool]:
    """Each interrupt answered: its frames, and whether an answer resumes the model."""
    manager = services.manager
    frames: list[bytes] = []
    resumed = False
    for entry in body.resume or ():
        call = services.interrupt_calls.take(caller.person.key, entry.interrupt_id)
        if entry.status == "cancelled":
            # Nothing to press: Mercury's choices are all ways to go ahead. The staging
            # lapses when it expires, as an unanswered one does.
            outcome: dict[str, Any] = {"outcome": "cancelled"}
        else:
            result = await manager.confirm(
                caller.principal,
                caller.person,
                conversation,
                _choice(entry),
                caller.language,
            )
            resumed = resumed or result.resume
            if result.resume:
                outcome = {"outcome": "confirmed"}
            elif result.resolved:
                outcome = {"outcome": "confirmed", "reply": result.text or ""}
            else:
                reply = caller.translator.gettext(NO_PENDING_CONFIRMATION)
                outcome = {"outcome": "expired", "reply": reply}
        if call is not None:
            frames.append(run.tool_result(call, outcome))
        if outcome.get("reply"):
            frames.append(run.text(outcome["reply"]))
    frames.append(run.close_text())
    return b"".join(frames), resumed


def _choice(entry: AgUiResume) -> str:
    """The token an answer presses: its payload's ``choice``, else the interrupt's own."""
    payload = entry.payload
    if isinstance(payload, dict) and isinstance(payload.get("choice"), str):
        return str(payload["choice"])
    return entry.interrupt_id


async def _once(frames: bytes) -> AsyncGenerator[bytes, None]:
    yield frames
