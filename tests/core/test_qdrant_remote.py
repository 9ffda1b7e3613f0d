"""QdrantStore against a Qdrant server: the real qdrant-client talking REST to a scripted peer.

What these tests can't reach (no Qdrant server runs here): a real server's own answers to
the same calls (its filter and ``order_by`` semantics are covered by the contract suite on
qdrant-client's local mode, which shares the server's query code paths only in part), gRPC,
TLS, a cluster's consistency and resharding, and server-side timeouts.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from core.memory import CollectionMismatch, MemoryPoint, MemoryStoreError, StoreUnavailable
from core.memory.qdrant import QdrantStore
from tests.support.memory_doubles import hash_vector
from tests.support.qdrant_standin import Fault, QdrantStandIn

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(60),
    # The stand-in listens on plain HTTP; a real deployment uses https or a private network.
    pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection"),
]

SIZE = 8
KEY = "the-right-key"
POINTS = r"PUT /collections/verbatim_archive/points"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def qdrant() -> AsyncIterator[QdrantStandIn]:
    with QdrantStandIn(api_key=KEY) as stand_in:
        yield stand_in


def open_store(qdrant: QdrantStandIn, *, key: str = KEY, **options: Any) -> QdrantStore:
    options.setdefault("timeout_s", 2)
    options.setdefault("retries", 2)
    return QdrantStore.remote(qdrant.url, api_key=key, **options)


@pytest.fixture
async def store(qdrant: QdrantStandIn, anyio_backend: str) -> AsyncIterator[QdrantStore]:
    opened = open_store(qdrant)
    await opened.ensure(SIZE)
    try:
        yield opened
    finally:
        await opened.close()


def message(content: str, ts: float, person: str = "alice") -> MemoryPoint:
    payload = {
        "personKey": person,
        "sessionKey": f"{person}:c1",
        "conversationId": "c1",
        "role": "user",
        "content": content,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "ts": ts,
    }
    return MemoryPoint(str(uuid.uuid4()), hash_vector(content, SIZE), payload)


async def test_ensure_creates_the_collections_and_their_payload_indexes(
    qdrant: QdrantStandIn, store: QdrantStore
) -> None:
    assert set(qdrant.collections) == {"verbatim_archive", "episodic_memory", "semantic_facts"}
    for collection in qdrant.collections.values():
        assert collection.size == SIZE
        assert collection.indexes == {
            "personKey": "keyword",
            "sessionKey": "keyword",
            "conversationId": "keyword",
            "topic": "keyword",
            "ts": "float",
        }


async def test_messages_written_are_read_back_in_order_and_only_by_their_person(
    store: QdrantStore,
) -> None:
    await store.upsert(
        "verbatim", [message("second", 2.0), message("first", 1.0), message("bob's", 3.0, "bob")]
    )

    page = await store.conversation("alice", "alice:c1", limit=10)
    assert [m.content for m in page.items] == ["first", "second"]
    found = await store.search("verbatim", "alice", hash_vector("second", SIZE), limit=5)
    assert found[0].payload["content"] == "second"
    assert all(hit.payload["personKey"] == "alice" for hit in found)


async def test_several_instances_ensuring_at_once_all_succeed_and_create_each_collection_once(
    qdrant: QdrantStandIn, anyio_backend: str
) -> None:
    # Every instance asks "does it exist?" before any has created it, then all create.
    qdrant.fault(Fault(r"GET /collections/\w+/exists", delay_s=0.3, times=100))
    stores = [open_store(qdrant) for _ in range(3)]
    try:
        await asyncio.gather(*(s.ensure(SIZE) for s in stores))
    finally:
        for s in stores:
            await s.close()

    for name in ("verbatim_archive", "episodic_memory", "semantic_facts"):
        assert qdrant.answered(f"PUT /collections/{name}", 200) == 1
    assert qdrant.answered(r"PUT /collections/\w+", 409) >= 2  # the race did happen
    assert len(qdrant.collections) == 3
    assert all(len(c.indexes) == 5 for c in qdrant.collections.values())


async def test_an_existing_collection_of_another_vector_size_is_a_mismatch_not_a_retry(
    qdrant: QdrantStandIn, anyio_backend: str
) -> None:
    first = open_store(qdrant)
    await first.ensure(SIZE)
    await first.close()

    other = open_store(qdrant)
    try:
        with pytest.raises(CollectionMismatch, match="8-dimensional"):
            await other.ensure(SIZE * 2)
    finally:
        await other.close()


async def test_a_5xx_is_retried_and_the_write_lands(
    qdrant: QdrantStandIn, store: QdrantStore
) -> None:
    qdrant.fault(Fault(POINTS, status=503, times=2))

    await store.upsert("verbatim", [message("kept", 1.0)])

    assert qdrant.count(POINTS) == 3
    page = await store.conversation("alice", "alice:c1", limit=10)
    assert [m.content for m in page.items] == ["kept"]


async def test_a_5xx_that_outlasts_the_retries_is_the_store_being_unavailable(
    qdrant: QdrantStandIn, store: QdrantStore
) -> None:
    qdrant.fault(Fault(POINTS, status=502, times=10))

    with pytest.raises(StoreUnavailable, match="status 502"):
        await store.upsert("verbatim", [message("waits", 1.0)])
    assert qdrant.count(POINTS) == 3  # the first try and two retries


async def test_a_429_waits_as_long_as_the_server_asks_then_succeeds(
    qdrant: QdrantStandIn, store: QdrantStore
) -> None:
    qdrant.fault(Fault(POINTS, status=429, headers={"Retry-After": "1"}))

    started = time.monotonic()
    await store.upsert("verbatim", [message("after a pause", 1.0)])

    assert time.monotonic() - started >= 1.0
    assert qdrant.count(POINTS) == 2


async def test_a_server_slower_than_the_timeout_is_unavailable_after_the_retries(
    qdrant: QdrantStandIn, anyio_backend: str
) -> None:
    slow = open_store(qdrant, timeout_s=1, retries=1)
    await slow.ensure(SIZE)
    qdrant.fault(Fault(POINTS, delay_s=3.0, times=2))
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="in time"):
            await slow.upsert("verbatim", [message("late", 1.0)])
        # Two attempts of about a second each: well under the server's three-second delay.
        assert time.monotonic() - started < 2 * 3.0
        assert qdrant.count(POINTS) == 2
    finally:
        await slow.close()


async def test_a_dropped_connection_is_retried(qdrant: QdrantStandIn, store: QdrantStore) -> None:
    qdrant.fault(Fault(POINTS, drop=True))

    await store.upsert("verbatim", [message("after a drop", 1.0)])

    assert qdrant.count(POINTS) == 2
    page = await store.conversation("alice", "alice:c1", limit=10)
    assert [m.content for m in page.items] == ["after a drop"]


async def test_a_bad_api_key_is_unavailable_at_once_and_names_the_setting(
    qdrant: QdrantStandIn, anyio_backend: str
) -> None:
    wrong = open_store(qdrant, key="not-the-key")
    try:
        with pytest.raises(StoreUnavailable, match="QDRANT_API_KEY"):
            await wrong.ensure(SIZE)
        assert await wrong.reachable() is False
        with pytest.raises(StoreUnavailable, match="status 401"):
            await wrong.upsert("verbatim", [message("refused", 1.0)])
    finally:
        await wrong.close()
    assert qdrant.count(r"PUT /collections/\w+/points") == 1  # a refused key is never retried
    assert qdrant.collections == {}


async def test_a_request_the_server_refuses_is_a_store_error_and_never_retried(
    qdrant: QdrantStandIn, store: QdrantStore
) -> None:
    qdrant.fault(Fault(POINTS, status=400))

    with pytest.raises(MemoryStoreError, match="status 400") as raised:
        await store.upsert("verbatim", [message("malformed", 1.0)])

    assert not isinstance(raised.value, StoreUnavailable)
    assert qdrant.count(POINTS) == 1


async def test_a_collection_deleted_under_the_store_reads_as_not_set_up_yet(
    qdrant: QdrantStandIn, store: QdrantStore
) -> None:
    del qdrant.collections["verbatim_archive"]

    with pytest.raises(StoreUnavailable, match="doesn't exist yet"):
        await store.conversation("alice", "alice:c1", limit=10)
    await store.ensure(SIZE)
    page = await store.conversation("alice", "alice:c1", limit=10)
    assert page.items == []


async def test_reachable_answers_quickly_while_the_server_hangs(
    qdrant: QdrantStandIn, store: QdrantStore
) -> None:
    qdrant.fault(Fault(r"GET /collections", delay_s=3.0, times=3))

    started = time.monotonic()
    assert await store.reachable() is False
    assert time.monotonic() - started < 3.0
