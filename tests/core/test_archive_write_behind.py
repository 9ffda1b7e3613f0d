"""The archive writes behind: several turns share one embedding call and one store write,
and nothing lingering is lost or hidden from a reader that waits for it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence

import pytest

from core.memory import Collection, MemoryPoint, MemoryStore, PointStoreBase
from core.memory.archive import ArchiveWriter, Backoff
from core.memory.qdrant import QdrantStore
from tests.support.memory_doubles import DownStore, HashEmbedder, SlowStore

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

FAST = Backoff(initial_s=0.01, max_s=0.05)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def store(anyio_backend: str) -> AsyncIterator[PointStoreBase]:
    opened = await QdrantStore.local()
    await opened.ensure(16)
    try:
        yield opened
    finally:
        await opened.close()


class CountingStore(SlowStore):
    """The store, answering at once, with the size of every write it was sent."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store, 0.0)
        self.writes: list[int] = []

    async def upsert(self, collection: Collection, points: Sequence[MemoryPoint]) -> None:
        self.writes.append(len(points))
        await super().upsert(collection, points)


def said(session: str, content: str, role: str = "user") -> dict[str, str]:
    return {"personKey": "alice", "sessionKey": session, "role": role, "content": content}


async def contents(store: PointStoreBase, session: str) -> list[str]:
    page = await store.conversation("alice", session, limit=500)
    return [m.content for m in page.items]


async def ensured(writer: ArchiveWriter) -> None:
    async with asyncio.timeout(10):
        while not writer.ensured:
            await asyncio.sleep(0.01)


async def test_turns_within_the_linger_share_one_embedding_call_and_one_store_write(
    store: PointStoreBase,
) -> None:
    counting, embedder = CountingStore(store), HashEmbedder()
    writer = ArchiveWriter(counting, embedder, linger_s=5.0, backoff=FAST)
    await writer.start()
    await ensured(writer)
    calls_before = embedder.calls
    for i in range(3):  # three turns a moment apart, each a question and its answer
        writer.submit("verbatim", said("alice:c", f"q{i}"))
        writer.submit("verbatim", said("alice:c", f"a{i}", role="assistant"))
        await asyncio.sleep(0.05)
    assert counting.writes == []  # still lingering

    assert await writer.settled(5.0)
    assert counting.writes == [6]
    assert embedder.calls - calls_before == 1
    assert await contents(store, "alice:c") == ["q0", "a0", "q1", "a1", "q2", "a2"]
    assert await writer.flush(timeout_s=5) == 0


async def test_a_full_batch_is_written_without_waiting_for_the_linger(
    store: PointStoreBase,
) -> None:
    counting = CountingStore(store)
    writer = ArchiveWriter(counting, HashEmbedder(), linger_s=30.0, batch_size=4, backoff=FAST)
    await writer.start()
    await ensured(writer)
    for i in range(4):
        writer.submit("verbatim", said("alice:c", f"m{i}"))
    async with asyncio.timeout(10):  # far less than the linger
        while counting.writes != [4]:
            await asyncio.sleep(0.01)
    assert await writer.flush(timeout_s=5) == 0


async def test_settled_ends_the_linger_and_returns_once_the_items_are_readable(
    store: PointStoreBase,
) -> None:
    writer = ArchiveWriter(store, HashEmbedder(), linger_s=30.0, backoff=FAST)
    await writer.start()
    await ensured(writer)
    writer.submit("verbatim", said("alice:c", "hello"))
    writer.submit("episodic", {"personKey": "alice", "sessionKey": "alice:c", "summary": "Hi."})
    assert writer.holds_conversation("alice:c")
    assert writer.holds_person("alice") and writer.holds_memory_of("alice")
    assert not writer.holds_conversation("alice:other") and not writer.holds_person("bob")

    started = time.monotonic()
    assert await writer.settled(10.0)
    assert time.monotonic() - started < 10.0  # the linger (30 s) was cut short
    assert await contents(store, "alice:c") == ["hello"]
    assert not writer.holds_conversation("alice:c")
    assert not writer.holds_person("alice") and not writer.holds_memory_of("alice")
    assert await writer.settled(0.01)  # nothing left: returns at once
    assert await writer.flush(timeout_s=5) == 0


async def test_flush_on_stop_writes_what_lingers_at_once(store: PointStoreBase) -> None:
    writer = ArchiveWriter(store, HashEmbedder(), linger_s=30.0, backoff=FAST)
    await writer.start()
    await ensured(writer)
    writer.submit("verbatim", said("alice:c", "last words"))
    writer.submit("verbatim", said("alice:c", "noted", role="assistant"))

    started = time.monotonic()
    assert await writer.flush(timeout_s=10) == 0  # stored, not left over
    assert time.monotonic() - started < 10
    assert await contents(store, "alice:c") == ["last words", "noted"]


async def test_settled_gives_up_after_its_timeout_while_the_store_is_down(
    store: PointStoreBase,
) -> None:
    down = DownStore(store)
    writer = ArchiveWriter(down, HashEmbedder(), linger_s=0.05, backoff=FAST)
    await writer.start()
    writer.submit("verbatim", said("alice:c", "waiting"))
    assert not await writer.settled(0.2)
    assert writer.holds_conversation("alice:c")
    down.revive()
    assert await writer.settled(10.0)
    assert await contents(store, "alice:c") == ["waiting"]
    assert await writer.flush(timeout_s=5) == 0
