"""How the process logs: one handler on the root logger, ``text`` for people or ``json``.

``json`` writes one object per line with ``ts`` (UTC, ISO 8601), ``level``, ``logger`` and
``message``, the request fields on request lines (:mod:`channel_http.access_log`), and the
exception, when a line carries one, as ``error`` (its type and message) and ``traceback``.
uvicorn's own lines go through the same handler.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any, Final, TextIO

import msgspec

from core.observe.telemetry import trace_id

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_encode = msgspec.json.Encoder().encode


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request = getattr(record, "request", None)
        if isinstance(request, dict):
            line.update(request)
        trace_id = getattr(record, "trace_id", None)
        if trace_id:
            line["traceId"] = trace_id
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            line["error"] = f"{type(error).__name__}: {error}"
            line["traceback"] = self.formatException(record.exc_info)
        return _encode(line).decode()


def with_trace_id(record: logging.LogRecord) -> bool:
    """Stamp the current trace id (when tracing records one) on every record."""
    record.trace_id = trace_id()
    return True


class _StandardError(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record comes, not what it was when built.

    A command run in process (a test capturing its output, an embedding program) swaps
    ``sys.stderr`` and closes its stand-in afterwards; a handler holding the stand-in would
    then fail on every later record.
    """

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        return


def configure(level: str = "info", style: str = "text", stream: TextIO | None = None) -> None:
    """Send every logger's records at ``level`` or above to ``stream`` in ``style``
    (by default the process's standard error, as it is when each record is written)."""
    handler: logging.StreamHandler = (  # type: ignore[type-arg]
        _StandardError() if stream is None else logging.StreamHandler(stream)
    )
    if style == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    handler.addFilter(with_trace_id)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # httpx logs every request it makes at info: one line per model call, none of it news.
    for chatty in ("httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(max(logging.WARNING, root.level))
