"""The MCP servers of the YAML file's ``mcp.servers`` section, read and checked.

::

    mcp:
      servers:
        github:                                  # the name: tools are offered as github_<tool>
          url: https://api.githubcopilot.com/mcp/
          auth: oauth                            # none | bearer | oauth
          oauth: {client_id: Iv1.abc, client_secret_env: GITHUB_MCP_SECRET, scopes: [repo]}
          tools: {allow: ["*"], deny: ["delete_*"]}
          confirm: {"get_*": never, "*": auto}   # per tool glob: auto | always | never
          trusted: true                          # its read-only hints may skip a confirmation
          timeout: 30                            # seconds per call
          connect_timeout: 10
          roles: [dev]                           # who may use it; absent: everyone
          spaces: [personal, "slack:C0123ABC"]   # where; absent: everywhere
          allowed_hosts: [github.com]
        notes:
          command: npx
          args: ["-y", "@acme/notes-mcp"]
          env: {NOTES_TOKEN: "${NOTES_TOKEN}"}   # ${VAR} is read from Mercury's environment

Secrets are never in the file: ``auth: bearer`` names the variable holding the token
(``bearer_env``), ``headers`` maps a header to the variable holding its value, and
``oauth.client_secret_env`` names the variable holding a pre-registered client's secret.
The values are read from the environment when the settings are read (:func:`with_secrets`).
"""

from __future__ import annotations

import fnmatch
import re
import urllib.parse
from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar, Final, Literal

from core.config.kinds import (
    _Group,
    _InvalidValueError,
    _Kind,
    _mapping,
    _must,
    _only_keys,
    _text_list,
)

__all__ = ["ConfirmRule", "McpAuth", "McpServerConfig", "with_secrets"]

McpAuth = Literal["none", "bearer", "oauth"]
ConfirmRule = Literal["auto", "always", "never"]

_NAME: Final = re.compile(r"[a-z][a-z0-9]{0,23}")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_REFERENCE: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_KEYS: Final = (
    *("url", "command", "args", "env", "cwd", "auth", "bearer_env", "oauth", "headers"),
    *("tools", "confirm", "trusted", "timeout", "connect_timeout", "roles", "spaces"),
    *("allowed_hosts", "title", "protocol"),
)
_OAUTH_KEYS: Final = ("client_id", "client_secret_env", "scopes")
_RULES: Final = ("auto", "always", "never")
_PROTOCOLS: Final = ("auto", "legacy", "2026-07-28")


class McpServerConfig(_Group, frozen=True, kw_only=True):
    """One MCP server: where it is, how Mercury signs in, which tools and who may use them."""

    _secrets: ClassVar[frozenset[str]] = frozenset(
        {"bearer", "header_values", "client_secret", "env_values"}
    )

    name: str
    title: str
    url: str | None = None
    command: str | None = None
    args: tuple[str, ...] = ()
    #: The stdio server's environment as written: values may hold ``${VAR}`` references.
    env: Mapping[str, str] = MappingProxyType({})
    cwd: str | None = None
    auth: McpAuth = "none"
    bearer_env: str | None = None
    #: Header name → the environment variable its value is read from.
    headers: Mapping[str, str] = MappingProxyType({})
    client_id: str | None = None
    client_secret_env: str | None = None
    scopes: tuple[str, ...] = ()
    allow: tuple[str, ...] = ("*",)
    deny: tuple[str, ...] = ()
    #: (tool glob, rule), first match wins; a tool no glob matches is ``auto``.
    confirm: tuple[tuple[str, ConfirmRule], ...] = ()
    trusted: bool = False
    timeout: float = 30.0
    connect_timeout: float = 10.0
    roles: tuple[str, ...] | None = None
    spaces: tuple[str, ...] | None = None
    allowed_hosts: tuple[str, ...] = ()
    #: ``auto`` (2026-07-28, falling back to the 2025-11-25 handshake), ``legacy`` or a version.
    protocol: str = "auto"
    # Read from the environment by with_secrets; never in the file, never shown.
    bearer: str | None = None
    header_values: tuple[tuple[str, str], ...] = ()
    client_secret: str | None = None
    env_values: tuple[tuple[str, str], ...] = ()

    @property
    def transport(self) -> Literal["http", "stdio"]:
        return "http" if self.url is not None else "stdio"

    def offers(self, tool: str) -> bool:
        """Whether ``tool`` (the server's own name) passes ``tools.allow`` and ``tools.deny``."""
        allowed = any(fnmatch.fnmatchcase(tool, glob) for glob in self.allow)
        return allowed and not any(fnmatch.fnmatchcase(tool, glob) for glob in self.deny)

    def rule_for(self, tool: str) -> ConfirmRule:
        for glob, rule in self.confirm:
            if fnmatch.fnmatchcase(tool, glob):
                return rule
        return "auto"

    def serves_in(self, space_id: str | None) -> bool:
        """Whether its tools are offered in ``space_id`` (None: a person's own conversation)."""
        if self.spaces is None:
            return True
        return ("personal" if space_id is None else space_id) in self.spaces


