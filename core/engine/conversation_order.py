"""One conversation's turns one after another, in arrival order, on every instance at once.

Several instances share one state store; consecutive requests of a conversation may land on
different ones. Each turn takes a **ticket** the moment it arrives (one short transaction:
the conversation's counter goes up by one, and a row of the queue names the ticket, the
instance holding it and when that claim lapses). A turn runs once its ticket is the lowest
live one of its conversation, and deletes its row when it ends. Nothing holds a database
connection while it waits or runs: a waiter polls (with a growing pause, woken early by a
notice when a turn of the conversation ends), and one statement per instance and interval
renews the claims of every turn the instance runs or queues, so 500 running turns cost a
renewal statement every few seconds, not 500 connections.

An instance that dies stops renewing: its claims lapse after ``lease_s`` and the queue moves
on. A stalled holder that comes back after its claim lapsed can no longer write the
transcript (every write is fenced on the claim still being there), and it learns so at once:
each renewal returns the claims it still found, and a running turn whose claim is gone is
stopped (its ``hold`` raises :class:`OrderError`, so its client gets an ``error`` event). A
turn also renews its own claim, fenced, just before its final event
(:meth:`HeldTurn.keep`), so a turn whose place was lost never reports an answer as given.

The **transcript of record** lives here too, beside the counter: each turn appends the
messages it added (the person's message as soon as its turn starts, the rest when it ends),
with what the person saw of them (:mod:`core.engine.transcript`), and raises the conversation's
**version**. An instance whose in-memory history carries
another version than the store rebuilds it from the transcript before the turn runs, so a
history is never stale. ``compact`` holds the conversation as a turn would, empties its
transcript and raises the version (:meth:`HeldTurn.start_afresh`): the next turn, on any
instance, starts from memory's summary, not from what was compacted (#39).

Exceptions::

    OrderError              the queue lost this turn (its claim lapsed while it ran)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec

from core.engine.transcript import ShownMessage, write_shown
from core.model import ChatMessage
from core.state import Database, Migration, Notice, Schema, Statements, Transaction

__all__ = ["SCHEMA", "ConversationOrder", "HeldTurn", "OrderError"]

log = logging.getLogger(__name__)

CHANNEL: Final = "conversation_order"
_FIRST_PAUSE_S: Final = 0.02
_LONGEST_PAUSE_S: Final = 0.5

SCHEMA: Final = Schema(
    "conversation_order",
    (
        Migration(
            1,
            sql="""
