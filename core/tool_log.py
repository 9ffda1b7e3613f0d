"""The tool log: each person's recent tool calls, what went in and what came out.

Rows live in the state store (:mod:`core.state`), kept per person (the newest 200 by default), so a
busy person never evicts anyone else's history. Inputs and outputs are cut to 2,000
characters, and login links are removed before anything is written: a link carrying an
OAuth ``state`` is a credential for as long as it lives.

Exception tree::

    ValueError                   an outcome outside success, failed and pending, or a
                                 keep count below one (programmer mistakes)
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Final, get_args

import msgspec

from core.clock import Clock
from core.events import ToolOutcome
from core.state import Database, Migration, Schema

__all__ = ["MAX_FIELD_CHARS", "ToolLog", "ToolLogEntry", "redact_urls"]

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


class ToolLogEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One logged tool call; ``timestamp`` is ISO 8601 in UTC (``2026-01-01T09:30:00.000Z``)."""

    timestamp: str
    conversation_id: str | None
    tool_name: str
    input: str
    output: str
    outcome: ToolOutcome


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
        """Log one tool call, login links removed and each side cut to 2,000 characters."""
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
                redact_urls(input)[:MAX_FIELD_CHARS],
                redact_urls(output)[:MAX_FIELD_CHARS],
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
                input=row["input"],
                output=row["output"],
                outcome=row["outcome"],
            )
            for row in rows
        ]
