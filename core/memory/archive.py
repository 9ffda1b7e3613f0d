"""Writing to memory off the hot path: :class:`ArchiveWriter`, a queue that never loses.

A turn hands its messages to :meth:`ArchiveWriter.submit`, which stamps them (a UUID, the
``timestamp`` and an ``ts`` strictly increasing per writer, so reads keep submission order even
when the clock doesn't move) and returns at once. A background task drains the queue in
batches: it embeds each batch, stores it, and on a store failure retries the same batch with
backoff, so nothing overtakes it.

- **Write-behind.** Once an item arrives the drain waits up to ``linger_s`` for more (or until
  a batch is full), so one embedding call and one store write serve several turns. A reader
  that must see what was submitted (the read routes, a conversation's rebuild, recall; when
  :meth:`holds_conversation` or :meth:`holds_person` says there is something to see) calls
  :meth:`settled`, which ends the wait at once; so does :meth:`flush`. A crash loses what
  the in-memory queue held, as it always could; the wait only adds ``linger_s``.

- **Full queue.** ``submit`` stays synchronous and never waits: once the in-memory queue holds
  ``queue_size`` items, new ones go to an overflow list that a second task writes to the
  ``archive_spill`` SQLite table (:mod:`core.memory.spill`). Until the spill has been
  drained back, every new item follows it there, so the store still sees items in order.
  Without a database the overflow stays in memory.
- **Embedder down.** The item is stored without a vector (listed, never matched by a search)
  and kept for a backfill, also recorded in SQLite, which re-embeds and rewrites it after the
  next successful embedding or every ``backfill_every_s`` while idle. Rewriting the same id is
  an idempotent upsert.
- **Store not ready.** :meth:`start` launches ``store.ensure`` with retries, so the server starts
  while the vector store is unreachable; items wait (queued, then spilled) until it answers.
- **Shutdown.** :meth:`flush` drains what it can within its deadline and persists the rest to
  SQLite; the next writer's :meth:`start` resends it.
- A batch the store keeps refusing for another reason than unavailability is parked after
  ``max_attempts`` tries (kind ``dead`` in SQLite, logged) instead of blocking the queue.
- **Several instances** (PostgreSQL): every row is claimed by exactly one writer, the one
  that spilled it or the one that took it up (an ``UPDATE`` of the claim, on rows locked
  with ``FOR UPDATE SKIP LOCKED``), and each writer renews its claims every third of
  ``claim_s``. Rows a flush leaves behind are unclaimed; rows of a writer that died are
  free once its claims lapse; a running writer looks for either every third of
  ``claim_s`` and takes them up, so no row is sent by two instances, and none waits for a
  restart of the instance that wrote it.

Exceptions: none of its own at run time; ``submit`` raises ``ValueError`` for a malformed item
and ``RuntimeError`` after :meth:`flush` (programmer mistakes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from core.clock import Clock, system_clock
from core.memory import (
    COLLECTIONS,
    Collection,
    CollectionMismatch,
    MemoryPoint,
    MemoryStore,
    MemoryStoreError,
    StoreUnavailable,
)
from core.memory.embedder import Embedder, EmbeddingFailed
from core.memory.spill import Item, Spill
from core.state import Database

log = logging.getLogger(__name__)

EMBEDDED_FIELD: Final[Mapping[Collection, str]] = {
    "verbatim": "content",
    "episodic": "summary",
    "semantic": "topic",
}
"""Which payload field each collection's vector is made from."""

_TS_STEP: Final = 1e-6
_SPILL_BATCH: Final = 200


