"""Turns' event logs in the shared state store, so a turn is rejoined through any instance.

The instance running a turn keeps its log in memory (:mod:`core.turn_logs.memory`; its own
readers follow it there, with no database on their path) and a **flusher** task per turn
copies it to the store in batches: one transaction per batch, at most every
:data:`FLUSH_S` (at once for a ``pending`` or ``final`` event, and when the turn ends), never
one write per token. Each transaction ends with a notice on :data:`CHANNEL` naming the turn.

Another instance finds the turn's row (owner, whether it ended, until when it is kept) and
follows the batches table from the asked-for number on, woken by the notices and, should one
be missed, by polling every :data:`POLL_S`. A batch is one row (its events' numbers, names
and one JSON array of their data), so a write is one statement for one event or a thousand.
The store's copy has the memory log's bounds: once the memory log has dropped the deltas of
whole rows, the next write replaces those rows with one row of the events they kept.

The grace period stays with the turn's instance. A reader on another instance renews an
``attached_until`` time on the turn's row every :data:`ATTACH_RENEW_S` and sets it to the
moment it leaves; when the turn's own grace timer fires with no reader of its own, the
instance reads that time and waits for the grace period after it before cancelling.

Rows are kept until ``expires_at``: while the turn runs, renewed by the flusher; once it
ended, the grace period after, or :data:`~core.turn_logs.memory.PENDING_RETENTION_S` when it
staged an action. Expired rows are deleted by whichever instance opens a turn next (at most
every :data:`PRUNE_EVERY_S`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import msgspec

from core.clock import Clock, system_clock
from core.engine import events
from core.state import Database, Migration, Notice, Schema, StateError
from core.turn_logs.memory import PENDING_RETENTION_S, MemoryTurnLogs, TurnLog
from core.turn_logs.port import Frame

__all__ = ["SCHEMA", "SharedTurnLogs", "StoredLog"]

log = logging.getLogger(__name__)

CHANNEL: Final = "turn_log"
#: The longest a batch waits to gather more events before it is written.
FLUSH_S: Final = 0.05
#: How often a reader elsewhere looks at the store when it hears nothing.
POLL_S: Final = 0.5
#: A running turn's row is renewed this often, and kept this long past a renewal.
RENEW_S: Final = 10.0
RUNNING_LEASE_S: Final = 60.0
#: A reader elsewhere says it is still there this often; a silent one counts this long.
ATTACH_RENEW_S: Final = 1.0
ATTACH_LEASE_S: Final = 3.0
PRUNE_EVERY_S: Final = 30.0
#: A write that failed is tried again after this; an ended turn's, this many times at most.
_RETRY_S: Final = 0.5
_ATTEMPTS_AFTER_END: Final = 20

SCHEMA: Final = Schema(
    "turn_log",
    (
        Migration(
            1,
            sql="""
