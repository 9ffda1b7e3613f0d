"""Optional OpenTelemetry tracing, switched on by the standard ``OTEL_*`` variables.

:func:`configure_tracing` installs the SDK's tracer provider when ``OTEL_TRACES_EXPORTER``
names an exporter (``otlp``, ``console``) or an OTLP endpoint is set, and instruments httpx
(the OIDC provider, the REST plugin, Qdrant). :func:`traced` puts the ASGI instrumentation
around the application once any SDK provider is installed (by us, by
``opentelemetry-instrument``, or by a test): one span per request, named by its route
template, with no query in its attributes and no span per sent frame.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

if TYPE_CHECKING:
    from litestar.types import ASGIApp

    from channel_http.paths import RouteTemplates

log = logging.getLogger("mercury.http")


def sdk_installed() -> bool:
    """Whether a recording tracer provider is in place."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        return False
    return isinstance(trace.get_tracer_provider(), TracerProvider)


def configure_tracing(environ: Mapping[str, str]) -> bool:
    """Install the SDK from the ``OTEL_*`` variables; whether tracing is on."""
    exporter_name = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if exporter_name in ("", "none") and not endpoint:
        return False
    if exporter_name == "none":
        return False
    try:
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError:
        log.warning(
            "OTEL_* variables ask for tracing, but the OpenTelemetry SDK isn't installed; "
            "install mercury-http[otel]."
        )
        return False
    exporter: SpanExporter
    if exporter_name == "console":
        exporter = ConsoleSpanExporter()
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )
        except ImportError:
            log.warning(
                "OTEL_* variables ask for OTLP traces, but the OTLP exporter isn't installed; "
                "install opentelemetry-exporter-otlp-proto-http."
            )
            return False
        exporter = OTLPSpanExporter()
    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME", "mercury-http")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    HTTPXClientInstrumentor().instrument()
    return True


def traced(app: ASGIApp, routes: RouteTemplates) -> ASGIApp:
    """``app`` inside the ASGI instrumentation when tracing is on, else ``app`` itself."""
    if not sdk_installed():
        return app
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    def details(scope: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        path = scope.get("path", "")
        route = routes.label(path)
        return f"{scope.get('method', 'HTTP')} {route}", {"http.route": route}

    def without_query(span: Any, scope: dict[str, Any]) -> None:
        # The login callback's code and state travel in the query: keep them out of traces.
        if span is not None and span.is_recording():
            path = scope.get("path", "")
            route = routes.label(path)
            for key in ("http.target", "url.path"):
                span.set_attribute(key, route)
            for key in ("http.url", "url.full"):
                span.set_attribute(key, route)
            span.set_attribute("url.query", "")

    wrapped: ASGIApp = OpenTelemetryMiddleware(  # type: ignore[assignment]
        app,
        default_span_details=details,
        server_request_hook=without_query,
        exclude_spans=["receive", "send"],  # no span per SSE frame
    )
    return wrapped
