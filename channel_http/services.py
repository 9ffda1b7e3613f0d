"""What a route handler reaches: :class:`Services`, opened once at start-up.

The composition root (:mod:`channel_http.app`) builds it and imports the routes; the routes
read it from ``request.app.state.services``. It lives in a module of its own so that neither
side imports the other back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from channel_http.protocols.ag_ui import InterruptCalls

if TYPE_CHECKING:
    from auth_providers import AuthChain
    from bridges.pipeline import PipelineStores
    from channel_http.bridging import Bridging
    from channel_http.metrics_server import MetricsServer
    from core.config.settings import Settings
    from core.engine.sessions import SessionManager
    from core.engine.transcript import Transcript
    from core.memory import CollectionNames
    from core.memory.embedder import Embedder
    from core.observe.metrics import Metrics
    from core.people.i18n import Catalogs
    from core.people.linking import Linking
    from core.people.people import People
    from core.people.person_settings import PersonSettings
    from core.spaces.routing import Router
    from core.state import Database
    from core.tools.logins import Logins
    from core.turn_logs import TurnLogs
    from core.workspace.files import PersonFiles
    from core.workspace.wiki import Vault


@dataclass
class Services:
    """Everything a handler reaches, opened once at start-up."""

    settings: Settings
    auth: AuthChain
    catalogs: Catalogs
    db: Database
    people: People
    person_settings: PersonSettings
    manager: SessionManager
    linking: Linking
    vault: Vault
    files: PersonFiles
    openapi: bytes
    collection_names: CollectionNames
    embedder: Embedder | None = None
    logins: Logins | None = None
    turn_logs: TurnLogs | None = None
    metrics: Metrics | None = None
    #: What people saw of their conversations, when instances share the state store:
    #: ``/conversation`` and ``/conversations`` read it instead of the memory archive.
    transcript: Transcript | None = None
    #: The models the settings name (chat, then embedding), when the settings built the
    #: model client; empty for a client given from outside.
    model_names: tuple[str, ...] = ()
    metrics_server: MetricsServer | None = None
    #: The stores of shared spaces (members, preferences, mutes, ambient talk).
    space_stores: PipelineStores | None = None
    #: What to do with a message in a space (mute, trigger, command, rate limit, ambient):
    #: the rule the bridges' pipeline follows, for ``POST /chat`` with a ``spaceId``.
    router: Router | None = None
    #: The chat bridges and their pipeline, once the lifespan has started them.
    bridging: Bridging | None = None
    #: The tool call each open AG-UI interrupt answers (``POST /ag-ui``).
    interrupt_calls: InterruptCalls = field(default_factory=InterruptCalls)
    started: float = field(default_factory=time.monotonic)

    async def memory_reachable(self) -> bool:
        memory = self.manager.memory
        if memory is None:
            return False
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                return await memory.reachable()
        return False
