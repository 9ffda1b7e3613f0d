"""The routes of the surface, one module per family.

Each handler reads the caller the middleware settled (``handling``), decodes its input at the
edge, asks the core, and answers JSON or a stream: ``turn`` (``POST /turn``, its rejoining,
``POST /confirm``, ``POST /confirmations/{id}``), ``ag_ui`` (``POST /ag-ui``, a turn as an
AG-UI run), ``chat`` (``POST /chat``, a turn answered in JSON), ``me`` (``/me``, ``/link``),
``connections`` (``/me/connections``, a person's MCP sign-ins), ``records`` (what a person
reads back: confirmations, the tool log, conversations, memory, the wiki), ``about`` (version,
contract, health, manifest), ``spaces``, ``pairing``, ``webhooks`` (the chat platforms'
deliveries), ``login_callback`` (with the OAuth client metadata document), ``probes``
(liveness, readiness, metrics), ``usage`` (the usage ledger, read), ``ui`` (the reference
browser UI) and ``ui_stream`` (turns as the AI SDK's UI message stream, for ``useChat``). How a
turn's events are written on the wire is not here but in :mod:`channel_http.protocols`.
"""

from channel_http.routes import (
    about,
    ag_ui,
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
    ui_stream,
    usage,
    webhooks,
)

__all__ = [
    "about",
    "ag_ui",
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
    "ui_stream",
    "usage",
    "webhooks",
]
