"""The session manager: the one façade a channel calls to run turns and read state.

A turn runs in its own task and appends events to :class:`~core.engine.turn_events.TurnEvents`,
which the channel drains in batches (:class:`Turn`); the core never holds a response.
Turns of one session run one after the other in arrival order (:class:`SessionLocks`),
different sessions in parallel.
Cancelling a turn's task (the client left) aborts the model request; a turn still
waiting for its session when cancelled never starts.

Exception tree: the manager raises nothing of its own at run time; a failed turn ends
with an :class:`~core.engine.events.Error` event. Configuration mistakes raise
:class:`~core.config.settings.ConfigurationError` when the manager is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Final, Literal

import msgspec

from core.clock import Clock, system_clock
from core.engine import events
from core.engine.answering import Answerer
from core.engine.capturing import Capturer
from core.engine.confirmations import ChoiceRef, is_token
from core.engine.confirming import Confirmer
from core.engine.conversation_order import OrderError
from core.engine.history import Session, interrupted_answer, shown_time
from core.engine.transcript import ShownMessage
from core.engine.turn_events import TurnEvents
from core.model import (
    ChatMessage,
    ModelBrokeOff,
    ModelClient,
    ModelError,
    ModelHTTPError,
    ModelUnreachable,
)
from core.observe.telemetry import span
from core.people.linking import is_link_code
from core.people.principal import Person, Principal
from core.people.timezones import stamp
from core.rate_limits import bucket_key
from core.spaces.ids import area_key
from core.spaces.turn import memory_block
from core.tools.registry import ToolCallContext, ToolRegistry
from core.usage import BudgetExceeded

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

    from core.engine.confirmations import ConfirmationStore, ResumeSlots
    from core.engine.conversation_order import ConversationOrder, HeldTurn
    from core.engine.tool_log import ToolLog
    from core.memory import MemoryStore
    from core.memory.archive import ArchiveWriter
    from core.memory.capture import Capture
    from core.observe.metrics import Metrics, TurnOutcome
    from core.people.i18n import Catalogs, Translator
    from core.people.linking import Linking
    from core.people.person_settings import PersonSettings
    from core.rate_limits import RateDecision, RateLimiter
    from core.spaces.turn import SpaceTurn
    from core.tools.registry import SignIn
    from core.usage import BudgetRefusal, Budgets, Spent, UsageLedger

log = logging.getLogger("mercury.sessions")

#: The start of a one-off session's id (a turn without conversationId).
ONE_OFF_PREFIX: Final = ".once-"


def conversation_of(session_key: str, person_key: str) -> str | None:
    """The conversationId of a person's own session key; None for a one-off turn's session
    or a shared space's."""
    conversation = session_key.removeprefix(person_key + ":")
    if conversation == session_key or conversation.startswith(ONE_OFF_PREFIX):
        return None
    return conversation


#: Why a turn failed: the model, the server stopping, something of ours, or an allowance
#: used up (refused before the model was asked).
TurnFailure = Literal["model", "stopping", "internal", "budget"]


class TurnInput(msgspec.Struct, frozen=True, kw_only=True):
    """One request for a turn, as a channel hands it to the core."""

    principal: Principal
    person: Person
    conversation_id: str | None
    text: str = ""
    opening: bool = False
    resume: bool = False
    language: str
    time_zone: str
    received_at: datetime
    #: Files saved to the person's inbox with this turn, as the model names them.
    attachments: tuple[str, ...] = ()
    #: The shared space the turn runs in (a chat bridge's); None for the person's own.
    space: SpaceTurn | None = None
    #: How a chat bridge hands a sign-in link to the person alone; None: the turn's events
    #: carry it to the caller (``POST /chat``).
    sign_in: SignIn | None = None
    #: In a space, the words once the trigger is taken out: what answers a question a tool
    #: asked in the conversation (a typed answer). None: ``text``.
    said: str | None = None
    #: The conversation this one's thread hangs under (a chat bridge's thread under the
    #: person's own message): a question asked of the person there is answered from here,
    #: when none waits here. None: no such conversation.
    parent_conversation_id: str | None = None


class ConfirmResult(msgspec.Struct, frozen=True, kw_only=True):
    """What ``POST /confirm`` answers: resolved or not, and the reply or a resume."""

    resolved: bool
    text: str | None = None
    resume: bool = False


