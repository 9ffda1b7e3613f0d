"""Qdrant Edge knows which sessions a person has: a never-archived conversation's rebuild
reads nothing, and a conversation from an earlier run is still rebuilt; a person whose archive
is too large to list is read each time, and still rebuilt."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from core.memory import Collection, MemoryPoint, RawPoint, Scope
from core.memory.edge import EdgeStore

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

T0 = 1_767_225_600.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class ReadCountingStore(EdgeStore):
    """The Edge store, counting the ordered reads a conversation's rebuild makes."""

    reads = 0

    async def _ordered(
        self,
        collection: Collection,
        scope: Scope,
        *,
        beyond: float | None,
        descending: bool,
        limit: int,
    ) -> list[RawPoint]:
        self.reads += 1
        return await super()._ordered(
            collection, scope, beyond=beyond, descending=descending, limit=limit
        )


def message(person: str, session: str, content: str, ts: float) -> MemoryPoint:
    payload = {
        "personKey": person,
        "sessionKey": session,
        "role": "user",
        "content": content,
        "timestamp": "",
        "ts": ts,
    }
    return MemoryPoint(str(uuid.uuid4()), [1.0, 0.0, 0.0, 0.0], payload)


async def rebuilt(store: EdgeStore, person: str, session: str) -> list[str]:
    found = await store.recent_messages(person, session, max_chars=10_000)
    return [m.content for m in found]


class SmallListingStore(ReadCountingStore):
    """Lists a person's sessions only while their archive holds at most two points."""

    list_sessions_up_to = 2


async def opened(
    root: Path, kind: type[ReadCountingStore] = ReadCountingStore
) -> ReadCountingStore:
    store = kind(root)
    await store.ensure(4)
    return store


async def test_a_conversation_never_archived_is_rebuilt_without_reading(tmp_path: Path) -> None:
    store = await opened(tmp_path)
    try:
        await store.upsert("verbatim", [message("alice", "alice:old", "hello", T0)])
        assert await rebuilt(store, "alice", "alice:old") == ["hello"]
        store.reads = 0
        for i in range(3):
            assert await rebuilt(store, "alice", f"alice:new{i}") == []
        assert store.reads == 0
        assert await rebuilt(store, "alice", "alice:old") == ["hello"]
        assert store.reads > 0
    finally:
        await store.close()


async def test_a_conversation_archived_after_the_listing_is_rebuilt(tmp_path: Path) -> None:
    store = await opened(tmp_path)
    try:
        assert await rebuilt(store, "alice", "alice:a") == []  # lists alice's sessions: none
        points: Sequence[MemoryPoint] = [
            message("alice", "alice:a", "first", T0),
            message("alice", "alice:b", "second", T0 + 1),
        ]
        await store.upsert("verbatim", points)
        assert await rebuilt(store, "alice", "alice:a") == ["first"]
        assert await rebuilt(store, "alice", "alice:b") == ["second"]
        assert await rebuilt(store, "bob", "alice:a") == []  # never another person's
    finally:
        await store.close()


async def test_a_restarted_store_still_rebuilds_a_conversation_of_an_earlier_run(
    tmp_path: Path,
) -> None:
    first = await opened(tmp_path)
    await first.upsert("verbatim", [message("alice", "alice:trip", "kiwi-12", T0)])
    await first.close()

    second = await opened(tmp_path)
    try:
        assert await rebuilt(second, "alice", "alice:new") == []  # lists alice's sessions
        assert second.reads == 0
        assert await rebuilt(second, "alice", "alice:trip") == ["kiwi-12"]
    finally:
        await second.close()


async def test_a_person_with_a_large_archive_is_read_each_time_and_still_rebuilt(
    tmp_path: Path,
) -> None:
    store = await opened(tmp_path, SmallListingStore)
    try:
        await store.upsert(
            "verbatim",
            [message("alice", "alice:old", f"m{i}", T0 + i) for i in range(3)],
        )
        await store.upsert("verbatim", [message("bob", "bob:old", "hi", T0)])
        for i in range(2):
            assert await rebuilt(store, "alice", f"alice:new{i}") == []
        assert store.reads == 2  # not listed: each new conversation is read
        assert await rebuilt(store, "alice", "alice:old") == ["m0", "m1", "m2"]
        await store.upsert("verbatim", [message("alice", "alice:later", "late", T0 + 9)])
        assert await rebuilt(store, "alice", "alice:later") == ["late"]

        store.reads = 0  # a person with a small archive is still listed
        assert await rebuilt(store, "bob", "bob:new") == []
        assert store.reads == 0
        assert await rebuilt(store, "bob", "bob:old") == ["hi"]
    finally:
        await store.close()