class _McpServers(_Kind):
    summary = "mapping: server name → `{url | command, auth, tools, confirm, trusted, …}`"

    def from_yaml(self, value: object) -> object:
        servers = _mapping(value, "", "a mapping from server name to its settings")
        read: dict[str, McpServerConfig] = {}
        for name, entry in servers.items():
            at = f".{name}"
            if not _NAME.fullmatch(name):
                raise _InvalidValueError(
                    "must be named with a lowercase letter then up to 23 lowercase letters or "
                    f"digits (its tools are offered as <name>_<tool>), not {name!r}",
                    at,
                )
            read[name] = _server(name, entry, at)
        return MappingProxyType(read)


def _server(name: str, value: object, at: str) -> McpServerConfig:
    entry = _mapping(value, at, "a mapping of the server's settings")
    _only_keys(entry, at, _KEYS)
    url: object = entry.get("url")
    command: object = entry.get("command")
    if (url is None) == (command is None):
        raise _InvalidValueError("needs either url (streamable HTTP) or command (stdio)", at)
    if url is not None:
        url = _http_url(url, f"{at}.url")
        for key in ("args", "env", "cwd"):
            if key in entry:
                raise _InvalidValueError(f"is for a stdio server (command); remove {key}", at)
    else:
        if not isinstance(command, str) or not command.strip():
            raise _InvalidValueError(str(_must("a program to run", command)), f"{at}.command")
        command = command.strip()
    args = _text_list(entry.get("args", []), f"{at}.args", "a list of words")
    env = _mapping(entry.get("env", {}), f"{at}.env", "a mapping from variable to value")
    for key, text in env.items():
        if not _ENV_NAME.fullmatch(key) or not isinstance(text, str):
            raise _InvalidValueError(
                "must map variable names to text (${VAR} reads Mercury's environment)",
                f"{at}.env.{key}",
            )
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise _InvalidValueError(str(_must("a folder", cwd)), f"{at}.cwd")
    auth = entry.get("auth", "none")
    if auth not in ("none", "bearer", "oauth"):
        raise _InvalidValueError(f"must be none, bearer or oauth, not {auth!r}", f"{at}.auth")
    if auth != "none" and url is None:
        raise _InvalidValueError(
            "is for a server over HTTP; a stdio server gets its secrets through env", f"{at}.auth"
        )
    bearer_env = entry.get("bearer_env")
    if auth == "bearer":
        if not isinstance(bearer_env, str) or not _ENV_NAME.fullmatch(bearer_env):
            raise _InvalidValueError(
                "needs bearer_env, the environment variable holding the token", at
            )
    elif bearer_env is not None:
        raise _InvalidValueError("is only read with auth: bearer; remove it", f"{at}.bearer_env")
    oauth = _mapping(entry.get("oauth", {}), f"{at}.oauth", "a mapping")
    _only_keys(oauth, f"{at}.oauth", _OAUTH_KEYS)
    if oauth and auth != "oauth":
        raise _InvalidValueError("is only read with auth: oauth; remove it", f"{at}.oauth")
    client_id = oauth.get("client_id")
    if client_id is not None and (not isinstance(client_id, str) or not client_id.strip()):
        raise _InvalidValueError(str(_must("text", client_id)), f"{at}.oauth.client_id")
    secret_env = oauth.get("client_secret_env")
    if secret_env is not None and (
        not isinstance(secret_env, str) or not _ENV_NAME.fullmatch(secret_env)
    ):
        raise _InvalidValueError(
            "must name an environment variable", f"{at}.oauth.client_secret_env"
        )
    scopes = _text_list(oauth.get("scopes", []), f"{at}.oauth.scopes", "a list of scopes")
    headers = _mapping(entry.get("headers", {}), f"{at}.headers", "a mapping")
    for header, variable in headers.items():
        if not isinstance(variable, str) or not _ENV_NAME.fullmatch(variable):
            raise _InvalidValueError(
                "must name the environment variable holding the header's value",
                f"{at}.headers.{header}",
            )
    if url is None and headers:
        raise _InvalidValueError("is for a server over HTTP; remove it", f"{at}.headers")
    tools = _mapping(entry.get("tools", {}), f"{at}.tools", "a mapping with allow and deny")
    _only_keys(tools, f"{at}.tools", ("allow", "deny"))
    allow = _text_list(tools.get("allow", ["*"]), f"{at}.tools.allow", "a list of tool globs")
    deny = _text_list(tools.get("deny", []), f"{at}.tools.deny", "a list of tool globs")
    rules = _mapping(entry.get("confirm", {}), f"{at}.confirm", "a mapping from tool glob to rule")
    confirm: list[tuple[str, ConfirmRule]] = []
    for glob, rule in rules.items():
        if rule not in _RULES:
            raise _InvalidValueError(
                f"must be auto, always or never, not {rule!r}", f'{at}.confirm."{glob}"'
            )
        confirm.append((glob, rule))
    trusted = entry.get("trusted", False)
    if not isinstance(trusted, bool):
        raise _InvalidValueError(str(_must("true or false", trusted)), f"{at}.trusted")
    timeout = _seconds(entry.get("timeout", 30), f"{at}.timeout")
    connect_timeout = _seconds(entry.get("connect_timeout", 10), f"{at}.connect_timeout")
    roles = entry.get("roles")
    spaces = entry.get("spaces")
    title = entry.get("title", name)
    if not isinstance(title, str) or not title.strip():
        raise _InvalidValueError(str(_must("text", title)), f"{at}.title")
    protocol = entry.get("protocol", "auto")
    if protocol not in _PROTOCOLS:
        raise _InvalidValueError(
            f"must be auto, legacy or 2026-07-28, not {protocol!r}", f"{at}.protocol"
        )
    hosts = _text_list(entry.get("allowed_hosts", []), f"{at}.allowed_hosts", "a list of hosts")
    return McpServerConfig(
        name=name,
        title=title.strip(),
        url=url if isinstance(url, str) else None,
        command=command if isinstance(command, str) else None,
        args=args,
        env=MappingProxyType(dict(env)),  # type: ignore[arg-type]
        cwd=cwd,
        auth=auth,
        bearer_env=bearer_env,
        headers=MappingProxyType(dict(headers)),  # type: ignore[arg-type]
        client_id=client_id.strip() if isinstance(client_id, str) else None,
        client_secret_env=secret_env,
        scopes=scopes,
        allow=allow,
        deny=deny,
        confirm=tuple(confirm),
        trusted=trusted,
        timeout=timeout,
        connect_timeout=connect_timeout,
        roles=None if roles is None else _text_list(roles, f"{at}.roles", "a list of role names"),
        spaces=None
        if spaces is None
        else _text_list(spaces, f"{at}.spaces", "a list of space ids (or personal)"),
        allowed_hosts=tuple(host.lower() for host in hosts),
        protocol=protocol,
    )


