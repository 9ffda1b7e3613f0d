"""The message pipeline: every bridge's messages routed, queued, run and answered the same way.

::

    bridge ─► submit (delivery taken, under a lease) ─► identify ─► muted? drop, silently
           ─► a link code in a group: withdrawn, a hint to send codes in a direct chat
           ─► pre-route trigger check (no I/O) ─► typing
           ─► not for the assistant, a program's words, a bot loop past its bound
              (core.spaces.bot_turns): kept as the space's ambient context
           ─► command (stop, compact): done at once, no rate limit, no queue;
              its answer told once a window per person; a stop reaches the turn on
              whichever instance runs it (bridges.stops)
           ─► rate limit (space:person, the space's own limit) ─► refused: told once a window,
              by one instance of all (bridges.notices)
           ─► normalize (media into the space's inbox; a refused file named in the reply)
           ─► run the turn ─► reply with the files this turn wrote ─► delivery handled

A webhook answers the platform as soon as the delivery is checked and taken; the rest runs in
a task of the pipeline's own (:meth:`Pipeline.submit`), so Slack's 3-second deadline holds
whatever the model takes. Turns of one conversation queue behind each other in the session
manager, across instances on a shared store.

A delivery is marked handled only once it came to something (a reply sent, ambient context
kept, a deliberate drop); one taken by an instance that died runs again on another
(:meth:`Pipeline.recover`, :mod:`bridges.deliveries`): at least once, and taken over only
once the holder's lease lapsed, which a live instance renews however long its turns take.

Nothing of one space reaches another: the space id comes from the platform's own thread,
never from the message, and every store (memory, files, wiki, ambient, preferences, mutes)
is keyed by it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final, Literal

import msgspec
from msgspec.structs import replace as replace_struct

from bridges.live import (
    ConfirmPress,
    LiveAnswer,
    StopPress,
    new_stop_id,
    owner_mark,
    parse_action,
    timeout_text,
    turn_mark,
    typed_confirmation,
)
from bridges.port import (
    BridgeError,
    CompletingBridge,
    EgressFile,
    IngressMessage,
    LiveBridge,
    PlatformBridge,
    Pressed,
    Received,
)
from bridges.sign_in import SIGN_IN_OPENING, sign_in_for
from bridges.stops import StopAsk
from core.engine import events
from core.engine.sessions import SessionLocks, Turn, TurnInput
from core.people.i18n import primary_language
from core.people.pairing import RESEND_AFTER, code_text, full_text
from core.people.people import Admitted
from core.people.principal import Principal
from core.spaces import area_key, parse_space_id
from core.spaces.routing import (
    Addressed,
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
from core.state import StateError
from core.workspace.file_types import describe_size
from core.workspace.files import (
    FileError,
    IncomingFile,
    InvalidFileName,
    checked_name,
    printable_name,
    refusal_text,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from bridges.deliveries import Deliveries
    from bridges.notices import NoticeClaims
    from bridges.stops import StopOutcome as AnsweredStop
    from bridges.stops import TurnStops
    from core.clock import Clock
    from core.config.settings import Settings
    from core.engine.sessions import SessionManager
    from core.people.i18n import Catalogs, Translator
    from core.people.pairing import Pairing
    from core.people.people import People
    from core.people.person_settings import PersonSettings
    from core.spaces.ambient import Ambient
    from core.spaces.bot_turns import BotTurns
    from core.spaces.members import Spaces
    from core.spaces.mutes import Mutes
    from core.spaces.preferences import SpacePreferences
    from core.spaces.settings import SpaceSettings
    from core.tools.registry import SignIn
    from core.workspace.files import PersonFiles

__all__ = ["Pipeline", "PipelineStores"]

log = logging.getLogger("mercury.bridges")

#: Messages handled at once before new deliveries are turned away to be sent again later.
MAX_IN_FLIGHT: Final = 1000
#: Seconds within which a person's second command in a space is done without an answer:
#: commands skip the rate limit, so 40 ``stop`` messages must not make 40 posts.
COMMAND_REPLY_WINDOW_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class _Running:
    """A turn running in a conversation here, whose it is and in which space (for ``stop``),
    and its stop button's id."""

    turn: Turn
    author: str
    space_id: str
    stop_id: str


