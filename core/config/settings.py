"""The service's settings: one frozen :class:`Settings`, read once at start-up.

Settings come from environment variables and, for everything that isn't a secret, from an
optional YAML file of nested sections (``http:``, ``ollama:``, …). Every setting is one row
of :data:`SETTINGS`, which drives the parsing, the reference in ``docs/configuration.md``
(:func:`settings_reference`) and the ``--help`` listing (:func:`help_text`).

Which file is read (``MERCURY_CONFIG_FILE``):

* unset: ``./mercury.yaml`` if it exists, else ``./mercury.yml``, else none;
* a path: that file, relative to the working directory; a missing file is an error;
* ``""`` or ``none`` (any case): no file.

Where each value comes from:

1. the environment variable, whenever it is present, even empty: an empty value means
   "not set", so the default applies over whatever the file says;
2. else the file;
3. else the default.

The file is strict: an unknown key at any level, a key given twice, a value of the wrong
type or a secret (secrets are read only from the environment) stops the start-up with an
error naming the file and the dotted key. No message ever shows a secret's value.

Exception tree::

    ConfigurationError (Exception)   a setting or the file is wrong; the message says which
                                     and how to put it right
"""

from __future__ import annotations

import difflib
import json
import os
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Final, Literal

import msgspec
import yaml

from core.config.kinds import (
    _SLUG,
    FallbackModelSpec,
    PersonAllowance,
    RestOperation,
    RestService,
    _Bool,
    _Choice,
    _Fallbacks,
    _Float,
    _Globs,
    _Group,
    _Int,
    _InvalidValueError,
    _Kind,
    _Names,
    _Origins,
    _PathKind,
    _PeopleJson,
    _PersonAllowances,
    _PluginRoles,
    _presence,
    _Services,
    _shown,
    _Text,
    _UnknownKeyError,
    _Url,
    _Zone,
    service_secret_variable,
)
from core.config.mcp import McpServerConfig, _McpServers, with_secrets
from core.people.i18n import N_, SUPPORTED_LANGUAGES, Translator
from core.people.pairing import DM_POLICIES, DmPolicy
from core.spaces.config import SpaceConfig, _Spaces, trigger_word

__all__ = [
    "CONFIG_FILE_VARIABLE",
    "DEFAULT_CONFIG_FILES",
    "DM_POLICY_PLATFORMS",
    "SERVICE_SECRET_VARIABLE",
    "SETTINGS",
    "AccessSettings",
    "AmbientSettings",
    "AuthSettings",
    "BridgesSettings",
    "ChatSettings",
    "ConfigurationError",
    "DefaultsSettings",
    "DirectorySettings",
    "DiscordSettings",
    "EngineSettings",
    "HttpSettings",
    "LogSettings",
    "MatrixSettings",
    "McpServerConfig",
    "McpSettings",
    "MemoryCollections",
    "MemorySettings",
    "MetricsSettings",
    "OidcSettings",
    "OllamaSettings",
    "RateLimitSettings",
    "RestOperation",
    "RestService",
    "SessionSettings",
    "Setting",
    "Settings",
    "SlackSettings",
    "SpaceConfig",
    "StateSettings",
    "TeamsSettings",
    "TelegramSettings",
    "TriggerSettings",
    "WhatsAppSettings",
    "WikiSettings",
    "dm_policies",
    "help_text",
    "load_settings",
    "read_settings",
    "service_secret_variable",
    "settings_reference",
]

#: The environment variable that names the YAML file, or turns the file off.
CONFIG_FILE_VARIABLE: Final = "MERCURY_CONFIG_FILE"
#: The files looked for in the working directory when ``MERCURY_CONFIG_FILE`` is unset.
DEFAULT_CONFIG_FILES: Final = ("mercury.yaml", "mercury.yml")
#: Where a declared service's client secret comes from; ``<NAME>`` is its name in capitals.
SERVICE_SECRET_VARIABLE: Final = "MERCURY_SERVICE_<NAME>_CLIENT_SECRET"  # noqa: S105 - a name

AuthProviderName = Literal["static", "oidc"]
MemoryStoreName = Literal["edge", "qdrant", "off"]
ModelProvider = Literal["ollama", "openai"]
UnknownPeople = Literal["refuse", "allow"]
TriggerMatch = Literal["mention", "prefix", "always"]
SlackMode = Literal["http", "socket"]
LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["text", "json"]