class SessionLocks:
    """A FIFO lock per session key, forgotten once nothing runs or waits on it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        #: How many holders wait behind an earlier one right now.
        self.waiting = 0

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        queued = lock.locked()
        self.waiting += queued
        try:
            try:
                await lock.acquire()  # asyncio.Lock wakes waiters in arrival order
            finally:
                self.waiting -= queued
            try:
                yield
            finally:
                lock.release()
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._locks[key]

    def busy(self, key: str) -> bool:
        """Whether a turn holds ``key`` or waits for it."""
        return key in self._locks

    def __len__(self) -> int:
        return len(self._locks)


class Turn:
    """A running turn: its events, in order, ending with ``None``."""

    def __init__(self) -> None:
        #: What the turn emitted and its reader has not taken yet.
        self.events = TurnEvents()
        self.task: asyncio.Task[None] | None = None
        self.language = "en"
        #: ``time.perf_counter()`` when the turn was opened.
        self.started = time.perf_counter()
        #: Set once the turn holds its conversation (or will never wait for it).
        self.admitted = asyncio.Event()
        #: Seconds the turn waited behind its conversation's earlier turns.
        self.queue_s = 0.0
        #: How the turn ended, once it has.
        self.outcome: TurnOutcome | None = None
        #: Why the turn ended with an ``error`` event, for a channel that answers at once.
        self.failure: TurnFailure | None = None
        #: The outbox files this turn's tools wrote, by name: what its answer carries.
        self.written: list[str] = []
        #: The allowance that refused the turn, when ``failure`` is ``budget``.
        self.refusal: BudgetRefusal | None = None

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()


@dataclass(frozen=True, slots=True)
class EngineLimits:
    max_steps: int = 8
    think: bool = True
    resume_max_chars: int = 8000
    idle_timeout_s: float = 1800.0
    idle_check_s: float = 60.0
    capture_threshold: int = 6
    #: Whether a model call's span carries the messages and the answer (opt-in).
    trace_content: bool = False


class SessionManager:
    """Runs turns and confirmations and answers the per-person reads."""

    def __init__(
        self,
        *,
        model: ModelClient,
        catalogs: Catalogs,
        registry: ToolRegistry,
        confirmations: ConfirmationStore,
        resume_slots: ResumeSlots[dict[str, str]],
        tool_log: ToolLog,
        person_settings: PersonSettings,
        rate_limiter: RateLimiter,
        linking: Linking | None = None,
        memory: MemoryStore | None = None,
        archive: ArchiveWriter | None = None,
        capture: Capture | None = None,
        limits: EngineLimits = EngineLimits(),
        clock: Clock = system_clock,
        order: ConversationOrder | None = None,
        metrics: Metrics | None = None,
        ledger: UsageLedger | None = None,
        budgets: Budgets | None = None,
    ) -> None:
        self.model = model
        self.catalogs = catalogs
        #: Every model call's tokens (None: the ledger is off) and the allowances on them.
        self.ledger = ledger
        self.budgets = budgets
        self.registry = registry
        self.confirmations = confirmations
        self.resume_slots = resume_slots
        self.tool_log = tool_log
        self.person_settings = person_settings
        self.rate_limiter = rate_limiter
        self.linking = linking
        self.memory = memory
        self.archive = archive
        self.capture = capture
        #: The capture of a session's words after a turn, and before it is compacted or freed.
        self.capturer = (
            None
            if capture is None
            else Capturer(capture, threshold=limits.capture_threshold, spend=self._spend)
        )
        self.limits = limits
        self.clock = clock
        self.locks = SessionLocks()
        self.order = order
        self.metrics = metrics
        if metrics is not None:
            metrics.readings.queued_turns = lambda: self.locks.waiting
        self.answerer = Answerer(
            model=model,
            registry=registry,
            confirmations=confirmations,
            tool_log=tool_log,
            archive=archive,
            max_steps=limits.max_steps,
            think=limits.think,
            clock=clock,
            metrics=metrics,
            ledger=ledger,
            trace_content=limits.trace_content,
        )
        self.confirmer = Confirmer(
            confirmations=confirmations, registry=registry, tool_log=tool_log, metrics=metrics
        )
        self.sessions: dict[str, Session] = {}
        self._turns: set[Turn] = set()
        #: Transcript writes under way, each shielded from its turn's cancellation.
        self._writes: set[asyncio.Future[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._stopping = False
        #: Sessions compacted here: their next turn starts from memory's summary alone (on a
        #: shared store, every instance's does: the transcript of record is emptied too).
        self._compacted: set[str] = set()

    # ------------------------------------------------------------------ turns

    @staticmethod
    def session_key(person: Person, conversation_id: str, space_id: str | None = None) -> str:
        """``<person key>:<conversationId>``: the caller's own namespace; in a shared space
        ``space:<space id>:<conversation>``, the same for everyone in it."""
        if space_id is not None:
            return f"{area_key(space_id)}:{conversation_id}"
        return f"{person.key}:{conversation_id}"

    async def check_rate(
        self,
        person: Person,
        text: str,
        *,
        opening: bool = False,
        space: str | None = None,
        limit: int | None = None,
    ) -> RateDecision | None:
        """The rate decision for a turn, or None when it is not counted (a token).

        An opening turn asks the model (while the person's name is unsaved) and is counted
        like a written one; a resumed turn is not: it needs a confirmation, which needs a
        staging, which a counted turn made.

        In a shared space the bucket is the person's in that space (``space``), and the
        space's own ``limit`` replaces the global one.
        """
        if not opening and self.is_intercepted(text):
            return None
        decision = await self.rate_limiter.check(bucket_key(space or person.key, person.key), limit)
        if not decision.allowed and self.metrics is not None:
            self.metrics.rate_limit_refusals.inc()
            self.metrics.turns.labels("refused").inc()
        return decision

    async def check_budget(self, person: Person, space: str | None) -> BudgetRefusal | None:
        """The allowance a turn of ``person`` in ``space`` would be refused by, if any (a
        bridge asks first, to tell it once per window; the turn checks again itself)."""
        if self.budgets is None:
            return None
        return await self.budgets.check(person.key, space)

    def _ended(self, turn: Turn) -> None:
        self._turns.discard(turn)
        # A task cancelled keeps its CancelledError, whose traceback holds the frame that
        # holds the turn: dropped here, the turn is freed at once, not by the collector.
        turn.task = None

    def is_intercepted(self, text: str) -> bool:
        """Whether ``text`` is answered without the model (a token or a link code)."""
        stripped = text.strip()
        if is_token(stripped):
            return True
        return self.linking is not None and is_link_code(stripped)

    def is_link_code(self, text: str) -> bool:
        """Whether ``text`` is a link code this instance answers (linking is on)."""
        return self.linking is not None and is_link_code(text)

    async def withdraw_link_code(self, text: str, language: str) -> str | None:
        """A link code sent in a group: withdrawn, never run; the hint to give, in
        ``language``. ``None`` when ``text`` isn't a link code (or linking is off)."""
        if self.linking is None:
            return None
        return await self.linking.withdraw(text, self.catalogs.translator(language))

    def open_turn(self, turn_input: TurnInput) -> Turn:
        """Start a turn in its own task; read its events from ``turn.events``."""
        turn = Turn()
        turn.language = turn_input.language
        self._turns.add(turn)
        turn.task = asyncio.get_running_loop().create_task(self._run(turn, turn_input))
        turn.task.add_done_callback(lambda _: self._ended(turn))
        if self._holds_at_once(turn_input):
            # Nothing to wait for: the channel need not give the task a loop iteration to
            # say so (under load, one iteration is milliseconds of every turn's first byte).
            turn.admitted.set()
        return turn

    def _holds_at_once(self, turn_input: TurnInput) -> bool:
        """Whether a turn opened now holds its session without waiting for another turn.

        A one-off conversation is its own; on an instance that shares no order, a
        conversation nobody holds or waits for is free. With a shared order, holding
        is a claim in the store, which the turn's task makes.
        """
        if turn_input.conversation_id is None:
            return True
        if self.order is not None:
            return False
        return not self.locks.busy(
            self.session_key(turn_input.person, turn_input.conversation_id, _space_id(turn_input))
        )

    async def _run(self, turn: Turn, turn_input: TurnInput) -> None:
        """The turn in a span of its own, a child of the request's (the task copied it)."""
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "Mercury",
        }
        if turn_input.conversation_id is not None:
            attributes["gen_ai.conversation.id"] = conversation_trace_id(turn_input)
        with span("invoke_agent Mercury", **attributes):
            await self._run_turn(turn, turn_input)

    async def _run_turn(self, turn: Turn, turn_input: TurnInput) -> None:
        emit = turn.events
        translator = self.catalogs.translator(turn_input.language)
        outcome: TurnOutcome = "error"
        try:
            if self._stopping:
                outcome = "refused"
                turn.failure = "stopping"
                await emit(events.Error(message=self._stopping_text(translator)))
                return
            if self.metrics is not None:
                self.metrics.turns_started.inc()
            await self._dispatch(turn_input, translator, emit, turn)
            outcome = "final"
        except asyncio.CancelledError:
            # Cancelled by the shutdown, the client saw an error event; else it left.
            outcome = "error" if self._stopping else "cancelled"
            raise
        except ModelError as error:
            turn.failure = "model"
            await emit(events.Error(message=self._model_error_text(error, translator)))
        except BudgetExceeded as exceeded:
            outcome = "refused"
            turn.failure = "budget"
            turn.refusal = exceeded.refusal
            if self.metrics is not None:
                self.metrics.budget_refusals.labels(exceeded.refusal.scope).inc()
            await emit(events.Error(message=exceeded.refusal.text(translator)))
        except OrderError as error:
            # The instance stalled longer than the lease and the conversation moved on.
            log.warning("turn stopped: %s", error)
            turn.failure = "internal"
            await emit(
                events.Error(
                    message=translator.gettext(
                        "Something went wrong on our side. Try again in a moment."
                    )
                )
            )
        except Exception:
            log.exception("turn failed")
            turn.failure = "internal"
            await emit(
                events.Error(
                    message=translator.gettext(
                        "Something went wrong on our side. Try again in a moment."
                    )
                )
            )
        finally:
            turn.outcome = outcome
            turn.admitted.set()
            if self.metrics is not None:
                self.metrics.turns.labels(outcome).inc()
                if outcome != "refused":
                    self.metrics.turn_duration.observe(time.perf_counter() - turn.started)
            turn.events.push(None)  # the end never waits, not even for a slow reader

    async def _dispatch(
        self, turn_input: TurnInput, translator: Translator, emit: _Emit, turn: Turn | None = None
    ) -> None:
        text = turn_input.text.strip()
        principal, person = turn_input.principal, turn_input.person
        conversation_id = turn_input.conversation_id
        written = None if turn is None else turn.written
        if self.linking is not None and not turn_input.opening and not turn_input.resume:
            if is_link_code(text):
                space = turn_input.space
                if space is not None and not space.is_dm:
                    reply = await self.linking.withdraw(text, translator)
                else:
                    reply = await self.linking.redeem(principal, text, translator)
                await emit(events.Final(text=reply or ""))
                return
        if self.budgets is not None:
            # Before anything of the turn runs (a confirmation's action included): past an
            # allowance, nothing is half-run. A turn already running is never cut.
            await self.budgets.enforce(person.key, _space_id(turn_input))
        # A one-off session's id has a character the conversationId rule refuses, so it
        # can't be continued, read back or listed as a conversation of its own.
        key = self.session_key(
            person, conversation_id or f"{ONE_OFF_PREFIX}{uuid.uuid4().hex}", _space_id(turn_input)
        )
        if not turn_input.opening and not turn_input.resume and is_token(text):
            await self._confirm_in_turn(turn_input, key, text, translator, emit, written)
            return
        if (
            conversation_id is not None
            and text
            and not turn_input.opening
            and not turn_input.resume
            and await self._answer_in_turn(turn_input, key, translator, emit, written)
        ):
            return  # the message answered a question asked in the conversation
        waiting_since = time.perf_counter()
        async with self._hold(key, conversation_id) as held:
            if turn is not None:
                turn.queue_s = time.perf_counter() - waiting_since
                turn.admitted.set()
            session = await self._session(key, person, conversation_id, held, turn_input.space)
            try:
                await self._turn(session, turn_input, translator, emit, held, written)
            finally:
                await self._record(session, held)
        if conversation_id is None:
            self.sessions.pop(key, None)

    async def _turn(
        self,
        session: Session,
        turn_input: TurnInput,
        translator: Translator,
        emit: _Emit,
        held: HeldTurn | None,
        written: list[str] | None = None,
    ) -> None:
        """One turn of a session the caller holds: resumed, opening, or the person's words."""
        principal, person = turn_input.principal, turn_input.person
        key, conversation_id = session.key, session.conversation_id
        session.speaker = (person.key, person.display_name)
        context = ToolCallContext(
            principal,
            person,
            key,
            conversation_id,
            translator,
            space=turn_input.space,
            written=written,
            sign_in=turn_input.sign_in,
        )
        if turn_input.resume:
            slot = await self.resume_slots.take(key)
            if slot is None:
                await emit(
                    events.Final(
                        text=translator.gettext(
                            "The answer to this confirmation is no longer available."
                        )
                    )
                )
                return
            for event in _shown_events(slot.get("shown")):
                await emit(event)
            session.messages.append(
                ChatMessage(role="tool", tool_name=slot["tool"], content=slot["result"])
            )
            await self.answerer.answer(
                session, context, emit, held, archive_user=None, received_at=turn_input.received_at
            )
            return
        if turn_input.opening:
            saved = await self.person_settings.get(person.key)
            if saved.name:
                await emit(events.Final(text=""))
                return
            session.messages.append(
                ChatMessage(
                    role="system",
                    content=(
                        "The person has just opened the conversation and has not written "
                        "yet. Introduce yourself in one or two sentences and ask how they "
                        "would like to be called. When they answer, save it with set_name."
                    ),
                )
            )
            await self.answerer.answer(
                session, context, emit, held, archive_user=None, received_at=turn_input.received_at
            )
            return
        stamped = stamp(turn_input.text, turn_input.received_at, turn_input.time_zone)
        if turn_input.attachments:
            stamped += attachments_note(turn_input.attachments)
        if turn_input.space is not None:
            # In a space the words and the files' names are a platform's strings: escaped
            # inside the <caller> element, nothing in them reads as markup (issue #34).
            stamped = turn_input.space.message(stamped)
        session.messages.append(ChatMessage(role="user", content=stamped))
        session.shown.append(
            ShownMessage(
                person_key=person.key,
                role="user",
                content=turn_input.text,
                timestamp=shown_time(turn_input.received_at),
            )
        )
        # The person's words are on record before the model runs: an instance dying
        # mid-turn loses the answer, never what was accepted.
        await self._record(session, held)
        await self.answerer.answer(
            session,
            context,
            emit,
            held,
            archive_user=turn_input.text,
            received_at=turn_input.received_at,
        )
        if conversation_id is not None and self.capturer is not None:
            await self.capturer.after_turn(session, context, emit, turn_input.text)

    @contextlib.asynccontextmanager
    async def _hold(self, key: str, conversation_id: str | None) -> AsyncIterator[HeldTurn | None]:
        """Run alone on the session: across instances when they share the state store."""
        if self.order is None or conversation_id is None:  # a one-off key is never shared
            async with self.locks.hold(key):
                yield None
        else:
            async with self.order.hold(key) as held:
                yield held

    async def _record(self, session: Session, held: HeldTurn | None) -> None:
        """Append the session's new messages to the transcript of record (shielded)."""
        if held is None:
            session.shown.clear()  # only a shared store keeps it (core/engine/transcript.py)
            return
        if session.recorded >= len(session.messages) and not session.shown:
            return
        new = session.messages[session.recorded :]
        shown = list(session.shown)
        writing = asyncio.ensure_future(held.append(new, shown))
        self._writes.add(writing)  # a shutdown waits for it before the claims are given back
        writing.add_done_callback(self._writes.discard)
        try:
            await asyncio.shield(writing)
        except asyncio.CancelledError:
            # The write finishes on its own; its failure, if any, is logged, not lost.
            writing.add_done_callback(_log_unrecorded)
            raise
        session.recorded += len(new)
        del session.shown[: len(shown)]
        session.version = held.version

    async def _session(
        self,
        key: str,
        person: Person,
        conversation_id: str | None,
        held: HeldTurn | None = None,
        space: SpaceTurn | None = None,
    ) -> Session:
        session = self.sessions.get(key)
        if session is not None and held is not None and session.version != held.version:
            # Another instance moved the conversation on (a turn there, or a ``compact``
            # that held nothing of it): what this session said since its last capture is
            # captured before it is let go, never dropped; then it is rebuilt.
            if self.capturer is not None:
                await self.capturer.rest(session)
            session = None
        if session is None:
            # A space's conversation keeps its memory under the space, shared by its people.
            area = person.key if space is None else space.area
            session = Session(
                key=key,
                person_key=area,
                conversation_id=conversation_id,
                space_id=None if space is None else space.space_id,
            )
            if self.capture is not None:
                primer = await self.capture.primer(area)
                if primer and space is not None:
                    # A space's memory is drawn from its people's words: data, escaped in
                    # its element as every platform string is (#34 follow-up).
                    primer = memory_block(primer)
                if primer:
                    session.messages.append(ChatMessage(role="system", content=primer))
            if key in self._compacted:
                self._compacted.discard(key)
                session.version = held.version if held is not None else 0
            elif held is not None and held.version > 0:
                recorded = await held.transcript()
                session.messages.extend(recorded)
                session.captured_upto = len(recorded)  # those were captured in their time
                session.version = held.version
            elif conversation_id is not None:
                rebuilt = await self._rebuilt_history(area, key)
                session.messages.extend(rebuilt)
                session.captured_upto = len(rebuilt)  # those were captured in their time
            # The primer and an archive rebuild aren't the conversation's own new messages.
            session.recorded = len(session.messages)
            self.sessions[key] = session
        session.last_active = self.clock().timestamp()
        return session

    async def _rebuilt_history(self, person_key: str, key: str) -> list[ChatMessage]:
        """The end of a conversation the process no longer holds, from the archive."""
        if self.memory is None or self.limits.resume_max_chars <= 0:
            return []
        try:
            async with asyncio.timeout(2.0):
                if self.archive is not None and self.archive.holds_conversation(key):
                    # Its last turns may still wait in the write-behind queue.
                    await self.archive.settled(1.0)
                archived = await self.memory.recent_messages(
                    person_key, key, max_chars=self.limits.resume_max_chars
                )
        except Exception as error:  # memory is enrichment: a turn never waits on it
            expected = self.archive is not None and self.archive.explains(error)
            level = logging.DEBUG if expected else logging.WARNING
            log.log(level, "could not rebuild %s from the archive: %r", key, error)
            return []
        return [
            ChatMessage(role="user", content=m.content)
            if m.role == "user"
            else interrupted_answer(m.content)
            if m.interrupted
            else ChatMessage(role="assistant", content=m.content)
            for m in archived
        ]

    # ----------------------------------------------------------- idle sessions

    def _spend(self, spent: Spent) -> None:
        """A model call outside a turn's steps (a capture's summary): the metric, the ledger."""
        self.answerer.spend(spent)

    def start_background(self) -> None:
        """Start the idle sweep: idle sessions are captured, then freed from memory.

        The same beat prunes the rate limiter's windows that have passed, so what it holds
        follows the people who wrote lately, not everyone ever seen.
        """
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.limits.idle_check_s)
            try:
                await self.sweep_idle()
            except Exception:
                log.exception("the idle sweep failed")
            try:
                await self.purge_expired()
            except Exception:
                log.exception("purging expired state failed")

    async def purge_expired(self) -> None:
        """Drop what has expired from the state store: stagings, resume slots, rate stamps."""
        await self.confirmations.purge_expired()
        await self.resume_slots.purge_expired()
        await self.rate_limiter.cleanup()

    async def compact(self, key: str) -> bool:
        """Summarize session ``key`` into memory and let its next turn start afresh.

        The ``compact`` command of a chat: what was said is captured (the primer brings the
        summary back), the history is dropped. False when nothing was held for it here.

        With a shared order it waits for the conversation's turns on every instance, then
        empties the transcript of record, so another instance's next turn starts afresh too.
        """
        async with self._hold(key, key) as held:
            session = self.sessions.pop(key, None)
            if held is None:
                self._compacted.add(key)
            else:  # the transcript, emptied, is the mark every instance reads
                await held.start_afresh()
            if session is None:
                return False
            if self.capturer is not None:
                await self.capturer.rest(session)
            return True

    async def sweep_idle(self) -> int:
        """Capture and free every session idle for longer than the idle timeout."""
        freed = 0
        for key, session in list(self.sessions.items()):
            if self.clock().timestamp() - session.last_active < self.limits.idle_timeout_s:
                continue
            async with self.locks.hold(key):
                if self.sessions.get(key) is not session:
                    continue
                if self.clock().timestamp() - session.last_active < self.limits.idle_timeout_s:
                    continue  # a turn ran while we waited for the session
                if self.capturer is not None:
                    await self.capturer.rest(session)
                del self.sessions[key]
                freed += 1
        return freed

    # ---------------------------------------------------------- confirmations

    async def _answer_in_turn(
        self,
        turn_input: TurnInput,
        key: str,
        translator: Translator,
        emit: _Emit,
        written: list[str] | None,
    ) -> bool:
        """The turn's text as the answer to a question a tool asked this person: in this
        conversation, else in the one its thread hangs under (the person's reply in the
        thread of the answer that asked), which the answer then goes on in."""
        reply = turn_input.said or turn_input.text.strip()
        if await self._confirm_in_turn(
            turn_input, key, None, translator, emit, written, reply=reply
        ):
            return True
        parent = turn_input.parent_conversation_id
        if parent is None or parent == turn_input.conversation_id:
            return False
        space = turn_input.space
        above = msgspec.structs.replace(
            turn_input,
            conversation_id=parent,
            parent_conversation_id=None,
            space=None if space is None else msgspec.structs.replace(space, conversation=parent),
        )
        parent_key = self.session_key(turn_input.person, parent, _space_id(turn_input))
        return await self._confirm_in_turn(
            above, parent_key, None, translator, emit, written, reply=reply
        )

    async def _confirm_in_turn(
        self,
        turn_input: TurnInput,
        key: str,
        token: str | None,
        translator: Translator,
        emit: _Emit,
        written: list[str] | None = None,
        *,
        reply: str | None = None,
    ) -> bool:
        """A bare token as turn text: run the staged action, never the model first.

        With ``reply`` (the turn's text) instead: the text answers the question a tool
        asked in this conversation whose answer is typed, if one waits for this person;
        False, having done nothing, when none does (the text is then an ordinary turn).
        """
        context = ToolCallContext(
            turn_input.principal,
            turn_input.person,
            key,
            turn_input.conversation_id,
            translator,
            space=turn_input.space,
            written=written,
            sign_in=turn_input.sign_in,
        )
        answer, handed_back, login, shown = await self.confirmer.resolve(
            context, token, reply=reply
        )
        if reply is not None and answer is None and handed_back is None:
            return False
        if login is not None:
            if turn_input.sign_in is None:
                await emit(events.Login(service=login.service, url=login.url))
            else:
                await turn_input.sign_in(login.service, login.url)
        for event in shown:
            await emit(event)
        if handed_back is None:
            if answer is None:
                answer = translator.gettext(
                    "There is no pending confirmation for this token: it may have expired, "
                    "been used already, or never existed."
                )
            await emit(events.Final(text=answer))
            return True
        async with self._hold(key, turn_input.conversation_id) as held:
            session = await self._session(
                key, turn_input.person, turn_input.conversation_id, held, turn_input.space
            )
            try:
                session.messages.append(
                    ChatMessage(role="tool", tool_name=handed_back[0], content=handed_back[1])
                )
                await self.answerer.answer(
                    session,
                    context,
                    emit,
                    held,
                    archive_user=None,
                    received_at=turn_input.received_at,
                )
            finally:
                await self._record(session, held)
        return True

    async def confirm(
        self,
        principal: Principal,
        person: Person,
        conversation_id: str,
        token: str | ChoiceRef,
        language: str,
    ) -> ConfirmResult:
        """``POST /confirm``: resolve a token in the caller's own session; no model.

        ``POST /confirmations/{id}`` comes here too, naming the choice instead of its token.
        """
        if isinstance(token, str):
            token = token.strip()
            if not is_token(token):
                return ConfirmResult(resolved=False)
        translator = self.catalogs.translator(language)
        key = self.session_key(person, conversation_id)
        context = ToolCallContext(principal, person, key, conversation_id, translator)
        reply, handed_back, _login, shown = await self.confirmer.resolve(context, token)
        if handed_back is None:
            if reply is None:
                return ConfirmResult(resolved=False)
            return ConfirmResult(resolved=True, text=reply)
        slot = {"tool": handed_back[0], "result": handed_back[1]}
        if shown:
            # What the action asked once run is shown by the resuming turn (its stream).
            slot["shown"] = msgspec.json.encode([[e.name.decode(), e] for e in shown]).decode()
        await self.resume_slots.put(key, slot)
        return ConfirmResult(resolved=True, resume=True)

    async def pending_conversation(self, person: Person, confirmation_id: str) -> str | None:
        """The conversation of the caller's own in which a staging waits, by the staging's
        id; None when none of theirs waits there (unknown, answered, expired, someone
        else's, or staged in a one-off turn or a shared space)."""
        key = await self.confirmations.session_of(person.key, confirmation_id)
        return None if key is None else conversation_of(key, person.key)

    async def cancel(
        self,
        principal: Principal,
        person: Person,
        conversation_id: str,
        confirmation_id: str,
        language: str,
    ) -> bool:
        """Drop a staging of the caller's own conversation unrun; whether it was pending."""
        key = self.session_key(person, conversation_id)
        translator = self.catalogs.translator(language)
        context = ToolCallContext(principal, person, key, conversation_id, translator)
        return await self.confirmer.cancel(context, confirmation_id)

    # ---------------------------------------------------------------- helpers

    @staticmethod
    def _model_error_text(error: ModelError, translator: Translator) -> str:
        where = {"model": error.model, "host": error.host}
        if isinstance(error, ModelUnreachable):
            if error.provider == "openai":
                return (
                    translator.gettext(
                        "The model %(model)s at %(host)s can't be reached. "
                        "Check that its model server is running there."
                    )
                    % where
                )
            return (
                translator.gettext(
                    "The model %(model)s at %(host)s can't be reached. "
                    "Check that Ollama is running there."
                )
                % where
            )
        if isinstance(error, ModelHTTPError):
            return translator.gettext(
                "The model %(model)s at %(host)s answered with an error: %(reason)s"
            ) % {**where, "reason": error.reason}
        if isinstance(error, ModelBrokeOff):
            return (
                translator.gettext(
                    "The model %(model)s at %(host)s stopped answering in the middle of the reply."
                )
                % where
            )
        return translator.gettext("Something went wrong on our side. Try again in a moment.")

    @staticmethod
    def _stopping_text(translator: Translator) -> str:
        return translator.gettext(
            "The server is stopping; this turn was interrupted. Send it again in a moment."
        )

    async def stop_turns(self, timeout_s: float = 5.0) -> None:
        """Shutdown: every open turn ends with an error event saying the server stops.

        Then waits (at most ``timeout_s``) for the cancelled turns to unwind and for their
        transcript writes to land: the conversation order's claims are given back only after
        this, so what the turns had accepted is on record, fenced by a claim still held.
        """
        self._stopping = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        for turn in list(self._turns):
            turn.failure = "stopping"
            turn.cancel()
            translator = self.catalogs.translator(turn.language)
            turn.events.push(events.Error(message=self._stopping_text(translator)))
            turn.events.push(None)
        tasks = {turn.task for turn in self._turns if turn.task is not None}
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        if self._writes:
            await asyncio.wait(set(self._writes), timeout=timeout_s)

    @property
    def stopping(self) -> bool:
        """Whether the shutdown has begun: no new turn runs from now on."""
        return self._stopping

    @property
    def open_turns(self) -> int:
        return len(self._turns)


