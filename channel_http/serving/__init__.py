"""The serving process around the application: what ``serve`` sets up before uvicorn runs.

``connections`` (what a connection may cost before a request reaches the application, and
uvicorn's options), ``accept`` (every waiting connection accepted at once), ``collector``
(when the process collects cyclic garbage), ``switching`` (how soon the loop hands the
interpreter to a thread) and ``logs`` (the process's log handler).

The modules are imported on first use (PEP 562): ``mercury-http chat`` reaches ``logs`` through
here and must not pay for uvicorn's protocol classes.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["accept", "collector", "connections", "logs", "switching"]


def __getattr__(name: str) -> ModuleType:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