class Backoff(msgspec.Struct, frozen=True, kw_only=True):
    """Delays between retries: ``initial_s``, doubled each time up to ``max_s``."""

    initial_s: float = 0.1
    max_s: float = 10.0

    def next(self, delay: float) -> float:
        return min(delay * 2, self.max_s)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ArchiveWriter:
    """The memory store's write queue: ``submit`` now, stored in the background, never lost."""

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        *,
        db: Database | None = None,
        queue_size: int = 1000,
        clock: Clock = system_clock,
        vector_size: int | None = None,
        batch_size: int = 32,
        backoff: Backoff | None = None,
        max_attempts: int = 5,
        backfill_every_s: float = 60.0,
        embed_timeout_s: float = 30.0,
        claim_s: float = 60.0,
        linger_s: float = 0.0,
    ) -> None:
        if queue_size < 1 or batch_size < 1:
            raise ValueError("ArchiveWriter needs queue_size and batch_size of at least 1.")
        self._store = store
        self._embedder = embedder
        #: Who claims this writer's rows of the spill table.
        self.holder = uuid.uuid4().hex
        #: The rows of items held outside memory (None without a database: they stay in it).
        self._spill = None if db is None else Spill(db, holder=self.holder, claim_s=claim_s)
        self._queue_size = queue_size
        self._clock = clock
        self._vector_size = vector_size
        self._batch_size = batch_size
        self._backoff = backoff or Backoff()
        self._max_attempts = max_attempts
        self._backfill_every_s = backfill_every_s
        self._embed_timeout_s = embed_timeout_s
        self._claim_s = claim_s
        self._linger_s = linger_s

        self._mem: deque[Item] = deque()
        self._overflow: list[Item] = []
        self._backfill: dict[str, Item] = {}
        self._spill_pending = False  # SQLite may hold pending rows not loaded yet
        #: Items spilled to SQLite since start-up because the queue was full.
        self.spilled = 0
        self._spill_generation = 0
        self._last_loaded_seq = 0
        self._last_ts = 0.0
        self._wake = asyncio.Event()
        self._spill_wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._ensured = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._submitted = 0  # items submitted to this writer
        self._done = 0  # every submission up to this one is stored (or parked)
        self._progress = asyncio.Event()
        self._hurry = asyncio.Event()  # a batch is full, or someone waits: stop lingering
        self._settling = 0
        self._stopping = False
        self._held: dict[tuple[str, str], int] = {}  # items not stored yet, by _hold_keys
        self._spilled_n: dict[str, int] = {}  # n of this writer's items now in SQLite

    # -- public ------------------------------------------------------------------------

    @property
    def ensured(self) -> bool:
        """Whether the store's collections exist, so writes can flow."""
        return self._ensured.is_set()

    def explains(self, error: BaseException) -> bool:
        """Whether a read failed with ``error`` because the collections aren't ensured yet: the
        ensure loop logs why itself, and a store never ensured holds nothing to miss (one left
        by an earlier run is read before that; docs/memory.md)."""
        return isinstance(error, StoreUnavailable) and not self.ensured

    @property
    def pending(self) -> int:
        """Items submitted and not yet stored that are held in memory (spilled rows aside)."""
        return len(self._mem) + len(self._overflow)

    @property
    def spilling(self) -> bool:
        """Whether new items go to the overflow because the queue filled up."""
        return bool(self._overflow) or self._spill_pending

    @property
    def unembedded(self) -> int:
        """Items stored without a vector, waiting for the backfill."""
        return len(self._backfill)

    async def start(self) -> None:
        """Reload leftovers from SQLite, then launch the ensure, drain and spill tasks."""
        if self._spill is not None:
            await self._spill.migrate()
            await self._adopt_orphans()
        self._tasks = [
            asyncio.create_task(self._ensure_loop(), name="archive-ensure"),
            asyncio.create_task(self._drain_loop(), name="archive-drain"),
        ]
        if self._spill is not None:
            self._tasks.append(asyncio.create_task(self._spill_loop(), name="archive-spill"))
            self._tasks.append(asyncio.create_task(self._claim_loop(), name="archive-claims"))

    def submit(self, collection: Collection, payload: Mapping[str, Any]) -> str:
        """Queue one point for writing and return its id; never blocks, never waits."""
        if self._closed:
            raise RuntimeError("The archive writer was flushed; submit to a new writer.")
        if collection not in COLLECTIONS:
            raise ValueError(f"Unknown memory collection {collection!r}; use one of {COLLECTIONS}.")
        if not isinstance(payload.get("personKey"), str) or not payload["personKey"]:
            raise ValueError("An archived item needs a personKey; set it in the payload.")
        stamped = dict(payload)
        if "ts" not in stamped:
            ts = max(self._clock().timestamp(), self._last_ts + _TS_STEP)
            self._last_ts = ts
            stamped["ts"] = ts
            stamped.setdefault("timestamp", _iso(datetime.fromtimestamp(ts, UTC)))
        self._submitted += 1
        item = Item(id=str(uuid.uuid4()), collection=collection, payload=stamped)
        item.n = self._submitted
        for held in _hold_keys(collection, stamped):
            self._held[held] = self._held.get(held, 0) + 1
        if self._overflow or self._spill_pending or len(self._mem) >= self._queue_size:
            self._overflow.append(item)
            self._spill_wake.set()
        else:
            self._mem.append(item)
            if len(self._mem) >= self._batch_size:
                self._hurry.set()
        self._idle.clear()
        self._wake.set()
        return item.id

    def holds_conversation(self, session_key: str) -> bool:
        """Whether messages of this session were submitted and are not stored yet."""
        return ("session", session_key) in self._held

    def holds_person(self, person_key: str) -> bool:
        """Whether anything of this person was submitted and is not stored yet."""
        return ("person", person_key) in self._held

    def holds_memory_of(self, person_key: str) -> bool:
        """Whether facts or episodes of this person were submitted and are not stored yet."""
        return ("memory", person_key) in self._held

    async def settled(self, timeout_s: float) -> bool:
        """Wait until everything submitted so far is stored, for a read that must see it;
        ``False`` when ``timeout_s`` passed first (the store is slow or away)."""
        target = self._submitted
        if self._done >= target:
            return True
        self._settling += 1
        self._hurry.set()
        try:
            async with asyncio.timeout(timeout_s):
                while self._done < target:
                    self._progress.clear()
                    await self._progress.wait()
        except TimeoutError:
            return False
        finally:
            self._settling -= 1
        return True

    async def flush(self, timeout_s: float) -> int:
        """Drain for up to ``timeout_s``, then stop and persist what is left; returns its count.

        Items the store didn't take are written to SQLite for the next :meth:`start` to resend
        (without a database they are logged as lost). The writer accepts nothing afterwards.
        """
        self._stopping = True
        self._hurry.set()  # nothing lingers any more: drain what is there
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while not self._is_empty():
                    self._idle.clear()
                    self._wake.set()
                    await self._idle.wait()
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        return await self._persist_leftovers()

    # -- background tasks --------------------------------------------------------------

    async def _ensure_loop(self) -> None:
        delay = self._backoff.initial_s
        while True:
            try:
                size = self._vector_size or await self._embedder.vector_size()
                await self._store.ensure(size)
                self._vector_size = size
            except CollectionMismatch:
                log.exception("Memory stays off: the vector store's collections don't fit.")
                return
            except Exception as exc:
                log.warning("Memory isn't ready yet, retrying in %.1f s: %s", delay, _said(exc))
                await asyncio.sleep(delay)
                delay = self._backoff.next(delay)
            else:
                self._ensured.set()
                self._wake.set()
                return

    async def _drain_loop(self) -> None:
        await self._ensured.wait()
        delay = self._backoff.initial_s
        while True:
            self._wake.clear()
            if not self._mem:
                await self._refill()
            if not self._mem:
                if self._is_empty():
                    self._idle.set()
                await self._wait_for_work()
                continue
            await self._linger()
            batch = [self._mem[i] for i in range(min(self._batch_size, len(self._mem)))]
            if await self._store_batch(batch):
                delay = self._backoff.initial_s
            else:
                await asyncio.sleep(delay)
                delay = self._backoff.next(delay)
                await self._reensure()

    async def _linger(self) -> None:
        """Give later turns ``linger_s`` to join this batch, unless it is full or awaited."""
        if self._linger_s <= 0 or len(self._mem) >= self._batch_size:
            return
        if not self._settling and not self._stopping:
            self._hurry.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._linger_s):
                await self._hurry.wait()

    def _stored(self, batch: list[Item]) -> None:
        """Count a batch as stored (or parked): readers waiting in :meth:`settled` may go."""
        for item in batch:
            if not item.n:
                continue  # an earlier writer's: never counted here
            for held in _hold_keys(item.collection, item.payload):
                left = self._held.get(held, 0) - 1
                if left > 0:
                    self._held[held] = left
                else:
                    self._held.pop(held, None)
            self._done = max(self._done, item.n)
        self._progress.set()

    async def _reensure(self) -> None:
        """After a failed write, make sure the collections still exist (Qdrant may have been
        restarted empty); ``ensure`` is idempotent, so this costs a round trip at most."""
        if self._vector_size is None:
            return
        try:
            await self._store.ensure(self._vector_size)
        except Exception as exc:
            log.debug("Re-ensuring memory collections failed (%s).", exc)

    async def _wait_for_work(self) -> None:
        try:
            async with asyncio.timeout(self._backfill_every_s):
                await self._wake.wait()
        except TimeoutError:
            if self._backfill:
                await self._backfill_some()

    async def _spill_loop(self) -> None:
        assert self._spill is not None  # noqa: S101 - only started with a database
        delay = self._backoff.initial_s
        while True:
            await self._spill_wake.wait()
            self._spill_wake.clear()
            while self._overflow:
                chunk = self._overflow[:_SPILL_BATCH]
                try:
                    await self._spill.insert("pending", chunk)
                except Exception:
                    log.exception(
                        "Couldn't spill %d archive items to SQLite; retrying.", len(chunk)
                    )
                    await asyncio.sleep(delay)
                    delay = self._backoff.next(delay)
                    continue
                delay = self._backoff.initial_s
                for item in chunk:
                    self._spilled_n[item.id] = item.n
                del self._overflow[: len(chunk)]
                self.spilled += len(chunk)
                self._spill_pending = True
                self._spill_generation += 1
                self._wake.set()

    async def _claim_loop(self) -> None:
        """Renew this writer's claims; take up rows nobody claims any more."""
        while True:
            await asyncio.sleep(self._claim_s / 3)
            try:
                await self._spill_required.renew()
                await self._adopt_orphans()
            except Exception:
                log.exception("Couldn't renew or take up archive spill rows; retrying.")

    # -- steps -------------------------------------------------------------------------

    async def _refill(self) -> None:
        """Bring spilled items back into the in-memory queue once it has emptied."""
        if self._spill is None:
            take = self._overflow[: self._queue_size]
            del self._overflow[: len(take)]
            self._mem.extend(take)
            return
        if not self._spill_pending:
            return
        generation = self._spill_generation
        rows = await self._spill.claim_pending(self._last_loaded_seq, self._queue_size)
        if rows:
            items = sorted(rows, key=lambda i: i.seq or 0)
            for item in items:
                item.n = self._spilled_n.pop(item.id, 0)
            self._last_loaded_seq = max(item.seq or 0 for item in items)
            self._mem.extend(items)
        elif generation == self._spill_generation:
            self._spill_pending = False

    async def _store_batch(self, batch: list[Item]) -> bool:
        """Embed and store one batch; ``True`` once it is stored (or parked)."""
        embedded = await self._embed([i for i in batch if i.vector is None])
        try:
            for collection in dict.fromkeys(i.collection for i in batch):
                await self._store.upsert(
                    collection,
                    [
                        MemoryPoint(i.id, i.vector, i.payload)
                        for i in batch
                        if i.collection == collection
                    ],
                )
        except StoreUnavailable as exc:
            log.warning("Memory store unavailable (%s); %d items wait.", exc, self.pending)
            return False
        except Exception:
            for item in batch:
                item.attempts += 1
            if batch[0].attempts < self._max_attempts:
                log.exception("Memory store refused %d items; retrying.", len(batch))
                return False
            log.exception(
                "Memory store refused %d items %d times; parking them.",
                len(batch),
                self._max_attempts,
            )
            await self._park(batch)
            self._drop(batch)
            self._stored(batch)
            return True
        self._drop(batch)
        self._stored(batch)
        await self._forget([i.seq for i in batch if i.seq is not None])
        unembedded = [i for i in batch if i.vector is None and self._text(i)]
        if unembedded:
            await self._defer(unembedded)
        elif embedded and self._backfill:
            await self._backfill_some()
        return True

    async def _embed(self, items: list[Item]) -> bool:
        """Give the items their vectors; ``False`` when the embedder failed (they stay without)."""
        todo = [i for i in items if self._text(i)]
        if not todo:
            return False
        try:
            async with asyncio.timeout(self._embed_timeout_s):
                vectors = await self._embedder.embed([self._text(i) for i in todo])
        except Exception as exc:
            log.warning("Embedding failed (%s); storing %d items without vectors.", exc, len(todo))
            return False
        for item, vector in zip(todo, vectors, strict=True):
            item.vector = vector
        return True

    async def _backfill_some(self) -> None:
        items = list(self._backfill.values())[: self._batch_size]
        if not await self._embed(items):
            return
        done = [i for i in items if i.vector is not None]
        try:
            for collection in dict.fromkeys(i.collection for i in done):
                await self._store.upsert(
                    collection,
                    [
                        MemoryPoint(i.id, i.vector, i.payload)
                        for i in done
                        if i.collection == collection
                    ],
                )
        except Exception as exc:
            log.warning("Backfill of %d vectors failed (%s); retrying later.", len(done), exc)
            return
        for item in done:
            del self._backfill[item.id]
        await self._forget([i.seq for i in done if i.seq is not None])

    async def _defer(self, items: list[Item]) -> None:
        """Remember items stored without a vector, in SQLite too, for the backfill."""
        for item in items:
            item.seq = None  # its pending row, if any, is gone: the point is stored
            self._backfill[item.id] = item
        if self._spill is None:
            return
        try:
            await self._spill.insert("backfill", items)
            await self._spill.adopt_seqs("backfill", items)
        except Exception:
            log.exception("Couldn't record %d items for the vector backfill.", len(items))

    async def _park(self, items: list[Item]) -> None:
        if self._spill is None:
            log.error("Dropping archive items the store refuses: %s", [i.id for i in items])
            return
        try:
            await self._forget([i.seq for i in items if i.seq is not None])
            await self._spill.insert("dead", items)
        except Exception:
            log.exception("Couldn't park refused archive items %s.", [i.id for i in items])

    def _drop(self, batch: list[Item]) -> None:
        for _ in batch:
            self._mem.popleft()

    async def _adopt_orphans(self) -> None:
        """Take up rows nobody holds: backfills into the set, pending rows on the next refill."""
        spill = self._spill_required
        for item in await spill.claim_backfills():
            self._backfill[item.id] = item
        if not self._spill_pending:
            if await spill.has_unclaimed_pending():
                self._spill_pending = True
                self._spill_generation += 1
                self._wake.set()

    async def _persist_leftovers(self) -> int:
        fresh = [i for i in self._mem if i.seq is None] + self._overflow
        fresh_backfill = [i for i in self._backfill.values() if i.seq is None]
        kept = len(self._mem) + len(self._overflow) + len(self._backfill)
        if self._spill is None:
            if kept:
                log.error("Archive writer stopped with %d unstored items and no database.", kept)
            return kept
        await self._spill.insert("pending", fresh, claimed=False)
        if fresh_backfill:
            # A flush can cut _defer between its insert and its seq adoption: skip the
            # rows already recorded, or the next start would backfill them twice.
            recorded = await self._spill.backfill_ids()
            fresh_backfill = [i for i in fresh_backfill if i.id not in recorded]
        await self._spill.insert("backfill", fresh_backfill, claimed=False)
        # What this writer held is free for the next writer, here or on another instance.
        await self._spill.release()
        self._mem.clear()
        self._overflow.clear()
        waiting = await self._spill.waiting()
        return kept if waiting is None else waiting

    # -- helpers -----------------------------------------------------------------------

    async def _forget(self, seqs: list[int]) -> None:
        if self._spill is not None:
            await self._spill.forget(seqs)

    @property
    def _spill_required(self) -> Spill:
        assert self._spill is not None  # noqa: S101 - only called with a database
        return self._spill

    def _is_empty(self) -> bool:
        return not self._mem and not self._overflow and not self._spill_pending

    @staticmethod
    def _text(item: Item) -> str:
        value = item.payload.get(EMBEDDED_FIELD[item.collection])
        return value if isinstance(value, str) else ""


def _hold_keys(collection: Collection, payload: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """What an unstored item holds back: its person's reads, and its conversation's or the
    person's facts and episodes."""
    person = ("person", str(payload["personKey"]))
    if collection != "verbatim":
        return (person, ("memory", person[1]))
    session = payload.get("sessionKey")
    return (person, ("session", session)) if isinstance(session, str) else (person,)


def _said(error: BaseException) -> str:
    """An error as one sentence for operators: our own messages, else only the type."""
    if isinstance(error, (EmbeddingFailed, MemoryStoreError)):
        return str(error)
    return f"the attempt failed ({type(error).__name__})."
