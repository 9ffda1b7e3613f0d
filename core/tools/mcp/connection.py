"""One live connection to one MCP server, kept open and reopened with a circuit breaker.

:class:`McpConnection` owns an SDK :class:`mcp.Client` inside a task of its own (the SDK's
client is an anyio context that must be entered and left by the same task), so any turn can
call through it and a dead connection is dropped and reopened without the callers noticing
more than a clear error. Reconnecting backs off per connection (0.5 s, doubling to 30 s, with
jitter): while the breaker is open a call fails at once instead of storming the server.

The list of tools is cached on the connection, ordered by name; a ``tools/list_changed``
notification (or a ``subscriptions/listen`` event on 2026-07-28) marks it stale so the next
look refreshes it, and a turn never lists once it is warm.

Exceptions::

    ToolError (core.tools.registry)
    └── McpUnavailable           the server can't be reached now (down, slow to connect,
        │                        breaker open); nothing was sent
        └── McpOutcomeUnknown    the connection broke while a call was in flight
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from core.tools.registry import ToolError
from core.version import __version__

if TYPE_CHECKING:
    from core.config.mcp import McpServerConfig
    from core.observe.metrics import Metrics

log = logging.getLogger("mercury.mcp")

__all__ = ["Authorization", "McpConnection", "McpOutcomeUnknown", "McpUnavailable"]

_BACKOFF_FIRST: Final = 0.5
_BACKOFF_MAX: Final = 30.0
#: Pages of tools/list read at most: a server whose cursor never ends can't hang a turn.
_LIST_PAGES: Final = 20
#: JSON-RPC errors that mean the connection, not the call, failed.
_BROKEN_CODES: Final = frozenset({types.CONNECTION_CLOSED})

#: Returns the ``Authorization`` header to send now (None: none); may raise LoginRequired.
Authorization = Callable[[], Awaitable[str | None]]
ElicitationCallback = Callable[[Any, Any], Awaitable[Any]]


class McpUnavailable(ToolError):
    """The server can't be reached now; nothing was sent."""


class McpOutcomeUnknown(McpUnavailable):
    """The connection broke while the call was in flight: it may or may not have run."""


class _Challenge:
    """What the server last answered with a 401/403, for the sign-in to read."""

    __slots__ = ("header", "status")

    def __init__(self) -> None:
        self.status: int | None = None
        self.header: str | None = None


class _BearerAuth(httpx2.Auth):
    """Sets the connection's current Authorization header on every request it sends."""

    def __init__(self, holder: dict[str, str]) -> None:
        self.holder = holder

    def auth_flow(self, request: httpx2.Request) -> Any:
        value = self.holder.get("authorization")
        if value:
            request.headers["Authorization"] = value
        yield request


