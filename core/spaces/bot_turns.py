"""Bot loops: the turns a space runs in a row with no person writing between them, bounded.

A chat bot that answers whatever it sees (an echo bot, another assistant) and the assistant
would answer each other for ever. Two kinds of sender are told apart from a person:

- **a program the platform names** (a Matrix ``m.notice``, an account listed in
  ``MATRIX_BOT_USERS``; Telegram, Slack and Discord flag bots, and their bridges drop them
  before routing): its messages never start a turn; they are kept as the space's ambient
  context, which the model reads when a person next addresses it
  (:meth:`core.spaces.routing.Router.route`);
- **a suspected program**: the sender of the space's latest answer, writing again once that
  answer was shown and no later than ``reply_s`` after it ended. A person reads an answer
  before writing back; a program answers what it sees at once.

Each turn a suspected message starts counts; a message from anyone else (a person writing,
addressed or not) ends the streak. Past ``max_turns`` turns in a row, a suspected message is
kept as ambient context only, and one log line per streak says so, never one per message.
With nothing answered, the loop ends there; the next person to write starts afresh.

The count lives in the state store, one row per space, so that every instance counts the same
streak (the platform's events of one room are taken by whichever instance claims them first).
A message costs one primary-key lookup and a write only when the streak changes; a turn costs
two writes (its answer shown, its answer ended); nothing is written per token.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, Literal

from core.codes import to_micros
from core.state import Migration, Schema

if TYPE_CHECKING:
    from core.clock import Clock
    from core.state import Database

__all__ = ["BotTurns", "Sender"]

log = logging.getLogger("mercury.spaces.bot_turns")

#: What a message's sender is judged to be: a person (the streak ends), a program whose turn
#: may still run (counted), or one past the bound (kept as ambient context only).
Sender = Literal["person", "program", "held"]

_SCHEMA: Final = Schema(
    "space_bot_turns",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS space_bot_turns (
    space        TEXT PRIMARY KEY,
    sender       TEXT NOT NULL,
    quick_until  BIGINT NOT NULL,
    streak       INTEGER NOT NULL DEFAULT 0
);
""",
        ),
    ),
)

_SHOWN: Final = (
    "INSERT INTO space_bot_turns (space, sender, quick_until, streak) VALUES (?, ?, ?, 0) "
    "ON CONFLICT (space) DO UPDATE SET sender = excluded.sender, "
    "quick_until = excluded.quick_until, "
    "streak = CASE WHEN space_bot_turns.sender = excluded.sender "
    "THEN space_bot_turns.streak ELSE 0 END"
)


class BotTurns:
    """The streak of turns each space ran for a suspected program, across every instance."""

    def __init__(self, db: Database, *, clock: Clock, max_turns: int, reply_s: float) -> None:
        if max_turns < 1 or reply_s < 0:
            raise ValueError("BotTurns needs max_turns of at least 1 and reply_s of at least 0.")
        self._db = db
        self._clock = clock
        self.max_turns = max_turns
        self._reply_us = round(reply_s * 1_000_000)

    async def ensure_schema(self) -> None:
        await self._db.migrate(_SCHEMA)

    async def judge(self, space_id: str, caller_id: str, *, turn: bool) -> Sender:
        """What ``caller_id``'s message in ``space_id`` is: a person's (the streak ends), or
        a suspected program's, counted when it would start a ``turn`` ("held" once that
        turn is past the bound). A message that starts no turn is never counted."""
        row = await self._db.fetch_key(
            "SELECT sender, quick_until, streak FROM space_bot_turns WHERE space = ?",
            (space_id,),
        )
        now = to_micros(self._clock())
        if row is None or row[0] != caller_id or int(row[1]) < now:
            if row is not None and int(row[2]) > 0:
                await self._db.execute(
                    "UPDATE space_bot_turns SET streak = 0 WHERE space = ?", (space_id,)
                )
            return "person"
        if not turn:
            return "program"
        counted = await self._db.fetch_one(
            "UPDATE space_bot_turns SET streak = streak + 1 WHERE space = ? RETURNING streak",
            (space_id,),
        )
        streak = int(counted[0]) if counted is not None else 1
        if streak <= self.max_turns:
            return "program"
        if streak == self.max_turns + 1:
            log.warning(
                "In %s, %s wrote back at once to %d answers in a row with no one else "
                "writing: a bot loop. Its messages are kept as ambient context only until "
                "someone else writes.",
                space_id,
                caller_id[:120],
                self.max_turns,
            )
        return "held"

    async def shown(self, space_id: str, caller_id: str, *, for_s: float) -> None:
        """An answer to ``caller_id`` is showing in ``space_id`` and being written (for at
        most ``for_s`` more): their messages from now count as replies to it."""
        until = to_micros(self._clock()) + round(for_s * 1_000_000) + self._reply_us
        await self._db.execute(_SHOWN, (space_id, caller_id, until))

    async def answered(self, space_id: str, caller_id: str) -> None:
        """The answer to ``caller_id`` in ``space_id``, shown earlier, ended: their messages
        count as replies to it for ``reply_s`` more, unless an answer to someone else showed
        since (an answer that never showed while written is :meth:`shown` at its end, with
        ``for_s`` of 0)."""
        until = to_micros(self._clock()) + self._reply_us
        await self._db.execute(
            "UPDATE space_bot_turns SET quick_until = ? WHERE space = ? AND sender = ?",
            (until, space_id, caller_id),
        )

    async def delete_space(self, space_id: str) -> None:
        """Forget the space's streak."""
        await self._db.execute("DELETE FROM space_bot_turns WHERE space = ?", (space_id,))
