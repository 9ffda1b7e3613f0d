"""Mercury's HTTP surface: one conversational turn per request, streamed as Server-Sent Events.

The names below are imported on first use (PEP 562): ``mercury-http chat`` runs in this
package too, and must not pay for loading the server (the memory stores, the model client).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from channel_http.app import CHANNEL_API_VERSION, HttpChannel, build_app, with_cors

__all__ = ["CHANNEL_API_VERSION", "HttpChannel", "build_app", "with_cors"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("channel_http.app"), name)
    raise AttributeError(f"module 'channel_http' has no attribute {name!r}")
