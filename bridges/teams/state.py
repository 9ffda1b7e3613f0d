"""What the Teams bridge must know to answer in a conversation, in the state store every
instance shares, so any instance can answer one another instance received.

Teams names the connector to answer through (``serviceUrl``) only in the activities it
sends; the bridge learns it, the bot's account and each person's account and personal chat
from them, and itself writes the files it offers (a file consent card, answered later) and
the text of its messages with buttons (kept when a press settles the message). A delivery
recovered by another instance, a consent answered there or a press landing there needs
them: each is kept here, under its kind and key, when it changes (or, unchanged, once a day
to keep it from expiring), never per activity::

    kind      key                      value                          kept
    route     <tenant>:<conversation>  the Route (serviceUrl, bot)    KEEP_ROUTES since written
    tenant    <tenant>                 the Route of its last activity KEEP_ROUTES
    account   the author's id          their Teams account (29:…)     KEEP_ROUTES
    personal  the author's id          their personal chat with bot   KEEP_ROUTES
    text      the bot's message id     its text (messages w/ buttons) KEEP_ANSWERS
    offer     the consent card's token the offered file               KEEP_ANSWERS

None of it is a secret (the bot's token is asked for by each instance and never kept); an
offered file is the person's own answer, read back only by the consent card's unguessable
token and deleted as it is taken. Expired rows are deleted at start and hourly.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Final, Literal

from core.clock import Clock, system_clock
from core.codes import to_micros
from core.state import Database, Migration, Schema

__all__ = ["KEEP_ANSWERS", "KEEP_ROUTES", "Kind", "TeamsState"]

log = logging.getLogger("mercury.bridges.teams")

Kind = Literal["route", "tenant", "account", "personal", "text", "offer"]

#: How long a conversation's route, a tenant's and a person's accounts are kept since written.
KEEP_ROUTES: Final = timedelta(days=30)
#: How long an offered file and a message's text wait for the person's answer or press.
KEEP_ANSWERS: Final = timedelta(days=7)
_KEEP: Final[dict[Kind, timedelta]] = {
    "route": KEEP_ROUTES,
    "tenant": KEEP_ROUTES,
    "account": KEEP_ROUTES,
    "personal": KEEP_ROUTES,
    "text": KEEP_ANSWERS,
    "offer": KEEP_ANSWERS,
}
#: Seconds between two deletions of expired rows by one instance.
_PURGE_EVERY_S: Final = 3_600.0

_SCHEMA: Final = Schema(
    "teams_state",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS teams_state (
    kind        TEXT NOT NULL,
    ref         TEXT NOT NULL,
    value       {blob} NOT NULL,
    expires_us  BIGINT NOT NULL,
    PRIMARY KEY (kind, ref)
);
CREATE INDEX IF NOT EXISTS teams_state_expires ON teams_state (expires_us);
""",
        ),
    ),
)


class TeamsState:
    """The Teams bridge's routes, offered files and message texts, shared by its instances."""

    def __init__(self, db: Database, *, clock: Clock = system_clock) -> None:
        self._db = db
        self._clock = clock
        self._purged_at = float("-inf")

    async def ensure_schema(self) -> None:
        await self._db.migrate(_SCHEMA)
        await self.purge()

    def _now(self) -> int:
        return to_micros(self._clock())

    async def put(self, kind: Kind, ref: str, value: bytes) -> None:
        """Keep ``value`` under ``kind`` and ``ref`` (replacing what was), for its kind's time."""
        now = self._now()
        expires = now + int(_KEEP[kind].total_seconds() * 1_000_000)
        await self._db.execute(
            "INSERT INTO teams_state (kind, ref, value, expires_us) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (kind, ref) DO UPDATE SET value = excluded.value, "
            "expires_us = excluded.expires_us",
            (kind, ref, value, expires),
        )
        if time.monotonic() - self._purged_at >= _PURGE_EVERY_S:
            await self.purge()

    async def get(self, kind: Kind, ref: str) -> bytes | None:
        """What is kept under ``kind`` and ``ref``, unless it expired."""
        row = await self._db.fetch_one(
            "SELECT value FROM teams_state WHERE kind = ? AND ref = ? AND expires_us > ?",
            (kind, ref, self._now()),
        )
        return bytes(row["value"]) if row is not None else None

    async def take(self, kind: Kind, ref: str) -> bytes | None:
        """What is kept under ``kind`` and ``ref``, deleted as it is read: one instance gets
        it, however many ask at once."""
        row = await self._db.fetch_one(
            "DELETE FROM teams_state WHERE kind = ? AND ref = ? AND expires_us > ? RETURNING value",
            (kind, ref, self._now()),
        )
        return bytes(row["value"]) if row is not None else None

    async def all(self, kind: Kind) -> list[bytes]:
        """Every unexpired value of ``kind`` (the tenants' routes: a handful)."""
        rows = await self._db.fetch_all(
            "SELECT value FROM teams_state WHERE kind = ? AND expires_us > ?",
            (kind, self._now()),
        )
        return [bytes(row["value"]) for row in rows]

    async def purge(self) -> int:
        """Delete what expired; returns how many rows went."""
        self._purged_at = time.monotonic()
        gone = await self._db.execute(
            "DELETE FROM teams_state WHERE expires_us <= ?", (self._now(),)
        )
        if gone:
            log.info("%d expired Teams routes, offers and texts deleted", gone)
        return gone