CREATE TABLE IF NOT EXISTS turn_logs (
    turn_id        TEXT PRIMARY KEY,
    owner          TEXT NOT NULL,
    done           INTEGER NOT NULL,
    expires_at     BIGINT NOT NULL,
    attached_until BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS turn_logs_expires ON turn_logs (expires_at);
CREATE TABLE IF NOT EXISTS turn_batches (
    turn_id   TEXT NOT NULL,
    first_seq BIGINT NOT NULL,
    last_seq  BIGINT NOT NULL,
    body      TEXT NOT NULL,
    PRIMARY KEY (turn_id, first_seq)
);
""",
        ),
    ),
)

_encode = msgspec.json.Encoder().encode
_decode_raws = msgspec.json.Decoder(list[msgspec.Raw]).decode


def _us(seconds: float) -> int:
    return int(seconds * 1_000_000)


class SharedTurnLogs:
    """Rejoinable turns on a shared state store: kept here, copied there, found anywhere."""

    def __init__(self, db: Database, grace_s: float, *, clock: Clock = system_clock) -> None:
        self.grace_s = grace_s
        self._db = db
        self._clock = clock
        self._here = MemoryTurnLogs(grace_s, clock=clock)
        self._flushers: set[asyncio.Task[None]] = set()
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._pruned_at = 0.0

    async def start(self) -> None:
        """Create the tables if needed and listen for other instances' batches."""
        await self._db.migrate(SCHEMA)
        await self._db.subscribe(CHANNEL, self._heard)

    async def close(self) -> None:
        """Wait briefly for the last batches, then stop writing."""
        tasks = list(self._flushers)
        if tasks:
            _, running = await asyncio.wait(tasks, timeout=2.0)
            for task in running:
                task.cancel()

    def now(self) -> float:
        return self._clock().timestamp()

    # -- the turn's instance -------------------------------------------------------------

    def open(self, owner: str, cancel: Callable[[], None]) -> TurnLog:
        turn = self._here.open(owner, cancel, idle=self._idle)
        task = asyncio.get_running_loop().create_task(
            self._flush(turn), name=f"turn-log-{turn.turn_id[:8]}"
        )
        self._flushers.add(task)
        task.add_done_callback(self._flushers.discard)
        if time.monotonic() - self._pruned_at > PRUNE_EVERY_S:
            self._pruned_at = time.monotonic()
            pruning = asyncio.get_running_loop().create_task(self._prune())
            self._flushers.add(pruning)
            pruning.add_done_callback(self._flushers.discard)
        return turn

    def end(self, log: TurnLog) -> None:
        self._here.end(log)  # wakes the flusher, which writes the rest and the end

    async def _flush(self, turn: TurnLog) -> None:
        """Copy ``turn``'s log to the store in batches until it ended and all is written."""
        flushed = _Flushed()
        renewed = time.monotonic()
        failures = 0
        while True:
            done = turn.done
            end = len(turn.events)
            stale = time.monotonic() - renewed > RENEW_S
            if not flushed.created or end > flushed.written or done or stale:
                batch = flushed.next_batch(turn, end)  # taken now: the turn goes on meanwhile
                try:
                    await self._write(turn, batch, flushed.created, done)
                except StateError as error:
                    failures += 1
                    if failures == 1:
                        log.warning("Couldn't copy turn events to the state store (%s).", error)
                    if done and failures >= _ATTEMPTS_AFTER_END:
                        # Rejoining through this instance still works, from memory.
                        log.warning("Gave up copying an ended turn's events to the state store.")
                        return
                    await asyncio.sleep(_RETRY_S)
                    continue
                failures = 0
                flushed.wrote(batch)
                renewed = time.monotonic()
            if done:
                return
            # What came while the batch was written woke nobody: look before waiting.
            if not turn.done and len(turn.events) == flushed.written:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(RENEW_S):
                        await turn.changed()
            if not turn.done and not _urgent(turn.events, flushed.written):
                await asyncio.sleep(FLUSH_S)  # let the batch grow

    async def _write(self, turn: TurnLog, batch: _Batch, created: bool, done: bool) -> None:
        now = self.now()
        if done:
            keep = max(self.grace_s, PENDING_RETENTION_S if turn.staged else 0.0)
        else:
            keep = self.grace_s + RUNNING_LEASE_S
        tid = turn.turn_id
        async with self._db.transaction() as tx:
            if created:
                await tx.execute(
                    "UPDATE turn_logs SET done = ?, expires_at = ? WHERE turn_id = ?",
                    (int(done), _us(now + keep), tid),
                )
            else:
                await tx.execute(
                    "INSERT INTO turn_logs (turn_id, owner, done, expires_at, attached_until) "
                    "VALUES (?, ?, ?, ?, 0)",
                    (tid, turn.owner, int(done), _us(now + keep)),
                )
            if batch.compacted is not None:
                # The batches whose deltas the turn dropped become one row of what it kept.
                first, last, body = batch.compacted
                await tx.execute(
                    "DELETE FROM turn_batches WHERE turn_id = ? AND first_seq >= ? "
                    "AND first_seq <= ?",
                    (tid, first, last),
                )
                if body:
                    await tx.execute(
                        "INSERT INTO turn_batches (turn_id, first_seq, last_seq, body) "
                        "VALUES (?, ?, ?, ?)",
                        (tid, first, last, body),
                    )
            if batch.body:
                await tx.execute(
                    "INSERT INTO turn_batches (turn_id, first_seq, last_seq, body) "
                    "VALUES (?, ?, ?, ?)",
                    (tid, batch.start, batch.end - 1, batch.body),
                )
            if batch.body or done:
                await tx.notify(CHANNEL, tid)

    def _idle(self, turn: TurnLog) -> None:
        task = asyncio.get_running_loop().create_task(self._check_readers(turn))
        self._flushers.add(task)
        task.add_done_callback(self._flushers.discard)

    async def _check_readers(self, turn: TurnLog) -> None:
        """No reader here for the grace period: cancel, unless one elsewhere was seen since."""
        try:
            row = await self._db.fetch_one(
                "SELECT attached_until FROM turn_logs WHERE turn_id = ?", (turn.turn_id,)
            )
        except StateError:
            turn.rearm(1.0)  # can't tell: look again rather than cancel on a hiccup
            return
        seen = 0.0 if row is None else int(row[0]) / 1_000_000
        left = seen + self.grace_s - self.now()
        if left > 0:
            turn.rearm(left)
        else:
            turn.abandon()

    async def _prune(self) -> None:
        now = _us(self.now())
        try:
            async with self._db.transaction() as tx:
                await tx.execute(
                    "DELETE FROM turn_batches WHERE turn_id IN "
                    "(SELECT turn_id FROM turn_logs WHERE expires_at < ?)",
                    (now,),
                )
                await tx.execute("DELETE FROM turn_logs WHERE expires_at < ?", (now,))
        except StateError as error:
            log.warning("Couldn't delete expired turn logs (%s).", error)

    # -- any instance --------------------------------------------------------------------

    async def find(self, turn_id: str, owner: str) -> TurnLog | StoredLog | None:
        here = self._here.find_here(turn_id, owner)
        if here is not None:
            return here
        row = await self._db.fetch_one(
            "SELECT owner, expires_at FROM turn_logs WHERE turn_id = ?", (turn_id,)
        )
        if row is None or not secrets.compare_digest(str(row[0]), owner):
            return None
        if int(row[1]) < _us(self.now()):
            return None
        return StoredLog(self, turn_id)

    def _heard(self, notice: Notice) -> None:
        if notice is None:  # notices may have been missed: every reader looks again
            waiting = [w for ws in self._waiters.values() for w in ws]
        else:
            waiting = list(self._waiters.get(notice, ()))
        for waiter in waiting:
            waiter.set()


def _lines(entries: list[events.Event | events.TurnStarted | None], start: int, end: int) -> str:
    """Events ``start`` to ``end`` (the kept ones) as a row's body: three lines.

    Their numbers (the first alone when there is no gap, else all, comma-separated), their
    names (space-separated), then one JSON array of their data: one encoder call a batch.
    """
    part = entries[start:end]
    kept = [event for event in part if event is not None]
    if not kept:
        return ""
    if len(kept) == len(part):
        numbers = b"%d" % start
    else:
        numbers = b",".join([b"%d" % n for n, e in enumerate(part, start) if e is not None])
    return b"\n".join((numbers, b" ".join([e.name for e in kept]), _encode(kept))).decode()


def _frames(body: str) -> list[Frame]:
    """A row's events, as :func:`_lines` wrote them."""
    numbers, names, data = body.encode().split(b"\n", 2)
    listed = names.split(b" ")
    raws = _decode_raws(data)
    if b"," in numbers or len(listed) == 1:
        seqs = [int(n) for n in numbers.split(b",")]
    else:
        first = int(numbers)
        seqs = list(range(first, first + len(listed)))
    return [(seq, name, bytes(raw)) for seq, name, raw in zip(seqs, listed, raws, strict=True)]


@dataclass(frozen=True, slots=True)
class _Batch:
    """What one write carries: events ``start`` to ``end``, and maybe a compacted range."""

    start: int
    end: int
    body: str
    compacted: tuple[int, int, str] | None  # first, last number, the kept events' lines


@dataclass
class _Flushed:
    """What a turn's flusher has written: up to where, and the rows not yet compacted."""

    created: bool = False
    written: int = 0
    compacted: int = 0  # rows below this number hold no dropped delta any more
    rows: list[tuple[int, int]] = field(default_factory=list)  # (first, end) since compacted

    def next_batch(self, turn: TurnLog, end: int) -> _Batch:
        compacted = None
        # Whole rows the turn's trimming has passed; what they kept goes into one row.
        below = [row_end for _, row_end in self.rows if row_end <= turn.trimmed_to]
        if below:
            boundary = max(below)
            compacted = (
                self.compacted,
                boundary - 1,
                _lines(turn.events, self.compacted, boundary),
            )
        return _Batch(self.written, end, _lines(turn.events, self.written, end), compacted)

    def wrote(self, batch: _Batch) -> None:
        self.created = True
        self.written = batch.end
        if batch.compacted is not None:
            self.compacted = batch.compacted[1] + 1
            self.rows = [row for row in self.rows if row[0] >= self.compacted]
        if batch.body:
            self.rows.append((batch.start, batch.end))


_URGENT: Final = events.Pending | events.Final


def _urgent(entries: list[events.Event | events.TurnStarted | None], start: int) -> bool:
    """Whether an event not yet written must go out now (a choice to offer, the answer)."""
    return any(isinstance(e, _URGENT) for e in entries[start:])


class StoredLog:
    """A turn's log read from the store, by a reader on another instance than the turn's."""

    def __init__(self, logs: SharedTurnLogs, turn_id: str) -> None:
        self.turn_id = turn_id
        self._logs = logs
        self._db = logs._db
        self._wake = asyncio.Event()
        self._renewer: asyncio.Task[None] | None = None

    async def read(self, start: int) -> tuple[list[Frame], bool]:
        # The end first: once it is seen, every event is already in (the same transaction).
        row = await self._db.fetch_one(
            "SELECT done, expires_at FROM turn_logs WHERE turn_id = ?", (self.turn_id,)
        )
        rows = await self._db.fetch_all(
            "SELECT body FROM turn_batches WHERE turn_id = ? AND last_seq >= ? ORDER BY first_seq",
            (self.turn_id, start),
        )
        ended = row is None or bool(row[0]) or int(row[1]) < _us(self._logs.now())
        frames = [frame for row in rows for frame in _frames(str(row[0])) if frame[0] >= start]
        return frames, ended

    def expect(self) -> None:
        self._wake.clear()

    async def changed(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._wake.wait()

    async def attach(self) -> None:
        self._logs._waiters.setdefault(self.turn_id, set()).add(self._wake)
        await self._mark(ATTACH_LEASE_S)
        self._renewer = asyncio.get_running_loop().create_task(self._renew())

    async def detach(self) -> None:
        waiters = self._logs._waiters.get(self.turn_id)
        if waiters is not None:
            waiters.discard(self._wake)
            if not waiters:
                del self._logs._waiters[self.turn_id]
        if self._renewer is not None:
            self._renewer.cancel()
            self._renewer = None
        with contextlib.suppress(StateError):
            await self._mark(0.0)  # left now: the grace period runs from here

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(ATTACH_RENEW_S)
            with contextlib.suppress(StateError):
                await self._mark(ATTACH_LEASE_S)

    async def _mark(self, lease_s: float) -> None:
        await self._db.execute(
            "UPDATE turn_logs SET attached_until = ? WHERE turn_id = ?",
            (_us(self._logs.now() + lease_s), self.turn_id),
        )
