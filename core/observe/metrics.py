"""The service's Prometheus metrics: one :class:`Metrics` per application, on its own registry.

Every name starts with ``mercury_``. No label ever carries a person, a token, a conversation
id or free text: each label takes its values from a closed set (:data:`TURN_OUTCOMES`, the
tool names the registry offers, the providers the auth chain knows, the methods of a store
port), so the number of series stays bounded whatever callers send.

The streaming path touches these once per turn, not per token: a turn counts its model
chunks in a local integer and adds them to ``mercury_model_chunks_total`` when it ends.

:func:`measured` wraps a store (the memory store, the state database) so each of its
coroutine methods records its latency and errors under the method's name, in a span of
its own.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, Literal, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from core.observe.telemetry import span

__all__ = [
    "TURN_OUTCOMES",
    "Metrics",
    "TurnOutcome",
    "measured",
]

TurnOutcome = Literal["final", "error", "cancelled", "refused"]
#: How a turn can end, as ``mercury_turns_total{outcome}`` counts it.
TURN_OUTCOMES: Final[tuple[TurnOutcome, ...]] = ("final", "error", "cancelled", "refused")

# Seconds: from a few milliseconds (an intercepted token) to the model's read timeout.
_TURN_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
_FIRST_BUCKETS: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
_STORE_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

#: The label value for a tool the model named that the registry doesn't offer.
UNKNOWN_TOOL: Final = "unknown"

_T = TypeVar("_T")


class _Readings(Collector):
    """Gauges and counters read from their owners at scrape time (no work per event)."""

    def __init__(self) -> None:
        self.archive_depth: Callable[[], int] | None = None
        self.archive_spilled: Callable[[], int] | None = None
        self.queued_turns: Callable[[], int] | None = None
        #: The usage ledger's writes: model calls written, rows upserted, statements run.
        self.ledger_writes: Callable[[], Mapping[str, int]] | None = None
        #: Each connection only one instance holds (#39), and whether this instance does.
        self.held_connections: Callable[[], Mapping[str, bool]] | None = None

    def collect(self) -> Iterator[Metric]:
        if self.queued_turns is not None:
            yield GaugeMetricFamily(
                "mercury_queued_turns",
                "Turns waiting behind an earlier turn of their conversation.",
                value=self.queued_turns(),
            )
        if self.held_connections is not None:
            held = GaugeMetricFamily(
                "mercury_bridge_connection_held",
                "1 for each platform connection this instance holds (Discord's gateway), 0 "
                "while it stands by for another instance's.",
                labels=["connection"],
            )
            for name, holds in sorted(self.held_connections().items()):
                held.add_metric([name], 1 if holds else 0)
            yield held
        if self.ledger_writes is not None:
            writes = CounterMetricFamily(
                "mercury_usage_ledger_writes",
                "The usage ledger's writes: model calls written (calls), rows upserted (rows; "
                "a row sums a batch's calls of one day, person, space and model) and "
                "statements run (statements; one per batch).",
                labels=["what"],
            )
            for what, count in self.ledger_writes().items():
                writes.add_metric([what], count)
            yield writes
        if self.archive_depth is not None:
            yield GaugeMetricFamily(
                "mercury_archive_queue_depth",
                "Memory archive items held in memory, waiting to be stored.",
                value=self.archive_depth(),
            )
        if self.archive_spilled is not None:
            yield CounterMetricFamily(
                "mercury_archive_spills",
                "Memory archive items spilled to SQLite because the queue was full.",
                value=self.archive_spilled(),
            )

    def describe(self) -> Iterable[Metric]:
        return ()


class Metrics:
    """Every metric the service exports, registered on :attr:`registry`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = CollectorRegistry() if registry is None else registry
        self.registry = r
        self.turns_started = Counter(
            "mercury_turns_started", "Turns started (a turn the server runs).", registry=r
        )
        self.turns = Counter(
            "mercury_turns",
            "Turns ended, by outcome: final, error, cancelled (the client left), refused.",
            ["outcome"],
            registry=r,
        )
        self.turn_duration = Histogram(
            "mercury_turn_duration_seconds",
            "From the turn's start to its last event.",
            buckets=_TURN_BUCKETS,
            registry=r,
        )
        self.turn_first_event = Histogram(
            "mercury_turn_first_event_seconds",
            "From the turn's start to its first event on the wire.",
            buckets=_FIRST_BUCKETS,
            registry=r,
        )
        self.model_first_token = Histogram(
            "mercury_model_first_token_seconds",
            "From asking the model to its first streamed chunk, per model call.",
            buckets=_FIRST_BUCKETS,
            registry=r,
        )
        self.model_chunks = Counter(
            "mercury_model_chunks",
            "Chunks of text and reasoning the model streamed.",
            registry=r,
        )
        self.model_tokens = Counter(
            "mercury_model_tokens",
            "Tokens the model reported, by model and kind: input, output, cached (the part "
            "of input read from the server's prompt cache).",
            ["model", "kind"],
            registry=r,
        )
        self.model_calls = Counter(
            "mercury_model_calls",
            "Model calls answered, by the model that answered (a fallback in the first's place).",
            ["model"],
            registry=r,
        )
        self.model_failures = Counter(
            "mercury_model_failures",
            "Models of the fallback chain that failed to start an answer, by model and why: "
            "unreachable, timeout, rate_limited, server_error, broke_off.",
            ["model", "reason"],
            registry=r,
        )
        self.open_streams = Gauge(
            "mercury_open_streams", "Event streams open to clients.", registry=r
        )
        self.heartbeats = Counter(
            "mercury_heartbeats", "Heartbeat comments sent on quiet streams.", registry=r
        )
        self.tool_calls = Counter(
            "mercury_tool_calls",
            "Tool calls by tool and outcome (success, failed, pending).",
            ["tool", "outcome"],
            registry=r,
        )
        self.mcp_calls = Counter(
            "mercury_mcp_calls",
            "MCP tool calls by server and outcome (success, error, unavailable, timeout, "
            "cancelled, unknown).",
            ["server", "outcome"],
            registry=r,
        )
        self.mcp_call_seconds = Histogram(
            "mercury_mcp_call_seconds",
            "How long an MCP tool call took, per server.",
            ["server"],
            buckets=_FIRST_BUCKETS,
            registry=r,
        )
        self.mcp_reconnects = Counter(
            "mercury_mcp_reconnects",
            "Connections (re)opened to an MCP server after the first, per server.",
            ["server"],
            registry=r,
        )
        self.confirmations = Counter(
            "mercury_confirmations",
            "Staged actions by event: staged, confirmed, cancelled, expired (the token or "
            "choice was unknown, used or expired).",
            ["event"],
            registry=r,
        )
        self.auth = Counter(
            "mercury_auth",
            "Authentication attempts by provider and outcome (ok, missing, invalid).",
            ["provider", "outcome"],
            registry=r,
        )
        self.admission_refusals = Counter(
            "mercury_admission_refusals",
            "Authenticated callers the core refused, by reason.",
            ["reason"],
            registry=r,
        )
        self.rate_limit_refusals = Counter(
            "mercury_rate_limit_refusals", "Turns refused by the per-person rate limit.", registry=r
        )
        self.budget_refusals = Counter(
            "mercury_budget_refusals",
            "Turns refused because a token allowance was used up, by whose: person or space.",
            ["scope"],
            registry=r,
        )
        self.store_seconds = Histogram(
            "mercury_store_call_seconds",
            "Latency of memory store and state store calls, by store and operation.",
            ["store", "operation"],
            buckets=_STORE_BUCKETS,
            registry=r,
        )
        self.store_errors = Counter(
            "mercury_store_errors",
            "Memory store and state store calls that raised, by store and operation.",
            ["store", "operation"],
            registry=r,
        )
        self.requests = Counter(
            "mercury_http_requests",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
            registry=r,
        )
        self.readings = _Readings()
        r.register(self.readings)
        for outcome in TURN_OUTCOMES:  # every outcome shows, at 0, from the first scrape
            self.turns.labels(outcome)

    def model_usage(self, model: str, input: int, output: int, cached: int | None) -> None:
        """One model call's reported tokens (once per call, never per token)."""
        self.model_tokens.labels(model, "input").inc(input)
        self.model_tokens.labels(model, "output").inc(output)
        if cached is not None:
            self.model_tokens.labels(model, "cached").inc(cached)

    def model_failed(self, model: str, reason: str) -> None:
        self.model_failures.labels(model, reason).inc()

    def tool_call(self, tool: str, outcome: str, known: bool) -> None:
        self.tool_calls.labels(tool if known else UNKNOWN_TOOL, outcome).inc()

    def store_call(self, store: str, operation: str, seconds: float, ok: bool) -> None:
        self.store_seconds.labels(store, operation).observe(seconds)
        if not ok:
            self.store_errors.labels(store, operation).inc()


class _Measured:
    """A store whose coroutine methods record their latency and errors."""

    def __init__(self, inner: Any, store: str, metrics: Metrics | None) -> None:
        self._inner = inner
        self._store = store
        self._metrics = metrics

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(attribute):
            return attribute
        metrics = self._metrics
        span_name = f"{self._store}.{name}"  # a method of the port: a closed set
        store = self._store

        async def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            ok = False
            try:
                with span(span_name):
                    result = await attribute(*args, **kwargs)
                ok = True
                return result
            finally:
                if metrics is not None:
                    metrics.store_call(store, name, time.perf_counter() - start, ok)

        return call


def measured(inner: _T, store: Literal["memory", "state"], metrics: Metrics | None) -> _T:
    """``inner`` with its calls measured under ``store`` and traced as ``<store>.<method>``."""
    if inner is None:
        return inner
    wrapped: _T = _Measured(inner, store, metrics)  # type: ignore[assignment]
    return wrapped