class McpConnection:
    """The connection to one server, for Mercury (shared) or for one person (``auth: oauth``)."""

    def __init__(
        self,
        server: McpServerConfig,
        *,
        target: Any = None,
        authorization: Authorization | None = None,
        challenged: Callable[[int, str | None], Awaitable[Any]] | None = None,
        elicitation: ElicitationCallback | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server = server
        #: What the SDK connects to; a configured URL or command when None (tests pass an
        #: in-process server here).
        self.target = target
        self.authorization = authorization
        #: Called after a 401/403 (raises LoginRequired); None: the credentials are refused.
        self.challenged = challenged
        self.elicitation = elicitation
        self.metrics = metrics
        self.clock = clock
        self.challenge = _Challenge()
        self._headers: dict[str, str] = {}
        self._client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._failures = 0
        self._retry_at = 0.0
        self._opened = 0
        self._tools: tuple[types.Tool, ...] | None = None
        self._tools_lock = asyncio.Lock()
        self.last_error: str | None = None
        #: How many tools/list calls this connection made (the bench reads it).
        self.list_calls = 0

    # --- state ------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._client is not None

    @property
    def protocol_version(self) -> str | None:
        client = self._client
        return client.protocol_version if client is not None else None

    def status(self) -> str:
        """``up``, ``down`` (the breaker is open) or ``idle`` (not connected yet)."""
        if self._client is not None:
            return "up"
        return "down" if self._failures else "idle"

    # --- connecting -------------------------------------------------------------------

    async def client(self) -> Client:
        """The live client, connecting first; raises McpUnavailable while the breaker is open."""
        if self.authorization is not None:
            header = await self.authorization()
            if header:
                self._headers["authorization"] = header
        client = self._client
        if client is not None:
            return client
        async with self._lock:
            if self._client is not None:
                return self._client
            wait = self._retry_at - self.clock()
            if wait > 0:
                raise McpUnavailable(
                    f"The MCP server {self.server.title} is unavailable "
                    f"({self.last_error or 'it failed just now'}); Mercury tries again in "
                    f"{max(1, round(wait))} s. Tell the person, and don't retry at once."
                )
            return await self._open()

    async def _open(self) -> Client:
        if self._opened and self.metrics is not None:
            self.metrics.mcp_reconnects.labels(self.server.name).inc()
        self._opened += 1
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Client] = loop.create_future()
        stop = asyncio.Event()
        runner = asyncio.create_task(self._run(ready, stop), name=f"mcp:{self.server.name}")
        try:
            async with asyncio.timeout(self.server.connect_timeout):
                client = await asyncio.shield(ready)
        except (TimeoutError, Exception) as error:
            stop.set()
            runner.cancel()
            await self._raise_challenge()
            reason = (
                f"no answer within {self.server.connect_timeout:g} s"
                if isinstance(error, TimeoutError)
                else _reason(error)
            )
            self._failed(reason)
            raise McpUnavailable(
                f"The MCP server {self.server.title} can't be reached ({reason}); tell the "
                "person, and don't retry at once."
            ) from None
        except asyncio.CancelledError:
            stop.set()
            runner.cancel()
            raise
        self._client, self._stop, self._runner = client, stop, runner
        self._failures, self.last_error = 0, None
        return client

    async def _run(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Hold the SDK client open until ``stop`` is set or the connection ends."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = await self._transport(stack)
                client = Client(
                    transport,
                    mode=self.server.protocol,
                    read_timeout_seconds=self.server.timeout,
                    elicitation_callback=self.elicitation,  # type: ignore[arg-type]
                    message_handler=self._on_message,
                    client_info=types.Implementation(name="mercury", version=__version__),
                    cache=None,  # Mercury keeps the lists itself, invalidated on change
                )
                await stack.enter_async_context(client)
                listening = await self._listen(client, stack)
                if not ready.done():
                    ready.set_result(client)
                if listening is not None:
                    await _first(stop.wait(), listening)
                else:
                    await stop.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # an ExceptionGroup from the SDK's task groups too
            if not ready.done():
                ready.set_exception(RuntimeError(_reason(error)))
            elif not stop.is_set():  # a connection dropped on purpose was counted already
                log.warning("MCP server %s: connection ended: %s", self.server.name, _reason(error))
                self._failed(_reason(error))
        finally:
            if self._client is not None and self._stop is stop:
                self._client = None
                self._tools = None

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        if self.target is not None:
            return self.target
        server = self.server
        if server.url is None:
            return StdioServerParameters(
                command=server.command or "",
                args=list(server.args),
                env=dict(server.env_values) or None,
                cwd=server.cwd,
            )
        headers = dict(server.header_values)
        if server.bearer:
            self._headers["authorization"] = f"Bearer {server.bearer}"
        challenge = self.challenge

        async def remember(response: httpx2.Response) -> None:
            if response.status_code in (401, 403):
                challenge.status = response.status_code
                challenge.header = response.headers.get("www-authenticate")

        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=headers,
                auth=_BearerAuth(self._headers),
                timeout=httpx2.Timeout(server.connect_timeout, read=max(server.timeout, 60.0)),
                event_hooks={"response": [remember]},
            )
        )
        return streamable_http_client(server.url, http_client=http)

    async def _listen(self, client: Client, stack: contextlib.AsyncExitStack) -> Any:
        """On 2026-07-28, a subscription to tool list changes when the server offers it."""
        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return None
        tools = client.server_capabilities.tools
        if tools is None or not tools.list_changed:
            return None
        try:
            subscription = await stack.enter_async_context(client.listen(tools_list_changed=True))
        except Exception as error:
            log.info("MCP server %s: no change subscription: %s", self.server.name, error)
            return None

        async def events() -> None:
            async for _event in subscription:
                self._tools = None

        return events()

    def _failed(self, reason: str) -> None:
        self._failures += 1
        self.last_error = reason
        backoff = min(_BACKOFF_MAX, _BACKOFF_FIRST * 2 ** (self._failures - 1))
        self._retry_at = self.clock() + backoff * random.uniform(0.8, 1.2)  # noqa: S311

    def broken(self, reason: str) -> None:
        """Drop the connection after a failure; the next call reconnects after the backoff."""
        stop = self._stop
        self._client = None
        self._tools = None
        self._stop = None
        if stop is not None:
            stop.set()
        self._failed(reason)

    async def close(self) -> None:
        stop, runner = self._stop, self._runner
        self._client = self._stop = self._runner = None
        if stop is not None:
            stop.set()
        if runner is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                async with asyncio.timeout(5):
                    await runner
            if not runner.done():
                runner.cancel()

    # --- messages ---------------------------------------------------------------------

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message, types.ToolListChangedNotification
        ):
            self._tools = None
        elif isinstance(message, Exception):
            log.info("MCP server %s: %s", self.server.name, _reason(message))

    # --- calls ------------------------------------------------------------------------

    async def tools(self) -> tuple[types.Tool, ...]:
        """The server's tools, ordered by name: cached, listed again only after a change."""
        cached = self._tools
        if cached is not None:
            return cached
        async with self._tools_lock:
            if self._tools is not None:
                return self._tools
            client = await self.client()
            listed: list[types.Tool] = []
            cursor: str | None = None
            try:
                for _ in range(_LIST_PAGES):
                    self.list_calls += 1
                    page = await client.list_tools(cursor=cursor)
                    listed.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
            except MCPError as error:
                await self._raise_for(error, sent=False)
            except Exception as error:
                self.broken(_reason(error))
                raise McpUnavailable(
                    f"The MCP server {self.server.title} failed to list its tools "
                    f"({_reason(error)})."
                ) from None
            tools = tuple(sorted(listed, key=lambda tool: tool.name))
            if self._client is client:
                self._tools = tools
            return tools

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        input_responses: Mapping[str, Any] | None = None,
        request_state: str | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Call ``name``; an answer that asks for input is returned for the caller to stage."""
        client = await self.client()
        try:
            async with asyncio.timeout(self.server.timeout + 1):
                result = await client.session.call_tool(
                    name,
                    dict(arguments),
                    read_timeout_seconds=self.server.timeout,
                    input_responses=dict(input_responses) if input_responses else None,  # type: ignore[arg-type]
                    request_state=request_state,
                    allow_input_required=True,
                )
        except MCPError as error:
            await self._raise_for(error, sent=True)
        except TimeoutError:
            raise McpOutcomeUnknown(
                f"The MCP server {self.server.title} didn't answer within "
                f"{self.server.timeout:g} s; it is unknown whether {name} ran."
            ) from None
        except (asyncio.CancelledError, ToolError):
            raise
        except Exception as error:
            self.broken(_reason(error))
            raise McpOutcomeUnknown(
                f"The connection to the MCP server {self.server.title} broke during the call "
                f"({_reason(error)}); it is unknown whether {name} ran."
            ) from None
        if not isinstance(result, types.CallToolResult | types.InputRequiredResult):
            raise ToolError(
                f"The MCP server {self.server.title} answered in a shape Mercury can't read."
            )
        return result

    async def _raise_challenge(self) -> None:
        """After a 401/403: the sign-in takes over (LoginRequired), or the credentials fail."""
        status, header = self.challenge.status, self.challenge.header
        if status is None:
            return
        self.challenge.status = self.challenge.header = None
        if self.challenged is not None:
            self._headers.pop("authorization", None)
            await self.challenged(status, header)
        raise ToolError(
            f"The MCP server {self.server.title} refused Mercury's credentials (HTTP {status}); "
            "tell the person an administrator must check its configuration."
        )

    async def _raise_for(self, error: MCPError, *, sent: bool) -> Any:
        await self._raise_challenge()
        code = error.error.code
        if code == types.REQUEST_TIMEOUT:
            raise McpOutcomeUnknown(
                f"The MCP server {self.server.title} didn't answer within "
                f"{self.server.timeout:g} s; it is unknown whether the call ran."
            ) from None
        if (
            code in _BROKEN_CODES
            or (code == types.INVALID_REQUEST and "terminated" in error.error.message.lower())
            or (
                code == types.INTERNAL_ERROR
                and "server returned an error" in error.error.message.lower()
            )
        ):
            self.broken(error.error.message)
            kind = McpOutcomeUnknown if sent else McpUnavailable
            tail = " It is unknown whether the call ran." if sent else ""
            raise kind(
                f"The connection to the MCP server {self.server.title} failed "
                f"({error.error.message}).{tail}"
            ) from None
        raise ToolError(
            f"The MCP server {self.server.title} refused the call: {error.error.message}"
        ) from None


async def _first(*awaitables: Awaitable[Any]) -> None:
    """Wait until the first of ``awaitables`` ends; cancel the others."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def _reason(error: BaseException) -> str:
    """A short reason for a failure, the innermost of an exception group."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    name = type(error).__name__
    return f"{name}: {text}"[:200] if text else name
