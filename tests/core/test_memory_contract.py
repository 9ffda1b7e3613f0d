"""One contract for every MemoryStore: Qdrant Edge and qdrant-client's local mode."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from core.memory import (
    CollectionMismatch,
    Cursor,
    InvalidCursor,
    MemoryPoint,
    PointStoreBase,
    StoreUnavailable,
)
from core.memory.edge import EdgeStore
from core.memory.edge import person_filter as edge_person_filter
from core.memory.qdrant import QdrantStore
from core.memory.qdrant import person_filter as qdrant_person_filter
from tests.support.memory_doubles import hash_vector

SIZE = 16
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


Opener = Callable[[], Awaitable[PointStoreBase]]


@pytest.fixture(params=["edge", "qdrant-local"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    async def open_store() -> PointStoreBase:
        if request.param == "edge":
            return EdgeStore(tmp_path / "edge")
        return await QdrantStore.local(path=tmp_path / "qdrant")

    return open_store


@pytest.fixture
async def store(opener: Opener, anyio_backend: str) -> AsyncIterator[PointStoreBase]:
    opened = await opener()
    await opened.ensure(SIZE)
    try:
        yield opened
    finally:
        await opened.close()


def _iso(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def message(
    person: str,
    session: str,
    content: str,
    ts: float,
    *,
    role: str = "user",
    vector: bool = True,
) -> MemoryPoint:
    payload: dict[str, Any] = {
        "personKey": person,
        "sessionKey": session,
        "conversationId": session.split(":", 1)[-1],
        "role": role,
        "content": content,
        "timestamp": _iso(ts),
        "ts": ts,
    }
    return MemoryPoint(str(uuid.uuid4()), hash_vector(content, SIZE) if vector else None, payload)


def fact(person: str, topic: str, value: str, ts: float) -> MemoryPoint:
    payload = {"personKey": person, "topic": topic, "value": value, "timestamp": _iso(ts), "ts": ts}
    return MemoryPoint(str(uuid.uuid4()), hash_vector(topic, SIZE), payload)


def episode(person: str, session: str, summary: str, ts: float) -> MemoryPoint:
    payload = {
        "personKey": person,
        "sessionKey": session,
        "summary": summary,
        "timestamp": _iso(ts),
        "ts": ts,
    }
    return MemoryPoint(str(uuid.uuid4()), hash_vector(summary, SIZE), payload)


async def populate(store: PointStoreBase, person: str) -> None:
    await store.upsert(
        "verbatim",
        [
            message(person, f"{person}:c1", f"{person} talks about boats", T0 + 1),
            message(
                person, f"{person}:c1", f"{person} hears about boats", T0 + 2, role="assistant"
            ),
            message(person, f"{person}:c2", f"{person} asks about trains", T0 + 3),
        ],
    )
    await store.upsert(
        "episodic", [episode(person, f"{person}:c1", f"{person} discussed boats", T0 + 4)]
    )
    await store.upsert(
        "semantic",
        [fact(person, "hobby", f"{person} sails", T0 + 5), fact(person, "city", "Turin", T0 + 6)],
    )


# -- setup ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_ensure_can_run_twice_and_on_collections_that_already_exist(
    store: PointStoreBase, opener: Opener
) -> None:
    await store.ensure(SIZE)
    await store.upsert("verbatim", [message("alice", "alice:c", "kept", T0)])
    await store.close()

    reopened = await opener()
    try:
        await reopened.ensure(SIZE)
        await reopened.ensure(SIZE)
        page = await reopened.conversation("alice", "alice:c", limit=10)
        assert [m.content for m in page.items] == ["kept"]
    finally:
        await reopened.close()


@pytest.mark.anyio
async def test_ensure_with_another_vector_size_is_a_collection_mismatch(
    store: PointStoreBase, opener: Opener
) -> None:
    await store.close()
    reopened = await opener()
    try:
        with pytest.raises(CollectionMismatch):
            await reopened.ensure(SIZE * 2)
    finally:
        await reopened.close()


@pytest.mark.anyio
async def test_reads_before_ensure_report_the_store_unavailable(opener: Opener) -> None:
    unready = await opener()
    try:
        with pytest.raises(StoreUnavailable):
            await unready.conversation("alice", "alice:c", limit=5)
        with pytest.raises(StoreUnavailable):
            await unready.upsert("verbatim", [message("alice", "alice:c", "early", T0)])
    finally:
        await unready.close()


@contextlib.asynccontextmanager
async def reopened_with_alice(
    store: PointStoreBase, opener: Opener
) -> AsyncIterator[PointStoreBase]:
    """Alice's points written and the store closed, then opened again (not ensured yet)."""
    await populate(store, "alice")
    await store.close()
    reopened = await opener()
    try:
        yield reopened
    finally:
        await reopened.close()