def _http_url(value: object, at: str) -> str:
    expected = "an http:// or https:// URL"
    if not isinstance(value, str):
        raise _InvalidValueError(str(_must(expected, value)), at)
    text = value.strip()
    try:
        parts = urllib.parse.urlsplit(text)
        host = parts.hostname
    except ValueError:
        raise _InvalidValueError(str(_must(expected, text)), at) from None
    if parts.scheme.lower() not in ("http", "https") or not host or parts.fragment:
        raise _InvalidValueError(str(_must(expected, text)), at)
    return text


def _seconds(value: object, at: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 3600:
        raise _InvalidValueError(f"must be a number of seconds from 0 to 3600, not {value!r}", at)
    return float(value)


def with_secrets(
    servers: Mapping[str, McpServerConfig], environ: Mapping[str, str]
) -> tuple[Mapping[str, McpServerConfig], list[str]]:
    """The servers with their secrets read from ``environ``, and the variables that are missing.

    A problem is one sentence naming the server and the variable; the server is kept, so
    ``check-config`` can report the rest.
    """
    problems: list[str] = []
    read: dict[str, McpServerConfig] = {}

    def need(server: str, variable: str, what: str) -> str:
        value = environ.get(variable, "")
        if not value:
            problems.append(
                f"The MCP server {server!r} reads {what} from {variable}, which is not set; "
                "set it, or remove the server from mcp.servers."
            )
        return value

    for name, server in servers.items():
        bearer = need(name, server.bearer_env, "its bearer token") if server.bearer_env else None
        headers = tuple(
            (header, need(name, variable, f"its {header} header"))
            for header, variable in server.headers.items()
        )
        secret = (
            need(name, server.client_secret_env, "its OAuth client secret")
            if server.client_secret_env
            else None
        )
        env_values = []
        for key, text in server.env.items():

            def expand(match: re.Match[str], key: str = key, name: str = name) -> str:
                return need(name, match.group(1), f"env.{key}")

            env_values.append((key, _ENV_REFERENCE.sub(expand, text)))
        read[name] = McpServerConfig(
            **{
                field: getattr(server, field)
                for field in server.__struct_fields__
                if field not in ("bearer", "header_values", "client_secret", "env_values")
            },
            bearer=bearer or None,
            header_values=headers,
            client_secret=secret or None,
            env_values=tuple(env_values),
        )
    return MappingProxyType(read), problems