#: How the engine hands events to the turn's reader: ``await emit(event)``, waiting while
#: the reader is behind; the model step pushes a whole read with ``emit.push``.
_Emit = TurnEvents


def _log_unrecorded(writing: asyncio.Future[None]) -> None:
    if not writing.cancelled() and (error := writing.exception()) is not None:
        log.warning("a cancelled turn's messages were not put on record: %r", error)


def attachments_note(paths: tuple[str, ...]) -> str:
    """What the model reads after the person's words when files came with them.

    In a space it is escaped with the words, inside the ``<caller>`` element: the names are
    a platform's strings (:meth:`~core.spaces.turn.SpaceTurn.message`).
    """
    listed = "".join(f"\n- {path}" for path in paths)
    return (
        f"\n\n[Files the person sent with this message, saved in their inbox:{listed}\n"
        "Read them with inbox_read when they matter.]"
    )


def _space_id(turn_input: TurnInput) -> str | None:
    return None if turn_input.space is None else turn_input.space.space_id


def _shown_events(encoded: str | None) -> list[events.Event]:
    """The events a resume slot keeps for the resuming turn to show (``pending``, ``login``)."""
    if not encoded:
        return []
    kinds: dict[str, type[events.Pending] | type[events.Login]] = {
        "pending": events.Pending,
        "login": events.Login,
    }
    shown: list[events.Event] = []
    for name, payload in msgspec.json.decode(encoded):
        kind = kinds.get(name)
        if kind is not None:
            shown.append(msgspec.convert(payload, kind))
    return shown


def conversation_trace_id(turn_input: TurnInput) -> str:
    """The conversation as traces name it: a digest of its key, stable across its turns.

    A conversation id is the client's text (it may hold a name or a subject), and traces
    leave the service for a collector: they get a pseudonym that still groups the turns.
    """
    space = _space_id(turn_input)
    key = f"{space or ''}\x00{turn_input.person.key}\x00{turn_input.conversation_id or ''}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]
