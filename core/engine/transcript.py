"""The conversation as the person saw it, on the shared state store: :class:`Transcript`.

When several instances share the state store, each turn writes what the person saw beside
the model's transcript of record (:mod:`core.engine.conversation_order`), in the same fenced
transactions: the person's message as soon as the turn holds its place, before the model
runs, and the answer as shown (the ``final`` text with its displays, or what had streamed
when it was cut off, flagged ``interrupted``) when the turn ends. ``GET /conversation`` and
``GET /conversations`` read it here, so a conversation continued through any instance
reads back whole through every other, at once, and a ``kill -9`` loses at most the answer
that was streaming. Memory (Qdrant) keeps its own verbatim archive for ``recall`` and
``/memory/scroll``.

Exceptions: :class:`core.memory.InvalidCursor` for an offset this module didn't give.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal

import msgspec

from core.memory import (
    ArchivedMessage,
    ConversationSummary,
    InvalidCursor,
    Listed,
    Page,
    list_conversations,
    titled,
)
from core.state import Database, Transaction

__all__ = ["ShownMessage", "Transcript", "write_shown"]

Role = Literal["user", "assistant"]

#: How many of the person's newest messages ``conversations`` looks through, as the
#: archive-backed list does.
_SCAN: Final = 500


class ShownMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message as the person saw it: their own words, or the answer shown to them."""

    person_key: str
    role: Role
    content: str
    timestamp: str
    interrupted: bool = False


async def write_shown(tx: Transaction, session_key: str, shown: Sequence[ShownMessage]) -> None:
    """Add ``shown`` to the conversation, inside the caller's (fenced) transaction."""
    for message in shown:
        await tx.execute(
            "INSERT INTO conversation_messages "
            "(session_key, person_key, role, content, timestamp, interrupted) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                session_key,
                message.person_key,
                message.role,
                message.content,
                message.timestamp,
                int(message.interrupted),
            ),
        )


class Transcript:
    """Reads of the person-facing transcript, with the memory store's signatures."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def conversation(
        self, person_key: str, session_key: str, *, limit: int, after: str | None = None
    ) -> Page[ArchivedMessage]:
        """A conversation's messages in the order the turns ran, one page at a time."""
        start = _cursor(after)
        rows = await self._db.fetch_all(
            "SELECT seq, role, content, timestamp, interrupted FROM conversation_messages "
            "WHERE person_key = ? AND session_key = ? AND seq > ? ORDER BY seq LIMIT ?",
            (person_key, session_key, start, limit + 1),
        )
        items = [
            ArchivedMessage(
                id=str(row["seq"]),
                person_key=person_key,
                session_key=session_key,
                role=row["role"],
                content=row["content"],
                timestamp=row["timestamp"],
                ts=float(row["seq"]),
                interrupted=bool(row["interrupted"]),
            )
            for row in rows[:limit]
        ]
        return Page(items, items[-1].id if len(rows) > limit and items else None)

    async def conversations(
        self, person_key: str, *, limit: int, scan: int = _SCAN
    ) -> list[ConversationSummary]:
        """The person's conversations, most recently active first, among their newest messages."""
        if limit <= 0:
            return []
        rows = await self._db.fetch_all(
            "SELECT session_key, role, content, timestamp FROM conversation_messages "
            "WHERE person_key = ? ORDER BY seq DESC LIMIT ?",
            (person_key, scan),
        )
        summaries, questions = list_conversations(
            (Listed(r["session_key"], r["role"], r["content"], r["timestamp"]) for r in rows),
            limit=limit,
        )
        if len(rows) == scan and summaries:
            # Older messages may exist: each session's first question, in one indexed read.
            keys = [item.session_key for item in summaries]
            marks = ", ".join("?" * len(keys))
            firsts = await self._db.fetch_all(
                "SELECT m.session_key, m.content FROM conversation_messages m JOIN ("  # noqa: S608 - fixed text
                "SELECT session_key, MIN(seq) AS first_seq FROM conversation_messages "
                f"WHERE person_key = ? AND role = 'user' AND session_key IN ({marks}) "
                "GROUP BY session_key) f ON m.seq = f.first_seq",
                (person_key, *keys),
            )
            questions.update((row["session_key"], row["content"]) for row in firsts)
        return titled(summaries, questions)


def _cursor(after: str | None) -> int:
    if after is None:
        return 0
    if not after.isdecimal() or len(after) > 18:
        raise InvalidCursor(f"{after[:40]!r} is not an offset this server gave.")
    return int(after)
