"""The composition root: the only place that builds adapters and wires them together.

:func:`build_app` checks what can be checked before the server starts (settings, auth
providers) and returns the Litestar application; its start-up hook opens what needs the
event loop (the state store, the vault, the memory store) into :class:`Services`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from litestar import Litestar

from auth_providers import AuthChain, load_providers
from bridges.build import build_bridges
from bridges.holding import ConnectionLeases
from bridges.port import PlatformBridge, SharedStateBridge
from channel_http.access_log import RequestLog
from channel_http.bridging import open_space_stores, start_bridging
from channel_http.errors import EXCEPTION_HANDLERS
from channel_http.metrics_server import MetricsServer
from channel_http.middleware import CorsMiddleware
from channel_http.paths import CanonicalPaths, RouteTemplates
from channel_http.requests import MAX_BODY
from channel_http.routes import about, ag_ui, chat, me, records, turn, ui_stream
from channel_http.routes.connections import connection_routes
from channel_http.routes.handling import authenticated_router
from channel_http.routes.login_callback import login_router, public_paths, redirect_uri
from channel_http.routes.pairing import pairing_routes
from channel_http.routes.probes import (
    fetch_hint,
    livez,
    metrics_route,
    missing_models,
    model_server,
    readyz,
)
from channel_http.routes.probes import model_names as probe_model_names
from channel_http.routes.spaces import space_routes
from channel_http.routes.ui import ui_router
from channel_http.routes.usage import usage_routes
from channel_http.routes.webhooks import webhook, webhook_interactions
from channel_http.services import Services
from channel_http.tracing import traced
from core.clock import Clock, system_clock
from core.config.settings import ConfigurationError, Settings, dm_policies
from core.engine.confirmations import ConfirmationStore, ResumeSlots
from core.engine.conversation_order import ConversationOrder
from core.engine.sessions import EngineLimits, SessionManager
from core.engine.tool_log import ToolLog
from core.engine.transcript import Transcript
from core.memory import CollectionNames, MemoryStore
from core.memory.archive import ArchiveWriter
from core.memory.capture import Capture
from core.memory.edge import EdgeStore
from core.memory.embedder import Embedder, OllamaEmbedder, OpenAIEmbedder
from core.model import FallbackModel, OllamaModel, OpenAIModel
from core.observe.metrics import Metrics, measured
from core.people.directory import Directory, DirectoryConfigurationError
from core.people.directory_static import StaticDirectory
from core.people.i18n import Catalogs
from core.people.linking import Linking
from core.people.pairing import Pairing
from core.people.people import People
from core.people.person_settings import PersonSettings
from core.rate_limits import rate_limiter
from core.spaces.routing import Router
from core.state import Database, connect
from core.tools.builtin_plugins import builtin_plugins
from core.tools.file_tools import files_plugin
from core.tools.logins import Logins
from core.tools.mcp import McpServers, McpSignIn
from core.tools.memory_tools import memory_plugin
from core.tools.registry import Plugin, ToolRegistry
from core.tools.rest_plugin import rest_plugin
from core.tools.space_tools import space_plugins
from core.turn_logs import MemoryTurnLogs, SharedTurnLogs, TurnLogs
from core.usage import Budgets, PersonAllowances, UsageLedger
from core.workspace.files import FileLimits, PersonFiles
from core.workspace.wiki import Vault

if TYPE_CHECKING:
    from litestar.types import ASGIApp

    from core.model import ModelClient

log = logging.getLogger("mercury.http")

#: The channel contract this surface is written for, as a literal: never the core's
#: constant, so an old channel can't claim a newer contract.
CHANNEL_API_VERSION: Final = 6


def _openapi_path() -> Path:
    """The contract document: beside this module in the wheel, at the root of a checkout."""
    here = Path(__file__).resolve().parent
    shipped = here / "openapi.yaml"
    return shipped if shipped.is_file() else here.parent / "openapi.yaml"


OPENAPI_PATH: Final = _openapi_path()


@dataclass(frozen=True, slots=True)
class HttpChannel:
    """The HTTP channel as the core sees it: a name and a contract version."""

    name: str = "http"
    api_version: int = CHANNEL_API_VERSION


def build_auth(settings: Settings) -> AuthChain:
    """The auth chain, or a ConfigurationError saying why no provider loaded."""
    if not settings.auth.providers:
        raise ConfigurationError(
            "No auth provider is configured: set MERCURY_AUTH (for example to static) "
            "and the provider's settings (AUTH_STATIC_TOKENS)."
        )
    chain, reasons = load_providers(
        settings.auth.providers,
        static_tokens=settings.auth.static_tokens,
        oidc_issuer=settings.oidc.issuer,
        oidc_audience=settings.oidc.audience,
        oidc_algorithms=settings.oidc.algorithms,
        oidc_leeway_s=settings.oidc.leeway_s,
        oidc_allow_http=settings.oidc.allow_http_issuer,
        log=log,
    )
    if chain is None:
        raise ConfigurationError(
            "No auth provider could be loaded, so the surface stays closed: " + "; ".join(reasons)
        )
    return chain


def build_directory(settings: Settings) -> Directory | None:
    """The directory of people, or None when the instance has none."""
    raw = settings.directory.static_people
    if raw is None:
        return None
    try:
        return StaticDirectory.from_env(raw)
    except DirectoryConfigurationError as error:
        raise ConfigurationError(str(error)) from None


def build_app(
    settings: Settings,
    *,
    model: ModelClient | None = None,
    clock: Clock = system_clock,
    auth: AuthChain | None = None,
    plugins: Sequence[Plugin] = (),
    extra_routes: Sequence[Any] = (),
    memory: MemoryStore | None = None,
    directory: Directory | None = None,
    dev_token: str | None = None,
    bridges: Sequence[PlatformBridge] | None = None,
    mcp_targets: Mapping[str, Any] | None = None,
) -> Litestar:
    """The application for ``settings``; raises ConfigurationError before anything opens.

    ``extra_routes`` are mounted behind the same authentication (benchmark baselines);
    ``dev_token`` is what the browser UI fills in for a browser on this machine (``--dev``);
    ``bridges`` replaces the chat bridges the settings turn on; ``mcp_targets`` stands in
    for configured MCP servers' URLs or commands (in-process servers, for tests).
    """
    auth = auth or build_auth(settings)
    chat_bridges = list(bridges) if bridges is not None else build_bridges(settings)
    directory = directory or build_directory(settings)
    catalogs = Catalogs.load()
    public_url = settings.http.public_url
    logins = Logins(
        secret_key=settings.secret_key,
        clock=clock,
        redirect_uri=redirect_uri(public_url) if public_url else None,
    )
    mcp_sign_in = McpSignIn(logins, public_url=public_url)
    plugins = (*plugins, *(rest_plugin(service, logins) for service in settings.services))
    metrics = Metrics() if settings.metrics.enabled else None
    mcp_servers = build_mcp(settings, metrics, mcp_targets, sign_in=mcp_sign_in)

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        services = await open_services(
            settings,
            auth,
            catalogs,
            directory,
            model=model,
            clock=clock,
            plugins=plugins,
            memory=memory,
            metrics=metrics,
            mcp=mcp_servers,
        )
        await logins.open(services.db)
        services.logins = logins
        services.mcp_sign_in = mcp_sign_in
        if services.space_stores is not None:
            leases = ConnectionLeases(
                services.db, lease_s=settings.bridges.connection_lease_s, clock=clock
            )
            await leases.ensure_schema()
            for bridge in chat_bridges:
                if isinstance(bridge, SharedStateBridge):
                    await bridge.share_state(services.db, clock=clock)
            services.bridging = start_bridging(
                chat_bridges,
                services.space_stores,
                settings=settings,
                manager=services.manager,
                people=services.people,
                person_settings=services.person_settings,
                catalogs=catalogs,
                files=services.files,
                clock=clock,
                leases=leases,
            )
            if metrics is not None:
                metrics.readings.held_connections = services.bridging.held_connections
        app.state.services = services
        if services.model_names:
            await check_models(settings, services.model_names)
        if metrics is not None and settings.metrics.port is not None:
            services.metrics_server = MetricsServer(
                metrics, settings.http.host, settings.metrics.port
            )
            log.info("Metrics are served on port %d.", services.metrics_server.port)
        try:
            yield
        finally:
            await close_services(services)

    public: list[Any] = [
        about.version,
        about.openapi_document,
        livez,
        readyz,
        webhook,
        webhook_interactions,
    ]
    if settings.http.ui:
        public.append(ui_router(settings, dev_token=dev_token))
    authenticated = [
        turn.turn,
        turn.turn_events,
        ag_ui.ag_ui_run,
        chat.chat,
        turn.confirm,
        turn.answer_confirmation,
        ui_stream.ui_stream,
        ui_stream.ui_stream_resume,
        me.me,
        me.patch_me,
        me.link,
        about.health,
        about.manifest,
        records.confirmations,
        records.tool_log,
        records.wiki_list,
        records.wiki_read,
        records.wiki_grep,
        records.conversation,
        records.conversations,
        records.memory_scroll,
        *space_routes,
        *pairing_routes,
        *usage_routes,
        *connection_routes,
        *extra_routes,
    ]
    if metrics is not None and settings.metrics.port is None:
        authenticated.append(metrics_route)
    # The login callback exists only where people's browsers can reach it.
    login_routes = [login_router(public_url, logins, mcp_sign_in)] if public_url else []
    app = Litestar(
        route_handlers=[*public, *login_routes, authenticated_router(authenticated)],
        lifespan=[lifespan],
        exception_handlers=EXCEPTION_HANDLERS,
        request_max_body_size=MAX_BODY,
        openapi_config=None,
        debug=False,
        logging_config=None,
    )
    app.state.metrics = metrics
    return app


def with_cors(app: Litestar, settings: Settings) -> ASGIApp:
    """The application behind the CORS layer and the request log, as the server runs it.

    Outermost, the path is made canonical once, so the preflight, the route and the request
    log agree on variants such as ``/turn/`` or ``//turn`` (channel_http/paths.py).
    """
    public_url = settings.http.public_url
    # The plain-text login pages carry no CORS and answer no preflight.
    bare = public_paths(public_url) if public_url else frozenset()
    routes = RouteTemplates(route.path for route in app.routes)
    cors = CorsMiddleware(app, settings.http.cors_origin, routes, bare=bare)
    logged = RequestLog(cors, routes, getattr(app.state, "metrics", None))
    return CanonicalPaths(traced(logged, routes))


async def open_services(
    settings: Settings,
    auth: AuthChain,
    catalogs: Catalogs,
    directory: Directory | None,
    *,
    model: ModelClient | None,
    clock: Clock,
    plugins: Sequence[Plugin] = (),
    memory: MemoryStore | None = None,
    metrics: Metrics | None = None,
    mcp: McpServers | None = None,
) -> Services:
    data_dir = settings.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    db = measured(
        await connect(
            settings.state.url,
            data_dir,
            pool_size=settings.state.pool_size,
            busy_timeout_s=settings.state.busy_timeout_s,
            connect_timeout_s=settings.state.connect_timeout_s,
        ),
        "state",
        metrics,
    )
    vault = Vault(settings.wiki.vault_path, db=db)
    await vault.init()
    pairing = Pairing(db, clock=clock, max_pending=settings.bridges.pairing_max_pending)
    await pairing.ensure_schema()
    people = People(
        directory,
        access_unknown=settings.access.unknown,
        dm_policies=dm_policies(settings),
        admitted=pairing,
        clock=clock,
    )
    person_settings = PersonSettings(db, clock=clock)
    linking = Linking(db, people, clock=clock)
    confirmations = ConfirmationStore(db, clock=clock)
    tool_log = ToolLog(db, clock=clock)
    limiter = rate_limiter(
        db,
        settings.rate_limit.per_user,
        timedelta(milliseconds=settings.rate_limit.window_ms),
        clock=clock,
    )
    resume_slots = ResumeSlots(db, dict[str, str], clock=clock)
    space_stores = await open_space_stores(db, settings, people, clock, pairing=pairing)
    # The schemas are migrated now, before the first request, whichever instance is first.
    await person_settings.ensure_schema()
    await linking.ensure_schema()
    await confirmations.ensure_schema()
    await tool_log.ensure_schema()
    await limiter.ensure_schema()
    await resume_slots.ensure_schema()
    chat_model = model or build_model(settings, metrics)
    model_names = () if model is not None else probe_model_names(settings, memory_on=False)
    memory = measured(memory or build_memory(settings), "memory", metrics)
    archive: ArchiveWriter | None = None
    capture: Capture | None = None
    embedder: Embedder | None = None
    memory_plugins: tuple[Plugin, ...] = ()
    if memory is not None:
        embedder = build_embedder(settings)
        archive = ArchiveWriter(
            memory,
            embedder,
            db=db,
            queue_size=settings.memory.archive_queue_size,
            clock=clock,
            linger_s=settings.memory.archive_linger_ms / 1000,
        )
        await archive.start()  # ensures the collections in the background, never blocks
        if model is None:
            model_names = probe_model_names(settings, memory_on=True)
        if metrics is not None:
            metrics.readings.archive_depth = lambda: archive.pending if archive else 0
            metrics.readings.archive_spilled = lambda: archive.spilled if archive else 0
        capture = Capture(chat_model, archive, memory, vault)
        memory_plugins = (memory_plugin(memory, archive, embedder),)
    files = PersonFiles(
        settings.wiki.vault_path,
        FileLimits(
            max_file_bytes=settings.chat.max_file_bytes,
            max_turn_bytes=settings.chat.max_turn_bytes,
        ),
    )
    registry = ToolRegistry(
        (
            *builtin_plugins(vault=vault, person_settings=person_settings),
            files_plugin(files, chat_model.accepts_images),
            *memory_plugins,
            *space_plugins(
                space_stores.preferences,
                space_stores.mutes,
                space_stores.spaces,
                settings=space_stores.settings,
            ),
            *plugins,
        ),
        access=settings.access.plugins,
        sources=(mcp,) if mcp is not None else (),
        tool_budget=settings.mcp.tool_budget,
    )
    if mcp is not None:
        mcp.start_warming()
    session = settings.session
    resume_chars = settings.http.resume_max_chars
    order: ConversationOrder | None = None
    if db.shared:  # instances share the store: a conversation's turns queue across them
        order = ConversationOrder(db, lease_s=settings.state.lease_s)
        await order.start()
    ledger: UsageLedger | None = None
    budgets: Budgets | None = None
    if settings.usage.ledger:
        ledger = UsageLedger(db, clock=clock, flush_s=settings.usage.flush_ms / 1000)
        await ledger.ensure_schema()
        allowances = PersonAllowances(db, settings, clock=clock)
        await allowances.ensure_schema()
        budgets = Budgets(ledger, settings, space_stores.settings, allowances=allowances)
        if metrics is not None:
            metrics.readings.ledger_writes = ledger.counts
    manager = SessionManager(
        model=chat_model,
        catalogs=catalogs,
        registry=registry,
        confirmations=confirmations,
        resume_slots=resume_slots,
        tool_log=tool_log,
        person_settings=person_settings,
        rate_limiter=limiter,
        linking=linking,
        memory=memory,
        archive=archive,
        capture=capture,
        limits=EngineLimits(
            max_steps=settings.engine.max_steps,
            think=settings.ollama.think,
            resume_max_chars=session.resume_max_chars if resume_chars is None else resume_chars,
            idle_timeout_s=session.idle_timeout_ms / 1000,
            idle_check_s=session.idle_check_interval_ms / 1000,
            capture_threshold=session.capture_message_threshold,
            trace_content=settings.tracing.capture_content,
        ),
        clock=clock,
        order=order,
        metrics=metrics,
        ledger=ledger,
        budgets=budgets,
    )
    manager.start_background()
    return Services(
        settings=settings,
        auth=auth,
        catalogs=catalogs,
        db=db,
        people=people,
        person_settings=person_settings,
        manager=manager,
        linking=linking,
        vault=vault,
        files=files,
        openapi=OPENAPI_PATH.read_bytes(),
        collection_names=collection_names(settings),
        embedder=embedder,
        turn_logs=await open_turn_logs(settings.http.rejoin_s, db, clock),
        metrics=metrics,
        model_names=model_names,
        transcript=Transcript(db) if order is not None else None,
        space_stores=space_stores,
        mcp=mcp,
        router=Router(
            settings=settings,
            engine=manager,
            people=people,
            person_settings=person_settings,
            spaces=space_stores.spaces,
            preferences=space_stores.preferences,
            mutes=space_stores.mutes,
            ambient=space_stores.ambient,
            clock=clock,
            space_settings=space_stores.settings,
        ),
    )


async def open_turn_logs(grace_s: float, db: Database, clock: Clock) -> TurnLogs | None:
    """Where rejoinable turns keep their events: none with rejoining off; the store when shared."""
    if not grace_s:
        return None
    if not db.shared:
        return MemoryTurnLogs(grace_s, clock=clock)
    shared = SharedTurnLogs(db, grace_s, clock=clock)
    await shared.start()
    return shared


async def check_models(settings: Settings, names: tuple[str, ...]) -> None:
    """Ask the model server once, bounded, whether it has ``names``; warn about any missing."""
    missing = await missing_models(settings, names, 3.0)
    server = model_server(settings)
    if missing is None:
        where = "OPENAI_BASE_URL" if settings.model.provider == "openai" else "OLLAMA_HOST"
        log.warning(
            "%s doesn't answer, so whether it has %s is unknown; start it, or set %s to "
            "where it runs.",
            server,
            " and ".join(names),
            where,
        )
    elif missing:
        log.warning(
            "%s lacks the model%s %s; %s",
            server,
            "s" if len(missing) > 1 else "",
            ", ".join(missing),
            fetch_hint(settings, missing),
        )


def build_mcp(
    settings: Settings,
    metrics: Metrics | None,
    targets: Mapping[str, Any] | None = None,
    *,
    sign_in: McpSignIn | None = None,
) -> McpServers | None:
    """The configured MCP servers, None when there are none; nothing connects yet.

    An ``auth: oauth`` server needs MERCURY_SECRET_KEY to seal people's tokens with
    (ConfigurationError without one, as for a REST service's login).
    """
    servers = settings.mcp.servers
    if not servers:
        return None
    oauth = [name for name, server in servers.items() if server.auth == "oauth"]
    if sign_in is not None:
        for name in oauth:
            sign_in.check(name)
    return McpServers(servers, sign_in=sign_in if oauth else None, metrics=metrics, targets=targets)


def collection_names(settings: Settings) -> CollectionNames:
    return CollectionNames(
        verbatim=settings.memory.collections.verbatim,
        episodic=settings.memory.collections.episodic,
        semantic=settings.memory.collections.semantic,
    )


def build_model(settings: Settings, metrics: Metrics | None = None) -> ModelClient:
    """The chat model on the server ``MERCURY_MODEL_PROVIDER`` names, followed by
    ``model.fallbacks`` when there are any."""
    first = _model_client(settings, settings.model.provider, None, None, None)
    if not settings.model.fallbacks:
        return first
    chain = [first]
    for spec in settings.model.fallbacks:
        chain.append(
            _model_client(settings, spec.provider, spec.model, spec.base_url, spec.api_key)
        )
    return FallbackModel(
        chain,
        first_chunk_timeout_s=settings.model.first_chunk_timeout_s,
        cooldown_s=settings.model.fallback_cooldown_s,
        on_failure=None if metrics is None else metrics.model_failed,
    )


def _model_client(
    settings: Settings,
    provider: str,
    model: str | None,
    base_url: str | None,
    api_key: str | None,
) -> ModelClient:
    """One chat model; ``None`` takes the provider's own setting."""
    if provider == "openai":
        openai = settings.openai
        name = model or openai.model
        if name is None:  # the settings refuse this already
            raise ConfigurationError("MERCURY_MODEL_PROVIDER=openai needs OPENAI_MODEL.")
        return OpenAIModel(
            base_url or openai.base_url,
            name,
            api_key=api_key if model is not None else openai.api_key,
            read_timeout_s=openai.timeout_s,
            connect_timeout_s=openai.connect_timeout_s,
        )
    return OllamaModel(
        base_url or settings.ollama.host,
        model or settings.ollama.model,
        read_timeout_s=settings.ollama.timeout_s,
        connect_timeout_s=settings.ollama.connect_timeout_s,
    )


def build_embedder(settings: Settings) -> Embedder:
    """The embedder for memory, on the same kind of server as the chat model."""
    if settings.model.provider == "openai":
        openai = settings.openai
        if openai.embedding_model is None:  # the settings refuse this already
            raise ConfigurationError(
                "MERCURY_MODEL_PROVIDER=openai with memory on needs OPENAI_EMBEDDING_MODEL."
            )
        return OpenAIEmbedder(
            openai.embedding_base_url or openai.base_url,
            openai.embedding_model,
            api_key=openai.api_key,
        )
    return OllamaEmbedder(settings.ollama.host, settings.ollama.embedding_model)


def build_memory(settings: Settings) -> MemoryStore | None:
    """The memory store the settings name; None when memory is off."""
    names = collection_names(settings)
    if settings.memory.store == "edge":
        return EdgeStore(
            settings.data_dir / "qdrant-edge",
            names,
            merge_above=settings.memory.edge_merge_above,
            search_ef=settings.memory.edge_search_ef,
        )
    if settings.memory.store == "qdrant":
        if settings.memory.qdrant_url is None:  # the settings refuse this already
            raise ConfigurationError("MERCURY_MEMORY_STORE=qdrant needs QDRANT_URL.")
        # Imported here: qdrant-client takes about a second to import, which every start
        # of a server that keeps its memory elsewhere (or nowhere) would pay.
        from core.memory.qdrant import QdrantStore

        return QdrantStore.remote(
            settings.memory.qdrant_url,
            names,
            api_key=settings.memory.qdrant_api_key,
            timeout_s=settings.memory.qdrant_timeout_s,
            retries=settings.memory.qdrant_retries,
        )
    return None


async def close_services(services: Services) -> None:
    if services.metrics_server is not None:
        services.metrics_server.close()
    manager = services.manager
    await manager.stop_turns()
    if services.bridging is not None:
        await services.bridging.close()
    if services.mcp is not None:
        await services.mcp.close()
    if manager.archive is not None:
        left = await manager.archive.flush(timeout_s=5.0)
        if left:
            log.info("%d memory writes kept in SQLite for the next start", left)
    if services.embedder is not None:
        await services.embedder.close()
    if manager.memory is not None:
        await manager.memory.close()
    await manager.model.close()
    services.vault.close()
    if services.turn_logs is not None:
        await services.turn_logs.close()
    if manager.ledger is not None:
        await manager.ledger.close()  # the calls of the last flush window
    if manager.order is not None:
        await manager.order.stop()
    await services.db.close()
