"""A plugin made of a declared REST service: each operation becomes a tool calling it.

The configuration file declares a service (its name, base URL and, when it acts as the
person, its OAuth 2.0 login) and its operations (name, description, method, path template,
JSON-schema parameters, whether a call must be confirmed). :func:`rest_plugin` turns it into a
:class:`~core.tools.registry.Plugin` whose tool ``<service>_<operation>`` calls
``base_url + path``:

- ``{name}`` placeholders in the path are filled from the arguments of the same name, each
  percent-encoded whole (``/`` included), and ``.``, ``..`` or empty values are refused, so
  an argument can never leave the path the operator wrote;
- the other arguments go in the query string (``GET``, ``DELETE``) or a JSON body;
- a service with a login is called with ``Authorization: Bearer <the person's token>``;
  a 401 refreshes the token once and retries, and a second 401 forgets the tokens and asks
  the person to log in again (:class:`~core.tools.registry.LoginRequired`);
- the model reads ``HTTP <status>`` and the response body, cut at 4,000 characters.

Exceptions::

    ConfigurationError (core.config.settings)  a path placeholder the parameters don't declare
    ToolError (core.tools.registry)    the service couldn't be reached (told to the model)
    ├── InvalidArguments               a path argument is missing or would escape the path
    └── LoginRequired                  the person must log in to the service first
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

import httpx
import msgspec

from core.config.settings import ConfigurationError
from core.tools.logins import Logins, ServiceLogin
from core.tools.registry import (
    ConfirmCheck,
    InvalidArguments,
    LoginRequired,
    Plugin,
    Tool,
    ToolCallContext,
    ToolError,
)
from core.version import PLUGIN_API_VERSION

if TYPE_CHECKING:
    from core.config.settings import RestOperation, RestService

__all__ = ["RESULT_MAX_CHARS", "rest_plugin"]

#: How much of a response body the model reads.
RESULT_MAX_CHARS: Final = 4000
_PLACEHOLDER: Final = re.compile(r"\{([^{}/]+)\}")
_QUERY_METHODS: Final = frozenset({"GET", "DELETE"})
_ENCODER: Final = msgspec.json.Encoder()


def rest_plugin(
    service: RestService,
    logins: Logins | None = None,
    *,
    timeout_s: float = 30.0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Plugin:
    """The plugin for ``service``; declares its login (if any) with ``logins``.

    Raises ConfigurationError when the service has a login and no ``logins`` is given, when
    ``logins`` refuses it (no MERCURY_SECRET_KEY), or when a path names an undeclared
    parameter.
    """
    login = ServiceLogin.of(service)
    if login is not None:
        if logins is None:
            raise ConfigurationError(
                f"The service {service.name!r} declares a login, but no login service was "
                "given to its plugin; build it with rest_plugin(service, logins)."
            )
        logins.declare(login)
    caller = _Caller(service, logins if login is not None else None, timeout_s, transport)
    tools = tuple(_tool(service, operation, caller) for operation in service.operations)
    return Plugin(
        name=service.name,
        api_version=PLUGIN_API_VERSION,
        tools=tools,
        acts_as="person" if login is not None else "mercury",
        login=login,
    )


def _tool(service: RestService, operation: RestOperation, caller: _Caller) -> Tool:
    parameters = dict(operation.parameters)
    properties = parameters.get("properties") or {}
    placeholders = _PLACEHOLDER.findall(operation.path)
    for name in placeholders:
        if name not in properties:
            raise ConfigurationError(
                f"The path {operation.path!r} of the operation {operation.name!r} of the service "
                f"{service.name!r} names {{{name}}}, which its parameters don't declare; add "
                f'"{name}" to its parameters\' properties.'
            )
    if placeholders:
        # A path argument can't be left out: the URL wouldn't exist.
        required = list(parameters.get("required") or [])
        parameters["required"] = [*required, *(n for n in placeholders if n not in required)]

    async def run(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        return await caller.call(context, operation, arguments)

    def detail(arguments: Mapping[str, Any]) -> str:
        try:
            path, _ = _fill(operation.path, arguments)
        except InvalidArguments:
            path = operation.path
        return f"{operation.method} {path}"

    def summary(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        return f"{operation.description} ({detail(arguments)} on {service.name})"

    async def logged_in_first(context: ToolCallContext, arguments: Mapping[str, Any]) -> bool:
        # Ask for the login before staging, not after the person has confirmed in vain.
        await caller.token(context)
        return True

    confirm: bool | ConfirmCheck = operation.confirm
    if operation.confirm and caller.logins is not None:
        confirm = logged_in_first

    return Tool(
        name=f"{service.name}_{operation.name}",
        description=operation.description,
        parameters=parameters,
        run=run,
        detail=detail,
        confirm=confirm,
        summary=summary if operation.confirm else None,
    )


class _Caller:
    """Calls one service, as the person when it has a login."""

    def __init__(
        self,
        service: RestService,
        logins: Logins | None,
        timeout_s: float,
        transport: httpx.AsyncBaseTransport | None,
    ) -> None:
        self.service = service
        self.logins = logins
        self.timeout_s = timeout_s
        self.transport = transport

    async def call(
        self, context: ToolCallContext, operation: RestOperation, arguments: Mapping[str, Any]
    ) -> str:
        path, rest = _fill(operation.path, arguments)
        url = self.service.base_url.rstrip("/") + path
        request: dict[str, Any] = {}
        if operation.method in _QUERY_METHODS:
            request["params"] = _query(rest)
        elif rest:
            request["json"] = rest
        name = self.service.name
        person, language = context.person.key, context.translator.language
        async with httpx.AsyncClient(
            timeout=self.timeout_s, transport=self.transport, follow_redirects=False
        ) as client:
            token = await self.token(context)
            response = await self._send(client, operation.method, url, token, request)
            if response.status_code == 401 and self.logins is not None:
                token = await self.logins.access_token(person, name, language=language, stale=token)
                response = await self._send(client, operation.method, url, token, request)
                if response.status_code == 401:
                    await self.logins.forget(person, name)
                    raise LoginRequired(name, await self.logins.begin(person, name, language))
        return _result(response)

    async def token(self, context: ToolCallContext) -> str | None:
        """The person's access token; None for a service without a login."""
        if self.logins is None:
            return None
        return await self.logins.access_token(
            context.person.key, self.service.name, language=context.translator.language
        )

    async def _send(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: str,
        token: str | None,
        request: Mapping[str, Any],
    ) -> httpx.Response:
        headers = {"accept": "application/json"}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        try:
            return await client.request(method, url, headers=headers, **request)
        except httpx.HTTPError as error:
            raise ToolError(
                f"{self.service.name} couldn't be reached ({type(error).__name__}); "
                "try again later."
            ) from None


