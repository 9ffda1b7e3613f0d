"""What anyone may ask of the server itself: its version, its contract, its health, its tools.

``GET /version`` and ``GET /openapi.yaml`` answer without auth; ``GET /health`` and
``GET /manifest`` behind it.
"""

from __future__ import annotations

import asyncio
import resource
import time
from typing import TYPE_CHECKING, Any

from litestar import Response, get

from channel_http.routes.handling import AnyRequest, caller_of, services_of
from core.version import PLUGIN_API_VERSION, core_version

if TYPE_CHECKING:
    pass


@get("/version", sync_to_thread=False)
def version() -> dict[str, Any]:
    return {"ok": True, "version": core_version()}


@get("/openapi.yaml", sync_to_thread=False)
def openapi_document(request: AnyRequest) -> Response[bytes]:
    # Litestar appends the charset to a text/ media type itself: naming it here doubled it.
    return Response(services_of(request).openapi, media_type="text/yaml")


@get("/health")
async def health(request: AnyRequest) -> dict[str, Any]:
    services = services_of(request)
    ollama_ok, qdrant_ok = await asyncio.gather(
        services.manager.model.reachable(), services.memory_reachable()
    )
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "ok": True,
        "uptimeSeconds": round(time.monotonic() - services.started, 3),
        "memory": {"rss": _rss_bytes(usage.ru_maxrss)},
        "qdrantReachable": qdrant_ok,
        "ollamaReachable": ollama_ok,
    }


def _rss_bytes(fallback_kib: int) -> int:
    try:
        with open("/proc/self/statm", "rb") as statm:  # current, not peak
            pages = int(statm.read().split()[1])
        return pages * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return fallback_kib * 1024


@get("/manifest")
async def manifest(request: AnyRequest) -> dict[str, Any]:
    caller = caller_of(request)
    registry = services_of(request).manager.registry
    return {"ok": True, "manifest": registry.manifest(caller.person, PLUGIN_API_VERSION)}
