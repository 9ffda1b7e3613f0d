"""The configured MCP servers as plugins: their connections, their tools, who gets them.

:class:`McpServers` is a :class:`~core.tools.registry.PluginSource`. For each server it keeps
one connection (a server with ``auth: oauth`` gets one per person, signed in as them through
:class:`~core.tools.mcp.oauth.McpSignIn`) and builds a plugin named for the server whose tools
are the server's, offered as ``<server>_<tool>``:

- a tool passes the server's ``tools.allow`` / ``tools.deny`` globs; its description (cut at
  1,000 characters) and input schema (at most 16 kB of JSON) are data in the tool list, never
  part of the instructions;
- a call is confirmed first (Confirm / Cancel, the tool's title and its salient arguments as
  the command) unless the server's rule for it is ``never``, or ``auto`` and the tool is
  read-only by its annotations on a ``trusted`` server; nothing reaches the server before;
- a question the server asks (2026-07-28 ``input_required``) is staged with choices
  (:mod:`core.tools.mcp.elicitation`) and the call retried with the answer after ``/confirm``,
  or, for free-text fields, after the person's next message in the conversation;
- a call whose connection broke is retried once only when the tool is read-only or
  idempotent on a trusted server; otherwise the model is told it is unknown whether it ran.

Which people and places: ``roles`` are the registry's ``access`` for the plugin (the
composition root passes them), ``spaces`` is checked here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import mcp_types as types
import msgspec

from core.observe.telemetry import span
from core.people.i18n import N_
from core.tools.mcp.connection import McpConnection, McpOutcomeUnknown, McpUnavailable
from core.tools.mcp.elicitation import (
    ANSWER,
    INPUT,
    answer_of,
    question_for,
    question_of,
    read_reply,
    responses_for,
)
from core.tools.mcp.oauth import McpSignIn, OAuthTarget
from core.tools.mcp.questions import OpenQuestions, Parked
from core.tools.mcp.results import reply_of
from core.tools.registry import (
    REPLY,
    InvalidArguments,
    Plugin,
    Tool,
    ToolCallContext,
    ToolError,
    ToolReply,
    cap,
)
from core.version import PLUGIN_API_VERSION

if TYPE_CHECKING:
    from core.config.mcp import McpServerConfig
    from core.observe.metrics import Metrics
    from core.people.principal import Person

log = logging.getLogger("mercury.mcp")

__all__ = ["DESCRIPTION_MAX_CHARS", "PEOPLE_MAX", "SCHEMA_MAX_BYTES", "McpServers", "ServerHealth"]

DESCRIPTION_MAX_CHARS: Final = 1000
#: People whose own connection (and tool list) to one ``auth: oauth`` server are kept.
PEOPLE_MAX: Final = 256
SCHEMA_MAX_BYTES: Final = 16_384
_TOOL_NAME: Final = re.compile(r"[^A-Za-z0-9_-]")
_ENCODER: Final = msgspec.json.Encoder()
#: A retry after a broken connection waits at most this long for the breaker.
_RETRY_WAIT: Final = 2.0
Outcome = Literal["success", "error", "unavailable", "unknown", "cancelled", "declined"]


class ServerHealth(msgspec.Struct, frozen=True, kw_only=True):
    """One server as ``/health`` reports it."""

    name: str
    transport: str
    status: str
    protocol: str | None = None
    tools: int | None = None
    error: str | None = None


class McpServers:
    """Every configured MCP server, as plugins per person and place."""

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        *,
        sign_in: McpSignIn | None = None,
        metrics: Metrics | None = None,
        targets: Mapping[str, Any] | None = None,
        people_max: int = PEOPLE_MAX,
    ) -> None:
        """``targets`` stands in for a server's URL or command (an in-process server in tests)."""
        self.servers = dict(servers)
        self.sign_in = sign_in
        self.metrics = metrics
        self.targets = dict(targets or {})
        self._shared: dict[str, McpConnection] = {}
        #: The people's own connections (``auth: oauth``), least recently used first; each
        #: holds that person's tool list, so a list the server scopes to the person (every
        #: list read with their token) is never handed to anyone else.
        self._personal: OrderedDict[tuple[str, str], McpConnection] = OrderedDict()
        #: How many people's connections (and lists) are kept per server; past it the least
        #: recently used idle one is closed, and that person's next turn reads their list anew.
        self.people_max = people_max
        self._closing: set[asyncio.Task[None]] = set()
        self._plugins: dict[tuple[str, str | None], tuple[tuple[types.Tool, ...], Plugin]] = {}
        self._warming: asyncio.Task[None] | None = None
        self.questions = OpenQuestions()

    # --- connections --------------------------------------------------------------------

    def connection(self, name: str, person_key: str | None) -> McpConnection:
        """The connection to ``name``: shared, or ``person_key``'s own for ``auth: oauth``."""
        server = self.servers[name]
        if server.auth != "oauth":
            shared = self._shared.get(name)
            if shared is None:
                shared = self._shared[name] = self._connect(server, None)
            return shared
        if person_key is None:
            raise ToolError(f"The MCP server {server.title} is used signed in as a person.")
        own = self._personal.get((name, person_key))
        if own is None:
            own = self._personal[(name, person_key)] = self._connect(server, person_key)
        else:
            self._personal.move_to_end((name, person_key))
        self._bound(name)
        return own

    def _bound(self, name: str) -> None:
        """Keep at most ``people_max`` people's connections to ``name``: the least recently
        used idle ones beyond it are closed (one with a call in flight, or a question
        waiting on it, stays until it is done)."""
        held = [key for key in self._personal if key[0] == name]
        excess = len(held) - self.people_max
        for key in held:
            if excess <= 0:
                break
            connection = self._personal[key]
            if self.questions.busy(connection):
                continue
            del self._personal[key]
            self._plugins.pop(key, None)
            closing = asyncio.get_running_loop().create_task(connection.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
            excess -= 1

    def _connect(self, server: McpServerConfig, person_key: str | None) -> McpConnection:
        authorization = challenged = None
        if server.auth == "oauth" and person_key is not None:
            sign_in = self.sign_in
            if sign_in is None:
                raise ToolError(
                    f"The MCP server {server.title} needs a sign-in, which needs "
                    "MERCURY_SECRET_KEY; tell the person an administrator must set it."
                )
            target = OAuthTarget(
                server=server.name,
                title=server.title,
                url=server.url or "",
                allowed_hosts=server.allowed_hosts,
                client_id=server.client_id,
                client_secret=server.client_secret,
                scopes=server.scopes,
            )
            key = person_key

            async def authorization_header() -> str | None:
                return await sign_in.authorization(key, target)

            async def on_challenge(status: int, header: str | None) -> None:
                await sign_in.challenged(key, target, status, header)

            authorization, challenged = authorization_header, on_challenge
        connection = McpConnection(
            server,
            target=self.targets.get(server.name),
            authorization=authorization,
            challenged=challenged,
            metrics=self.metrics,
        )
        # 2025-11-25: a question asked mid-call waits for the person, bounded within the
        # call's own timeout so the server hears "cancel" before the call times out.
        connection.elicitation = self.questions.callback(connection, server.timeout * 0.8)
        return connection

    async def warm(self) -> None:
        """Connect to every shared server and list its tools, in parallel; failures are kept."""

        async def one(name: str) -> None:
            try:
                await self.connection(name, None).tools()
            except ToolError as error:
                log.warning("MCP server %s is not available yet: %s", name, error)

        await asyncio.gather(
            *(one(n) for n, s in self.servers.items() if s.auth != "oauth"),
            return_exceptions=True,
        )

    def start_warming(self) -> None:
        """Warm every shared server in the background: start-up never waits on a server."""
        if self._warming is None:
            self._warming = asyncio.create_task(self.warm(), name="mcp:warm")

    async def close(self) -> None:
        if self._warming is not None:
            self._warming.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._warming
        connections = [*self._shared.values(), *self._personal.values()]
        self._shared.clear()
        self._personal.clear()
        await asyncio.gather(
            *(c.close() for c in connections), *self._closing, return_exceptions=True
        )

    async def probe(self) -> dict[str, str | None]:
        """Per server, None when it answers a tool list now, else why not (for check-config)."""
        answers: dict[str, str | None] = {}

        async def one(name: str) -> None:
            if self.servers[name].auth == "oauth":
                answers[name] = None
                return
            connection = self.connection(name, None)
            try:
                tools = await connection.tools()
            except ToolError as error:
                answers[name] = str(error)
                return
            answers[name] = None
            log.info("MCP server %s answers: %d tools", name, len(tools))

        await asyncio.gather(*(one(name) for name in sorted(self.servers)))
        await self.close()
        return dict(sorted(answers.items()))

    def health(self) -> list[ServerHealth]:
        """Each server's state as the shared connection (or the people's) last saw it."""
        report = []
        for name, server in sorted(self.servers.items()):
            if server.auth == "oauth":
                own = [c for (n, _), c in self._personal.items() if n == name]
                up = sum(c.connected for c in own)
                report.append(
                    ServerHealth(
                        name=name,
                        transport=server.transport,
                        status="per-person",
                        error=f"{up} of {len(own)} people's connections up" if own else None,
                    )
                )
                continue
            connection = self._shared.get(name)
            if connection is None:
                report.append(ServerHealth(name=name, transport=server.transport, status="idle"))
                continue
            cached = connection._tools
            report.append(
                ServerHealth(
                    name=name,
                    transport=server.transport,
                    status=connection.status(),
                    protocol=connection.protocol_version,
                    tools=len(cached) if cached is not None else None,
                    error=connection.last_error,
                )
            )
        return report

    # --- plugins ------------------------------------------------------------------------

    async def plugins_for(self, person: Person, space_id: str | None) -> Sequence[Plugin]:
        plugins = []
        for name, server in self.servers.items():
            if not server.serves_in(space_id):
                continue
            if server.roles is not None and not person.roles.intersection(server.roles):
                continue
            person_key = person.key if server.auth == "oauth" else None
            connection = self.connection(name, person_key)
            try:
                listed = await connection.tools()
            except ToolError as error:
                # A server that is down, or a person not signed in yet: its tools are not
                # offered this turn; the turn goes on with the others.
                log.info("MCP server %s offers no tools now: %s", name, error)
                if person_key is not None and connection.status() == "idle":
                    plugins.append(self._sign_in_plugin(server))
                continue
            plugins.append(self._plugin(server, person_key, listed))
        return plugins

    def _plugin(
        self, server: McpServerConfig, person_key: str | None, listed: tuple[types.Tool, ...]
    ) -> Plugin:
        key = (server.name, person_key)
        cached = self._plugins.get(key)
        if cached is not None and cached[0] is listed:
            return cached[1]
        tools = tuple(self._tool(server, tool) for tool in listed if server.offers(tool.name))
        plugin = Plugin(
            name=server.name,
            api_version=PLUGIN_API_VERSION,
            tools=tools,
            acts_as="person" if server.auth == "oauth" else "mercury",
        )
        self._plugins[key] = (listed, plugin)
        return plugin

    def _sign_in_plugin(self, server: McpServerConfig) -> Plugin:
        """For a person not signed in yet: one tool that asks them to, so the model can."""

        async def run(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
            connection = self.connection(server.name, context.person.key)
            tools = await connection.tools()  # raises LoginRequired while not signed in
            return (
                f"Signed in to {server.title}; {len(tools)} tools are offered from the next turn."
            )

        tool = Tool(
            name=_tool_name(server.name, "sign_in"),
            description=(
                f"Sign the person in to {server.title}, whose tools need their own account. "
                "Call it when they ask for something there."
            ),
            parameters={"type": "object", "properties": {}, "additionalProperties": False},
            run=run,
            title=f"{server.title}: sign in",
        )
        return Plugin(
            name=server.name, api_version=PLUGIN_API_VERSION, tools=(tool,), acts_as="person"
        )

    def _tool(self, server: McpServerConfig, listed: types.Tool) -> Tool:
        annotations = listed.annotations
        read_only = bool(annotations and annotations.read_only_hint)
        idempotent = bool(annotations and annotations.idempotent_hint)
        rule = server.rule_for(listed.name)
        confirm = rule == "always" or (rule == "auto" and not (read_only and server.trusted))
        title = listed.title or (annotations.title if annotations else None) or listed.name
        shown = f"{server.title}: {title}"
        description = (
            cap(listed.description or title, DESCRIPTION_MAX_CHARS)
            + f" (from the MCP server {server.title})"
        )
        parameters = _bounded_schema(listed.input_schema)
        retry_safe = server.trusted and (read_only or idempotent)
        remote = listed.name
        servers = self

        async def run(context: ToolCallContext, arguments: Mapping[str, Any]) -> ToolReply | str:
            arguments = dict(arguments)
            answer = arguments.pop(ANSWER, None)
            asked = arguments.pop(INPUT, None)
            if asked is None and answer == "cancel":
                return f"The person cancelled; nothing was sent to {server.title}."
            if isinstance(asked, Mapping) and isinstance(answer, str) and answer.startswith(REPLY):
                # Their message answers a question asked in the conversation: checked
                # against the form first (AnswerRefused asks again), then it is a choice.
                answer = read_reply(
                    server.title,
                    asked,
                    answer.removeprefix(REPLY),
                    arguments,
                    context.translator,
                )
            if isinstance(asked, Mapping) and "open" in asked:
                return await servers._answer(server, context, arguments, asked, answer)
            responses, state = (
                responses_for(asked, answer) if isinstance(asked, Mapping) else (None, None)
            )
            return await servers._call(
                server, remote, context, arguments, responses, state, retry_safe=retry_safe
            )

        def detail(arguments: Mapping[str, Any]) -> str:
            return _salient(arguments)

        def summary(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
            salient = _salient(arguments)
            return cap(f"{shown} — {salient}" if salient else shown, 300)

        def choices(
            context: ToolCallContext, arguments: Mapping[str, Any]
        ) -> list[tuple[str, str]]:
            gettext = context.translator.gettext
            return [(gettext("Confirm"), "confirm"), (gettext("Cancel"), "cancel")]

        async def needs(context: ToolCallContext, arguments: Mapping[str, Any]) -> bool:
            if server.auth == "oauth":
                # Ask for the sign-in before staging, not after the person confirmed in vain.
                await self.connection(server.name, context.person.key).client()
            return confirm

        return _McpTool(
            name=_tool_name(server.name, listed.name),
            description=description,
            parameters=parameters,
            run=run,
            label=N_("Using %(tool)s…"),
            detail=detail,
            confirm=needs if server.auth == "oauth" else confirm,
            summary=summary,
            choices=choices,
            choice_argument=ANSWER,
            hands_back=True,
            title=shown,
            deferrable=True,
        )

    async def _answer(
        self,
        server: McpServerConfig,
        context: ToolCallContext,
        arguments: dict[str, Any],
        asked: Mapping[str, Any],
        answer: str | None,
    ) -> ToolReply | str:
        """The person's answer to a 2025-11-25 question, handed to the call still open."""
        result = await self.questions.resume(
            str(asked["open"]), context.person.key, answer_of(asked, answer)
        )
        if isinstance(result, Parked):
            raise question_for(
                server.title, result.params, {"open": result.id}, arguments, context.translator
            )
        if self.metrics is not None:
            self.metrics.mcp_calls.labels(server.name, "success").inc()
        return reply_of(server.title, result)

    async def _call(
        self,
        server: McpServerConfig,
        remote: str,
        context: ToolCallContext,
        arguments: dict[str, Any],
        responses: Mapping[str, Any] | None,
        state: str | None,
        *,
        retry_safe: bool,
    ) -> ToolReply | str:
        person_key = context.person.key if server.auth == "oauth" else None
        connection = self.connection(server.name, person_key)
        started = time.perf_counter()
        outcome: Outcome = "error"
        try:
            with span(
                "mcp.tools.call",
                **{
                    "mcp.method.name": "tools/call",
                    "mcp.server": server.name,
                    "gen_ai.tool.name": remote,
                    "gen_ai.operation.name": "execute_tool",
                },
            ):

                async def start() -> types.CallToolResult | types.InputRequiredResult:
                    try:
                        return await connection.call(
                            remote, arguments, input_responses=responses, request_state=state
                        )
                    except McpOutcomeUnknown:
                        if not retry_safe:
                            raise
                        # Read-only or idempotent on a trusted server: once more, on a new
                        # connection, after at most a short wait for the breaker.
                        wait = connection._retry_at - connection.clock()
                        await asyncio.sleep(min(_RETRY_WAIT, max(0.0, wait)))
                        return await connection.call(
                            remote, arguments, input_responses=responses, request_state=state
                        )

                result = await self.questions.run(connection, context.person.key, start)
            if isinstance(result, Parked):
                outcome = "success"
                raise question_for(
                    server.title, result.params, {"open": result.id}, arguments, context.translator
                )
            if isinstance(result, types.InputRequiredResult):
                outcome = "success"
                raise question_of(server.title, result, arguments, context.translator)
            reply = reply_of(server.title, result)
            outcome = "success"
            return reply
        except McpOutcomeUnknown:
            outcome = "unknown"
            raise
        except McpUnavailable:
            outcome = "unavailable"
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            if self.metrics is not None:
                self.metrics.mcp_calls.labels(server.name, outcome).inc()
                self.metrics.mcp_call_seconds.labels(server.name).observe(
                    time.perf_counter() - started
                )


@dataclass(frozen=True, slots=True)
class _McpTool(Tool):
    """An MCP server's tool: the model's arguments never carry what only a staging may."""

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        if any(str(key).startswith("__mcp") for key in arguments):
            # The staged answer and question state come from the confirmation store alone:
            # from the model they could answer a question for someone else.
            raise InvalidArguments(f"The arguments of {self.name} name a reserved key.")
        return Tool.validate(self, arguments)


def _tool_name(server: str, tool: str) -> str:
    """``<server>_<tool>`` with only the characters model APIs accept, at most 64."""
    return _TOOL_NAME.sub("_", f"{server}_{tool}")[:64]


def _bounded_schema(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    if not schema:
        return {"type": "object"}
    if len(_ENCODER.encode(schema)) > SCHEMA_MAX_BYTES:
        return {"type": "object", "description": "The schema was too large to show."}
    bounded = dict(schema)
    bounded.setdefault("type", "object")
    return bounded


def _salient(arguments: Mapping[str, Any]) -> str:
    """The arguments a person reads in a confirmation: short values, first few keys."""
    parts = []
    for key, value in list(arguments.items())[:4]:
        if key.startswith("__mcp"):
            continue
        shown = value if isinstance(value, str) else _ENCODER.encode(value).decode()
        parts.append(f"{key}={cap(str(shown), 60)}")
    return ", ".join(parts)
