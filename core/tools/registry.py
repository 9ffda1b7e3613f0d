"""Tools the model may call, the plugins that bring them, and who is offered what.

A :class:`Plugin` has a name, the plugin API version it is written for, its tools, its
skills (markdown the model reads) and whether it acts as Mercury or as the person. The
:class:`ToolRegistry` decides per person which plugins are offered (``access`` roles)
and builds the manifest a UI reads.

Exception tree::

    ToolError                 a tool could not do what it was asked (told to the model)
    ├── InvalidArguments      the model's arguments do not fit the tool's schema
    ├── LoginRequired         the person must log in to a service first (not a failure)
    └── InputRequired         the tool needs the person's answer first: staged with choices
        └── AnswerRefused     the person's typed answer doesn't fit: asked again
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import jsonschema
import msgspec

from core.model.port import ToolSpec
from core.people.principal import Person, Principal

if TYPE_CHECKING:
    from core.people.i18n import Translator
    from core.spaces.turn import SpaceTurn
    from core.tools.displays import Displays

ActsAs = Literal["mercury", "person"]


class ToolError(Exception):
    """A tool could not do what it was asked; the message is told to the model."""


class InvalidArguments(ToolError):
    """The model's arguments do not fit the tool's parameters."""


class LoginRequired(ToolError):
    """The person must log in to ``service`` at ``url``; the model is told only that."""

    def __init__(self, service: str, url: str) -> None:
        super().__init__(f"The person is not logged in to {service}.")
        self.service = service
        self.url = url


#: How a channel hands a sign-in link to the person alone (``service``, ``url``): True when
#: it reached them where nobody else reads it, False when it could not (they were told how
#: to get one). None on a channel that shows the link to its caller (``POST /chat``).
SignIn = Callable[[str, str], Awaitable[bool]]


class InputRequired(ToolError):
    """The tool asks the person something before it can go on (an MCP server's question).

    The call is staged again as ``arguments`` (which carry what the tool needs to resume),
    worded ``summary``, with ``choices`` (label, value); ``link`` (service, url) is also shown
    as a ``login`` link when the answer is given on another site.
    """

    def __init__(
        self,
        summary: str,
        choices: Sequence[tuple[str, str]],
        arguments: Mapping[str, Any],
        link: tuple[str, str] | None = None,
        ask: str | None = None,
    ) -> None:
        super().__init__(summary)
        self.summary = summary
        self.choices = tuple(choices)
        self.arguments = dict(arguments)
        self.link = link
        #: Set when the answer is typed, not chosen: what the model is told to ask in the
        #: conversation. The person's next message there is the answer, handed to the tool
        #: as :data:`REPLY` followed by the message in its choice argument.
        self.ask = ask


class AnswerRefused(InputRequired):
    """The person's typed answer doesn't fit the question: ``reason`` (a sentence in their
    language) is shown to them as it is, and the question is staged again."""

    def __init__(
        self,
        reason: str,
        summary: str,
        choices: Sequence[tuple[str, str]],
        arguments: Mapping[str, Any],
        ask: str,
    ) -> None:
        super().__init__(summary, choices, arguments, ask=ask)
        self.reason = reason


#: The value a typed answer arrives with in a staged tool's choice argument, the person's
#: message following it (``reply:Ada``); a choice's own value never starts with it.
REPLY: Final = "reply:"


@dataclass(frozen=True, slots=True)
class ToolCallContext:
    """What a tool knows about the call: who, where, in which language.

    ``displays`` collects what the turn shows the person verbatim (``present``); None
    where nothing can be shown (a confirmation answered outside a turn). ``space`` is the
    shared space the turn runs in, None for a person's own conversation. ``written``
    collects the outbox files the turn's tools wrote, by name, for its answer to carry
    (only its own, whatever other turns of the area write meanwhile); None outside a turn.
    ``sign_in`` delivers a sign-in link on a chat bridge (:data:`SignIn`).
    """

    principal: Principal
    person: Person
    session_key: str
    conversation_id: str | None
    translator: Translator
    displays: Displays | None = None
    space: SpaceTurn | None = None
    written: list[str] | None = None
    sign_in: SignIn | None = None

    @property
    def area(self) -> str:
        """Whose memory, files and wiki the call works on: the space's, or the person's."""
        return self.person.key if self.space is None else self.space.area


class ToolReply(msgspec.Struct, frozen=True):
    """A tool's answer with images for the model to see (base64), beside its text."""

    text: str
    images: tuple[str, ...] = ()


ToolRun = Callable[[ToolCallContext, Mapping[str, Any]], Awaitable["str | ToolReply"]]
ConfirmCheck = Callable[[ToolCallContext, Mapping[str, Any]], Awaitable[bool]]
Describe = Callable[[ToolCallContext, Mapping[str, Any]], str]
ChoicesFor = Callable[[ToolCallContext, Mapping[str, Any]], Sequence[tuple[str, str]]]


@dataclass(frozen=True, slots=True)
class Tool:
    """One function the model may call.

    ``label`` is a catalog msgid (the status line shown while it runs; ``%(tool)s`` is
    the tool's name). ``confirm`` says whether a call must be confirmed by the person
    first, always (``True``) or depending on its arguments (a check). A confirm-required
    call is staged; ``summary`` words what will happen, ``choices`` the ways to answer
    (label, value), the value going into the argument named ``choice_argument``.
    ``hands_back`` sends the confirmed action's result back to the model.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    run: ToolRun
    label: str = "Using %(tool)s…"
    detail: Callable[[Mapping[str, Any]], str] | None = None
    confirm: bool | ConfirmCheck = False
    summary: Describe | None = None
    choices: ChoicesFor | None = None
    choice_argument: str | None = None
    hands_back: bool = False
    #: The name a person reads in the status line (``%(tool)s`` of ``label``); the name if None.
    title: str | None = None
    #: Left out of a long tool list until a search loads it (:mod:`core.tools.tool_search`).
    deferrable: bool = False
    #: What the model is offered, built once: a turn used to build one per tool.
    spec: ToolSpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        spec = ToolSpec(self.name, self.description, dict(self.parameters))
        object.__setattr__(self, "spec", spec)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments, checked against the tool's JSON schema."""
        try:
            jsonschema.validate(dict(arguments), dict(self.parameters))
        except jsonschema.ValidationError as error:
            raise InvalidArguments(
                f"The arguments of {self.name} do not fit its parameters: {error.message}"
            ) from None
        return dict(arguments)

    async def needs_confirmation(
        self, context: ToolCallContext, arguments: Mapping[str, Any]
    ) -> bool:
        if isinstance(self.confirm, bool):
            return self.confirm
        return await self.confirm(context, arguments)


@dataclass(frozen=True, slots=True)
class Skill:
    """Markdown the model reads when the plugin is offered."""

    name: str
    text: str


@dataclass(frozen=True, slots=True)
class Plugin:
    """A named bundle of tools and skills."""

    name: str
    api_version: int
    tools: tuple[Tool, ...] = ()
    skills: tuple[Skill, ...] = ()
    acts_as: ActsAs = "mercury"
    builtin: bool = False
    has_build: bool = False
    custom_status: str | None = None
    login: Any = None  # a core.tools.logins.ServiceLogin for plugins acting as the person


class PluginSource(Protocol):
    """Plugins whose tools are known only at run time (an MCP server's), per person and place."""

    async def plugins_for(self, person: Person, space_id: str | None) -> Sequence[Plugin]:
        """The plugins ``person`` may use in ``space_id`` (None: their own conversation)."""
        ...


@dataclass(frozen=True, slots=True)
class ToolRegistry:
    """Every plugin the core hosts, and the access rules that decide who gets which."""

    plugins: tuple[Plugin, ...]
    access: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    sources: tuple[PluginSource, ...] = ()
    #: Past this many tools in a turn, deferrable tools are found by a search; None: never.
    tool_budget: int | None = None

    async def offer(
        self, person: Person, space: SpaceTurn | None = None
    ) -> dict[str, tuple[Plugin, Tool]]:
        """Every tool ``person`` is offered in ``space``: the hosted plugins' and the sources'.

        The sources' plugins obey ``access`` as the hosted ones do; a name already taken
        keeps its first tool.
        """
        offered = self.offered_tools(person)
        space_id = space.space_id if space is not None else None
        for source in self.sources:
            for plugin in await source.plugins_for(person, space_id):
                roles = self.access.get(plugin.name)
                if roles is not None and not person.roles.intersection(roles):
                    continue
                for tool in plugin.tools:
                    offered.setdefault(tool.name, (plugin, tool))
        return offered

    def offered_plugins(self, person: Person) -> list[Plugin]:
        """The plugins ``person`` is offered.

        Every plugin is offered to everyone unless ``access`` names it: then only to
        people holding one of its roles. Built-in plugins (wiki, memory, settings) can be
        gated the same way.
        """
        offered = []
        for plugin in self.plugins:
            roles = self.access.get(plugin.name)
            if roles is not None and not person.roles.intersection(roles):
                continue
            offered.append(plugin)
        return offered

    def offered_tools(self, person: Person) -> dict[str, tuple[Plugin, Tool]]:
        return {
            tool.name: (plugin, tool)
            for plugin in self.offered_plugins(person)
            for tool in plugin.tools
        }

    def manifest(self, person: Person, core_api_version: int) -> dict[str, Any]:
        plugins = self.offered_plugins(person)
        return {
            "coreApiVersion": core_api_version,
            "plugins": [
                {
                    "name": plugin.name,
                    "apiVersion": plugin.api_version,
                    "active": True,
                    "skills": [skill.name for skill in plugin.skills],
                    "hasBuild": plugin.has_build,
                    "customStatus": plugin.custom_status,
                }
                for plugin in plugins
            ],
            "activeClis": [],
            "skills": [skill.name for plugin in plugins for skill in plugin.skills],
        }


def detail_of(
    arguments: Mapping[str, Any], keys: Sequence[str] = ("command", "path", "pattern")
) -> str:
    """The salient argument of a call for its status line, capped at 300 characters."""
    for key in keys:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            return cap(value)
    return cap(msgspec.json.encode(dict(arguments)).decode())


def cap(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def headline(text: str, limit: int = 80) -> str:
    """``text``'s first non-blank line for a status line: at most ``limit`` characters, and
    an ellipsis where it was cut or more lines follow."""
    lines = [line.strip() for line in text.strip().splitlines()]
    first = lines[0] if lines else ""
    if len(first) > limit:
        return first[: limit - 1].rstrip() + "…"
    return first + "…" if len(lines) > 1 else first
