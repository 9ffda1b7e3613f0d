"""Tracing through the OpenTelemetry API: spans for the model call, tools and stores.

The API alone records nothing; spans are kept only once a tracer provider from the SDK is
installed (``channel_http/tracing.py`` does it from the standard ``OTEL_*`` variables). The
streaming path opens no span per token: one per model call, per tool call, per store call.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Final

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

__all__ = ["span", "trace_id"]

_tracer: Final = trace.get_tracer("mercury")
# What a span is while no tracer provider is installed: the API's own no-op path costs ~15 µs
# a span (a context attached and detached), paid per model call and per store call.
_NOTHING: Final = nullcontext(trace.INVALID_SPAN)


def span(name: str, **attributes: AttributeValue) -> AbstractContextManager[trace.Span]:
    """A child span of whatever is current, named ``name``: a closed set, never free text."""
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return _NOTHING  # no provider installed: nothing would be recorded
    return _tracer.start_as_current_span(name, attributes=attributes)


def trace_id() -> str | None:
    """The current trace id as 32 hex digits, or None outside any recorded trace."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None