AUTH_PROVIDERS: Final = ("static", "oidc")
TRIGGER_MATCHES: Final = ("mention", "prefix", "always")
SLACK_MODES: Final = ("http", "socket")
MODEL_PROVIDERS: Final = ("ollama", "openai")
# Asymmetric algorithms only: "none" and the HMAC family would let a shared secret (or
# nothing) stand in for the issuer's key.
OIDC_ALGORITHMS: Final = (
    *("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
    *("ES256", "ES384", "ES512", "EdDSA"),
)
# Keys refused anywhere in the file (outside JSON schemas and the people list), whatever
# section they sit in: their values are secrets by name.
_SECRET_KEY_NAMES: Final = frozenset(
    {"client_secret", "api_key", "secret_key", "static_tokens", "password"}
)
_SHOWN_MAX_CHARS: Final = 60


class ConfigurationError(Exception):
    """A setting or the configuration file is wrong; the message says which and the way out."""


# --- the settings, grouped as the file's sections are ------------------------------------


class HttpSettings(_Group, frozen=True, kw_only=True):
    """The HTTP surface: where it listens and how it streams."""

    host: str
    port: int
    cors_origin: tuple[str, ...]
    public_url: str | None
    heartbeat_s: float
    resume_max_chars: int | None
    graceful_timeout_s: float
    rejoin_s: float
    ui: bool
    ui_oidc_client_id: str | None
    ui_oidc_scope: str
    max_header_bytes: int
    header_timeout_s: float
    keep_alive_timeout_s: float
    max_connections: int
    workers: int


class AuthSettings(_Group, frozen=True, kw_only=True):
    """Which auth providers recognize callers, in the order they are tried."""

    _secrets: ClassVar[frozenset[str]] = frozenset({"static_tokens"})

    providers: tuple[AuthProviderName, ...]
    static_tokens: str | None


class OllamaSettings(_Group, frozen=True, kw_only=True):
    """The Ollama server that answers and embeds."""

    host: str
    model: str
    think: bool
    embedding_model: str
    timeout_s: float
    connect_timeout_s: float


class ModelSettings(_Group, frozen=True, kw_only=True):
    """Which kind of server answers and embeds, and which models stand in when it can't."""

    provider: ModelProvider
    fallbacks: tuple[FallbackModelSpec, ...]
    first_chunk_timeout_s: float
    fallback_cooldown_s: float


class OpenAISettings(_Group, frozen=True, kw_only=True):
    """A server speaking OpenAI's chat-completions protocol (vLLM, llama-server, LiteLLM, …)."""

    _secrets: ClassVar[frozenset[str]] = frozenset({"api_key"})

    base_url: str
    api_key: str | None
    model: str | None
    embedding_model: str | None
    embedding_base_url: str | None
    timeout_s: float
    connect_timeout_s: float


class DefaultsSettings(_Group, frozen=True, kw_only=True):
    """What applies to a person who hasn't said otherwise."""

    language: str
    time_zone: str


class EngineSettings(_Group, frozen=True, kw_only=True):
    """Limits of one turn."""

    max_steps: int


class ChatSettings(_Group, frozen=True, kw_only=True):
    """``POST /chat``: its time limit, the size of files, and who may act for others."""

    timeout_s: float
    max_file_bytes: int
    max_turn_bytes: int
    bridge_role: str


class RateLimitSettings(_Group, frozen=True, kw_only=True):
    """How many turns a person may start in a sliding window."""

    per_user: int
    window_ms: int


class StateSettings(_Group, frozen=True, kw_only=True):
    """Where the durable state lives: SQLite under the data directory, or PostgreSQL."""

    _secrets: ClassVar[frozenset[str]] = frozenset({"url"})

    url: str | None
    pool_size: int
    lease_s: int
    busy_timeout_s: float
    connect_timeout_s: float


class WikiSettings(_Group, frozen=True, kw_only=True):
    """The wiki's vault on disk."""

    vault_path: Path


class MemoryCollections(_Group, frozen=True, kw_only=True):
    """The names of the memory store's collections."""

    verbatim: str
    episodic: str
    semantic: str


class MemorySettings(_Group, frozen=True, kw_only=True):
    """Long-term memory: which store, where, and the archive's queue."""

    _secrets: ClassVar[frozenset[str]] = frozenset({"qdrant_api_key"})

    store: MemoryStoreName
    qdrant_url: str | None
    qdrant_api_key: str | None
    qdrant_timeout_s: int
    qdrant_retries: int
    collections: MemoryCollections
    archive_queue_size: int
    edge_merge_above: int
    edge_search_ef: int
    archive_linger_ms: int


class SessionSettings(_Group, frozen=True, kw_only=True):
    """When a conversation is summarized, freed and brought back."""

    idle_timeout_ms: int
    idle_check_interval_ms: int
    capture_message_threshold: int
    resume_max_chars: int


class DirectorySettings(_Group, frozen=True, kw_only=True):
    """The static directory of people, as JSON text (validated by the directory)."""

    static_people: str | None


class AccessSettings(_Group, frozen=True, kw_only=True):
    """Who the core talks to and which plugins each person is offered."""

    unknown: UnknownPeople
    plugins: Mapping[str, tuple[str, ...]]


class OidcSettings(_Group, frozen=True, kw_only=True):
    """The OIDC provider's issuer and audience (validated by the provider)."""

    issuer: str | None
    audience: str | None
    algorithms: tuple[str, ...]
    leeway_s: int
    allow_http_issuer: bool


class TriggerSettings(_Group, frozen=True, kw_only=True):
    """When a message in a shared space is addressed to the assistant (spaces may override)."""

    match: TriggerMatch
    name: str
    pattern: str | None
    media_in_groups: bool


class AmbientSettings(_Group, frozen=True, kw_only=True):
    """How much of a space's untriggered talk the next triggered run sees."""

    max_messages: int
    max_chars: int


class UsageSettings(_Group, frozen=True, kw_only=True):
    """The usage ledger and the token allowances every person and space has (0: none)."""

    ledger: bool
    flush_ms: int
    person_day: int
    person_month: int
    space_day: int
    space_month: int
    #: Named people's own allowances, by person key (core/usage/allowances.py).
    people: Mapping[str, PersonAllowance]


class BridgesSettings(_Group, frozen=True, kw_only=True):
    """What every chat bridge shares."""

    max_message_age_s: int
    live_answers: bool
    show_reasoning: bool
    pairing_max_pending: int
    connection_lease_s: int
    bot_turns: int = 3
    bot_reply_s: float = 3.0


class SlackSettings(_Group, frozen=True, kw_only=True):
    """The Slack bridge (Events API webhook or Socket Mode, Web API replies)."""

    _secrets: ClassVar[frozenset[str]] = frozenset({"bot_token", "signing_secret", "app_token"})

    enabled: bool
    #: ``http``: events at ``POST /webhooks/slack``; ``socket``: Socket Mode connections.
    mode: SlackMode = "http"
    bot_token: str | None
    signing_secret: str | None
    app_token: str | None = None
    api_url: str
    dm_policy: DmPolicy | None = None


class TelegramSettings(_Group, frozen=True, kw_only=True):
    """The Telegram bridge (webhook, Bot API replies)."""

    _secrets: ClassVar[frozenset[str]] = frozenset({"bot_token", "webhook_secret"})

    enabled: bool
    bot_token: str | None
    webhook_secret: str | None
    api_url: str
    file_url: str
    dm_policy: DmPolicy | None = None


class DiscordSettings(_Group, frozen=True, kw_only=True):
    """The Discord bridge (gateway connection, REST replies)."""

    _secrets: ClassVar[frozenset[str]] = frozenset({"bot_token"})

    enabled: bool
    bot_token: str | None
    api_url: str
    dm_policy: DmPolicy | None = None


class WhatsAppSettings(_Group, frozen=True, kw_only=True):
    """The WhatsApp bridge (Cloud API webhook, Graph API replies)."""

    _secrets: ClassVar[frozenset[str]] = frozenset({"access_token", "app_secret", "verify_token"})

    enabled: bool
    access_token: str | None
    app_secret: str | None
    verify_token: str | None
    phone_number_id: str | None
    api_url: str
    dm_policy: DmPolicy | None = None


class TeamsSettings(_Group, frozen=True, kw_only=True):
    """The Microsoft Teams bridge (Bot Framework activities in, the connector service out)."""

    _secrets: ClassVar[frozenset[str]] = frozenset({"app_password"})

    enabled: bool
    app_id: str | None
    app_password: str | None
    tenant_id: str | None
    openid_url: str
    token_url: str | None
    dm_policy: DmPolicy | None = None
    service_urls: tuple[str, ...] = ()


class MatrixSettings(_Group, frozen=True, kw_only=True):
    """The Matrix bridge (a sync loop held as the bot's user, replies over the client API)."""

    _secrets: ClassVar[frozenset[str]] = frozenset({"access_token", "password"})

    enabled: bool
    homeserver: str | None
    user_id: str | None
    access_token: str | None
    password: str | None
    dm_policy: DmPolicy | None = None
    bot_users: tuple[str, ...] = ()


class LogSettings(_Group, frozen=True, kw_only=True):
    """What the service logs and how each line looks."""

    level: LogLevel
    format: LogFormat


class McpSettings(_Group, frozen=True, kw_only=True):
    """The MCP servers whose tools the model is offered, and when their schemas are deferred."""

    servers: Mapping[str, McpServerConfig]
    tool_budget: int


class MetricsSettings(_Group, frozen=True, kw_only=True):
    """The Prometheus metrics: whether they are kept, and where they are served."""

    enabled: bool
    port: int | None


class TracingSettings(_Group, frozen=True, kw_only=True):
    """What the traces hold beyond their shape (they are switched on by ``OTEL_*``)."""

    capture_content: bool


class Settings(_Group, frozen=True, kw_only=True):
    """Every setting of the service, read once at start-up by :func:`load_settings`."""

    _secrets: ClassVar[frozenset[str]] = frozenset({"secret_key"})

    http: HttpSettings
    data_dir: Path
    state: StateSettings
    auth: AuthSettings
    model: ModelSettings
    ollama: OllamaSettings
    openai: OpenAISettings
    defaults: DefaultsSettings
    engine: EngineSettings
    chat: ChatSettings
    rate_limit: RateLimitSettings
    wiki: WikiSettings
    memory: MemorySettings
    session: SessionSettings
    directory: DirectorySettings
    access: AccessSettings
    oidc: OidcSettings
    trigger: TriggerSettings
    ambient: AmbientSettings
    usage: UsageSettings
    bridges: BridgesSettings
    slack: SlackSettings
    telegram: TelegramSettings
    discord: DiscordSettings
    whatsapp: WhatsAppSettings
    teams: TeamsSettings
    matrix: MatrixSettings
    spaces: Mapping[str, SpaceConfig]
    log: LogSettings
    metrics: MetricsSettings
    mcp: McpSettings
    tracing: TracingSettings
    secret_key: str | None
    services: tuple[RestService, ...]
    #: The YAML file that was read, if any.
    config_file: Path | None

    def redacted(self) -> str:
        """One ``key = value`` line per setting, for the log; secrets read only "set"/"not set"."""
        lines = [f"config_file = {self.config_file if self.config_file else 'none'}"]
        for setting in SETTINGS:
            value = _lookup(self, setting.path)
            if setting.secret:
                shown = _presence(value)
            elif setting.path == "services":
                shown = ", ".join(_describe_service(s) for s in self.services) or "none"
            elif setting.path == "spaces" and self.spaces:
                # One line per space, as the file writes it (flow YAML), not a Python repr.
                lines.extend(
                    f"spaces.{json.dumps(space, ensure_ascii=False)} = {_flow_yaml(_given(given))}"
                    for space, given in self.spaces.items()
                )
                continue
            else:
                shown = _plain(value)
            lines.append(f"{setting.path} = {shown}")
        return "\n".join(lines)


_GROUPS: Final[Mapping[str, type[_Group]]] = {
    "http": HttpSettings,
    "state": StateSettings,
    "auth": AuthSettings,
    "model": ModelSettings,
    "ollama": OllamaSettings,
    "openai": OpenAISettings,
    "defaults": DefaultsSettings,
    "engine": EngineSettings,
    "chat": ChatSettings,
    "rate_limit": RateLimitSettings,
    "wiki": WikiSettings,
    "memory": MemorySettings,
    "memory.collections": MemoryCollections,
    "session": SessionSettings,
    "directory": DirectorySettings,
    "access": AccessSettings,
    "oidc": OidcSettings,
    "trigger": TriggerSettings,
    "ambient": AmbientSettings,
    "usage": UsageSettings,
    "bridges": BridgesSettings,
    "slack": SlackSettings,
    "telegram": TelegramSettings,
    "discord": DiscordSettings,
    "whatsapp": WhatsAppSettings,
    "teams": TeamsSettings,
    "matrix": MatrixSettings,
    "log": LogSettings,
    "metrics": MetricsSettings,
    "mcp": McpSettings,
    "tracing": TracingSettings,
}


# --- the table ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: where it is read from, what it accepts and what it means."""

    #: The dotted attribute of :class:`Settings`, which is also its key in the file.
    path: str
    #: Its environment variable, or ``None`` for a setting only the file can give.
    env: str | None
    kind: _Kind
    default: object
    doc: str
    #: Read only from the environment; refused in the file and never shown.
    secret: bool = False
    #: The default as the reference shows it, when the value alone wouldn't say it.
    default_doc: str | None = None
    #: Other keys under which the file is refused this secret.
    aliases: tuple[str, ...] = ()

    @property
    def in_file(self) -> bool:
        """Whether the file may give this setting."""
        return not self.secret


_PORT: Final = _Int(0, 65535)
_SECONDS: Final = _Float(0, inclusive=False)

#: The chat bridges whose direct messages follow a DM policy (``<platform>.dm_policy``): a
#: new bridge adds its name here, a ``dm_policy`` field to its section and
#: ``_dm_policy("<platform>")`` to the table.
DM_POLICY_PLATFORMS: Final = ("slack", "telegram", "discord", "whatsapp", "teams", "matrix")


def _dm_policy(platform: str) -> Setting:
    """The DM policy row of a chat bridge's section (core/people/pairing.py says what each does)."""
    return Setting(
        f"{platform}.dm_policy",
        f"{platform.upper()}_DM_POLICY",
        _Choice(DM_POLICIES),
        None,
        N_(
            "Who may talk to the assistant from this platform when the directory doesn't know "
            "them: `pairing` (an unknown sender's direct message gets a code an admin approves), "
            "`allowlist` (the directory's people only) or `open` (everyone). "
            "`MERCURY_ACCESS_UNKNOWN=allow` lets everyone in whatever this says."
        ),
        default_doc=N_("`pairing` with a directory, `open` without"),
    )


def dm_policies(settings: Settings) -> dict[str, DmPolicy | None]:
    """Each chat bridge's DM policy as set (``None``: the default, which depends on the
    directory: :meth:`core.people.people.People.dm_policy` decides it)."""
    policies: dict[str, DmPolicy | None] = {}
    for platform in DM_POLICY_PLATFORMS:
        policies[platform] = getattr(settings, platform).dm_policy
    return policies


#: Every setting, in the order the reference lists them.
# fmt: off
SETTINGS: Final[tuple[Setting, ...]] = (
    # path, environment variable, kind, default, doc
    Setting("http.host", "HTTP_SURFACE_HOST", _Text(), "127.0.0.1",
            N_("The address to listen on.")),
    Setting("http.port", "HTTP_SURFACE_PORT", _PORT, 4100,
            N_("The port; 0 picks a free one.")),
    Setting("http.cors_origin", "HTTP_SURFACE_CORS_ORIGIN", _Origins(), ("*",),
            N_("The origins a browser UI may call from: `*` for any, or a comma-separated "
            "list of exact origins such as `https://ui.example`; a request from one of them "
            "is answered with that origin."), default_doc=N_("`*`")),
    Setting("http.public_url", "HTTP_SURFACE_PUBLIC_URL", _Url(base=True), None,
            N_("The address browsers reach the surface at; without it nobody can log in to "
            "services.")),
    Setting("http.workers", "HTTP_SURFACE_WORKERS", _Int(1, 64), 1,
            N_("Server processes on this machine sharing the port (`serve --workers`); more "
            "than 1 needs the state in PostgreSQL (`MERCURY_STATE_URL`) and memory on a "
            "Qdrant server or off.")),
    Setting("http.heartbeat_s", "HTTP_SURFACE_HEARTBEAT_S", _SECONDS, 15.0,
            N_("Seconds of silence on a stream before a keep-alive comment.")),
    Setting("http.resume_max_chars", "HTTP_SURFACE_RESUME_MAX_CHARS", _Int(0), None,
            N_("Characters of a reopened conversation given back to the model; 0 turns resuming "
            "off."), default_doc=N_("`SESSION_RESUME_MAX_CHARS`")),
    Setting("http.graceful_timeout_s", "HTTP_SURFACE_GRACEFUL_TIMEOUT_S",
            _Float(0, inclusive=True), 10.0,
            N_("Seconds running streams get to finish when the service stops.")),
    Setting("http.rejoin_s", "HTTP_SURFACE_REJOIN_S", _Float(0, inclusive=True), 0.0,
            N_("Seconds a turn keeps running after its client went away, waiting to be rejoined "
            "with Last-Event-ID; 0 cancels it at once.")),
    Setting("http.ui", "HTTP_SURFACE_UI", _Bool(), True,
            N_("Serve the reference browser UI at /ui/.")),
    Setting("http.ui_oidc_client_id", "HTTP_SURFACE_UI_OIDC_CLIENT_ID", _Text(raw=True), None,
            N_("The OpenID client the browser UI logs people in with (a public client, "
            "authorization code with PKCE, redirect URI <address>/ui/); without it the UI "
            "only takes pasted tokens.")),
    Setting("http.ui_oidc_scope", "HTTP_SURFACE_UI_OIDC_SCOPE", _Text(raw=True), "openid profile",
            N_("The scopes the browser UI asks the OpenID provider for.")),
    Setting("http.max_header_bytes", "HTTP_SURFACE_MAX_HEADER_BYTES", _Int(1024, 1_048_576),
            65_536,
            N_("Bytes a request's head (request line and headers) may take; past them, 431.")),
    Setting("http.header_timeout_s", "HTTP_SURFACE_HEADER_TIMEOUT_S", _SECONDS, 10.0,
            N_("Seconds a request's head may take to arrive whole; past them, 408 and the "
            "connection is closed.")),
    Setting("http.keep_alive_timeout_s", "HTTP_SURFACE_KEEP_ALIVE_TIMEOUT_S", _SECONDS, 5.0,
            N_("Seconds an idle keep-alive connection is kept open between requests.")),
    Setting("http.max_connections", "HTTP_SURFACE_MAX_CONNECTIONS", _Int(1, 100_000), 2048,
            N_("Connections (or running requests) served at once; past them, 503 with "
            "Retry-After. Each open stream holds one.")),
    Setting("data_dir", "MERCURY_DATA_DIR", _PathKind(), Path("data"),
            N_("Where the service keeps its files."), default_doc=N_("`./data`")),
    Setting("state.url", "MERCURY_STATE_URL", _Text(raw=True), None,
            N_("The PostgreSQL database every instance shares "
            "(`postgresql://user:password@host:port/db`); unset keeps the state in SQLite "
            "under the data directory."), secret=True, default_doc=N_("not set (SQLite)")),
    Setting("state.pool_size", "MERCURY_STATE_POOL_SIZE", _Int(1, 100), 10,
            N_("The most PostgreSQL connections one instance opens at once.")),
    Setting("state.lease_s", "MERCURY_CONVERSATION_LEASE_S", _Int(2, 30), 15,
            N_("Seconds after which a turn of an instance that stopped answering (it died) "
            "lets the conversation's next turn run on another instance, and a chat message "
            "it took and never answered runs again on another.")),
    Setting("state.busy_timeout_s", "MERCURY_STATE_BUSY_TIMEOUT_S", _SECONDS, 10.0,
            N_("Seconds a write to the SQLite file waits for another process's lock on it "
            "before it is refused (503 with Retry-After).")),
    Setting("state.connect_timeout_s", "MERCURY_STATE_CONNECT_TIMEOUT_S", _SECONDS, 10.0,
            N_("Seconds connecting to PostgreSQL is retried at start-up (a server still "
            "starting is waited for) before the start fails.")),
    Setting("auth.providers", "MERCURY_AUTH", _Names(AUTH_PROVIDERS, "provider"), (),
            N_("The auth providers, tried in this order (comma-separated in the environment)."),
            default_doc=N_("none (not configured)")),
    Setting("auth.static_tokens", "AUTH_STATIC_TOKENS", _Text(raw=True), None,
            N_("The static provider's tokens, as JSON (validated by the provider)."),
            secret=True),
    Setting("model.provider", "MERCURY_MODEL_PROVIDER", _Choice(MODEL_PROVIDERS), "ollama",
            N_("Which server answers and embeds: `ollama`, or `openai` for any server speaking "
            "OpenAI's chat-completions protocol (vLLM, llama-server, LM Studio, LiteLLM).")),
    Setting("model.fallbacks", None, _Fallbacks(), (),
            N_("Other models asked, in order, when the model can't start an answer (unreachable, "
            "no first chunk in time, HTTP 429 or 5xx); never after the answer began."),
            default_doc=N_("none")),
    Setting("model.first_chunk_timeout_s", "MERCURY_MODEL_FIRST_CHUNK_TIMEOUT_S", _SECONDS, 60.0,
            N_("With fallbacks: seconds a model may take to start its answer before the next "
            "one is asked (the last model of the chain waits its full read timeout).")),
    Setting("model.fallback_cooldown_s", "MERCURY_MODEL_FALLBACK_COOLDOWN_S", _SECONDS, 30.0,
            N_("With fallbacks: seconds a model that failed is skipped before a turn tries it "
            "again; doubled at each failure in a row, up to ten minutes.")),
    Setting("ollama.host", "OLLAMA_HOST", _Text(), "http://127.0.0.1:11434",
            N_("The Ollama server's address.")),
    Setting("ollama.model", "OLLAMA_MODEL", _Text(), "llama3.2",
            N_("The chat model.")),
    Setting("ollama.think", "OLLAMA_THINK", _Bool(), True,
            N_("Whether the model streams its reasoning.")),
    Setting("ollama.embedding_model", "OLLAMA_EMBEDDING_MODEL", _Text(), "nomic-embed-text",
            N_("The model that embeds memory.")),
    Setting("ollama.timeout_s", "OLLAMA_TIMEOUT_S", _SECONDS, 300.0,
            N_("Seconds to wait for the next chunk of a streamed answer.")),
    Setting("ollama.connect_timeout_s", "OLLAMA_CONNECT_TIMEOUT_S", _SECONDS, 5.0,
            N_("Seconds to wait for a connection to Ollama.")),
    Setting("openai.base_url", "OPENAI_BASE_URL", _Url(base=True), "http://127.0.0.1:8080/v1",
            N_("The server's API address, `/v1` included.")),
    Setting("openai.api_key", "OPENAI_API_KEY", _Text(raw=True), None,
            N_("The bearer token the server asks for, if any."), secret=True),
    Setting("openai.model", "OPENAI_MODEL", _Text(), None,
            N_("The chat model, as the server names it; required with "
            "`MERCURY_MODEL_PROVIDER=openai`.")),
    Setting("openai.embedding_model", "OPENAI_EMBEDDING_MODEL", _Text(), None,
            N_("The model that embeds memory through `/embeddings`; required with "
            "`MERCURY_MODEL_PROVIDER=openai` unless `MERCURY_MEMORY_STORE=off`.")),
    Setting("openai.embedding_base_url", "OPENAI_EMBEDDING_BASE_URL", _Url(base=True), None,
            N_("Where the embedding model is served, when another server than the chat model's "
            "(llama-server serves one or the other)."), default_doc=N_("`OPENAI_BASE_URL`")),
    Setting("openai.timeout_s", "OPENAI_TIMEOUT_S", _SECONDS, 300.0,
            N_("Seconds to wait for the next event of a streamed answer.")),
    Setting("openai.connect_timeout_s", "OPENAI_CONNECT_TIMEOUT_S", _SECONDS, 5.0,
            N_("Seconds to wait for a connection to the server.")),
    Setting("defaults.language", "MERCURY_DEFAULT_LANGUAGE", _Choice(SUPPORTED_LANGUAGES), "en",
            N_("The language of people who haven't chosen one.")),
    Setting("defaults.time_zone", "MERCURY_DEFAULT_TIME_ZONE", _Zone(), "UTC",
            N_("The time zone of people who haven't given one, spelled as the tz database does.")),
    Setting("engine.max_steps", "MERCURY_MAX_STEPS", _Int(1, 100), 8,
            N_("Model steps (answers and tool rounds) one turn may take.")),
    Setting("chat.timeout_s", "CHAT_TIMEOUT_S", _SECONDS, 300.0,
            N_("Seconds a `POST /chat` turn may take before it is stopped and refused with 504.")),
    Setting("chat.max_file_bytes", "CHAT_MAX_FILE_BYTES", _Int(1), 10 * 1024 * 1024,
            N_("Bytes one file sent to or written by the assistant may hold."),
            default_doc=N_("`10485760` (10 MiB)")),
    Setting("chat.max_turn_bytes", "CHAT_MAX_TURN_BYTES", _Int(1), 25 * 1024 * 1024,
            N_("Bytes the files of one `POST /chat` may hold together, sent or returned."),
            default_doc=N_("`26214400` (25 MiB)")),
    Setting("chat.bridge_role", "CHAT_BRIDGE_ROLE", _Text(), "mercury.bridge",
            N_("The directory role that lets a caller act for others on `POST /chat` "
            "(`callerId`, `authorName`, `spaceId`).")),
    Setting("rate_limit.per_user", "MERCURY_RATE_LIMIT_PER_USER", _Int(1, 1000), 10,
            N_("Turns a person may start per window (60 a minute under `serve --dev` when "
            "neither sets it).")),
    Setting("rate_limit.window_ms", "MERCURY_RATE_LIMIT_WINDOW_MS", _Int(1000, 3_600_000),
            60_000, N_("The rate limit's sliding window, in milliseconds.")),
    Setting("wiki.vault_path", "WIKI_VAULT_PATH", _PathKind(), None,
            N_("The wiki's vault."), default_doc=N_("`<data dir>/wiki`")),
    Setting("memory.store", "MERCURY_MEMORY_STORE", _Choice(("edge", "qdrant", "off")), "edge",
            N_("Where long-term memory lives: embedded, on a Qdrant server, or nowhere.")),
    Setting("memory.qdrant_url", "QDRANT_URL", _Url(), None,
            N_("The Qdrant server; required when the store is `qdrant`.")),
    Setting("memory.qdrant_api_key", "QDRANT_API_KEY", _Text(raw=True), None,
            N_("The Qdrant server's API key."), secret=True, aliases=("qdrant.api_key",)),
    Setting("memory.qdrant_timeout_s", "QDRANT_TIMEOUT_S", _Int(1, 300), 10,
            N_("Whole seconds a request to the Qdrant server may take, connecting included.")),
    Setting("memory.qdrant_retries", "QDRANT_RETRIES", _Int(0, 10), 2,
            N_("Times a Qdrant request that timed out or met a 429 or 5xx is sent again.")),
    Setting("memory.collections.verbatim", "QDRANT_VERBATIM_COLLECTION", _Text(),
            "verbatim_archive", N_("The collection of archived messages.")),
    Setting("memory.collections.episodic", "QDRANT_EPISODIC_COLLECTION", _Text(),
            "episodic_memory", N_("The collection of conversation summaries.")),
    Setting("memory.collections.semantic", "QDRANT_SEMANTIC_FACTS_COLLECTION", _Text(),
            "semantic_facts", N_("The collection of facts about people.")),
    Setting("memory.archive_queue_size", "MERCURY_ARCHIVE_QUEUE_SIZE", _Int(1), 10_000,
            N_("Messages that may wait to be archived before new ones are dropped.")),
    Setting("memory.edge_merge_above", "MERCURY_EDGE_MERGE_ABOVE", _Int(0, 1000), 0,
            N_("Segments a Qdrant Edge shard may have before a child process merges them into "
            "one; 0 never merges.")),
    Setting("memory.edge_search_ef", "MERCURY_EDGE_SEARCH_EF", _Int(4, 1024), 32,
            N_("Candidates a Qdrant Edge search visits per segment of its index (HNSW ef): fewer "
            "answer faster and find fewer of the true nearest.")),
    Setting("memory.archive_linger_ms", "MERCURY_ARCHIVE_LINGER_MS", _Int(0, 10_000), 100,
            N_("Milliseconds the archive waits for more messages so one write serves several "
               "turns.")),
    Setting("session.idle_timeout_ms", "SESSION_IDLE_TIMEOUT_MS", _Int(1000), 1_800_000,
            N_("Milliseconds of quiet after which a conversation is summarized and freed.")),
    Setting("session.idle_check_interval_ms", "SESSION_IDLE_CHECK_INTERVAL_MS", _Int(100),
            60_000, N_("Milliseconds between looks for idle conversations.")),
    Setting("session.capture_message_threshold", "SESSION_CAPTURE_MESSAGE_THRESHOLD", _Int(1),
            6, N_("New messages after which a conversation is summarized.")),
    Setting("session.resume_max_chars", "SESSION_RESUME_MAX_CHARS", _Int(0), 8000,
            N_("Characters of a freed conversation given back to the model when it is resumed.")),
    Setting("directory.static_people", "DIRECTORY_STATIC_PEOPLE", _PeopleJson(), None,
            N_("The people the static directory knows, as JSON (validated by the directory).")),
    Setting("access.unknown", "MERCURY_ACCESS_UNKNOWN", _Choice(("refuse", "allow")), "refuse",
            N_("Whether people the directory doesn't know are let in.")),
    Setting("access.plugins", None, _PluginRoles(), MappingProxyType({}),
            N_("Per plugin, the roles a person needs to be offered it."),
            default_doc=N_("none (no role gates)")),
    Setting("oidc.issuer", "OIDC_ISSUER", _Text(raw=True), None,
            N_("The exact issuer tokens carry (validated by the provider).")),
    Setting("oidc.audience", "OIDC_AUDIENCE", _Text(raw=True), None,
            N_("The client id tokens carry in `aud` (validated by the provider).")),
    Setting("oidc.algorithms", "OIDC_ALGORITHMS", _Names(OIDC_ALGORITHMS, "algorithm"), (),
            N_("The signature algorithms accepted (comma-separated in the environment)."),
            default_doc=N_("the provider's choice")),
    Setting("oidc.leeway_s", "OIDC_LEEWAY_S", _Int(0, 60), 30,
            N_("Seconds of clock difference tolerated on a token's times.")),
    Setting("oidc.allow_http_issuer", "OIDC_ALLOW_HTTP_ISSUER", _Bool(), False,
            N_("Accept a plain-http issuer; for development against a local issuer only.")),
    Setting("trigger.match", "MERCURY_TRIGGER_MATCH", _Choice(TRIGGER_MATCHES), "mention",
            N_("When a message in a shared space is for the assistant: `mention` (the trigger "
            "as a standalone word anywhere), `prefix` (the message starts with it) or "
            "`always`; direct messages always are. A space may set its own.")),
    Setting("trigger.name", "MERCURY_TRIGGER_NAME", _Text(), "Mercury",
            N_("The assistant's name in chats: a bridge writes a mention of the bot as "
            "`@<name>`.")),
    Setting("trigger.pattern", "MERCURY_TRIGGER_PATTERN", _Text(), None,
            N_("The trigger word, matched without regard to case, with or without a leading "
            "`@`."), default_doc=N_("`trigger.name`")),
    Setting("trigger.media_in_groups", "MERCURY_TRIGGER_MEDIA_IN_GROUPS", _Bool(), False,
            N_("Whether a file sent without text in a group is for the assistant.")),
    Setting("ambient.max_messages", "MERCURY_AMBIENT_MAX_MESSAGES", _Int(0, 500), 20,
            N_("Untriggered messages of a space kept for its next triggered run; 0 keeps none.")),
    Setting("ambient.max_chars", "MERCURY_AMBIENT_MAX_CHARS", _Int(0, 100_000), 4000,
            N_("Characters of untriggered talk a space keeps for its next triggered run.")),
    Setting("usage.ledger", "MERCURY_USAGE_LEDGER", _Bool(), True,
            N_("Whether every model call's tokens are kept in the usage ledger (per person, "
            "space, model and day); the allowances below need it.")),
    Setting("usage.flush_ms", "MERCURY_USAGE_FLUSH_MS", _Int(10, 60_000), 250,
            N_("Milliseconds a model call's tokens may wait in memory before the ledger writes "
            "them (in one statement with the others waiting): the most a crash may lose, "
            "and how late another instance's report sees them; a shutdown writes them at once.")),
    Setting("usage.person_day", "MERCURY_USAGE_PERSON_DAY", _Int(0, 10**12), 0,
            N_("Tokens (input and output) a person may use per UTC day, all conversations "
            "together; 0 is no allowance. A space's `budget.person_day` setting replaces it "
            "in that space.")),
    Setting("usage.person_month", "MERCURY_USAGE_PERSON_MONTH", _Int(0, 10**12), 0,
            N_("Tokens a person may use per UTC month; 0 is no allowance.")),
    Setting("usage.space_day", "MERCURY_USAGE_SPACE_DAY", _Int(0, 10**12), 0,
            N_("Tokens the people of a shared space may use together per UTC day; 0 is no "
            "allowance. A space's `budget.space_day` setting replaces it.")),
    Setting("usage.space_month", "MERCURY_USAGE_SPACE_MONTH", _Int(0, 10**12), 0,
            N_("Tokens the people of a shared space may use together per UTC month; 0 is none.")),
    Setting("usage.people", None, _PersonAllowances(), MappingProxyType({}),
            N_("Named people's own allowances, by person key as `GET /usage` shows it "
            "(`people:alice: {day: 50000, month: 1000000}`): each replaces the person "
            "allowance everyone has (`usage.person_*`, a space's `budget.person_*`) for that "
            "person only; 0 is none. An administrator's runtime value replaces it."),
            default_doc=N_("none")),
    Setting("bridges.max_message_age_s", "BRIDGE_MAX_MESSAGE_AGE_S", _Int(60, 604_800), 86_400,
            N_("Seconds a platform message may be old (by the time the platform stamped it) and "
            "still run; an older one, or one stamped more than five minutes ahead, is "
            "acknowledged and dropped. At most 7 days, so that a replay de-duplication has "
            "forgotten is refused as stale."), default_doc=N_("`86400` (1 day)")),
    Setting("bridges.live_answers", "BRIDGE_LIVE_ANSWERS", _Bool(), True,
            N_("Write answers in chats as they come (edits, a native stream or finished "
            "paragraphs, paced to each platform's limits), with buttons for confirmations "
            "and stop; off sends one message once the answer is complete. A space may set "
            "its own (`live_answers`).")),
    Setting("bridges.show_reasoning", "BRIDGE_SHOW_REASONING", _Bool(), False,
            N_("Show the model's reasoning in chats while an answer is written live: its latest "
            "line as the status, until the first words. Off, a chat sees \"Thinking…\".")),
    Setting("bridges.pairing_max_pending", "BRIDGE_PAIRING_MAX_PENDING", _Int(1, 10_000), 100,
            N_("Requests for access (pairing codes) one chat platform holds at once; past it a "
            "stranger is told to try later, so a flood can't fill the store.")),
    Setting("bridges.connection_lease_s", "BRIDGE_CONNECTION_LEASE_S", _Int(2, 60), 10,
            N_("Seconds a connection only one instance may hold (Discord's gateway) stays with "
            "an instance that stopped renewing it (it died, lost the state store or stalled); "
            "then another instance with the bridge on takes it over and resumes it. The "
            "holder renews every third of it.")),
    Setting("bridges.bot_turns", "BRIDGE_BOT_TURNS", _Int(1, 100), 3,
            N_("Turns a space runs in a row for a sender that writes back within "
            "`bridges.bot_reply_s` of each answer, with no one else writing between them (a "
            "bot loop, such as an echo bot's); past it, its messages are kept as ambient "
            "context only, until someone else writes.")),
    Setting("bridges.bot_reply_s", "BRIDGE_BOT_REPLY_S", _Float(0, inclusive=True), 3.0,
            N_("Seconds after an answer ends (or from when it first shows, while it is written) "
            "within which its asker's next message counts as a program's reply towards "
            "`bridges.bot_turns`.")),
    Setting("slack.enabled", "MERCURY_SLACK", _Bool(), False,
            N_("Run the Slack bridge: events at `POST /webhooks/slack`, or over Socket Mode.")),
    Setting("slack.mode", "SLACK_MODE", _Choice(SLACK_MODES), "http",
            N_("`http`: Slack posts events and button presses to `/webhooks/slack` (a public "
            "HTTPS URL, checked by the signing secret); `socket`: the bridge opens Socket "
            "Mode connections to Slack itself (no public URL; needs `SLACK_APP_TOKEN`), on "
            "every instance.")),
    Setting("slack.bot_token", "SLACK_BOT_TOKEN", _Text(raw=True), None,
            N_("The Slack app's bot token (`xoxb-…`)."), secret=True),
    Setting("slack.signing_secret", "SLACK_SIGNING_SECRET", _Text(raw=True), None,
            N_("The Slack app's signing secret, which every event is checked against (`http` "
            "mode)."), secret=True),
    Setting("slack.app_token", "SLACK_APP_TOKEN", _Text(raw=True), None,
            N_("The Slack app's app-level token (`xapp-…`, scope `connections:write`) that "
            "opens Socket Mode connections (`socket` mode)."), secret=True),
    Setting("slack.api_url", "SLACK_API_URL", _Url(base=True), "https://slack.com/api",
            N_("Slack's Web API address.")),
    _dm_policy("slack"),
    Setting("telegram.enabled", "MERCURY_TELEGRAM", _Bool(), False,
            N_("Run the Telegram bridge: updates at `POST /webhooks/telegram`.")),
    Setting("telegram.bot_token", "TELEGRAM_BOT_TOKEN", _Text(raw=True), None,
            N_("The bot's token from BotFather."), secret=True),
    Setting("telegram.webhook_secret", "TELEGRAM_WEBHOOK_SECRET", _Text(raw=True), None,
            N_("The secret token given to setWebhook, which every update must carry."),
            secret=True),
    Setting("telegram.api_url", "TELEGRAM_API_URL", _Url(base=True),
            "https://api.telegram.org/bot", N_("The Bot API's address, the token follows it.")),
    Setting("telegram.file_url", "TELEGRAM_FILE_URL", _Url(base=True),
            "https://api.telegram.org/file/bot", N_("Where the Bot API serves files.")),
    _dm_policy("telegram"),
    Setting("discord.enabled", "MERCURY_DISCORD", _Bool(), False,
            N_("Run the Discord bridge over the gateway.")),
    Setting("discord.bot_token", "DISCORD_BOT_TOKEN", _Text(raw=True), None,
            N_("The Discord bot's token."), secret=True),
    Setting("discord.api_url", "DISCORD_API_URL", _Url(base=True),
            "https://discord.com/api/v10", N_("Discord's REST API address.")),
    _dm_policy("discord"),
    Setting("whatsapp.enabled", "MERCURY_WHATSAPP", _Bool(), False,
            N_("Run the WhatsApp bridge: Cloud API events at `/webhooks/whatsapp`.")),
    Setting("whatsapp.access_token", "WHATSAPP_ACCESS_TOKEN", _Text(raw=True), None,
            N_("The Cloud API access token (a system user's)."), secret=True),
    Setting("whatsapp.app_secret", "WHATSAPP_APP_SECRET", _Text(raw=True), None,
            N_("The Meta app's secret, which every event's signature is checked against."),
            secret=True),
    Setting("whatsapp.verify_token", "WHATSAPP_VERIFY_TOKEN", _Text(raw=True), None,
            N_("The token the webhook's verification request must carry."), secret=True),
    Setting("whatsapp.phone_number_id", "WHATSAPP_PHONE_NUMBER_ID", _Text(), None,
            N_("The business phone number's id, which replies are sent from.")),
    Setting("whatsapp.api_url", "WHATSAPP_API_URL", _Url(base=True),
            "https://graph.facebook.com/v21.0", N_("The Graph API's address.")),
    _dm_policy("whatsapp"),
    Setting("teams.enabled", "MERCURY_TEAMS", _Bool(), False,
            N_("Run the Microsoft Teams bridge: activities at `POST /webhooks/teams`.")),
    Setting("teams.app_id", "TEAMS_APP_ID", _Text(), None,
            N_("The bot's Microsoft App ID (its Entra app registration's client id): the "
            "audience every incoming token must carry.")),
    Setting("teams.app_password", "TEAMS_APP_PASSWORD", _Text(raw=True), None,
            N_("The app registration's client secret, which replies' tokens are asked with."),
            secret=True),
    Setting("teams.tenant_id", "TEAMS_TENANT_ID", _Text(), None,
            N_("For a single-tenant bot: its Entra tenant id. Tokens are then asked from that "
            "tenant, and activities from any other tenant are ignored."), default_doc=N_("none")),
    Setting("teams.openid_url", "TEAMS_OPENID_URL", _Url(),
            "https://login.botframework.com/v1/.well-known/openidconfiguration",
            N_("The Bot Framework's OpenID metadata: the issuer and the keys incoming tokens "
            "are checked against.")),
    Setting("teams.token_url", "TEAMS_TOKEN_URL", _Url(), None,
            N_("Where the bot asks for its own tokens (OAuth client credentials)."),
            default_doc=N_("`https://login.microsoftonline.com/<tenant>/oauth2/v2.0/token`, "
            "the tenant `botframework.com` unless `teams.tenant_id` is set")),
    Setting("teams.service_urls", "TEAMS_SERVICE_URLS", _Origins(wildcard=False), (),
            N_("Origins an activity's `serviceUrl` may name besides the Bot Framework's own "
            "hosts (HTTPS on `smba.trafficmanager.net`, `botframework.com`, "
            "`teams.microsoft.com` and their US government clouds): a stand-in or emulator. "
            "Replies and the bot's token go nowhere else."), default_doc=N_("none")),
    _dm_policy("teams"),
    Setting("matrix.enabled", "MERCURY_MATRIX", _Bool(), False,
            N_("Run the Matrix bridge: a sync loop held as the bot's user.")),
    Setting("matrix.homeserver", "MATRIX_HOMESERVER", _Url(base=True), None,
            N_("The homeserver's client-server API address (`https://matrix.example.org`).")),
    Setting("matrix.user_id", "MATRIX_USER_ID", _Text(), None,
            N_("The bot's Matrix user id (`@mercury:example.org`).")),
    Setting("matrix.access_token", "MATRIX_ACCESS_TOKEN", _Text(raw=True), None,
            N_("The bot's access token."), secret=True),
    Setting("matrix.password", "MATRIX_PASSWORD", _Text(raw=True), None,
            N_("The bot's password, to log in with when no access token is set (each start "
            "logs in anew)."), secret=True),
    _dm_policy("matrix"),
    Setting("matrix.bot_users", "MATRIX_BOT_USERS", _Globs("user id"), (),
            N_("Matrix accounts that are programs (user ids, `*` and `?` as wildcards: "
            "`@*bot:example.org`): their messages never start a turn and reach the model only "
            "as ambient context, as every `m.notice` does."), default_doc=N_("none")),
    Setting("spaces", None, _Spaces(), MappingProxyType({}),
            N_("Per space (`slack:C123`, `telegram:-100123`, …): its admins and members, and "
            "its own `rate_limit`, `trigger` and `live_answers`."), default_doc=N_("none")),
    Setting("log.level", "MERCURY_LOG_LEVEL", _Choice(("debug", "info", "warning", "error")),
            "info", N_("The least severe log lines written.")),
    Setting("log.format", "MERCURY_LOG_FORMAT", _Choice(("text", "json")), "text",
            N_("`text` for people, `json` for log pipelines (one object per line).")),
    Setting("metrics.enabled", "MERCURY_METRICS", _Bool(), True,
            N_("Keep Prometheus metrics and serve them at `GET /metrics` (behind the bearer "
            "token).")),
    Setting("metrics.port", "MERCURY_METRICS_PORT", _PORT, None,
            N_("A port of its own for `GET /metrics` (0 picks a free one), without auth, for a "
            "network only the scraper reaches; the surface then serves none."),
            default_doc=N_("none")),
    Setting("mcp.servers", None, _McpServers(), MappingProxyType({}),
            N_("MCP servers whose tools the model is offered as `<server>_<tool>` (see "
            "docs/mcp.md)."), default_doc=N_("none")),
    Setting("mcp.tool_budget", "MERCURY_MCP_TOOL_BUDGET", _Int(1, 1000), 40,
            N_("Past this many tools in a turn (built-in ones included), MCP tools are offered "
            "through a search tool that loads the schemas it finds.")),
    Setting("tracing.capture_content", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
            _Bool(), False,
            N_("Put the messages a model call was sent and its answer on its span "
            "(`gen_ai.input.messages`, `gen_ai.output.messages`): people's words leave the "
            "service for the trace collector, so only where it may keep them.")),
    Setting("secret_key", "MERCURY_SECRET_KEY", _Text(raw=True), None,
            N_("The key the service signs and encrypts its own data with."), secret=True),
    Setting("services", None, _Services(), (),
            N_("REST services the model may call, with their operations."), default_doc=N_("none")),
)
# fmt: on


# --- loading ------------------------------------------------------------------------------


def load_settings(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Settings:
    """Read the settings from ``environ`` (default ``os.environ``) and the YAML file.

    Relative paths, the file's included, are taken from ``cwd`` (default the working
    directory). Raises :class:`ConfigurationError` on the first thing that is wrong.
    Reads the disk: call it at start-up, before the event loop runs, or in a thread.
    """
    settings, problems = read_settings(environ, cwd)
    if problems:
        raise ConfigurationError(problems[0])
    return settings


def read_settings(
    environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> tuple[Settings, list[str]]:
    """The settings as :func:`load_settings` reads them, and what is wrong across them.

    A file that can't be read at all (missing, not YAML, a secret in it) still raises
    :class:`ConfigurationError`. Every value that can't be read (in the environment or the
    file) and every rule between settings that doesn't hold (a bridge on without its secrets,
    workers on SQLite) is a problem in the list, in that order, the settings built anyway with
    the defaults in place of the unreadable values, so ``check-config`` can show them all.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    base = (Path.cwd() if cwd is None else cwd).absolute()
    config_file = _config_file(env, base)
    problems: list[str] = []
    file_values = _read_file(config_file, problems) if config_file is not None else {}

    values: dict[str, Any] = {}
    for setting in SETTINGS:
        if setting.env is not None and setting.env in env:
            try:
                values[setting.path] = _from_environment(setting, env[setting.env])
            except ConfigurationError as error:
                problems.append(str(error))
                values[setting.path] = file_values.get(setting.path, setting.default)
        elif setting.path in file_values:
            values[setting.path] = file_values[setting.path]
        else:
            values[setting.path] = setting.default

    values["data_dir"] = (base / values["data_dir"]).resolve()
    vault = values["wiki.vault_path"]
    values["wiki.vault_path"] = (base / vault).resolve() if vault else values["data_dir"] / "wiki"
    values["services"] = tuple(
        msgspec.structs.replace(service, client_secret=_service_secret(service, env))
        for service in values["services"]
    )
    values["model.fallbacks"] = tuple(
        msgspec.structs.replace(spec, api_key=env.get(spec.api_key_env) or None)
        if spec.api_key_env
        else spec
        for spec in values["model.fallbacks"]
    )
    values["mcp.servers"], missing = with_secrets(values["mcp.servers"], env)
    problems.extend(missing)
    for check in (
        _check_state_url,
        _check_workers,
        _check_memory,
        _check_model,
        _check_bridges,
        _check_trigger,
    ):
        try:
            check(values)
        except ConfigurationError as error:
            problems.append(str(error))
    return Settings(**_build("", Settings, values), config_file=config_file), problems


def _check_trigger(values: Mapping[str, Any]) -> None:
    for path, variable in (
        ("trigger.pattern", "MERCURY_TRIGGER_PATTERN"),
        ("trigger.name", "MERCURY_TRIGGER_NAME"),
    ):
        word = values[path]
        if word is not None and not trigger_word(word):
            raise ConfigurationError(
                f'{variable} ({path} in the file) needs a character besides "@", which is '
                "taken out before matching (so this word would match every message); give "
                "the assistant's name, such as Mercury."
            )


def _check_state_url(values: Mapping[str, Any]) -> None:
    state_url = values["state.url"]
    if state_url is not None and not state_url.startswith(("postgresql://", "postgres://")):
        # Never quoted: the URL carries a password.
        raise ConfigurationError(
            "MERCURY_STATE_URL must be a PostgreSQL URL, "
            "postgresql://user:password@host:port/database; unset it to keep the state in "
            "SQLite under the data directory."
        )


def _check_memory(values: Mapping[str, Any]) -> None:
    if values["memory.store"] == "qdrant" and values["memory.qdrant_url"] is None:
        raise ConfigurationError(
            'The memory store is "qdrant", which needs QDRANT_URL (memory.qdrant_url in the '
            "file); set it, or set MERCURY_MEMORY_STORE to edge or off."
        )


def _check_model(values: Mapping[str, Any]) -> None:
    if values["model.provider"] != "openai":
        return
    if values["openai.model"] is None:
        raise ConfigurationError(
            'The model provider is "openai", which needs OPENAI_MODEL (openai.model in the '
            "file), the model's name as the server lists it under /v1/models; set it."
        )
    if values["openai.embedding_model"] is None and values["memory.store"] != "off":
        raise ConfigurationError(
            'The model provider is "openai" and memory is on, which needs '
            "OPENAI_EMBEDDING_MODEL (openai.embedding_model in the file) to embed it; "
            "set it, or set MERCURY_MEMORY_STORE to off."
        )


#: Per bridge, the secrets it can't run without, by environment variable.
_BRIDGE_SECRETS: Final = {
    "slack": (
        ("slack.bot_token", "SLACK_BOT_TOKEN"),
        ("slack.signing_secret", "SLACK_SIGNING_SECRET"),
    ),
    # Socket Mode reads no signed requests: the app-level token opens its connections.
    "slack:socket": (
        ("slack.bot_token", "SLACK_BOT_TOKEN"),
        ("slack.app_token", "SLACK_APP_TOKEN"),
    ),
    "telegram": (
        ("telegram.bot_token", "TELEGRAM_BOT_TOKEN"),
        ("telegram.webhook_secret", "TELEGRAM_WEBHOOK_SECRET"),
    ),
    "discord": (("discord.bot_token", "DISCORD_BOT_TOKEN"),),
    "whatsapp": (
        ("whatsapp.access_token", "WHATSAPP_ACCESS_TOKEN"),
        ("whatsapp.app_secret", "WHATSAPP_APP_SECRET"),
        ("whatsapp.verify_token", "WHATSAPP_VERIFY_TOKEN"),
        ("whatsapp.phone_number_id", "WHATSAPP_PHONE_NUMBER_ID"),
    ),
    "teams": (
        ("teams.app_id", "TEAMS_APP_ID"),
        ("teams.app_password", "TEAMS_APP_PASSWORD"),
    ),
    "matrix": (
        ("matrix.homeserver", "MATRIX_HOMESERVER"),
        ("matrix.user_id", "MATRIX_USER_ID"),
    ),
}


_BRIDGE_NAMES: Final = {
    "slack": "Slack",
    "slack:socket": "Slack",
    "telegram": "Telegram",
    "discord": "Discord",
    "whatsapp": "WhatsApp",
    "teams": "Microsoft Teams",
    "matrix": "Matrix",
}


def _check_bridges(values: Mapping[str, Any]) -> None:
    """A bridge that is on runs only with every secret it needs."""
    for key, needed in _BRIDGE_SECRETS.items():
        bridge, _, mode = key.partition(":")
        if not values[f"{bridge}.enabled"] or (
            bridge == "slack" and values["slack.mode"] != (mode or "http")
        ):
            continue
        missing = [variable for path, variable in needed if not values[path]]
        if missing:
            raise ConfigurationError(
                f"The {_BRIDGE_NAMES[key]} bridge is on{' in Socket Mode' if mode else ''} but "
                f"{' and '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not set; set "
                f"{'it' if len(missing) == 1 else 'them'} in the environment, or turn the "
                "bridge off."
            )
    app_token = values["slack.app_token"]
    if values["slack.enabled"] and values["slack.mode"] == "socket" and app_token:
        if not app_token.startswith("xapp-"):
            raise ConfigurationError(
                "SLACK_APP_TOKEN is not an app-level token (those begin with xapp-); create "
                "one with the connections:write scope under the Slack app's Basic Information."
            )
    if values["matrix.enabled"] and not (
        values["matrix.access_token"] or values["matrix.password"]
    ):
        raise ConfigurationError(
            "The Matrix bridge is on but neither MATRIX_ACCESS_TOKEN nor MATRIX_PASSWORD is "
            "set; set the bot's access token (or its password) in the environment, or turn "
            "the bridge off."
        )


def _check_workers(values: Mapping[str, Any]) -> None:
    """Several processes share only what lives outside them: refuse the embedded stores."""
    workers = values["http.workers"]
    if workers <= 1:
        return
    if values["state.url"] is None:
        raise ConfigurationError(
            f"HTTP_SURFACE_WORKERS is {workers}, but the state is in SQLite under the data "
            "directory, which one process at a time may write; set MERCURY_STATE_URL to a "
            "PostgreSQL database, or run one worker."
        )
    if values["memory.store"] == "edge":
        raise ConfigurationError(
            f"HTTP_SURFACE_WORKERS is {workers}, but memory is on Qdrant Edge, which lives "
            "inside one process; set MERCURY_MEMORY_STORE=qdrant with QDRANT_URL (a Qdrant "
            "server), or MERCURY_MEMORY_STORE=off, or run one worker."
        )
    if values["metrics.enabled"] and values["metrics.port"] is not None:
        raise ConfigurationError(
            f"HTTP_SURFACE_WORKERS is {workers}, but MERCURY_METRICS_PORT asks each process "
            "for the same metrics port; unset it to scrape GET /metrics on the surface, "
            "which adds up every worker's metrics."
        )


def _build(prefix: str, cls: type[_Group], values: Mapping[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name in cls.__struct_fields__:
        path = f"{prefix}.{name}" if prefix else name
        if path in _GROUPS:
            group = _GROUPS[path]
            fields[name] = group(**_build(path, group, values))
        elif path in values:
            fields[name] = values[path]
    return fields


def _from_environment(setting: Setting, text: str) -> object:
    value = text if setting.kind.raw else text.strip()
    if value == "":
        # An empty variable means "not set", and still wins over the file.
        return setting.default
    try:
        return setting.kind.from_text(value)
    except _InvalidValueError as invalid:
        # Secrets are kept raw and never invalid, so no reason here can quote one.
        raise ConfigurationError(f"{setting.env} {invalid.reason}.") from None


def _service_secret(service: RestService, env: Mapping[str, str]) -> str | None:
    return env.get(service.secret_variable) or None


def _config_file(env: Mapping[str, str], cwd: Path) -> Path | None:
    named = env.get(CONFIG_FILE_VARIABLE)
    if named is None:
        for name in DEFAULT_CONFIG_FILES:
            candidate = cwd / name
            if candidate.is_file():
                return candidate
        return None
    named = named.strip()
    if named == "" or named.lower() == "none":
        return None
    path = cwd / named
    if not path.exists():
        raise ConfigurationError(
            f"{CONFIG_FILE_VARIABLE} names {path}, which doesn't exist; correct the path, "
            f"or set {CONFIG_FILE_VARIABLE}=none to read no file."
        )
    if not path.is_file():
        raise ConfigurationError(
            f"{CONFIG_FILE_VARIABLE} names {path}, which isn't a file; name a YAML file, "
            f"or set {CONFIG_FILE_VARIABLE}=none to read no file."
        )
    return path


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice instead of keeping the last."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                repeated = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base loader refuses it itself
                continue
            if repeated:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {_shown(key)} is given twice", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)


def _read_file(path: Path, problems: list[str]) -> dict[str, object]:
    """The values the file gives, by setting path, each read and checked; a key or value that
    is wrong is added to ``problems`` and left out."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigurationError(f"{path} isn't UTF-8 text; save it as UTF-8.") from None
    except OSError as error:
        raise ConfigurationError(f"{path} can't be read: {error.strerror}.") from None
    try:
        tree = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        raise ConfigurationError(f"{path} isn't valid YAML: {_yaml_problem(error)}.") from None
    if tree is None:  # empty, or only comments
        return {}
    if not isinstance(tree, dict):
        raise ConfigurationError(
            f"{path} must hold a mapping of sections (such as http: or ollama:) at the top, "
            f"not {_shown(tree)}."
        )
    _refuse_secrets(tree, path)
    values: dict[str, object] = {}
    _collect(tree, "", _key_tree(), path, values, problems)
    return values


def _yaml_problem(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"{error.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return str(error).replace("\n", " ")


def _key_tree() -> dict[str, Any]:
    """The keys the file may hold, as nested dictionaries whose leaves are settings."""
    tree: dict[str, Any] = {}
    for setting in SETTINGS:
        if not setting.in_file:
            continue
        *sections, leaf = setting.path.split(".")
        node = tree
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = setting
    return tree


def _collect(
    node: Mapping[object, object],
    prefix: str,
    known: Mapping[str, Any],
    file: Path,
    values: dict[str, object],
    problems: list[str],
) -> None:
    for key, value in node.items():
        dotted = f"{prefix}{key}"
        expected = known.get(key) if isinstance(key, str) else None
        if expected is None:
            candidates = [f"{prefix}{name}" for name in known]
            problems.append(_unknown_key(file, dotted, candidates))
        elif isinstance(expected, Setting):
            if _is_unset(value, expected.kind):
                continue  # an empty value means "not set", as in the environment
            try:
                values[expected.path] = expected.kind.from_yaml(value)
            except _InvalidValueError as invalid:
                problems.append(f"{file}: {dotted}{invalid.at} {invalid.reason}.")
            except _UnknownKeyError as unknown:
                where = [expected.path + name for name in unknown.known]
                problems.append(_unknown_key(file, expected.path + unknown.at, where))
        elif value is None:
            continue  # an empty section
        elif isinstance(value, Mapping):
            _collect(value, f"{dotted}.", expected, file, values, problems)
        else:
            problems.append(f"{file}: {dotted} must be a section of keys, not {_shown(value)}.")


def _is_unset(value: object, kind: _Kind) -> bool:
    if value is None or value == "":
        return True
    return isinstance(value, str) and not kind.raw and value.strip() == ""


def _unknown_key(file: Path, dotted: str, candidates: list[str]) -> str:
    message = f'{file}: unknown key "{dotted}"'
    close = difflib.get_close_matches(dotted, candidates, n=1)
    if close:
        return f'{message}; did you mean "{close[0]}"?'
    return f"{message}; see docs/configuration.md for the keys the file may hold."


def _refuse_secrets(tree: Mapping[object, object], file: Path) -> None:
    for setting in SETTINGS:
        if not setting.secret:
            continue
        for dotted in (setting.path, *setting.aliases):
            if _present(tree, dotted):
                raise ConfigurationError(_secret_in_file(file, dotted, setting.env))
    _refuse_secret_names(tree, "", file, None)


def _present(tree: Mapping[object, object], dotted: str) -> bool:
    node: object = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _refuse_secret_names(node: object, at: str, file: Path, service: str | None) -> None:
    if isinstance(node, list):
        for index, item in enumerate(node):
            if at == "services" and isinstance(item, Mapping):
                name = item.get("name")
                service = name if isinstance(name, str) and _SLUG.fullmatch(name) else "<NAME>"
            _refuse_secret_names(item, f"{at}[{index}]", file, service)
    elif isinstance(node, Mapping):
        for key, value in node.items():
            dotted = f"{at}.{key}" if at else str(key)
            if key in _SECRET_KEY_NAMES:
                variable = None
                if key == "client_secret" and service is not None:
                    variable = SERVICE_SECRET_VARIABLE.replace("<NAME>", service.upper())
                raise ConfigurationError(_secret_in_file(file, dotted, variable))
            # JSON schemas and the people list may well have a "password" property.
            if key == "parameters" or dotted == "directory.static_people":
                continue
            _refuse_secret_names(value, dotted, file, service)


def _secret_in_file(file: Path, dotted: str, variable: str | None) -> str:
    if variable is None:
        return (
            f"{file}: {dotted} looks like a secret, and secrets are read only from the "
            "environment; remove it from the file."
        )
    return (
        f"{file}: {dotted} is a secret, and secrets are read only from the environment; "
        f"remove it from the file and set the {variable} environment variable instead."
    )


# --- showing values -----------------------------------------------------------------------


def _lookup(settings: Settings, path: str) -> object:
    value: object = settings
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _plain(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ", ".join(str(item) for item in value) or "none"
    if isinstance(value, Mapping):
        shown = (f"{key}: {_plain(item)}" for key, item in value.items())
        return "; ".join(shown) or "none"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _given(group: _Group) -> dict[str, object]:
    """What a settings group holds beyond its defaults, nested groups included."""
    given: dict[str, object] = {}
    for name in group.__struct_fields__:
        value = getattr(group, name)
        if isinstance(value, _Group):
            value = _given(value)
        elif isinstance(value, tuple):
            value = list(value)
        if value not in (None, [], {}):
            given[name] = value
    return given


def _flow_yaml(value: object) -> str:
    text: str = yaml.safe_dump(value, default_flow_style=True, width=10_000, sort_keys=False)
    return text.removesuffix("\n...\n").strip()


def _describe_service(service: RestService) -> str:
    secret = "client secret set" if service.client_secret else "no client secret"
    count = len(service.operations)
    return f"{service.name} ({count} operation{'s' if count != 1 else ''}, {secret})"


def _default_text(setting: Setting, translate: Callable[[str], str] = N_) -> str:
    """The default as the reference shows it; ``translate`` gives ``--help`` its language."""
    if setting.default_doc is not None:
        return translate(setting.default_doc)
    if setting.default is None:
        return translate(N_("not set"))
    return f"`{_plain(setting.default)}`"


_SECTION_TITLES: Final = {
    "http": "HTTP surface",
    "data_dir": "Data directory",
    "state": "State store",
    "auth": "Authentication",
    "model": "Model server",
    "ollama": "Ollama",
    "openai": "OpenAI-compatible server",
    "defaults": "Defaults for people",
    "engine": "Engine",
    "chat": "Chat (`POST /chat` and files)",
    "rate_limit": "Rate limit",
    "wiki": "Wiki",
    "memory": "Memory",
    "session": "Sessions",
    "directory": "Directory",
    "access": "Access",
    "oidc": "OIDC provider",
    "trigger": "Triggers in shared spaces",
    "ambient": "Ambient context",
    "usage": "Usage and token allowances",
    "bridges": "Every chat bridge",
    "slack": "Slack bridge",
    "telegram": "Telegram bridge",
    "discord": "Discord bridge",
    "whatsapp": "WhatsApp bridge",
    "teams": "Microsoft Teams bridge",
    "matrix": "Matrix bridge",
    "spaces": "Spaces",
    "log": "Logs",
    "metrics": "Metrics",
    "mcp": "MCP servers",
    "tracing": "Traces",
    "secret_key": "Secret key",
    "services": "REST services",
}


def settings_reference() -> str:
    """The Markdown reference of every setting that ``docs/configuration.md`` carries."""
    lines: list[str] = []
    section = None
    for setting in SETTINGS:
        top = setting.path.split(".")[0]
        if top != section:
            section = top
            if lines:
                lines.append("")
            lines += [
                f"### {_SECTION_TITLES[top]}",
                "",
                "| Environment variable | YAML key | Type | Default | Meaning |",
                "|---|---|---|---|---|",
            ]
        variable = f"`{setting.env}`" if setting.env else "— (file only)"
        key = "— (secret: environment only)" if setting.secret else f"`{setting.path}`"
        lines.append(
            f"| {variable} | {key} | {setting.kind.summary} | {_default_text(setting)} "
            f"| {setting.doc} |"
        )
        if setting.path == "services":
            lines.append(
                f"| `{SERVICE_SECRET_VARIABLE}` | — (secret: environment only) | text, kept "
                "exactly | not set | The client secret of the service called `<name>`. |"
            )
    return "\n".join(lines) + "\n"


def help_text(tr: Translator) -> str:
    """Every environment variable with its default, for ``mercury-http serve --help``, in
    ``tr``'s language (``docs/configuration.md`` keeps the English of the same texts)."""
    width = 36
    heading = tr.gettext(
        "Settings (environment variables; every one that isn't a secret can also be set in "
        "mercury.yaml, see docs/configuration.md; an empty value means the default):"
    )
    lines = [*textwrap.wrap(heading, width=98), ""]

    def entry(name: str, text: str) -> None:
        wrapped = textwrap.wrap(text, width=98 - width)
        indent = " " * (width + 2)
        if len(name) <= width - 2:  # two spaces at least between a name and its text
            lines.append(f"  {name:<{width}}{wrapped[0]}")
        else:  # a name as wide as the column gets a line of its own, as argparse does
            lines.append(f"  {name}")
            lines.append(indent + wrapped[0])
        lines.extend(indent + more for more in wrapped[1:])

    entry(
        CONFIG_FILE_VARIABLE,
        tr.gettext(
            "The YAML file to read (default: ./mercury.yaml, else ./mercury.yml; none: no file)."
        ),
    )
    for setting in SETTINGS:
        if setting.env is None:
            continue
        default = _default_text(setting, tr.gettext)
        # Shown: a setting in serve --help; %(meaning)s is what it does, %(default)s its default.
        line = N_("%(meaning)s (default: %(default)s)")
        if setting.secret:
            # Shown: a secret setting in serve --help (it can't be set in the file).
            line = N_("%(meaning)s (default: %(default)s) Secret.")
        meaning = tr.gettext(setting.doc)
        values = {"meaning": meaning.replace("`", ""), "default": default.replace("`", "")}
        entry(setting.env, tr.gettext(line) % values)
    entry(
        SERVICE_SECRET_VARIABLE,
        tr.gettext(
            "The client secret of a service declared in the file (default: not set). Secret."
        ),
    )
    return "\n".join(lines) + "\n"
