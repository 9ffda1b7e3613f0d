"""The answer of a turn: the model's steps, the tools it calls, and the exchange archived.

:class:`Answerer` is the session manager's collaborator for everything between the person's
message and ``final``: it streams each model step into the turn's events (one batch per
model read), runs or stages the tools the model calls, shows what ``present`` displayed,
renews a shared conversation's claim before ``final``, and submits the exchange to the
archive, an interrupted one included, so the history and the archive stay pairs.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, cast

import msgspec

from core.clock import Clock, system_clock
from core.engine import events
from core.engine.confirmations import StagedActionSpec, choice_kinds
from core.engine.history import Session, interrupted_answer, shown_time
from core.engine.transcript import ShownMessage
from core.engine.turn_events import TurnEvents
from core.model import ChatChunk, ChatMessage, ModelClient, ModelError, ToolCall, ToolSpec
from core.observe.telemetry import span
from core.spaces.turn import escape
from core.tools.display_tools import PRESENT
from core.tools.displays import Displays, display_chunks, tool_message, with_displays
from core.tools.registry import (
    InputRequired,
    LoginRequired,
    Tool,
    ToolCallContext,
    ToolError,
    ToolRegistry,
    ToolReply,
    cap,
    detail_of,
)
from core.tools.tool_search import deferral
from core.usage import Spent

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

    from core.engine.confirmations import ConfirmationStore
    from core.engine.conversation_order import HeldTurn
    from core.engine.tool_log import ToolLog
    from core.memory.archive import ArchiveWriter
    from core.observe.metrics import Metrics
    from core.usage import UsageLedger

log = logging.getLogger("mercury.sessions")

#: How many text pieces of a streaming answer are kept apart before they are joined.
_JOIN_PARTS: Final = 64

PERSONA: Final = (
    "You are Mercury, a helpful assistant for a team. Answer in plain text, briefly and "
    "precisely. Use the tools you are given when they help; never invent their results. "
    "Each user message starts with the local time the person wrote it, in brackets."
)


class Answerer:
    """Runs the model's steps of a turn whose session the caller holds."""

    def __init__(
        self,
        *,
        model: ModelClient,
        registry: ToolRegistry,
        confirmations: ConfirmationStore,
        tool_log: ToolLog,
        archive: ArchiveWriter | None = None,
        max_steps: int = 8,
        think: bool = True,
        clock: Clock = system_clock,
        metrics: Metrics | None = None,
        ledger: UsageLedger | None = None,
        trace_content: bool = False,
    ) -> None:
        self.model = model
        #: Where each model call's tokens are kept (None: the ledger is off).
        self.ledger = ledger
        self.trace_content = trace_content
        self.registry = registry
        self.confirmations = confirmations
        self.tool_log = tool_log
        self.archive = archive
        self.max_steps = max_steps
        self.think = think
        self.clock = clock
        self.metrics = metrics

    async def answer(
        self,
        session: Session,
        context: ToolCallContext,
        emit: TurnEvents,
        held: HeldTurn | None,
        *,
        archive_user: str | None,
        received_at: datetime,
    ) -> None:
        """Run the model's steps for this turn, then settle and archive it.

        On a shared store the turn's claim is renewed, fenced, just before ``final``: a turn
        whose place in the conversation lapsed ends with an error, never with an answer that
        can't be put on record.

        What the model presented follows its answer: streamed as ``text`` deltas just
        before ``final``, appended to ``final.text`` (after the pending note when the turn
        only staged) and archived with it, never added to the model's own messages.
        """
        displays = Displays(session.results)
        context = replace(context, displays=displays)
        translator = context.translator
        offered, search = deferral(
            await self.registry.offer(context.person, context.space), self.registry.tool_budget
        )
        listed = [
            tool.spec
            for _, tool in offered.values()
            if search is None or tool.name not in search.deferred
        ]
        system = ChatMessage(role="system", content=self._instructions(context, offered))
        text_parts: list[str] = []
        step_text: list[str] = []  # the step whose answer is still streaming
        staged = False
        finished = False
        delivered = False
        answer = ""
        used = _TurnUsage()
        try:
            for _step in range(self.max_steps):
                step_text = []
                specs = listed if search is None else [*listed, *search.specs()]
                calls = await self._model_step(
                    [system, *session.messages], specs, emit, step_text, context, used
                )
                text_parts.extend(step_text)
                session.messages.append(
                    ChatMessage(role="assistant", content="".join(step_text), tool_calls=calls)
                )
                step_text = []
                if not calls:
                    finished = True
                    break
                step_events: list[events.Event] = []
                for call in calls:
                    staged |= await self._call_tool(
                        session, context, offered, call, emit, step_events
                    )
                for event in step_events:
                    await emit(event)
            answer = "".join(text_parts)
            pending_note = None
            if not finished:
                limit_text = translator.ngettext(
                    "The assistant stopped after %(steps)d step without finishing.",
                    "The assistant stopped after %(steps)d steps without finishing.",
                    self.max_steps,
                ) % {"steps": self.max_steps}
                answer = f"{answer}\n\n{limit_text}" if answer.strip() else limit_text
            elif staged and not answer.strip():
                pending_note = translator.gettext("Action pending, waiting for confirmation.")
                answer = pending_note
            for chunk in display_chunks("".join(text_parts), displays.shown):
                await emit(events.Text(chunk=chunk))
            if displays.shown:
                answer = with_displays(answer, displays.shown)
            if held is not None:
                await held.keep()
            await emit(events.Final(text=answer, pending_note=pending_note, usage=used.event()))
            delivered = True
        finally:
            if not delivered:
                # Cancelled or failed before its final event: the history keeps what streamed,
                # marked as cut off, as a rebuild from the archive will (docs/memory.md).
                text_parts.extend(step_text)
                answer = "".join(text_parts)
                session.messages.append(interrupted_answer("".join(step_text)))
            shown = self._archive_turn(
                context, received_at, archive_user, answer, interrupted=not delivered
            )
            session.shown.extend(m for m in shown if m.role == "assistant")

    async def _model_step(
        self,
        messages: list[ChatMessage],
        specs: list[ToolSpec],
        emit: TurnEvents,
        parts: list[str],
        context: ToolCallContext,
        used: _TurnUsage,
    ) -> tuple[ToolCall, ...] | None:
        """Stream one model answer into ``parts`` (its text pieces); returns the tools it called.

        ``parts`` belongs to the caller so a turn cut off mid-answer still knows what streamed.
        The tokens the model reports on its last chunk are added to ``used`` and handed to
        the ledger once the answer has ended: one row's worth per model call, none per token.
        """
        calls: list[ToolCall] = []
        reasoning_id: str | None = None
        asked = time.perf_counter()
        chunks = 0  # counted here, added to the metrics once: nothing shared per token
        push = emit.push
        requested = self.model.model
        answered: str | None = None
        usage: ChatChunk | None = None
        stream = self.model.chat(messages, tools=specs, think=self.think)
        with span(
            f"chat {requested}",
            **{"gen_ai.operation.name": "chat", "gen_ai.request.model": requested},
        ) as call_span:
            try:
                # One batch per model read: its events are pushed at once and the reader
                # woken once; the turn waits for room only when the reader is far behind.
                batch: Sequence[ChatChunk]
                async for batch in stream:
                    for chunk in batch:
                        message = chunk.message
                        if chunk.done:
                            usage = chunk
                        if message is None:
                            continue
                        if not chunks and self.metrics is not None:
                            self.metrics.model_first_token.observe(time.perf_counter() - asked)
                        chunks += 1
                        if message.thinking:
                            if reasoning_id is None:
                                reasoning_id = uuid.uuid4().hex[:12]
                            push(events.Reasoning(chunk=message.thinking, id=reasoning_id))
                        if message.content:
                            if reasoning_id is not None:
                                push(events.ReasoningEnd(id=reasoning_id, failed=False))
                                reasoning_id = None
                            parts.append(message.content)
                            push(events.Text(chunk=message.content))
                        if message.tool_calls:
                            calls.extend(message.tool_calls)
                    if len(parts) >= _JOIN_PARTS:
                        # A token is a string of its own (~50 bytes for 4 characters):
                        # joined now and then, a long answer keeps its size, not 13 times it.
                        parts[:] = ["".join(parts)]
                    if emit.is_full():
                        await emit.room()
            except ModelError:
                if reasoning_id is not None:
                    await emit(events.ReasoningEnd(id=reasoning_id, failed=True))
                raise
            finally:
                if usage is not None:
                    answered = usage.model
                answered = answered or requested
                emit.model = answered
                if self.metrics is not None:
                    self.metrics.model_chunks.inc(chunks)
                    self.metrics.model_calls.labels(answered).inc()
                if call_span.is_recording():
                    call_span.set_attributes(_call_attributes(answered, usage))
                    if self.trace_content:
                        call_span.set_attributes(_content_attributes(messages, parts, calls))
                await stream.aclose()  # type: ignore[attr-defined]
        if usage is not None and (usage.prompt_eval_count or usage.eval_count):
            # The counts ride on the last chunk, with the model that answered (a fallback's).
            self._record_usage(context, usage, answered or requested, used)
        if reasoning_id is not None:
            await emit(events.ReasoningEnd(id=reasoning_id, failed=False))
        return tuple(calls) or None

    def _record_usage(
        self, context: ToolCallContext, done: ChatChunk, model: str, used: _TurnUsage
    ) -> None:
        """Count one call's tokens: the turn's sum, then :meth:`spend`."""
        spent = Spent(
            person_key=context.person.key,
            space_id=None if context.space is None else context.space.space_id,
            model=model,
            input=done.prompt_eval_count or 0,
            output=done.eval_count or 0,
            cached=done.cached_count,
            person_name=context.person.display_name,
        )
        used.add(spent)
        self.spend(spent)

    def spend(self, spent: Spent) -> None:
        """One model call's tokens, a turn's or a capture's: the metric and the ledger.

        The ledger is write-behind (:meth:`~core.usage.UsageLedger.add`): nothing here
        waits on the store, and a turn cancelled after this still has its call on record.
        """
        if self.metrics is not None:
            self.metrics.model_usage(spent.model, spent.input, spent.output, spent.cached)
        if self.ledger is not None:
            self.ledger.add(spent)

    async def _call_tool(
        self,
        session: Session,
        context: ToolCallContext,
        offered: Mapping[str, tuple[Any, Tool]],
        call: ToolCall,
        emit: TurnEvents,
        step_events: list[events.Event],
    ) -> bool:
        """Run or stage one tool call; returns whether it was staged."""
        translator = context.translator
        name = call.function.name
        arguments = call.function.arguments
        tool_call_id = f"call_{uuid.uuid4().hex[:16]}"
        entry = offered.get(name)
        tool = entry[1] if entry is not None else None
        shown = (tool.title or name) if tool else name
        label = translator.gettext(tool.label if tool else "Using %(tool)s…") % {"tool": shown}
        detail = cap(tool.detail(arguments)) if tool and tool.detail else detail_of(arguments)
        await emit(
            events.Tool(label=label, detail=detail, tool_call_id=tool_call_id, tool_name=name)
        )
        outcome: events.ToolOutcome = "success"
        staged = False
        images: tuple[str, ...] | None = None
        known = name if tool else "unknown"  # a span's name is never what the model made up
        with span(
            f"execute_tool {known}",
            **{
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": known,
                "gen_ai.tool.call.id": tool_call_id,
                "mercury.tool": known,
            },
        ):
            try:
                if tool is None:
                    raise ToolError(f"There is no tool named {name}.")
                valid = tool.validate(arguments)
                if await tool.needs_confirmation(context, valid):
                    staging = await self._stage(context, tool, valid, tool_call_id)
                    outcome, staged = "pending", True
                    step_events.append(staging)  # every staging gets its event and tokens
                    result = (
                        "This action needs the person's confirmation and was not run yet. "
                        "They have been shown how to confirm it; tell them briefly what will "
                        "happen once they confirm, without inventing a token."
                    )
                else:
                    ran = await tool.run(context, valid)
                    if isinstance(ran, ToolReply):
                        result, images = ran.text, ran.images or None
                    else:
                        result = ran
            except InputRequired as asked:
                if asked.link is not None:
                    step_events.append(events.Login(service=asked.link[0], url=asked.link[1]))
                staging = await self._stage(
                    context,
                    cast("Tool", tool),  # only a tool that ran can ask
                    asked.arguments,
                    tool_call_id,
                    summary=asked.summary,
                    choices=asked.choices,
                    by_reply=asked.ask is not None,
                )
                outcome, staged = "pending", True
                step_events.append(staging)
                result = asked.ask or (
                    f"The tool asks the person: {asked.summary} They have been shown the "
                    "choices; tell them briefly, without inventing a token, and wait."
                )
            except LoginRequired as login:
                outcome = "failed"
                result = await _sign_in(context, login, step_events)
            except ToolError as error:
                outcome, result = "failed", f"Error: {error}"
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.exception("tool %s failed", name)
                outcome, result = "failed", f"Error: the tool failed ({type(error).__name__})."
        await emit(events.ToolFinish(tool_call_id=tool_call_id, outcome=outcome))
        if self.metrics is not None:
            self.metrics.tool_call(name, outcome, known=tool is not None)
        if outcome == "success" and name != PRESENT:
            session.results.add(tool_call_id, result)
        session.messages.append(
            ChatMessage(
                role="tool",
                tool_name=name,
                content=tool_message(tool_call_id, result),
                images=images,
            )
        )
        await self.tool_log.record(
            context.person.key,
            context.conversation_id,
            name,
            msgspec.json.encode(arguments).decode(),
            result,
            outcome,
        )
        return staged

    async def _stage(
        self,
        context: ToolCallContext,
        tool: Tool,
        arguments: dict[str, Any],
        tool_call_id: str,
        *,
        summary: str | None = None,
        choices: Sequence[tuple[str, str]] | None = None,
        by_reply: bool = False,
    ) -> events.Pending:
        if summary is None:
            summary = (
                tool.summary(context, arguments) if tool.summary else _summary(tool, arguments)
            )
        if choices is None and tool.choices:
            choices = list(tool.choices(context, arguments))
        staging = await self.confirmations.stage(
            context.session_key,
            context.person.key,
            StagedActionSpec(
                tool_name=tool.name,
                arguments=arguments,
                summary=summary,
                hands_back=tool.hands_back,
            ),
            choices,
            by_reply=by_reply,
        )
        if self.metrics is not None:
            self.metrics.confirmations.labels("staged").inc()
        # A yes/no staging (its values confirm and cancel) says which choice is which.
        values = [value for _, value in choices] if choices else [None]
        kinds = choice_kinds(values)
        return events.Pending(
            command=summary,
            token=staging.token,
            choices=tuple(
                events.Choice(c.token, c.label, kind)
                for c, kind in zip(staging.choices, kinds, strict=True)
            ),
            tool_call_id=tool_call_id,
            confirmation_id=staging.id,
            expires_at=staging.expires_at,
        )

    def _instructions(
        self, context: ToolCallContext, offered: Mapping[str, tuple[Any, Tool]]
    ) -> str:
        """The system message: what never changes first, byte for byte, then the context.

        A model server's prompt cache reuses the longest prefix it has seen: the persona and
        the offered plugins' skills (in the registry's fixed order) lead, the same for every
        turn; then what belongs to this person or space. Nothing that moves from turn to
        turn is here: the time, the caller, the ambient talk and recalled memory come in the
        messages after it.
        """
        parts = [PERSONA]
        seen: set[str] = set()
        for plugin, _ in offered.values():
            if plugin.name in seen:
                continue
            seen.add(plugin.name)
            parts.extend(skill.text for skill in plugin.skills)
        parts.append(f"Always answer in the language with code '{context.translator.language}'.")
        space = context.space
        if space is not None:
            parts.append(space.instructions())
        elif context.person.display_name:
            # The account's name is data the identity provider gave: escaped, in its element.
            parts.append(
                "The <person> element holds the person's name as their account gives it: "
                f'<person name="{escape(context.person.display_name)}"/>'
            )
        if space is not None and space.preferences:
            parts.append(space.preferences)
        return "\n\n".join(parts)

    def _archive_turn(
        self,
        context: ToolCallContext,
        received_at: datetime,
        user_text: str | None,
        answer: str,
        *,
        interrupted: bool,
    ) -> list[ShownMessage]:
        """Archive one exchange: the person's message, then the answer, submitted together.

        Turns of a session run one at a time, and the writer gives every item an ``ts``
        strictly increasing in submission order, which is the order reads follow: so each
        exchange stays a pair, in the order the turns ran. ``ts`` is not the arrival time
        (a message waiting behind other turns would sort before their answers); the
        person's message keeps that in ``timestamp``. An interrupted answer is archived as
        far as it streamed (possibly empty) and flagged, so the pair stays whole.

        Returns the exchange as the person saw it, for the transcript of record.
        """
        person_key = context.person.key
        exchange: list[ShownMessage] = []
        if user_text is not None:
            exchange.append(
                ShownMessage(
                    person_key=person_key,
                    role="user",
                    content=user_text,
                    timestamp=shown_time(received_at),
                )
            )
        if answer or (interrupted and user_text is not None):
            exchange.append(
                ShownMessage(
                    person_key=person_key,
                    role="assistant",
                    content=answer,
                    timestamp=shown_time(self.clock()),
                    interrupted=interrupted,
                )
            )
        if self.archive is not None:
            base = {
                "personKey": context.area,
                "sessionKey": context.session_key,
                "conversationId": (
                    context.conversation_id or context.session_key.rsplit(":", 1)[1]
                ),
            }
            for message in exchange:
                payload: dict[str, Any] = {
                    **base,
                    "role": message.role,
                    "content": message.content,
                    "timestamp": message.timestamp,
                }
                if message.interrupted:
                    payload["interrupted"] = True
                self.archive.submit("verbatim", payload)
        return exchange