@dataclass(frozen=True, slots=True)
class _Started:
    """A turn started for a message: what sending its answer needs."""

    turn: Turn
    key: str
    area: str
    translator: Translator
    #: The space and the person whose turn it is (a confirmation's owner).
    space_id: str = ""
    owner_key: str = ""
    #: Sentences for the person about files of the message that were refused.
    notes: tuple[str, ...] = ()
    #: Whether the answer is written live (the space's settings in force).
    live_answers: bool = True
    #: The id the turn's stop button carries (:func:`bridges.live.new_stop_id`).
    stop_id: str = ""
    #: The author as the space's stores name them (``<platform>:<id>``).
    caller_id: str = ""


@dataclass(frozen=True, slots=True)
class _Compact:
    """A ``compact`` to do once the space's routing has let go of the message."""

    key: str
    bucket: str
    translator: Translator


def _space_of(bridge: PlatformBridge, message: Received) -> str:
    """The space a message belongs to, for the order of its routing (never raises)."""
    try:
        return bridge.parse_thread(message.thread_id).space_id
    except Exception:
        return message.thread_id


@dataclass(frozen=True, slots=True)
class PipelineStores:
    """The space stores the pipeline reads and writes."""

    spaces: Spaces
    preferences: SpacePreferences
    mutes: Mutes
    ambient: Ambient
    deliveries: Deliveries
    pairing: Pairing
    settings: SpaceSettings
    #: Which instance tells a once-a-window notice (the rate limit's, a command's answer).
    notices: NoticeClaims
    #: ``stop`` for a turn running on another instance.
    stops: TurnStops
    #: The turns each space ran in a row for a suspected program (a bot loop's bound).
    bot_turns: BotTurns

    async def delete_space(self, space_id: str) -> None:
        """Forget everything kept for a space but its memory and files."""
        await self.bot_turns.delete_space(space_id)
        await self.preferences.delete_space(space_id)
        await self.settings.delete_space(space_id)
        await self.mutes.delete_space(space_id)
        await self.ambient.delete_space(space_id)
        await self.spaces.delete(space_id)


