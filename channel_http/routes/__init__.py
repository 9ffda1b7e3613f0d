"""The routes of the surface, one module per family.

Each handler reads the caller the middleware settled (``handling``), decodes its input at the
edge, asks the core, and answers JSON or a stream: ``turn`` (``POST /turn``, its rejoining,
``POST /confirm``), ``chat`` (``POST /chat``, a turn answered in JSON), ``me`` (``/me``,
``/link``), ``connections`` (``/me/connections``, a person's MCP sign-ins), ``records``
(what a person reads back: confirmations, the tool log, conversations, memory, the wiki),
``about`` (version, contract, health, manifest), ``spaces``, ``pairing``, ``webhooks`` (the
chat platforms' deliveries), ``login_callback`` (with the OAuth client metadata document),
``probes`` (liveness, readiness, metrics) and ``ui`` (the reference browser UI). How a turn's
events are written on the wire is not here but in :mod:`channel_http.protocols`.
"""

from channel_http.routes import (
    about,
    chat,
    connections,
    handling,
    login_callback,
    me,
    pairing,
    probes,
    records,
    spaces,
    turn,
    ui,
    webhooks,
)

__all__ = [
    "about",
    "chat",
    "connections",
    "handling",
    "login_callback",
    "me",
    "pairing",
    "probes",
    "records",
    "spaces",
    "turn",
    "ui",
    "webhooks",
]