class _TurnUsage:
    """The tokens of a turn's model calls, summed for its ``final`` event."""

    __slots__ = ("cached", "calls", "input", "output")

    def __init__(self) -> None:
        self.calls = 0
        self.input = 0
        self.output = 0
        self.cached: int | None = None

    def add(self, spent: Spent) -> None:
        self.calls += 1
        self.input += spent.input
        self.output += spent.output
        if spent.cached is not None:
            self.cached = (self.cached or 0) + spent.cached

    def event(self) -> events.Usage | None:
        if not self.calls:
            return None
        return events.Usage(input=self.input, output=self.output, cached=self.cached)


def _summary(tool: Tool, arguments: Mapping[str, Any]) -> str:
    return cap(f"{tool.name} {msgspec.json.encode(dict(arguments)).decode()}", 200)


async def _sign_in(
    context: ToolCallContext, login: LoginRequired, step_events: list[events.Event]
) -> str:
    """Hand ``login``'s link to the person (the turn's events, or the chat's own way), and
    what the model is told: only what happened, never the link."""
    if context.sign_in is None:
        step_events.append(events.Login(service=login.service, url=login.url))
        return (
            f"The person must log in to {login.service} first. They have been shown a link "
            "to do it; tell them to use it and ask again. Never write a link yourself."
        )
    if await context.sign_in(login.service, login.url):
        return (
            f"The person must log in to {login.service} first. A link to do it was sent to "
            "them privately, where nobody else reads it; tell them to use it and ask again. "
            "Never write a link yourself."
        )
    return (
        f"The person must log in to {login.service} first, but a link could not be sent to "
        "them privately from here. They have been told in this chat to open a direct chat "
        "with you and ask there; say so briefly. Never write a link yourself."
    )