CREATE TABLE IF NOT EXISTS conversation_turns (
    session_key TEXT PRIMARY KEY,
    next_ticket BIGINT NOT NULL,
    version     BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS conversation_queue (
    session_key TEXT NOT NULL,
    ticket      BIGINT NOT NULL,
    holder      TEXT NOT NULL,
    expires_at  BIGINT NOT NULL,
    PRIMARY KEY (session_key, ticket)
);
CREATE INDEX IF NOT EXISTS conversation_queue_holder ON conversation_queue (holder);
CREATE TABLE IF NOT EXISTS conversation_transcript (
    seq         {id},
    session_key TEXT NOT NULL,
    message     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS conversation_transcript_key
    ON conversation_transcript (session_key, seq);
""",
        ),
        # What the person saw, for GET /conversation(s): see core/engine/transcript.py.
        Migration(
            2,
            sql="""
CREATE TABLE IF NOT EXISTS conversation_messages (
    seq         {id},
    session_key TEXT NOT NULL,
    person_key  TEXT NOT NULL,
    role        TEXT NOT NULL,
    content     TEXT NOT NULL,
    timestamp   TEXT NOT NULL,
    interrupted INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS conversation_messages_key
    ON conversation_messages (session_key, seq);
CREATE INDEX IF NOT EXISTS conversation_messages_person
    ON conversation_messages (person_key, seq);
""",
        ),
    ),
)

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(ChatMessage).decode


class OrderError(Exception):
    """This turn's claim lapsed while it ran; another turn of the conversation went ahead."""


def _now_us() -> int:
    return int(time.time() * 1_000_000)


@dataclass
class HeldTurn:
    """A conversation's turn while it runs: the version it found, and its transcript writes."""

    key: str
    ticket: int
    version: int
    _order: ConversationOrder = field(repr=False)
    #: Set once a renewal found this turn's claim gone: another turn may run meanwhile.
    lost: bool = False
    _task: asyncio.Task[object] | None = field(default=None, repr=False)
    #: Whether a renewal cancelled the turn's task for it (and nothing else did).
    _stopped: bool = field(default=False, repr=False)

    async def transcript(self) -> list[ChatMessage]:
        """Every message of the conversation, in order."""
        return await self._order.transcript(self.key)

    async def append(
        self, messages: Sequence[ChatMessage], shown: Sequence[ShownMessage] = ()
    ) -> None:
        """Add ``messages`` to the transcript, ``shown`` to what the person saw, and raise
        the version (one transaction)."""
        if messages or shown:
            self.version = await self._order.append(self, messages, shown)

    async def keep(self) -> None:
        """Renew this turn's claim now; raises OrderError when it has lapsed already."""
        await self._order.keep(self)

    async def start_afresh(self) -> None:
        """Empty the transcript and raise the version (one transaction): every instance's
        next turn of the conversation starts without what was said (``compact``)."""
        self.version = await self._order.start_afresh(self)


_FENCE: Final = (
    "SELECT 1 FROM conversation_queue WHERE session_key = ? AND ticket = ? AND holder = ?"
)
_FENCE_LOCKED: Final = _FENCE + " FOR SHARE"


class ConversationOrder:
    """Per-conversation turn order across instances, on the shared state store."""

    def __init__(self, db: Database, *, lease_s: float, holder: str | None = None) -> None:
        self._db = db
        self._fence_sql = _FENCE_LOCKED if db.dialect == "postgresql" else _FENCE
        self.lease_s = lease_s
        self.holder = holder or uuid.uuid4().hex
        self._wakers: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}
        self._renewer: asyncio.Task[None] | None = None
        #: The turns running here, by (key, ticket): what a renewal checks its claims against.
        self._held: dict[tuple[str, int], HeldTurn] = {}

    async def start(self) -> None:
        """Create the tables if needed, listen for ends of turns, renew claims from now on."""
        await self._db.migrate(SCHEMA)
        await self._db.subscribe(CHANNEL, self._heard)
        self._renewer = asyncio.get_running_loop().create_task(self._renew_forever())

    async def stop(self) -> None:
        """Stop renewing and give back this instance's claims."""
        await self.stop_renewing()
        with contextlib.suppress(Exception):
            await self._db.execute(
                "DELETE FROM conversation_queue WHERE holder = ?", (self.holder,)
            )

    async def stop_renewing(self) -> None:
        """Stop renewing the claims; they lapse after the lease, as a dead instance's do."""
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
            self._renewer = None

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[HeldTurn]:
        """Wait for this conversation's earlier turns, on every instance; then run alone."""
        ticket = await self._take_ticket(key)
        try:
            version = await self._wait_for(key, ticket)
            held = HeldTurn(key, ticket, version, self, _task=asyncio.current_task())
            self._held[key, ticket] = held
            try:
                yield held
            except asyncio.CancelledError:
                task = asyncio.current_task()
                # Cancelled by a renewal that found the claim gone, and by nothing else:
                # the turn ends with an OrderError, which its client hears as an error.
                if held._stopped and task is not None and task.uncancel() == 0:
                    raise OrderError(_lost(key)) from None
                raise
            finally:
                self._held.pop((key, ticket), None)
        finally:
            # Shielded: a cancelled turn must still leave the queue, or it blocks it a lease.
            await asyncio.shield(self._leave(key, ticket))

    async def transcript(self, key: str) -> list[ChatMessage]:
        rows = await self._db.fetch_all(
            "SELECT message FROM conversation_transcript WHERE session_key = ? ORDER BY seq",
            (key,),
        )
        return [_decode(row[0]) for row in rows]

    async def append(
        self,
        held: HeldTurn,
        messages: Sequence[ChatMessage],
        shown: Sequence[ShownMessage] = (),
    ) -> int:
        async with self._db.transaction() as tx:
            await self._fence(tx, held)
            for message in messages:
                await tx.execute(
                    "INSERT INTO conversation_transcript (session_key, message) VALUES (?, ?)",
                    (held.key, _encode(message).decode()),
                )
            await write_shown(tx, held.key, shown)
            row = await tx.fetch_one(
                "UPDATE conversation_turns SET version = version + 1 "
                "WHERE session_key = ? RETURNING version",
                (held.key,),
            )
        assert row is not None  # noqa: S101 - the ticket's row exists since it was taken
        return int(row[0])

    async def start_afresh(self, held: HeldTurn) -> int:
        async with self._db.transaction() as tx:
            await self._fence(tx, held)
            await tx.execute(
                "DELETE FROM conversation_transcript WHERE session_key = ?", (held.key,)
            )
            row = await tx.fetch_one(
                "UPDATE conversation_turns SET version = version + 1 "
                "WHERE session_key = ? RETURNING version",
                (held.key,),
            )
        assert row is not None  # noqa: S101 - the ticket's row exists since it was taken
        return int(row[0])

    async def claimed_elsewhere(self, key: str) -> bool:
        """Whether another instance runs, or queues, a turn of conversation ``key`` now."""
        row = await self._db.fetch_one(
            "SELECT 1 FROM conversation_queue "
            "WHERE session_key = ? AND holder <> ? AND expires_at >= ? LIMIT 1",
            (key, self.holder, _now_us()),
        )
        return row is not None

    async def _fence(self, tx: Transaction, held: HeldTurn) -> None:
        """OrderError unless ``held``'s claim is still there; on PostgreSQL it stays locked
        until ``tx`` ends.

        Another instance takes a lapsed claim over by deleting it. A plain read would let
        that delete, and the next turn's read of the version, fall between this check and
        the commit: the next turn would start without the messages written here. ``FOR
        SHARE`` makes the delete wait for the commit. (SQLite's writes are one at a time:
        the transaction already holds the file's write lock.)
        """
        still_held = await tx.fetch_one(self._fence_sql, (held.key, held.ticket, self.holder))
        if still_held is None:
            raise OrderError(_lost(held.key))

    async def keep(self, held: HeldTurn) -> None:
        """Renew ``held``'s claim alone, fenced: OrderError when it is gone already."""
        renewed = await self._db.execute(
            "UPDATE conversation_queue SET expires_at = ? "
            "WHERE session_key = ? AND ticket = ? AND holder = ?",
            (self._expiry(), held.key, held.ticket, self.holder),
        )
        if renewed == 0:
            held.lost = True
            raise OrderError(_lost(held.key))

    async def renew(self, statements: Statements | None = None) -> None:
        """Renew every claim of this instance at once; stop the running turns whose claim is
        gone (a stall longer than the lease let it lapse, and the queue moved on)."""
        running = dict(self._held)
        rows = await (statements or self._db).fetch_all(
            "UPDATE conversation_queue SET expires_at = ? WHERE holder = ? "
            "RETURNING session_key, ticket",
            (self._expiry(), self.holder),
        )
        found = {(str(row[0]), int(row[1])) for row in rows}
        for place, held in running.items():
            if place in found or self._held.get(place) is not held or held.lost:
                continue  # still claimed, or it ended while the renewal ran
            log.warning(
                "The running turn of %s lost its place (its claim lapsed); stopping it.",
                held.key,
            )
            held.lost = True
            if held._task is not None:
                held._stopped = True
                held._task.cancel()

    # --- inside -----------------------------------------------------------------------

    async def _take_ticket(self, key: str) -> int:
        async with self._db.transaction() as tx:
            row = await tx.fetch_one(
                "INSERT INTO conversation_turns (session_key, next_ticket, version) "
                "VALUES (?, 1, 0) ON CONFLICT (session_key) DO UPDATE "
                "SET next_ticket = conversation_turns.next_ticket + 1 RETURNING next_ticket",
                (key,),
            )
            assert row is not None  # noqa: S101 - an upsert with RETURNING gives its row
            ticket = int(row[0])
            await tx.execute(
                "INSERT INTO conversation_queue (session_key, ticket, holder, expires_at) "
                "VALUES (?, ?, ?, ?)",
                (key, ticket, self.holder, self._expiry()),
            )
        return ticket

    async def _wait_for(self, key: str, ticket: int) -> int:
        waker = self._wakers.setdefault(key, asyncio.Event())
        self._waiting[key] = self._waiting.get(key, 0) + 1
        try:
            return await self._poll(key, ticket, waker)
        finally:
            self._waiting[key] -= 1
            if not self._waiting[key]:
                del self._waiting[key]
                del self._wakers[key]

    async def _poll(self, key: str, ticket: int, waker: asyncio.Event) -> int:
        pause = _FIRST_PAUSE_S
        while True:
            waker.clear()
            await self._db.execute(
                "DELETE FROM conversation_queue WHERE session_key = ? AND expires_at < ?",
                (key, _now_us()),
            )
            row = await self._db.fetch_one(
                "SELECT q.ticket, t.version FROM conversation_queue q "
                "JOIN conversation_turns t ON t.session_key = q.session_key "
                "WHERE q.session_key = ? ORDER BY q.ticket LIMIT 1",
                (key,),
            )
            if row is None or int(row[0]) > ticket:
                # Our claim lapsed while we waited (the renewals stalled): claim the place
                # again; every ticket before ours has left or lapsed too.
                await self._db.execute(
                    "INSERT INTO conversation_queue (session_key, ticket, holder, expires_at) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (session_key, ticket) DO NOTHING",
                    (key, ticket, self.holder, self._expiry()),
                )
                continue
            if int(row[0]) == ticket:
                return int(row[1])
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await waker.wait()
            pause = min(pause * 2, _LONGEST_PAUSE_S)

    async def _leave(self, key: str, ticket: int) -> None:
        try:
            await self._db.execute(
                "DELETE FROM conversation_queue WHERE session_key = ? AND ticket = ?",
                (key, ticket),
            )
            await self._db.notify(CHANNEL, key)
        except Exception:  # the claim lapses by itself; the queue moves on then
            log.exception("could not leave the queue of %s; its claim will lapse", key)
        finally:
            self._wake(key)

    def _heard(self, notice: Notice) -> None:
        if notice is None:  # notices may have been missed: everyone looks again
            for event in self._wakers.values():
                event.set()
            return
        self._wake(notice)

    def _wake(self, key: str) -> None:
        event = self._wakers.get(key)
        if event is not None:
            event.set()

    def _expiry(self) -> int:
        return _now_us() + int(self.lease_s * 1_000_000)

    async def _renew_forever(self) -> None:
        """Renew on a connection of its own: a pool kept busy longer than the lease (a
        burst of turns, slow statements) must not let this instance's claims lapse."""
        while True:
            try:
                async with self._db.own_connection() as own:
                    while True:
                        await asyncio.sleep(self.lease_s / 3)
                        await self.renew(own)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("could not renew this instance's conversation claims")
                await asyncio.sleep(self.lease_s / 3)  # then connect again


def _lost(key: str) -> str:
    return f"The turn of {key!r} lost its place: its claim lapsed while it ran."
