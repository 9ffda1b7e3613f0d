"""Ambient talk: what was said in a space without addressing the assistant.

A group's messages that don't trigger the assistant are kept here, per space, until its
next triggered run takes them (:meth:`Ambient.take`) and reads them before the person's
words (:func:`render_ambient`), so it can follow a conversation it wasn't called into.
Each space keeps only the newest: at most ``max_messages`` messages and ``max_chars``
characters of text in all, the oldest dropped first as new ones arrive; ``max_messages``
of 0 keeps nothing. Taking is one ``DELETE … RETURNING``: of two instances taking at once,
only one gets any message.

Exceptions::

    InvalidSpaceId (ValueError)   the space id is malformed (from core.spaces.ids)
    ValueError                    a negative budget (a programming or configuration mistake)
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Final

import msgspec

from core.codes import from_micros, to_micros
from core.spaces.ids import parse_space_id
from core.spaces.turn import escape
from core.state import Database, Migration, Schema

__all__ = ["AMBIENT_NOTE", "Ambient", "AmbientMessage", "render_ambient"]

#: What the block tells the model its messages are.
AMBIENT_NOTE: Final = "Messages in this space since your last answer, not addressed to you."


_SCHEMA: Final = Schema(
    "space_ambient",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS space_ambient (
    seq         {id},
    space_id    TEXT NOT NULL,
    author_name TEXT,
    caller_id   TEXT NOT NULL,
    text        TEXT NOT NULL,
    at          BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS space_ambient_space ON space_ambient (space_id, seq);
""",
        ),
    ),
)


class AmbientMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message of a space not addressed to the assistant: who said what, when."""

    author_name: str | None
    caller_id: str
    text: str
    at: datetime


class Ambient:
    """The ambient talk of every space, in the state store, within a budget per space."""

    def __init__(self, db: Database, *, max_messages: int, max_chars: int) -> None:
        if max_messages < 0 or max_chars < 0:
            raise ValueError(
                f"The ambient budget can't be negative (max_messages={max_messages}, "
                f"max_chars={max_chars}); 0 keeps nothing."
            )
        self._db = db
        self.max_messages = max_messages
        self.max_chars = max_chars
        self._ready = False

    async def ensure_schema(self) -> None:
        """Create the table if needed; done lazily by every call, idempotent."""
        if not self._ready:
            await self._db.migrate(_SCHEMA)
            self._ready = True

    async def add(
        self,
        space_id: str,
        message: AmbientMessage,
        *,
        max_messages: int | None = None,
        max_chars: int | None = None,
    ) -> None:
        """Keep ``message`` for the space's next run, dropping the oldest past the budget.

        The budget is the space's own when given (its settings in force), else the store's.
        A message longer than the whole character budget keeps its first ``max_chars``.
        """
        parse_space_id(space_id)
        max_messages = self.max_messages if max_messages is None else max(0, max_messages)
        max_chars = self.max_chars if max_chars is None else max(0, max_chars)
        if max_messages == 0 or max_chars == 0 or not message.text:
            return
        await self.ensure_schema()
        async with self._db.transaction(lock=f"space_ambient:{space_id}") as transaction:
            await transaction.execute(
                "INSERT INTO space_ambient (space_id, author_name, caller_id, text, at) "
                "VALUES (?, ?, ?, ?, ?)",
                (
                    space_id,
                    message.author_name,
                    message.caller_id,
                    message.text[:max_chars],
                    to_micros(message.at),
                ),
            )
            # Newest first: the running count and running length say which to drop.
            await transaction.execute(
                "DELETE FROM space_ambient WHERE seq IN (SELECT seq FROM ("
                "SELECT seq, ROW_NUMBER() OVER (ORDER BY seq DESC) AS n, "
                "SUM(LENGTH(text)) OVER (ORDER BY seq DESC ROWS UNBOUNDED PRECEDING) AS chars "
                "FROM space_ambient WHERE space_id = ?) ranked WHERE n > ? OR chars > ?)",
                (space_id, max_messages, max_chars),
            )

    async def take(self, space_id: str) -> list[AmbientMessage]:
        """The space's kept messages, oldest first, removed in the same statement."""
        parse_space_id(space_id)
        await self.ensure_schema()
        rows = await self._db.fetch_all(
            "DELETE FROM space_ambient WHERE space_id = ? "
            "RETURNING seq, author_name, caller_id, text, at",
            (space_id,),
        )
        return [
            AmbientMessage(
                author_name=row["author_name"],
                caller_id=row["caller_id"],
                text=row["text"],
                at=from_micros(int(row["at"])),
            )
            for row in sorted(rows, key=lambda row: int(row["seq"]))
        ]

    async def delete_space(self, space_id: str) -> int:
        """Drop every kept message of the space; how many there were."""
        parse_space_id(space_id)
        await self.ensure_schema()
        return await self._db.execute("DELETE FROM space_ambient WHERE space_id = ?", (space_id,))


def render_ambient(messages: Iterable[AmbientMessage]) -> str:
    """The ambient block placed before the person's words; ``''`` when nothing was said.

    Each message names its author and their caller id (what the moderation tools take), and
    its time in UTC. Everything is escaped: a message can't close the block or forge another.
    """
    lines = [
        f'<message author="{escape(m.author_name or m.caller_id)}" '
        f'caller="{escape(m.caller_id)}" at="{_stamp(m.at)}">'
        f"{escape(m.text)}</message>"
        for m in messages
    ]
    if not lines:
        return ""
    return f'<ambient note="{AMBIENT_NOTE}">\n' + "\n".join(lines) + "\n</ambient>"


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