def _call_attributes(answered: str, last: ChatChunk | None) -> dict[str, AttributeValue]:
    """The GenAI attributes a model call's span gets once it has ended."""
    attributes: dict[str, AttributeValue] = {"gen_ai.response.model": answered}
    if last is None:
        return attributes
    if last.prompt_eval_count is not None:
        attributes["gen_ai.usage.input_tokens"] = last.prompt_eval_count
    if last.eval_count is not None:
        attributes["gen_ai.usage.output_tokens"] = last.eval_count
    if last.done_reason:
        attributes["gen_ai.response.finish_reasons"] = (last.done_reason,)
    return attributes


def _content_attributes(
    messages: Sequence[ChatMessage], parts: Sequence[str], calls: Sequence[ToolCall]
) -> dict[str, AttributeValue]:
    """What the model was sent and what it answered, for a span (only when opted in)."""
    sent = [{"role": m.role, "parts": [{"type": "text", "content": m.content}]} for m in messages]
    answer: list[dict[str, Any]] = [{"type": "text", "content": "".join(parts)}]
    answer += [
        {"type": "tool_call", "name": c.function.name, "arguments": c.function.arguments}
        for c in calls
    ]
    return {
        "gen_ai.input.messages": msgspec.json.encode(sent).decode(),
        "gen_ai.output.messages": msgspec.json.encode(
            [{"role": "assistant", "parts": answer}]
        ).decode(),
    }
