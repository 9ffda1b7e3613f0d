"""The tool log: each person's recent tool calls, what went in and what came out.

Rows live in the state store (:mod:`core.state`), kept per person (the newest 200 by default), so a
busy person never evicts anyone else's history. Inputs and outputs are cut to 2,000
characters, and login links are removed before anything is written: a link carrying an
OAuth ``state`` is a credential for as long as it lives. An input or output that is a JSON
object or array is kept as JSON and read back as a value: when it is too long, its long
strings and lists are shortened (marked with ``…``) until it fits, so it stays valid JSON.

Exception tree::

    ValueError                   an outcome outside success, failed and pending, or a
                                 keep count below one (programmer mistakes)
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Final, get_args

import msgspec

from core.clock import Clock
from core.engine.events import ToolOutcome
from core.state import Database, Migration, Schema

__all__ = ["MAX_FIELD_CHARS", "LoggedValue", "ToolLog", "ToolLogEntry", "redact_urls"]

MAX_FIELD_CHARS: Final = 2000
LOGIN_LINK: Final = "[login link]"

_OUTCOMES: Final = frozenset(get_args(ToolOutcome))
# Generous on purpose: a URL cut short could leave its state behind, one taken too long
# only hides a little more text.
_URL: Final = re.compile(r"https?://[^\s\"'<>`]+", re.IGNORECASE)
_STATE_PARAMETER: Final = re.compile(r"(?:[?&;]|\\u0026)state=", re.IGNORECASE)
_TRAILING_PUNCTUATION: Final = ".,;:!?)]}"

_SCHEMA: Final = Schema(
    "tool_log",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS tool_log (
    id              {id},
    person_key      TEXT NOT NULL,
    conversation_id TEXT,
    tool_name       TEXT NOT NULL,
    input           TEXT NOT NULL,
    output          TEXT NOT NULL,
    outcome         TEXT NOT NULL,
    timestamp       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tool_log_person ON tool_log (person_key, id);
""",
        ),
    ),
)


#: An input or output as the log gives it back: a JSON object or array, else text.
LoggedValue = str | dict[str, Any] | list[Any]

#: The successive shortenings tried on a JSON value too long to keep whole: the longest
#: string kept, and how many items of each list or object.
_SHORTENINGS: Final = ((1000, 50), (300, 20), (100, 10), (30, 5), (10, 2), (0, 0))
_MAX_DEPTH: Final = 16


class ToolLogEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One logged tool call; ``timestamp`` is ISO 8601 in UTC (``2026-01-01T09:30:00.000Z``)."""

    timestamp: str
    conversation_id: str | None
    tool_name: str
    input: LoggedValue
    output: LoggedValue
    outcome: ToolOutcome


def _container(text: str) -> dict[str, Any] | list[Any] | None:
    """``text`` decoded when it is a JSON object or array; None for anything else."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, dict | list) else None


def _shortened(value: Any, chars: int, items: int, depth: int = 0) -> Any:
    if isinstance(value, str):
        return value if len(value) <= chars else value[:chars] + "…"
    if depth >= _MAX_DEPTH and isinstance(value, dict | list):
        return "…"
    if isinstance(value, list):
        kept = [_shortened(item, chars, items, depth + 1) for item in value[:items]]
        return [*kept, f"… {len(value) - items} more"] if len(value) > items else kept
    if isinstance(value, dict):
        pairs = list(value.items())
        kept_pairs = {k: _shortened(v, chars, items, depth + 1) for k, v in pairs[:items]}
        if len(pairs) > items:
            kept_pairs["…"] = f"{len(pairs) - items} more"
        return kept_pairs
    return value


def _kept(text: str) -> str:
    """What the log stores of an input or output: redacted, and within the size limit.

    A JSON object or array stays valid JSON: shortened, never cut in the middle.
    """
    text = redact_urls(text)
    value = _container(text)
    if value is None:
        return text[:MAX_FIELD_CHARS]
    encoded = msgspec.json.encode(value).decode()
    for chars, items in _SHORTENINGS:
        if len(encoded) <= MAX_FIELD_CHARS:
            return encoded
        encoded = msgspec.json.encode(_shortened(value, chars, items)).decode()
    return encoded  # at most "[\"… n more\"]" or {"…": "n more"}: well within the limit


def _read_back(text: str) -> LoggedValue:
    value = _container(text)
    return text if value is None else value


def _redact_match(match: re.Match[str]) -> str:
    url = match.group(0)
    stripped = url.rstrip(_TRAILING_PUNCTUATION)
    query_at = stripped.find("?")
    if query_at < 0 or not _STATE_PARAMETER.search(stripped, query_at):
        return url
    return LOGIN_LINK + url[len(stripped) :]


def redact_urls(text: str) -> str:
    """``text`` with every http(s) URL whose query has a ``state`` replaced by ``[login link]``."""
    return _URL.sub(_redact_match, text)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ToolLog:
    """Each person's newest tool calls, newest first."""

    def __init__(self, db: Database, *, clock: Clock, keep_per_person: int = 200) -> None:
        if keep_per_person < 1:
            raise ValueError(
                f"A tool log keeping {keep_per_person} entries per person keeps nothing; "
                "give keep_per_person a count of at least one."
            )
        self._db = db
        self._clock = clock
        self.keep_per_person = keep_per_person
        self._ready = False

    async def ensure_schema(self) -> None:
        """Migrate the table; lazily by every call too, so the log can be built synchronously."""
        if not self._ready:
            await self._db.migrate(_SCHEMA)
            self._ready = True

    async def record(
        self,
        person_key: str,
        conversation_id: str | None,
        tool_name: str,
        input: str,  # shadows the builtin on purpose: the column's name, as the log shows it
        output: str,
        outcome: ToolOutcome,
    ) -> None:
        """Log one tool call, login links removed and each side kept within 2,000 characters."""
        if outcome not in _OUTCOMES:
            raise ValueError(
                f"A tool call can't end as {outcome!r}; log it as success, failed or pending."
            )
        await self.ensure_schema()
        # Redact before cutting, so a cut never leaves half a login link behind.
        await self._db.execute(
            "INSERT INTO tool_log "
            "(person_key, conversation_id, tool_name, input, output, outcome, timestamp) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                person_key,
                conversation_id,
                tool_name,
                _kept(input),
                _kept(output),
                outcome,
                _iso(self._clock()),
            ),
        )
        await self._db.execute(
            "DELETE FROM tool_log WHERE person_key = ? AND id <= "
            "(SELECT id FROM tool_log WHERE person_key = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
            (person_key, person_key, self.keep_per_person),
        )

    async def recent(self, person_key: str, limit: int = 200) -> list[ToolLogEntry]:
        """The person's newest ``limit`` entries (at most what is kept), newest first."""
        await self.ensure_schema()
        rows = await self._db.fetch_all(
            "SELECT timestamp, conversation_id, tool_name, input, output, outcome "
            "FROM tool_log WHERE person_key = ? ORDER BY id DESC LIMIT ?",
            (person_key, max(0, limit)),
        )
        return [
            ToolLogEntry(
                timestamp=row["timestamp"],
                conversation_id=row["conversation_id"],
                tool_name=row["tool_name"],
                input=_read_back(row["input"]),
                output=_read_back(row["output"]),
                outcome=row["outcome"],
            )
            for row in rows
        ]