def _fill(template: str, arguments: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The path with its placeholders filled, and the arguments left over."""
    rest = dict(arguments)

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in rest:
            raise InvalidArguments(f"The argument {name!r} is missing; the path needs it.")
        value = rest.pop(name)
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise InvalidArguments(f"The argument {name!r} must be a string or a number.")
        text = str(value)
        if text in ("", ".", ".."):
            raise InvalidArguments(f"The argument {name!r} can't be {text!r}.")
        return quote(text, safe="")

    return _PLACEHOLDER.sub(substitute, template), rest


def _query(arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
    params: list[tuple[str, str]] = []
    for key, value in arguments.items():
        values = value if isinstance(value, list) else [value]
        for item in values:
            if item is None:
                continue
            if isinstance(item, bool):
                params.append((key, "true" if item else "false"))
            elif isinstance(item, str | int | float):
                params.append((key, str(item)))
            else:
                params.append((key, _ENCODER.encode(item).decode()))
    return params


def _result(response: httpx.Response) -> str:
    body = response.text
    content_type = response.headers.get("content-type", "")
    if "json" in content_type:
        try:
            body = _ENCODER.encode(msgspec.json.decode(response.content)).decode()
        except msgspec.DecodeError:
            pass
    if len(body) > RESULT_MAX_CHARS:
        body = body[:RESULT_MAX_CHARS] + "…"
    return f"HTTP {response.status_code}\n{body}"
