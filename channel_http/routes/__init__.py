"""The routes of the surface, one module per family.

Each handler reads the caller the middleware settled (``handling``), decodes its input at the
edge, asks the core, and answers JSON or a stream: ``turn`` (``POST /turn``, its rejoining,
``POST /confirm``), ``ag_ui`` (``POST /ag-ui``, a turn as an AG-UI run), ``chat``
(``POST /chat``, a turn answered in JSON), ``me`` (``/me``, ``/link``), ``records`` (what a
person reads back: confirmations, the tool log, conversations, memory, the wiki), ``about``
(version, contract, health, manifest), ``spaces``, ``pairing``, ``webhooks`` (the chat
platforms' deliveries), ``login_callback``, ``probes`` (liveness, readiness, metrics), ``ui``
(the reference browser UI) and ``ui_stream`` (turns as the AI SDK's UI message stream, for
``useChat``). How a turn's events are written on the wire is not here but in
:mod:`channel_http.protocols`.
"""

from channel_http.routes import (
    about,
    ag_ui,
    chat,
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
    webhooks,
)

__all__ = [
    "about",
    "ag_ui",
    "chat",
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
    "webhooks",
]
