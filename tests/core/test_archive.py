"""ArchiveWriter: submitting never blocks, and nothing submitted is ever lost."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from core.clock import ManualClock
from core.memory import PointStoreBase
from core.memory.archive import ArchiveWriter, Backoff
from core.memory.qdrant import QdrantStore
from core.state import Database
from tests.support.memory_doubles import DownStore, HashEmbedder, SlowStore, hash_vector
from tests.support.state import StateBackend

FAST = Backoff(initial_s=0.01, max_s=0.05)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def store(anyio_backend: str) -> AsyncIterator[PointStoreBase]:
    opened = await QdrantStore.local()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def db(state: StateBackend) -> Database:
    return await state.open()


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 15.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not await check():
            await asyncio.sleep(0.02)


def said(session: str, content: str, role: str = "user") -> dict[str, Any]:
    return {
        "personKey": "alice",
        "sessionKey": session,
        "conversationId": session.split(":", 1)[-1],
        "role": role,
        "content": content,
    }


async def contents(store: PointStoreBase, session: str) -> list[str]:
    page = await store.conversation("alice", session, limit=500)
    return [m.content for m in page.items]


async def spill_rows(db: Database, kind: str = "pending") -> int:
    row = await db.fetch_one("SELECT COUNT(*) FROM archive_spill WHERE kind = ?", (kind,))
    return int(row[0]) if row else 0


@pytest.mark.anyio
async def test_submit_returns_at_once_while_the_store_is_slow(store: PointStoreBase) -> None:
    slow = SlowStore(store, delay_s=0.1)
    writer = ArchiveWriter(slow, HashEmbedder(), queue_size=4, backoff=FAST, batch_size=4)
    await writer.start()

    started = time.perf_counter()
    for i in range(20):
        writer.submit("verbatim", said("alice:c", f"m{i}"))
    elapsed = time.perf_counter() - started

    assert elapsed < slow.delay_s  # twenty submits take less than one store call
    assert await writer.flush(timeout_s=30) == 0
    assert await contents(store, "alice:c") == [f"m{i}" for i in range(20)]


@pytest.mark.anyio
async def test_items_land_in_order_once_a_down_store_comes_back(store: PointStoreBase) -> None:
    down = DownStore(store)
    writer = ArchiveWriter(down, HashEmbedder(), clock=ManualClock(), backoff=FAST)
    await writer.start()
    for i in range(6):
        writer.submit("verbatim", said("alice:a", f"a{i}"))
        writer.submit("verbatim", said("alice:b", f"b{i}", role="assistant"))

    await eventually(lambda: _true(down.refused >= 3))
    assert not writer.ensured
    down.revive()
    await eventually(lambda: _true(writer.pending == 0))

    # The clock never moved: the writer's strictly increasing ts keeps submission order.
    assert await contents(store, "alice:a") == [f"a{i}" for i in range(6)]
    assert await contents(store, "alice:b") == [f"b{i}" for i in range(6)]
    await writer.flush(timeout_s=5)


@pytest.mark.anyio
async def test_a_full_queue_spills_to_sqlite_and_drains_back_in_order(
    store: PointStoreBase, db: Database
) -> None:
    await store.ensure(16)
    down = DownStore(store)
    writer = ArchiveWriter(down, HashEmbedder(), db=db, queue_size=4, batch_size=3, backoff=FAST)
    await writer.start()
    for i in range(20):
        writer.submit("verbatim", said("alice:c", f"m{i}"))

    await eventually(lambda: _true_async(spill_rows(db), lambda n: n == 16))
    assert writer.spilling
    down.revive()
    await eventually(lambda: _true_async(contents(store, "alice:c"), lambda c: len(c) == 20))

    assert await contents(store, "alice:c") == [f"m{i}" for i in range(20)]
    await eventually(lambda: _true_async(spill_rows(db), lambda n: n == 0))
    await eventually(lambda: _true(not writer.spilling))
    writer.submit("verbatim", said("alice:c", "after the spill"))
    assert await writer.flush(timeout_s=10) == 0
    assert (await contents(store, "alice:c"))[-1] == "after the spill"


@pytest.mark.anyio
async def test_without_a_database_the_overflow_waits_in_memory(store: PointStoreBase) -> None:
    down = DownStore(store)
    writer = ArchiveWriter(down, HashEmbedder(), queue_size=2, backoff=FAST)
    await writer.start()
    for i in range(9):
        writer.submit("verbatim", said("alice:c", f"m{i}"))
    assert writer.spilling

    down.revive()
    assert await writer.flush(timeout_s=15) == 0
    assert await contents(store, "alice:c") == [f"m{i}" for i in range(9)]


@pytest.mark.anyio
async def test_flush_persists_leftovers_and_the_next_writer_resends_them(
    store: PointStoreBase, db: Database
) -> None:
    down = DownStore(store)
    first = ArchiveWriter(down, HashEmbedder(), db=db, queue_size=3, backoff=FAST)
    await first.start()
    for i in range(7):
        first.submit("verbatim", said("alice:c", f"m{i}"))

    assert await first.flush(timeout_s=0.2) == 7
    assert await spill_rows(db) == 7
    with pytest.raises(RuntimeError, match="flushed"):
        first.submit("verbatim", said("alice:c", "too late"))

    second = ArchiveWriter(store, HashEmbedder(), db=db, backoff=FAST)
    await second.start()
    second.submit("verbatim", said("alice:c", "after the restart"))
    assert await second.flush(timeout_s=15) == 0

    assert sorted(await contents(store, "alice:c")) == sorted(
        [f"m{i}" for i in range(7)] + ["after the restart"]
    )
    assert (await contents(store, "alice:c"))[-1] == "after the restart"
    assert await spill_rows(db) == 0


@pytest.mark.anyio
async def test_an_item_the_embedder_failed_is_stored_without_a_vector_then_backfilled(
    store: PointStoreBase, db: Database
) -> None:
    await store.ensure(16)
    embedder = HashEmbedder()
    writer = ArchiveWriter(store, embedder, db=db, backoff=FAST)
    await writer.start()
    embedder.down = True
    writer.submit("verbatim", said("alice:c", "sailing boats on the lake"))

    await eventually(lambda: _true_async(contents(store, "alice:c"), bool))
    query = hash_vector("sailing boats on the lake")
    assert await store.search("verbatim", "alice", query) == []
    assert await spill_rows(db, "backfill") == 1

    embedder.down = False
    writer.submit("verbatim", said("alice:c", "tax forms"))  # the next good embedding backfills
    await eventually(
        lambda: _true_async(store.search("verbatim", "alice", query), lambda h: len(h) == 2)
    )
    hits = await store.search("verbatim", "alice", query)
    assert hits[0].payload["content"] == "sailing boats on the lake"
    # The backfilled item's row goes a moment after the item itself.
    await eventually(lambda: _true_async(spill_rows(db, "backfill"), lambda n: n == 0))
    assert await writer.flush(timeout_s=5) == 0
    assert await spill_rows(db, "backfill") == 0


@pytest.mark.anyio
async def test_a_backfill_left_at_shutdown_is_finished_by_the_next_writer_while_idle(
    store: PointStoreBase, db: Database
) -> None:
    embedder = HashEmbedder()
    embedder.down = True
    first = ArchiveWriter(store, embedder, db=db, backoff=FAST)
    await first.start()
    first.submit("episodic", {"personKey": "alice", "sessionKey": "alice:c", "summary": "boats"})
    # Wait for the write itself too: on a loaded machine the item can still be in flight.
    await eventually(lambda: _true(first.unembedded == 1 and first.pending == 0))
    assert await first.flush(timeout_s=5) == 1

    embedder.down = False
    second = ArchiveWriter(store, embedder, db=db, backoff=FAST, backfill_every_s=0.05)
    await second.start()
    await eventually(lambda: _true(second.unembedded == 0))
    # The backfilled item's row goes a moment after the item itself.
    await eventually(lambda: _true_async(spill_rows(db, "backfill"), lambda n: n == 0))

    hits = await store.search("episodic", "alice", hash_vector("boats"))
    assert [h.payload["summary"] for h in hits] == ["boats"]
    assert await second.flush(timeout_s=5) == 0


def upserted(stores: list[DownStore]) -> list[str]:
    return [point for store in stores for _, points in store.upserts for point in points]


@pytest.mark.anyio
async def test_rows_left_in_a_shared_spill_are_sent_by_exactly_one_of_several_writers(
    store: PointStoreBase, shared_state: StateBackend
) -> None:
    db = await shared_state.open()
    first = ArchiveWriter(DownStore(store), HashEmbedder(), db=db, queue_size=5, backoff=FAST)
    await first.start()
    for i in range(60):
        first.submit("verbatim", said("alice:c", f"m{i:02}"))
    assert await first.flush(timeout_s=0.2) == 60

    stores = [DownStore(store) for _ in range(3)]
    for each in stores:
        each.revive()
    writers = [
        ArchiveWriter(
            each,
            HashEmbedder(),
            db=await shared_state.open(),
            queue_size=5,
            batch_size=2,
            backoff=FAST,
            claim_s=0.6,
        )
        for each in stores
    ]
    await asyncio.gather(*(writer.start() for writer in writers))  # three instances at once
    await eventually(lambda: _true_async(spill_rows(db), lambda n: n == 0), timeout_s=30)

    sent = upserted(stores)
    assert len(sent) == len(set(sent)) == 60  # every row once, none by two writers
    assert sorted(await contents(store, "alice:c")) == [f"m{i:02}" for i in range(60)]
    for writer in writers:
        assert await writer.flush(timeout_s=5) == 0


@pytest.mark.anyio
async def test_a_live_writers_rows_stay_its_own_and_a_dead_writers_are_taken_up_once(
    store: PointStoreBase, shared_state: StateBackend
) -> None:
    await store.ensure(16)
    db = await shared_state.open()
    alive_store = DownStore(store)
    alive = ArchiveWriter(
        alive_store, HashEmbedder(), db=db, queue_size=2, backoff=FAST, claim_s=1.0
    )
    await alive.start()
    for i in range(8):
        alive.submit("verbatim", said("alice:live", f"l{i}"))
    await eventually(lambda: _true_async(spill_rows(db), lambda n: n == 6))
    # Rows a writer that died had claimed: its claims lapsed long ago.
    await db.execute_many(
        "INSERT INTO archive_spill (kind, point_id, collection, payload, claimed_by, "
        "claim_expires) VALUES ('pending', ?, 'verbatim', ?, 'a-dead-writer', 1)",
        [
            (
                f"00000000-0000-4000-8000-00000000000{i}",
                json.dumps(
                    said("alice:dead", f"d{i}")
                    | {"ts": 1.0 + i, "timestamp": "2026-01-01T00:00:00.000Z"}
                ),
            )
            for i in range(4)
        ],
    )

    others = [DownStore(store), DownStore(store)]
    writers = []
    for each in others:
        each.revive()
        writers.append(
            ArchiveWriter(
                each, HashEmbedder(), db=await shared_state.open(), backoff=FAST, claim_s=1.0
            )
        )
        await writers[-1].start()
    await eventually(lambda: _true_async(contents(store, "alice:dead"), lambda c: len(c) == 4))
    await asyncio.sleep(3.0)  # three claim periods: the live writer renews, nobody takes over

    sent = upserted(others)
    assert sorted(sent) == sorted(f"00000000-0000-4000-8000-00000000000{i}" for i in range(4))
    assert await contents(store, "alice:live") == []
    alive_store.revive()
    await eventually(lambda: _true_async(contents(store, "alice:live"), lambda c: len(c) == 8))
    assert await contents(store, "alice:live") == [f"l{i}" for i in range(8)]
    assert upserted(others) == sent
    for writer in [alive, *writers]:
        assert await writer.flush(timeout_s=5) == 0


@pytest.mark.anyio
async def test_submit_refuses_an_item_without_a_person_or_with_an_unknown_collection(
    store: PointStoreBase,
) -> None:
    writer = ArchiveWriter(store, HashEmbedder())
    with pytest.raises(ValueError, match="personKey"):
        writer.submit("verbatim", {"content": "whose?"})
    with pytest.raises(ValueError, match="collection"):
        writer.submit("tool_corrections", {"personKey": "alice"})  # type: ignore[arg-type]


async def _true(value: bool) -> bool:
    return value


async def _true_async(value: Awaitable[Any], test: Callable[[Any], bool]) -> bool:
    return test(await value)