@pytest.mark.anyio
async def test_a_reopened_store_reads_what_it_holds_before_ensure(
    store: PointStoreBase, opener: Opener
) -> None:
    # After a restart ensure() waits for the embedder to tell the vector size; a new
    # session's primer and a conversation's rebuild read what the store holds meanwhile.
    async with reopened_with_alice(store, opener) as reopened:
        episode_read = await reopened.latest_episode("alice")
        assert episode_read is not None and episode_read.summary == "alice discussed boats"
        assert [f.topic for f in await reopened.facts("alice", limit=20)] == ["city", "hobby"]
        page = await reopened.conversation("alice", "alice:c1", limit=10)
        assert [m.content for m in page.items] == [
            "alice talks about boats",
            "alice hears about boats",
        ]
        await reopened.ensure(SIZE)
        await reopened.upsert("semantic", [fact("alice", "pet", "a cat", T0 + 7)])
        assert [f.topic for f in await reopened.facts("alice", limit=20)] == [
            "pet",
            "city",
            "hobby",
        ]


@pytest.mark.anyio
async def test_ensure_with_another_vector_size_after_a_read_is_a_collection_mismatch(
    store: PointStoreBase, opener: Opener
) -> None:
    async with reopened_with_alice(store, opener) as reopened:
        assert await reopened.facts("alice", limit=20)
        with pytest.raises(CollectionMismatch):
            await reopened.ensure(SIZE * 2)


@pytest.mark.anyio
async def test_an_open_store_is_reachable(store: PointStoreBase) -> None:
    assert await store.reachable()


def test_both_person_filters_refuse_an_empty_person_key() -> None:
    with pytest.raises(ValueError, match="person key"):
        qdrant_person_filter("")
    with pytest.raises(ValueError, match="person key"):
        edge_person_filter("")


# -- writing and listing -------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_upserted_point_scrolls_back_with_its_id_and_payload(
    store: PointStoreBase,
) -> None:
    point = message("alice", "alice:c", "hello", T0)
    await store.upsert("verbatim", [point])
    await store.upsert("verbatim", [point])  # the same id again replaces, never duplicates

    page = await store.scroll("verbatim", "alice", limit=10)

    assert page.next_cursor is None
    assert [(p.id, p.payload) for p in page.items] == [(point.id, point.payload)]


