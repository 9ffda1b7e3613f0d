"""What operators' tools ask: the liveness and readiness probes and the Prometheus metrics.

``GET /livez`` answers as long as the process serves. ``GET /readyz`` asks the state store,
the memory store and the model host, each within its bound, and turns 503 the moment the
shutdown begins, so a balancer stops sending turns while open streams drain; when a bridge
holds a connection only one instance may hold (Discord's gateway), its ``connections`` say
whether this instance holds it or stands by (#39). Both are
public and cheap. ``GET /metrics`` is the Prometheus text format: behind the bearer token on
the surface, or on a port of its own without auth (:mod:`channel_http.metrics_server`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any, Final

from litestar import Request, Response, get
from prometheus_client import CollectorRegistry, generate_latest, multiprocess

from channel_http.errors import Unavailable
from core.model import ollama, openai
from core.people import messages

if TYPE_CHECKING:
    from channel_http.services import Services
    from core.config.settings import Settings
    from core.observe.metrics import Metrics

log = logging.getLogger("mercury.http")

#: How long one readiness check may take before it counts as "doesn't answer".
CHECK_TIMEOUT_S: Final = 2.0

_NOT_READY: Final = {
    "state": messages.NOT_READY_STATE,
    "memory": messages.NOT_READY_MEMORY,
    "model": messages.NOT_READY_MODEL,
}


@get("/livez", sync_to_thread=False)
def livez() -> dict[str, Any]:
    return {"ok": True}


@get("/readyz")
async def readyz(request: Request[Any, Any, Any]) -> dict[str, Any]:
    services: Services = request.app.state.services
    translator = services.catalogs.translator(services.settings.defaults.language)
    if services.manager.stopping:
        raise Unavailable(
            translator.gettext(messages.NOT_READY_STOPPING),
            extra={"checks": {}},
        )
    checks, missing = await readiness(services)
    held = services.bridging.held_connections() if services.bridging is not None else {}
    # Which connections only one instance may hold this one holds, ready or not (#39).
    connections = {"connections": held} if held else {}
    if all(checks.values()):
        return {"ok": True, "checks": checks, **connections}
    sentences = [translator.gettext(_NOT_READY[name]) for name, ok in checks.items() if not ok]
    if missing and services.settings.model.provider == "openai":
        sentences.append(
            translator.gettext(messages.MODELS_MISSING_OPENAI) % {"models": ", ".join(missing)}
        )
    elif missing:
        sentences.append(
            translator.gettext(messages.MODELS_MISSING_OLLAMA)
            % {"models": ", ".join(missing), "command": pull_command(missing)}
        )
    raise Unavailable(" ".join(sentences), extra={"checks": checks, **connections})


def pull_command(models: tuple[str, ...]) -> str:
    """The shell line that fetches ``models`` into Ollama."""
    return " && ".join(f"ollama pull {model}" for model in models)


def model_names(settings: Settings, *, memory_on: bool) -> tuple[str, ...]:
    """The models the settings name on the chat model's server: chat, then embedding."""
    if settings.model.provider == "openai":
        chat = settings.openai.model
        names = (chat,) if chat else ()
        embedding = settings.openai.embedding_model
        if memory_on and embedding and settings.openai.embedding_base_url is None:
            names = (*names, embedding)
        return names
    names = (settings.ollama.model,)
    return (*names, settings.ollama.embedding_model) if memory_on else names


def model_server(settings: Settings) -> str:
    """The model server as a sentence names it: "Ollama at …" or "The model server at …"."""
    if settings.model.provider == "openai":
        return f"The model server at {settings.openai.base_url}"
    return f"Ollama at {settings.ollama.host}"


async def missing_models(
    settings: Settings, names: tuple[str, ...], timeout_s: float
) -> tuple[str, ...] | None:
    """The models among ``names`` the configured model server lacks; None when it can't say."""
    if settings.model.provider == "openai":
        return await openai.missing_models(
            settings.openai.base_url, names, api_key=settings.openai.api_key, timeout_s=timeout_s
        )
    return await ollama.missing_models(settings.ollama.host, names, timeout_s=timeout_s)


def fetch_hint(settings: Settings, missing: tuple[str, ...]) -> str:
    """What to do about ``missing`` models, for a log line or a problem."""
    if settings.model.provider == "openai":
        return "load them on that server or set OPENAI_MODEL to a model GET /models lists"
    return f"on that machine run: {pull_command(missing)}"


async def readiness(services: Services) -> tuple[dict[str, bool], tuple[str, ...]]:
    """Each dependency's answer within its bound, and the models the model host lacks."""

    async def state() -> bool:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            await services.db.fetch_one("SELECT 1")
        return True

    async def model() -> tuple[bool, tuple[str, ...]]:
        names = services.model_names
        if not names:  # a model client the settings didn't build: it answers for itself
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                return await services.manager.model.reachable(), ()
        missing = await missing_models(services.settings, names, CHECK_TIMEOUT_S)
        if (missing is None or missing) and services.settings.model.fallbacks:
            # The first model can't answer, but the chain stays ready while one model does.
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                if await services.manager.model.reachable():
                    return True, ()
        return (missing is not None and not missing), missing or ()

    async def guarded(check: Any, fallback: Any) -> Any:
        try:
            return await check
        except Exception:  # a check that raises or times out is a check that failed
            return fallback

    memory_on = services.manager.memory is not None
    state_ok, (model_ok, missing), memory_ok = await asyncio.gather(
        guarded(state(), False),
        guarded(model(), (False, ())),
        services.memory_reachable() if memory_on else asyncio.sleep(0, True),
    )
    checks = {"state": state_ok, "model": model_ok}
    if memory_on:
        checks["memory"] = memory_ok
    return checks, missing


# ------------------------------------------------------------------ metrics


def exposition(metrics: Metrics) -> bytes:
    """The Prometheus text of ``metrics``, or of every worker in multi-process mode."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
    return generate_latest(metrics.registry)


@get("/metrics", sync_to_thread=False)
def metrics_route(request: Request[Any, Any, Any]) -> Response[bytes]:
    services: Services = request.app.state.services
    assert services.metrics is not None  # noqa: S101 - the route exists only with metrics
    # Litestar appends "; charset=utf-8"; 0.0.4 is the format every scraper reads.
    return Response(exposition(services.metrics), media_type="text/plain; version=0.0.4")