class Pipeline:
    """Routes each platform message: drop, keep as ambient, command, or run a turn."""

    def __init__(
        self,
        *,
        settings: Settings,
        manager: SessionManager,
        people: People,
        person_settings: PersonSettings,
        catalogs: Catalogs,
        files: PersonFiles,
        stores: PipelineStores,
        clock: Clock,
    ) -> None:
        self._settings = settings
        self._manager = manager
        self._people = people
        self._person_settings = person_settings
        self._catalogs = catalogs
        self._files = files
        self._stores = stores
        self._clock = clock
        #: What to do with each message: the core's rule, shared with ``POST /chat``.
        self._router = Router(
            settings=settings,
            engine=manager,
            people=people,
            person_settings=person_settings,
            spaces=stores.spaces,
            preferences=stores.preferences,
            mutes=stores.mutes,
            ambient=stores.ambient,
            clock=clock,
            space_settings=stores.settings,
            bot_turns=stores.bot_turns,
        )
        #: Past this many messages in hand, :attr:`full` turns new deliveries away.
        self.max_in_flight = MAX_IN_FLIGHT
        self._tasks: set[asyncio.Task[None]] = set()
        #: Typing indicators being started (not messages: they don't count towards full).
        self._typing_tasks: set[asyncio.Task[None]] = set()
        #: The turn running in each conversation here (session key), for ``stop``.
        self._running: dict[str, _Running] = {}
        #: Each space's messages routed one at a time, in the order they were taken.
        self._order = SessionLocks()
        stores.stops.serve(self._stop_asked)

    # ---------------------------------------------------------------- intake

    async def room(self) -> None:
        """Wait until the pipeline is not :attr:`full`: a gateway's back-pressure (what it
        has not taken yet stays with the platform, unacknowledged, instead of queueing up
        here without bound)."""
        while self.full:
            await asyncio.wait(set(self._tasks), return_when=asyncio.FIRST_COMPLETED)

    async def submit(self, bridge: PlatformBridge, message: Received) -> bool:
        """Take ``message`` (on one instance) and handle it in the background.

        False for a delivery handled already, or being handled by a live instance: a
        platform's retry, answered and dropped.
        """
        if not await self._stores.deliveries.take(message):
            log.info("%s delivery %s taken already", message.platform, message.delivery_id)
            return False
        self._spawn(bridge, message)
        return True

    def _spawn(self, bridge: PlatformBridge, message: Received) -> None:
        task = asyncio.get_running_loop().create_task(self.handle(bridge, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def recover(self, bridges: Mapping[str, PlatformBridge]) -> int:
        """Run again what a dead instance took and never handled (its lease lapsed), with
        the bridges of their platforms here; returns how many were taken over."""
        room = self.max_in_flight - len(self._tasks)
        messages = await self._stores.deliveries.stale(bridges.keys(), limit=min(room, 100))
        for message in messages:
            log.info(
                "%s delivery %s runs again: it was taken and never handled",
                message.platform,
                message.delivery_id,
            )
            bridge = bridges[message.platform]
            if isinstance(message, Pressed):
                task = asyncio.get_running_loop().create_task(self.handle_press(bridge, message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            else:
                self._spawn(bridge, message)
        return len(messages)

    async def deliver(self, bridge: PlatformBridge, message: Received | Pressed) -> None:
        """For a gateway bridge: what :meth:`submit` (or :meth:`submit_press`) does,
        without an answer to give."""
        if isinstance(message, Pressed):
            await self.submit_press(bridge, message)
        else:
            await self.submit(bridge, message)

    async def settled(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the messages being handled, those taken while
        waiting too: a shutdown's step before the bridges' connections and clients close,
        so every answer being written gets its last edit."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self._tasks or self._typing_tasks:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            await asyncio.wait(self._tasks | self._typing_tasks, timeout=left)

    @property
    def handling(self) -> int:
        """Messages being handled now."""
        return len(self._tasks)

    @property
    def full(self) -> bool:
        """Whether a flood filled the pipeline: a delivery is then refused before it is
        taken, so the platform sends it again later and nothing is lost."""
        return len(self._tasks) >= self.max_in_flight

    async def handle(self, bridge: PlatformBridge, message: Received) -> None:
        """Route one message; failures are logged, never raised (nobody waits for them).

        A space's messages are routed one at a time, in the order they were taken, up to
        the moment a turn starts: talk said before a mention is always the mention's ambient
        context, whatever each message waited for on its way. The answer is awaited outside
        that order, so a long turn holds up nothing but its own conversation.
        """
        deliveries = self._stores.deliveries
        try:
            async with self._order.hold(_space_of(bridge, message)):
                if isinstance(bridge, CompletingBridge):  # names learned after the ack (#34)
                    message = await bridge.complete(message)
                started = await self._route(bridge, message)
            if isinstance(started, _Started) and not await self._finish(bridge, message, started):
                # A live answer left unfinished (the platform's client gone under a frozen
                # instance): run again, that run writes on in the same message.
                log.warning(
                    "a %s answer did not reach the platform; its delivery runs again",
                    message.platform,
                )
                await deliveries.release(message)
                return
            if isinstance(started, _Compact):
                await self._compact(bridge, message, started)
            await deliveries.handled(message)
        except asyncio.CancelledError:
            raise  # a shutdown: the lease lapses, another instance runs it again
        except Exception:
            log.exception("handling a %s message failed", message.platform)
            with contextlib.suppress(Exception):
                await deliveries.release(message)

    # ---------------------------------------------------------------- routing

    async def _route(self, bridge: PlatformBridge, message: Received) -> _Started | _Compact | None:
        thread = bridge.parse_thread(message.thread_id)
        space = parse_space_id(thread.space_id)  # the bridge's own: never a message's word
        principal = Principal(
            id=message.author_id, provider=message.platform, display_name=message.author_name
        )
        facts = ChatMessage(
            space=space,
            conversation=thread.conversation_external_id,
            is_dm=thread.is_dm,
            principal=principal,
            text=message.text,
            is_reply_to_bot=message.is_reply_to_bot,
            attachment_names=tuple(a.name for a in message.attachments),
            from_bot=message.from_bot,
        )
        decision = await self._router.route(facts, addressed=lambda: self._typing(bridge, message))
        if isinstance(decision, Withdraw):
            if decision.hint is not None:  # only people let in are answered
                await self._reply(bridge, message, decision.hint)
            return None
        if isinstance(decision, Stranger):
            if decision.pair:
                await self._pair(bridge, message)
            return None  # nothing a stranger wrote is run or kept
        if isinstance(decision, Muted | AmbientKept):
            return None  # a mute is silent: no model call, no reply, not even ambient
        who = decision.who
        translator = self._catalogs.translator(who.language)
        if message.opening is not None:
            # The platform's Start of a private chat (Telegram's, a deep link's payload with
            # it): answered here, never the model's to read (a stranger's got its code above).
            await self._reply(bridge, message, _opening_text(message.opening, translator))
            return None
        if isinstance(decision, Command):
            if decision.kind == "compact":
                # It waits for the conversation's running turn, never for the space's routing.
                return _Compact(key=who.key, bucket=decision.reply_bucket, translator=translator)
            outcome = await self._stop_turn(decision)
            if outcome == "stopped" and isinstance(bridge, LiveBridge):
                if who.live_answers:
                    return None  # the answer being written says "Stopped." itself
            text = _stop_text(outcome, translator)
            if await self._once(decision.reply_bucket, COMMAND_REPLY_WINDOW_S):
                await self._reply(bridge, message, text)
            return None
        if isinstance(decision, Refuse):
            await self._refuse_once(bridge, message, who.bucket, decision.retry_after_s, translator)
            return None
        # An allowance used up is told once per allowance and window, as the rate limit is;
        # the turn would refuse itself (the core checks every turn), but once per message.
        refusal = await self._manager.check_budget(who.person, who.space_id)
        if refusal is not None:
            if await self._once(refusal.bucket, refusal.seconds_left(datetime.now(UTC))):
                await self._reply(bridge, message, refusal.text(translator))
            return None
        ingress, notes = await self._normalize(
            bridge, message, thread.conversation_external_id, space.id, translator
        )
        started = await self._start(
            ingress, decision, translator, _sign_in(bridge, message, translator)
        )
        return replace(started, notes=notes)

    async def _pair(self, bridge: PlatformBridge, message: Received) -> None:
        """A stranger's direct message under ``pairing``: their code, sent once in a while;
        a sentence, once in a while, when the platform holds as many requests as it may."""
        # A stranger has no saved language: the platform's word for theirs, else the default.
        language = primary_language(message.language) or self._settings.defaults.language
        translator = self._catalogs.translator(language)
        # What answering them again needs, never what they wrote.
        reach = msgspec.json.encode(replace_struct(message, text="", attachments=())).decode()
        asked = await self._stores.pairing.ask(
            message.platform,
            message.author_id,
            name=message.author_name,
            language=language,
            reach=reach,
        )
        if asked.request is not None:
            log.info(
                "%s account %s asked to be let in (code %s)",
                message.platform,
                message.author_id[:80],
                asked.request.code,
            )
            await self._reply(bridge, message, code_text(asked.request.code, translator))
        elif asked.outcome == "full":
            bucket = f"pairing-full|{message.platform}:{message.author_id}"
            if await self._once(bucket, RESEND_AFTER.total_seconds()):
                await self._reply(bridge, message, full_text(translator))

    async def stop(self, command: Command, translator: Translator) -> str:
        """Stop the conversation's running turn here, if the sender may (a bridge's ``stop``,
        or ``POST /chat``'s in a space); the sentence to tell them."""
        return _stop_text(await self._stop_turn(command), translator)

    @contextlib.contextmanager
    def running(self, who: Addressed, turn: Turn) -> Iterator[str]:
        """``turn`` known as its conversation's running turn while the block runs, so a
        ``stop`` (typed, pressed, or asked by another instance) reaches it; yields its stop
        id. ``POST /chat``'s turns in a space are held so, as a bridge's are."""
        running = self._hold_running(who, turn)
        try:
            yield running.stop_id
        finally:
            self._let_go(who.key, turn)

    def _hold_running(self, who: Addressed, turn: Turn) -> _Running:
        running = _Running(
            turn=turn, author=who.person.key, space_id=who.space_id, stop_id=new_stop_id()
        )
        self._running[who.key] = running
        return running

    def _let_go(self, key: str, turn: Turn) -> None:
        running = self._running.get(key)
        if running is not None and running.turn is turn:
            del self._running[key]

    async def _stop_turn(self, command: Command, button: str = "") -> StopOutcome:
        """Stop the turn of the conversation ``command`` was sent in, wherever it runs; with
        ``button``, only the turn holding that stop id."""
        running = self._running.get(command.who.key)
        if running is None:
            return await self._stop_elsewhere(command, button)
        return await self._judge_stop(
            running, command.who.person.key, command.who.principal.user_key, button
        )

    async def _judge_stop(
        self, running: _Running, sender: str, caller_id: str, button: str
    ) -> AnsweredStop:
        """The one place a stop is judged: against the turn it names (the button's id), by
        the turn's author and the turn's own space."""
        if button and not hmac.compare_digest(running.stop_id, button):
            return "expired"  # a button of an earlier turn of the conversation
        allowed = await self._router.may_stop(
            sender, caller_id, author=running.author, space_id=running.space_id
        )
        if not allowed:
            return "refused"
        running.turn.cancel()
        return "stopped"

    async def _stop_elsewhere(self, command: Command, button: str) -> StopOutcome:
        """Stop the conversation's turn running on another instance (a shared store), by
        the same rule; "idle" when none runs there, "unanswered" when one holds it but no
        answer came in time."""
        order = self._manager.order
        key = command.who.key
        if not self._stores.stops.shared or order is None:
            return "idle"
        if not await order.claimed_elsewhere(key):
            return "idle"  # no instance runs or queues a turn of it: nobody to ask
        ask = StopAsk(
            mark=turn_mark(key),
            person_key=command.who.person.key,
            caller_id=command.who.principal.user_key,
            button=button,
        )
        answered = await self._stores.stops.ask(ask)
        if answered is not None:
            return answered
        # A late answer (a busy instance) is not "nothing is running": say so only when no
        # instance holds the conversation any more.
        return "unanswered" if await order.claimed_elsewhere(key) else "idle"

    async def _stop_asked(self, ask: StopAsk) -> AnsweredStop | None:
        """Another instance's stop: judged here, where the turn runs, by the same rule;
        None when no turn of its conversation runs here."""
        running = next((r for key, r in self._running.items() if turn_mark(key) == ask.mark), None)
        if running is None:
            return None
        return await self._judge_stop(running, ask.person_key, ask.caller_id, ask.button)

    # ---------------------------------------------------------------- button presses

    async def submit_press(self, bridge: PlatformBridge, press: Pressed) -> bool:
        """Take ``press`` (on one instance, like a message) and handle it in the background;
        False for a press taken already (a platform's retry)."""
        if not await self._stores.deliveries.take(press):
            log.info("%s press %s taken already", press.platform, press.delivery_id)
            return False
        task = asyncio.get_running_loop().create_task(self.handle_press(bridge, press))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def handle_press(self, bridge: PlatformBridge, press: Pressed) -> None:
        """Do what a pressed button asks: a confirmation's choice or a stop. Failures are
        logged, never raised."""
        deliveries = self._stores.deliveries
        try:
            if isinstance(bridge, LiveBridge):
                await self._press(bridge, press)
            await deliveries.handled(press)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("handling a %s press failed", press.platform)
            with contextlib.suppress(Exception):
                await deliveries.release(press)

    async def _press(self, bridge: LiveBridge, press: Pressed) -> None:
        thread = bridge.parse_thread(press.thread_id)
        space = parse_space_id(thread.space_id)  # the bridge's own: never the press's word
        principal = Principal(
            id=press.author_id, provider=press.platform, display_name=press.author_name
        )
        identification = await self._people.identify(principal)
        person = identification.person if isinstance(identification, Admitted) else None
        caller_id = f"{press.platform}:{press.author_id}"
        targets = [caller_id] if person is None else [caller_id, person.key]
        if await self._stores.mutes.is_muted(space.id, targets):
            return  # silently, as a muted person's messages: nothing runs, nothing is said
        language = self._settings.defaults.language
        zone = self._settings.defaults.time_zone
        if person is not None:
            language, zone = await self._router.language_and_zone(person)
        translator = self._catalogs.translator(language)
        asked = parse_action(press.action)
        if person is None or asked is None:
            key = None
        else:
            key = self._manager.session_key(person, thread.conversation_external_id, space.id)
        if isinstance(asked, StopPress) and person is not None and key is not None:
            stop = Command(
                kind="stop",
                who=Addressed(
                    principal=principal,
                    person=person,
                    space_id=space.id,
                    conversation=thread.conversation_external_id,
                    key=key,
                    language=language,
                    time_zone=zone,
                ),
            )
            await self._press_stop(bridge, press, asked, stop, translator)
            return
        if not isinstance(asked, ConfirmPress) or key is None or person is None:
            await self._answer_press(
                bridge, press, translator.gettext("Already answered or expired.")
            )
            return
        if owner_mark(person.key) != asked.owner:
            # Anyone else's press runs nothing, and is told so privately (#37).
            await self._answer_press(
                bridge, press, translator.gettext("This isn't yours to answer.")
            )
            return
        label = await self._manager.confirmations.label_of(key, person.key, asked.token)
        if label is None:
            await self._answer_press(
                bridge, press, translator.gettext("Already answered or expired.")
            )
            return
        # One choice per message, across instances: a double tap is two presses, and the
        # second must not run the token again (it would answer "no pending confirmation"
        # in the group). The first press on the message holds it for good.
        chosen_mark = replace_struct(
            press, delivery_id=f"chosen:{press.thread_id}:{press.message_id}"
        )
        deliveries = self._stores.deliveries
        if not await deliveries.take(chosen_mark):
            await self._answer_press(
                bridge, press, translator.gettext("Already answered or expired.")
            )
            return
        await deliveries.handled(chosen_mark)
        chosen = translator.gettext("Chosen: %(choice)s") % {
            "choice": label or translator.gettext("Confirm")
        }
        try:
            await bridge.settle_press(press, chosen)
        except BridgeError as error:
            log.warning("a %s press was not settled: %s", press.platform, error)
        # Exactly as typing the token in that conversation: the same routing (mutes, the
        # space's rate limit), then a turn whose text is the token.
        message = Received(
            platform=press.platform,
            thread_id=press.thread_id,
            delivery_id=press.delivery_id,
            message_id=press.message_id,
            author_id=press.author_id,
            author_name=press.author_name,
            text=asked.token,
            is_dm=thread.is_dm,
            is_reply_to_bot=True,
        )
        ingress = IngressMessage(
            platform=press.platform,
            space_id=space.id,
            conversation_external_id=thread.conversation_external_id,
            caller_id=caller_id,
            author_name=press.author_name,
            text=asked.token,
            is_dm=thread.is_dm,
            is_reply_to_bot=True,
            attachments=(),
        )
        facts = ChatMessage(
            space=space,
            conversation=thread.conversation_external_id,
            is_dm=thread.is_dm,
            principal=principal,
            text=asked.token,
            is_reply_to_bot=True,
        )
        async with self._order.hold(space.id):
            decision = await self._router.route(facts)
            if not isinstance(decision, Run):
                if isinstance(decision, Refuse):
                    await self._answer_press(
                        bridge, press, translator.gettext("Rate limit exceeded. Try again shortly.")
                    )
                return
            started = await self._start(
                ingress, decision, translator, _sign_in(bridge, message, translator)
            )
        await self._finish(bridge, message, started)

    async def _press_stop(
        self,
        bridge: LiveBridge,
        press: Pressed,
        asked: StopPress,
        stop: Command,
        translator: Translator,
    ) -> None:
        """The stop button: the typed ``stop``'s path and rule, for the turn holding the
        button's id in the conversation it was pressed in, wherever it runs."""
        outcome = await self._stop_turn(stop, button=asked.turn)
        await self._answer_press(bridge, press, _stop_text(outcome, translator))

    @staticmethod
    async def _answer_press(bridge: LiveBridge, press: Pressed, text: str) -> None:
        try:
            await bridge.answer_press(press, text)
        except BridgeError as error:
            log.warning("a %s press was not answered: %s", press.platform, error)

    async def _compact(self, bridge: PlatformBridge, message: Received, compact: _Compact) -> None:
        try:
            await self._manager.compact(compact.key)
        except Exception:
            log.exception("compacting %s failed", message.thread_id)
            return
        if await self._once(compact.bucket, COMMAND_REPLY_WINDOW_S):
            await self._reply(
                bridge,
                message,
                compact.translator.gettext("Done: this conversation starts afresh from a summary."),
            )

    async def _refuse_once(
        self,
        bridge: PlatformBridge,
        message: Received,
        bucket: str,
        retry_after_s: int,
        translator: Translator,
    ) -> None:
        """Tell the person they are over the limit, once per window, never per message."""
        if await self._once(bucket, retry_after_s):
            await self._reply(
                bridge, message, translator.gettext("Rate limit exceeded. Try again shortly.")
            )

    async def _once(self, bucket: str, window_s: float) -> bool:
        """True once per ``window_s`` for ``bucket``, across every instance: whether to tell
        the person now. When the store can't say, the person is told (once more, at worst)."""
        try:
            return await self._stores.notices.claim(bucket, window_s)
        except StateError as error:
            log.warning("a notice was told without its claim: %s", error)
            return True

    # ---------------------------------------------------------------- the run

    async def _normalize(
        self,
        bridge: PlatformBridge,
        message: Received,
        conversation: str,
        space_id: str,
        translator: Translator,
    ) -> tuple[IngressMessage, tuple[str, ...]]:
        """The message for the core: its media downloaded into the space's inbox; and a
        sentence for each file refused by name or not fetched (the others are kept)."""
        saved: tuple[str, ...] = ()
        notes: list[str] = []
        if message.attachments:
            limits = self._files.limits
            incoming: list[IncomingFile] = []
            budget = limits.max_turn_bytes
            for attachment in message.attachments:
                try:
                    checked_name(attachment.name)
                except InvalidFileName as error:
                    notes.append(refusal_text(error, translator))
                    continue
                cap = min(limits.max_file_bytes, budget)
                try:
                    data = await bridge.download(attachment, cap)
                except BridgeError as error:
                    log.warning("a %s attachment was not fetched: %s", message.platform, error)
                    notes.append(
                        translator.gettext(
                            'The file "%(name)s" was not kept: it is larger than %(limit)s, '
                            "or the platform did not send it."
                        )
                        % {"name": printable_name(attachment.name), "limit": describe_size(cap)}
                    )
                    continue
                budget -= len(data)
                incoming.append(IncomingFile(attachment.name, data))
            try:
                stored = await self._files.receive(area_key(space_id), incoming)
            except FileError as error:
                log.warning("a %s message's files were not saved: %s", message.platform, error)
                stored = []
            saved = tuple(f.path for f in stored)
        parent = None
        if message.parent_thread_id is not None:
            above = bridge.parse_thread(message.parent_thread_id)
            if above.space_id == space_id and above.conversation_external_id != conversation:
                parent = above.conversation_external_id
        ingress = IngressMessage(
            platform=message.platform,
            space_id=space_id,
            conversation_external_id=conversation,
            parent_conversation=parent,
            caller_id=f"{message.platform}:{message.author_id}",
            author_name=message.author_name,
            text=message.text,
            is_dm=message.is_dm,
            is_reply_to_bot=message.is_reply_to_bot,
            attachments=saved,
        )
        return ingress, tuple(notes)

    async def _start(
        self, ingress: IngressMessage, run: Run, translator: Translator, sign_in: SignIn | None
    ) -> _Started:
        """The turn for ``ingress`` opened, with the space's preferences and ambient talk;
        a sign-in link its tools ask for goes to the author alone (``sign_in``)."""
        who = run.who
        space = await self._router.space_turn(
            run, is_dm=ingress.is_dm, author_name=ingress.author_name
        )
        turn = self._manager.open_turn(
            TurnInput(
                principal=who.principal,
                person=who.person,
                conversation_id=ingress.conversation_external_id,
                parent_conversation_id=ingress.parent_conversation,
                text=run.text,  # the token alone when that is what the message is
                said=run.said,
                language=who.language,
                time_zone=who.time_zone,
                received_at=datetime.now(UTC),
                attachments=ingress.attachments,
                space=space,
                sign_in=sign_in,
            )
        )
        running = self._hold_running(who, turn)
        return _Started(
            turn=turn,
            key=who.key,
            area=space.area,
            translator=translator,
            space_id=who.space_id,
            owner_key=who.person.key,
            live_answers=who.live_answers,
            stop_id=running.stop_id,
            caller_id=ingress.caller_id,
        )

    async def _finish(self, bridge: PlatformBridge, message: Received, started: _Started) -> bool:
        """Send the turn's answer, with the files it wrote: live where the bridge can
        write it as it comes and the space wants it so, else as one message at the end.

        A live answer to a delivery taken over from an earlier run goes on in the message
        that run posted; False when a live answer's last word did not reach the platform."""
        shown: list[bool] = []
        try:
            return await self._send_answer(bridge, message, started, shown)
        finally:
            # An answer that never showed while written (one message at the end) shows now.
            await self._bot_turn(started, ended=any(shown))

    async def _send_answer(
        self, bridge: PlatformBridge, message: Received, started: _Started, shown: list[bool]
    ) -> bool:
        turn, key = started.turn, started.key
        deliveries = self._stores.deliveries

        async def posted(ref: str) -> None:
            # First: a program's reply to these first words may come at once.
            shown.append(await self._bot_turn(started, ended=False, for_s=None))
            await deliveries.posted(message, ref)

        try:
            if isinstance(bridge, LiveBridge) and started.live_answers:
                answer = LiveAnswer(
                    bridge,
                    message,
                    started.translator,
                    owner_key=started.owner_key,
                    stop_id=started.stop_id,
                    show_reasoning=self._settings.bridges.show_reasoning,
                    resume=deliveries.left_reply(message),
                    posted=posted,
                )
                return await answer.render(
                    turn,
                    timeout_s=self._settings.chat.timeout_s,
                    files_of=lambda: self._files_of(started),
                    notes=started.notes,
                )
            text = await self._answer_of(turn, started.translator)
        finally:
            self._let_go(key, turn)
        if text is None:
            return True  # stopped: the stop command answered
        files = await self._files_of(started)
        if started.notes:
            text = "\n\n".join((text, *started.notes))
        await self._reply(bridge, message, text, files)
        return True

    async def _bot_turn(self, started: _Started, *, ended: bool, for_s: float | None = 0.0) -> bool:
        """Note for the bot-loop bound (:mod:`core.spaces.bot_turns`) that the answer to
        ``started`` shows (for ``for_s`` more, None: the turn's time limit), or that the
        answer shown earlier ``ended``: its author's next words count as a reply to it.
        True once noted; the answer never fails for it."""
        if not started.space_id or not started.caller_id:
            return False
        bot_turns = self._stores.bot_turns
        try:
            if ended:
                await bot_turns.answered(started.space_id, started.caller_id)
            else:
                limit = self._settings.chat.timeout_s if for_s is None else for_s
                await bot_turns.shown(started.space_id, started.caller_id, for_s=limit)
            return True
        except Exception as error:  # bookkeeping: never the answer's failure, nor a shutdown's
            log.warning("a bot-loop count was not kept: %s", error)
            return False

    async def _files_of(self, started: _Started) -> list[EgressFile]:
        # This turn's own files: another conversation of the space writes to the same outbox.
        return [
            EgressFile(filename=found.name, mime_type=found.mime_type, data=data)
            for found, data in await self._files.written(started.area, started.turn.written)
        ]

    async def _answer_of(self, turn: Turn, translator: Translator) -> str | None:
        """The reply a turn comes to: its answer, a confirmation to give, or its error."""
        timeout_s = self._settings.chat.timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                final, pending, error = await _collect(turn)
        except TimeoutError:
            turn.cancel()
            return timeout_text(timeout_s, translator)
        if turn.outcome == "cancelled":
            return None
        if error is not None:
            return error.message
        if final is None:
            return translator.gettext("Something went wrong on our side. Try again in a moment.")
        if pending is not None:
            return f"{final.text}\n\n{typed_confirmation(pending, translator)}"
        return final.text

    # ---------------------------------------------------------------- platform calls

    async def _reply(
        self,
        bridge: PlatformBridge,
        message: Received,
        text: str,
        files: list[EgressFile] | None = None,
    ) -> None:
        try:
            await bridge.send_reply(message, text, files or ())
        except BridgeError as error:
            # Nothing is lost on our side: the answer is in the conversation's history.
            log.warning("a %s reply was not delivered: %s", message.platform, error)

    def _typing(self, bridge: PlatformBridge, message: Received) -> None:
        task = asyncio.get_running_loop().create_task(self._start_typing(bridge, message))
        self._typing_tasks.add(task)
        task.add_done_callback(self._typing_tasks.discard)

    @staticmethod
    async def _start_typing(bridge: PlatformBridge, message: Received) -> None:
        with contextlib.suppress(BridgeError):
            await bridge.start_typing(message)


StopOutcome = Literal["idle", "stopped", "refused", "expired", "unanswered"]


def _sign_in(bridge: PlatformBridge, message: Received, translator: Translator) -> SignIn | None:
    """How a turn answering ``message`` hands a sign-in link to its author alone: the one
    rule of :mod:`bridges.sign_in` on a bridge that can reach a person privately."""
    return sign_in_for(bridge, message, translator) if isinstance(bridge, LiveBridge) else None


def _opening_text(opening: str, translator: Translator) -> str:
    """What a person who opened a private chat with the bot (Telegram's Start) is told."""
    if opening == SIGN_IN_OPENING:
        # Shown: in a private chat opened from the group's hint that a sign-in link could not
        # be sent privately (Telegram's Start button).
        return translator.gettext(
            "Hello! This is our private chat: ask me here what you asked for, and the link to "
            "sign in will come here, for you alone."
        )
    # Shown: in a private chat the person just opened with the bot (Telegram's Start button).
    return translator.gettext("Hello! Write to me here and I'll answer.")


def _stop_text(outcome: StopOutcome, translator: Translator) -> str:
    """What the sender of a ``stop`` is told."""
    if outcome == "idle":
        return translator.gettext("Nothing is running here.")
    if outcome == "stopped":
        return translator.gettext("Stopped.")
    if outcome == "expired":
        return translator.gettext("Already answered or expired.")
    if outcome == "unanswered":
        return translator.gettext(
            "The stop was passed on, but no answer came in time; "
            "if the answer is still being written, try again."
        )
    return translator.gettext(
        "Only the person who asked, or an admin of this space, can stop this turn."
    )


async def _collect(
    turn: Turn,
) -> tuple[events.Final | None, events.Pending | None, events.Error | None]:
    """The turn's ``final``, ``pending`` and ``error`` events, once it has ended."""
    final: events.Final | None = None
    pending: events.Pending | None = None
    error: events.Error | None = None
    while True:
        for event in await turn.events.take():
            if event is None:
                return final, pending, error
            if isinstance(event, events.Final):
                final = event
            elif isinstance(event, events.Pending):
                pending = event
            elif isinstance(event, events.Error):
                error = event