@pytest.mark.anyio
async def test_scrolling_pages_through_equal_timestamps_without_gaps_or_duplicates(
    store: PointStoreBase,
) -> None:
    # 23 points in groups of 4 sharing one ts: every page boundary lands inside a tie group.
    points = [message("alice", "alice:c", f"m{i}", T0 + i // 4) for i in range(23)]
    await store.upsert("verbatim", points)
    expected = [p.id for p in sorted(points, key=lambda p: (p.payload["ts"], p.id))]

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await store.scroll("verbatim", "alice", limit=3, after=cursor)
        seen += [p.id for p in page.items]
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor

    assert seen == expected
    assert pages == 8


@pytest.mark.anyio
async def test_a_conversation_pages_chronologically_with_a_real_cursor(
    store: PointStoreBase,
) -> None:
    points = [message("alice", "alice:c", f"m{i}", T0 + i // 2) for i in range(10)]
    await store.upsert("verbatim", points[::-1])

    first = await store.conversation("alice", "alice:c", limit=4)
    second = await store.conversation("alice", "alice:c", limit=4, after=first.next_cursor)
    third = await store.conversation("alice", "alice:c", limit=4, after=second.next_cursor)

    contents = [m.content for page in (first, second, third) for m in page.items]
    assert sorted(contents, key=lambda c: int(c[1:])) == [f"m{i}" for i in range(10)]
    assert len(set(contents)) == 10
    timestamps = [m.ts for page in (first, second, third) for m in page.items]
    assert timestamps == sorted(timestamps)
    assert third.next_cursor is None
    assert first.items[0].conversation_id == "c"


@pytest.mark.anyio
async def test_a_conversation_only_holds_that_person_and_session(store: PointStoreBase) -> None:
    await store.upsert(
        "verbatim",
        [
            message("alice", "alice:c1", "mine", T0),
            message("alice", "alice:c2", "my other conversation", T0 + 1),
            message("bob", "alice:c1", "bob's point under the same session key", T0 + 2),
        ],
    )

    page = await store.conversation("alice", "alice:c1", limit=10)

    assert [m.content for m in page.items] == ["mine"]


@pytest.mark.anyio
async def test_conversations_are_deduplicated_newest_first_with_a_cut_preview(
    store: PointStoreBase,
) -> None:
    long_text = "x" * 130
    await store.upsert(
        "verbatim",
        [
            message("alice", "alice:old", "first", T0),
            message("alice", "alice:new", "second", T0 + 1),
            message("alice", "alice:old", "third", T0 + 2),
            message("alice", "alice:new", long_text, T0 + 3, role="assistant"),
        ],
    )

    summaries = await store.conversations("alice", limit=10)
    assert [s.session_key for s in summaries] == ["alice:new", "alice:old"]
    assert summaries[0].preview == "x" * 120 + "…"
    assert summaries[0].last_timestamp == _iso(T0 + 3)
    assert summaries[1].preview == "third"
    assert [s.session_key for s in await store.conversations("alice", limit=1)] == ["alice:new"]


@pytest.mark.anyio
async def test_a_conversations_title_is_its_first_question_on_one_line(
    store: PointStoreBase,
) -> None:
    await store.upsert(
        "verbatim",
        [
            message("alice", "alice:a", "Hi, what should I call you?", T0, role="assistant"),
            message("alice", "alice:a", "Call me\n  Alice", T0 + 1),
            message("alice", "alice:a", "**Hello**, Alice.", T0 + 2, role="assistant"),
            message("alice", "alice:b", "Only a greeting.", T0 + 3, role="assistant"),
            message("alice", "alice:a", "y" * 130, T0 + 4),
            message("alice", "alice:a", "An answer.", T0 + 5, role="assistant"),
        ],
    )

    whole = await store.conversations("alice", limit=10)
    assert [(s.session_key, s.title) for s in whole] == [
        ("alice:a", "Call me Alice"),
        ("alice:b", ""),
    ]
    assert whole[0].preview == "An answer."
    # The newest two messages alone don't hold the first question: it is looked up.
    assert [s.title for s in await store.conversations("alice", limit=10, scan=2)] == [
        "Call me Alice"
    ]
    await store.upsert("verbatim", [message("alice", "alice:c", "z" * 130, T0 + 6)])
    assert (await store.conversations("alice", limit=1))[0].title == "z" * 120 + "…"


@pytest.mark.anyio
async def test_recent_messages_are_the_newest_that_fit_the_budget_in_chronological_order(
    store: PointStoreBase,
) -> None:
    await store.upsert(
        "verbatim",
        [message("alice", "alice:c", c, T0 + i) for i, c in enumerate(["aaaa", "bbb", "cc", "d"])],
    )

    assert [m.content for m in await store.recent_messages("alice", "alice:c", max_chars=6)] == [
        "bbb",
        "cc",
        "d",
    ]
    assert [m.content for m in await store.recent_messages("alice", "alice:c", max_chars=5)] == [
        "cc",
        "d",
    ]
    assert await store.recent_messages("alice", "alice:c", max_chars=0) == []


@pytest.mark.anyio
async def test_search_ranks_the_callers_points_and_never_anyone_elses(
    store: PointStoreBase,
) -> None:
    await store.upsert(
        "verbatim",
        [
            message("alice", "alice:c", "sailing boats on the lake", T0),
            message("alice", "alice:c", "tax forms", T0 + 1),
            message("bob", "bob:c", "sailing boats on the lake", T0 + 2),
        ],
    )

    hits = await store.search("verbatim", "alice", hash_vector("sailing boats on the lake", SIZE))

    assert [h.payload["personKey"] for h in hits] == ["alice", "alice"]
    assert hits[0].payload["content"] == "sailing boats on the lake"
    assert hits[0].score == pytest.approx(1.0, abs=1e-4)


@pytest.mark.anyio
async def test_points_without_a_vector_are_stored_and_listed_but_never_matched(
    store: PointStoreBase,
) -> None:
    bare = message("alice", "alice:c", "embedder was down", T0, vector=False)
    await store.upsert("verbatim", [bare, message("alice", "alice:c", "embedded", T0 + 1)])

    listed = await store.scroll("verbatim", "alice", limit=10)
    hits = await store.search("verbatim", "alice", hash_vector("embedder was down", SIZE))

    assert listed.items[0].id == bare.id
    assert bare.id not in [h.id for h in hits]
    assert [m.content for m in (await store.conversation("alice", "alice:c", limit=5)).items] == [
        "embedder was down",
        "embedded",
    ]


@pytest.mark.anyio
async def test_facts_come_newest_first_and_the_latest_episode_is_the_newest(
    store: PointStoreBase,
) -> None:
    await populate(store, "alice")
    await store.upsert("episodic", [episode("alice", "alice:c2", "later summary", T0 + 9)])

    facts = await store.facts("alice", limit=10)
    latest = await store.latest_episode("alice")

    assert [(f.topic, f.value) for f in facts] == [("city", "Turin"), ("hobby", "alice sails")]
    assert latest is not None
    assert latest.summary == "later summary"
    assert await store.latest_episode("nobody") is None


@pytest.mark.anyio
async def test_delete_facts_removes_only_the_callers_facts_on_that_topic(
    store: PointStoreBase,
) -> None:
    await populate(store, "alice")
    await populate(store, "bob")

    assert await store.delete_facts("alice", "hobby") == 1
    assert await store.delete_facts("alice", "hobby") == 0

    assert [f.topic for f in await store.facts("alice", limit=10)] == ["city"]
    assert sorted(f.topic for f in await store.facts("bob", limit=10)) == ["city", "hobby"]


@pytest.mark.anyio
async def test_two_people_never_see_each_others_points_on_any_read(
    store: PointStoreBase,
) -> None:
    await populate(store, "alice")
    await populate(store, "bob")

    def only_alice(payloads: list[dict[str, Any]]) -> bool:
        return bool(payloads) and all(p["personKey"] == "alice" for p in payloads)

    for collection in ("verbatim", "episodic", "semantic"):
        page = await store.scroll(collection, "alice", limit=50)
        assert only_alice([p.payload for p in page.items]), collection
        hits = await store.search(collection, "alice", hash_vector("bob boats", SIZE), limit=50)
        assert only_alice([h.payload for h in hits]), collection
    assert [
        m.person_key for m in (await store.conversation("alice", "bob:c1", limit=50)).items
    ] == []
    assert {
        m.person_key for m in (await store.conversation("alice", "alice:c1", limit=50)).items
    } == {"alice"}
    assert {s.session_key for s in await store.conversations("alice", limit=50)} == {
        "alice:c1",
        "alice:c2",
    }
    assert await store.recent_messages("alice", "bob:c1", max_chars=1000) == []
    assert {f.person_key for f in await store.facts("alice", limit=50)} == {"alice"}
    latest = await store.latest_episode("alice")
    assert latest is not None
    assert latest.person_key == "alice"
    assert await store.delete_facts("carol", "hobby") == 0
    assert len(await store.facts("bob", limit=50)) == 2


@pytest.mark.anyio
async def test_a_cursor_the_store_never_issued_is_refused(store: PointStoreBase) -> None:
    await store.upsert("verbatim", [message("alice", "alice:c", "hello", T0)])
    forged_id = Cursor(T0, "not-a-uuid").encode()
    for bad in ("%%%", "bm90IGpzb24", forged_id, Cursor(float("inf"), str(uuid.uuid4())).encode()):
        with pytest.raises(InvalidCursor):
            await store.scroll("verbatim", "alice", limit=5, after=bad)
        with pytest.raises(InvalidCursor):
            await store.conversation("alice", "alice:c", limit=5, after=bad)
