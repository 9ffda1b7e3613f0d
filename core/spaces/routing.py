"""What to do with a chat message in a space: the one routing rule a bridge and ``/chat`` share.

::

    ChatMessage ─► identify ─► muted?                      Muted (nothing runs, nothing kept)
                ─► a link code in a group?                 Withdraw (the hint, for people let in)
                ─► from someone not let in?                Stranger (nothing run, nothing kept,
                                                            in a DM or a group; a code to ask
                                                            for, in a DM under ``pairing``)
                ─► from a program? (the platform says so)  kept as ambient talk → Ambient
                ─► a bot loop? (its sender answering each   kept as ambient talk → Ambient
                   answer at once, past the bound)          (core.spaces.bot_turns)
                ─► for the assistant? (trigger, DM, reply)  no: kept as ambient talk → Ambient
                ─► what it says, the trigger taken out:
                   stop, compact?                          Command (no rate limit, no queue)
                ─► over the space's rate limit?            Refuse (the bucket, when to try again)
                ─► Run (who, in which language and zone, which conversation, and the text:
                   a confirmation token or a link code alone, else the message as said)

:class:`Router` decides and keeps what the core keeps on the way (the space opened and
joined, ambient talk, the withdrawn code, the rate count); the caller does what touches its
transport: a bridge's typing indicator, replies and downloads, or ``/chat``'s JSON answer.
Nothing here knows a platform's API or HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, Protocol

from core.people.i18n import choose_language
from core.people.people import Admitted, Refused
from core.people.timezones import choose_zone
from core.rate_limits import bucket_key
from core.spaces.ambient import AmbientMessage, render_ambient
from core.spaces.preferences import render_preferences
from core.spaces.settings import InForce, resolve
from core.spaces.triggers import Command as CommandKind
from core.spaces.triggers import command_of, without_trigger
from core.spaces.turn import SpaceTurn

if TYPE_CHECKING:
    from collections.abc import Callable

    from core.clock import Clock
    from core.config.settings import Settings
    from core.people.people import People
    from core.people.person_settings import PersonSettings
    from core.people.principal import Person, Principal
    from core.rate_limits import RateDecision
    from core.spaces.ambient import Ambient
    from core.spaces.bot_turns import BotTurns
    from core.spaces.ids import SpaceRef
    from core.spaces.members import Spaces
    from core.spaces.mutes import Mutes
    from core.spaces.preferences import SpacePreferences
    from core.spaces.settings import SpaceSettings

__all__ = [
    "Addressed",
    "AmbientKept",
    "ChatMessage",
    "Command",
    "Decision",
    "Engine",
    "Muted",
    "Refuse",
    "Router",
    "Run",
    "Stranger",
    "Withdraw",
    "may_stop",
]

#: What an ambient entry says for a file sent without text.
FILE_NOTE: Final = "[sent a file: {names}]"


class Engine(Protocol):
    """What routing asks of the session manager (:class:`core.engine.sessions.SessionManager`)."""

    def is_link_code(self, text: str) -> bool: ...

    def is_intercepted(self, text: str) -> bool: ...

    async def withdraw_link_code(self, text: str, language: str) -> str | None: ...

    def session_key(
        self, person: Person, conversation_id: str, space_id: str | None = None
    ) -> str: ...

    async def check_rate(
        self,
        person: Person,
        text: str,
        *,
        opening: bool = False,
        space: str | None = None,
        limit: int | None = None,
    ) -> RateDecision | None: ...


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """A message in a space, as plain facts: where, who, what (never a platform object).

    ``space`` comes from the transport's own thread (never from a word of the message);
    ``attachment_names`` are the names of the files sent with it, not yet fetched;
    ``from_bot``: the platform (or the deployment's list) says a program wrote it.
    """

    space: SpaceRef
    conversation: str
    is_dm: bool
    principal: Principal
    text: str
    is_reply_to_bot: bool = False
    attachment_names: tuple[str, ...] = ()
    from_bot: bool = False

    @property
    def caller_id(self) -> str:
        """``<platform>:<id>``: the author as the space's stores name them."""
        return self.principal.user_key


@dataclass(frozen=True, slots=True)
class Muted:
    """The author is muted in the space: nothing runs, nothing is kept."""


@dataclass(frozen=True, slots=True)
class Stranger:
    """A message from someone not let in, in a direct chat or a group: nothing runs and
    nothing is kept, not even as the group's ambient talk, so nothing they write reaches the
    model, before or after they are let in.

    ``pair``: a direct message, the platform's DM policy is ``pairing`` and the directory
    doesn't know the sender, so the caller gives them a code to ask an approver with
    (:mod:`core.people.pairing`); otherwise they are told nothing.
    """

    pair: bool


@dataclass(frozen=True, slots=True)
class Withdraw:
    """A link code said in a group: withdrawn, never run nor kept; ``hint`` tells the
    author to send codes in a direct chat (``None``: tell nobody, the author isn't let in)."""

    hint: str | None


@dataclass(frozen=True, slots=True)
class AmbientKept:
    """Not for the assistant: kept as the space's ambient talk."""


@dataclass(frozen=True, slots=True)
class Addressed:
    """A message for the assistant: who sent it, the conversation, their language."""

    principal: Principal
    person: Person
    space_id: str
    conversation: str
    key: str
    language: str
    time_zone: str
    #: Whether the answer is written live, by the space's settings in force (a button's
    #: stop, which writes no answer, leaves it as it is).
    live_answers: bool = True

    @property
    def bucket(self) -> str:
        """The person's rate-limit bucket in the space."""
        return bucket_key(self.space_id, self.person.key)


@dataclass(frozen=True, slots=True)
class Command:
    """``stop`` or ``compact``: done at once, outside the rate limit and the queue."""

    kind: CommandKind
    who: Addressed

    @property
    def reply_bucket(self) -> str:
        """What a bounded reply to this command is counted under (once a window per person)."""
        return f"{self.kind}|{self.who.bucket}"


@dataclass(frozen=True, slots=True)
class Refuse:
    """Over the space's rate limit: not run; accepted again after ``retry_after_s``."""

    who: Addressed
    retry_after_s: int
    reason: Literal["rate"] = "rate"


@dataclass(frozen=True, slots=True)
class Run:
    """Run a turn for the message, in the space.

    ``text`` is what the turn runs with: a confirmation token or a link code alone when that
    is all the message says once the trigger is taken out (``@Mercury k9m2-x7q4``), so it is
    answered as one and never reaches the model; otherwise the message as it was said.
    ``said`` is the message with the trigger taken out: the answer, when a tool asked the
    person a question in the conversation.
    """

    who: Addressed
    text: str
    said: str | None = None


Decision = Muted | Stranger | Withdraw | AmbientKept | Command | Refuse | Run


def may_stop(author: str, sender: str, *, admin: bool) -> bool:
    """The ``stop`` rule: a turn ``author`` asked for stops for its author, or an admin of
    the turn's own space (person keys), on whichever instance the turn runs."""
    return admin or author == sender


class Router:
    """Decides what to do with each message in a space, for every transport alike."""

    def __init__(
        self,
        *,
        settings: Settings,
        engine: Engine,
        people: People,
        person_settings: PersonSettings,
        spaces: Spaces,
        preferences: SpacePreferences,
        mutes: Mutes,
        ambient: Ambient,
        clock: Clock,
        space_settings: SpaceSettings | None = None,
        bot_turns: BotTurns | None = None,
    ) -> None:
        self._settings = settings
        #: Bot loops bounded (a chat platform's messages); ``/chat``, asked by its caller
        #: for each answer, has none.
        self._bot_turns = bot_turns
        self._space_settings = space_settings
        self._engine = engine
        self._people = people
        self._person_settings = person_settings
        self._spaces = spaces
        self._preferences = preferences
        self._mutes = mutes
        self._ambient = ambient
        self._clock = clock

    async def route(
        self, message: ChatMessage, *, addressed: Callable[[], None] | None = None
    ) -> Decision:
        """The decision for ``message``; ``addressed`` is called as soon as it is known to be
        for the assistant (a bridge starts its typing indicator then, before any store)."""
        space = message.space
        caller_id = message.caller_id
        identification = await self._people.identify(message.principal)
        person = identification.person if isinstance(identification, Admitted) else None
        targets = [caller_id] if person is None else [caller_id, person.key]
        if await self._mutes.is_muted(space.id, targets):
            return Muted()
        if person is None and message.is_dm:
            # Nothing a stranger writes in a direct chat reaches the model, not even as
            # ambient talk shown once they are let in.
            pair = (
                isinstance(identification, Refused)
                and identification.reason == "unknown"
                and self._people.dm_policy(message.principal.provider) == "pairing"
            )
            return Stranger(pair=pair)
        # The space's settings in force, read anew for every message: a value an admin
        # changed through any instance is the one this message meets (#40).
        in_force = await self.in_force(space.id)
        trigger = in_force.trigger
        said = without_trigger(message.text, trigger)
        if not message.is_dm and self._engine.is_link_code(said):
            # Everyone in a group saw the code: it is withdrawn, never run nor kept (#34).
            language = self._settings.defaults.language
            if person is not None:
                language, _zone = await self.language_and_zone(person)
            hint = await self._engine.withdraw_link_code(said, language)
            return Withdraw(hint if person is not None else None)
        if person is None:
            # Nor in a group: what they write is neither run nor kept as the ambient talk a
            # member's next turn shows the model, mentions included.
            return Stranger(pair=False)
        # A program's words never start a turn: they reach the model as ambient context
        # when a person next addresses it (core.spaces.bot_turns).
        matched = not message.from_bot and trigger.matches(
            message.text,
            is_dm=message.is_dm,
            is_reply_to_bot=message.is_reply_to_bot,
            has_attachments=bool(message.attachment_names),
        )
        command = command_of(message.text, trigger) if matched else None
        if self._bot_turns is not None and not message.from_bot:
            sender = await self._bot_turns.judge(
                space.id, caller_id, turn=matched and command is None
            )
            matched = matched and sender != "held"  # a bot loop past its bound: ambient
        if matched and addressed is not None:
            addressed()
        await self._spaces.open(space)
        await self._spaces.join(space.id, person.key, name=person.display_name)
        if not matched:
            await self._keep_ambient(message, in_force)
            return AmbientKept()
        language, zone = await self.language_and_zone(person)
        who = Addressed(
            principal=message.principal,
            person=person,
            space_id=space.id,
            conversation=message.conversation,
            key=self._engine.session_key(person, message.conversation, space.id),
            language=language,
            time_zone=zone,
            live_answers=in_force.live_answers,
        )
        # What the message is, judged once the trigger is taken out: a command, a token or a
        # link code said with the trigger is one all the same (``Mercury: k9m2-x7q4``).
        if command is not None:
            return Command(kind=command, who=who)
        text = said if self._engine.is_intercepted(said) else message.text
        decision = await self._engine.check_rate(
            person, text, space=space.id, limit=in_force.rate_limit
        )
        if decision is not None and not decision.allowed:
            return Refuse(who=who, retry_after_s=decision.retry_after_s)
        return Run(who=who, text=text, said=said)

    async def in_force(self, space_id: str) -> InForce:
        """The settings ``space_id``'s messages are routed by: its runtime values, else the
        file's, else the global ones (:mod:`core.spaces.settings`)."""
        if self._space_settings is None:
            return InForce.of(resolve(self._settings, space_id, {}))
        return await self._space_settings.in_force(space_id)

    async def may_stop(self, sender: str, caller_id: str, *, author: str, space_id: str) -> bool:
        """Whether ``sender`` (a person key; ``caller_id`` the account they write from) may
        stop a turn ``author`` asked for in the space ``space_id``: the one who asked, or an
        admin of *that* space, never of the space the stop was sent from. Every path that
        stops a turn asks this (the stop button, a typed ``stop``, another instance's ask)."""
        if may_stop(author, sender, admin=False):
            return True  # their own turn: no role to look up
        role = await self._spaces.role(space_id, sender, (caller_id,))
        return may_stop(author, sender, admin=role == "admin")

    async def space_turn(self, run: Run, *, is_dm: bool, author_name: str | None) -> SpaceTurn:
        """What the turn carries of its space: the sender's role, the space's preferences and
        the ambient talk kept since the last run (taken: each is shown once)."""
        who = run.who
        space_id = who.space_id
        caller_id = who.principal.user_key
        role = await self._spaces.role(space_id, who.person.key, (caller_id,))
        preferences = render_preferences(await self._preferences.list(space_id))
        ambient = render_ambient(await self._ambient.take(space_id))
        return SpaceTurn(
            space_id=space_id,
            conversation=who.conversation,
            is_dm=is_dm,
            caller_id=caller_id,
            author_name=author_name,
            role=role,
            preferences=preferences,
            ambient=ambient,
        )

    async def language_and_zone(self, person: Person) -> tuple[str, str]:
        """The person's saved language and time zone, else the instance's defaults."""
        saved = await self._person_settings.get(person.key)
        defaults = self._settings.defaults
        language = choose_language(saved.language, None, defaults.language)
        return language, choose_zone(saved.time_zone, None, defaults.time_zone)

    async def _keep_ambient(self, message: ChatMessage, in_force: InForce) -> None:
        text = message.text.strip()
        if self._engine.is_link_code(text):
            return  # never kept, so never shown to the model (issue #34)
        if not text and message.attachment_names:
            text = FILE_NOTE.format(names=", ".join(message.attachment_names))
        if not text:
            return
        await self._ambient.add(
            message.space.id,
            AmbientMessage(
                author_name=message.principal.display_name or message.caller_id,
                caller_id=message.caller_id,
                text=text,
                at=self._clock(),
            ),
            max_messages=in_force.ambient_max_messages,
            max_chars=in_force.ambient_max_chars,
        )
