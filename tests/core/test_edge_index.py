"""Qdrant Edge's background index: built once the store is quiet, exact per person, cached reads."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import anyio
import numpy as np
import pytest

from channel_http.app import build_memory
from core.config.settings import load_settings
from core.memory import MemoryPoint, Scope
from core.memory.edge import EdgeStore

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

DIM = 768  # big enough that 2,000 points pass the indexing threshold
T0 = 1_767_225_600.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _vectors(n: int, seed: int) -> np.ndarray:
    block = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    block /= np.linalg.norm(block, axis=1, keepdims=True)
    return block


def _clustered(n: int, seed: int, topics: int = 20) -> np.ndarray:
    """Vectors around a few topics (a centroid plus noise of the same norm), as embeddings of
    one person's messages are: many points about equally near a query of their topic."""
    centroids = _vectors(topics, 99)
    rng = np.random.default_rng(seed)
    block: np.ndarray = centroids[rng.integers(0, topics, n)]
    block = block + rng.standard_normal((n, DIM)).astype(np.float32) / np.sqrt(DIM)
    block /= np.linalg.norm(block, axis=1, keepdims=True)
    return block


def _points(person: str, vectors: np.ndarray, start: int = 0) -> list[MemoryPoint]:
    return [
        MemoryPoint(
            str(uuid.uuid4()),
            vector.tolist(),
            {
                "personKey": person,
                "sessionKey": f"{person}:s",
                "role": "user",
                "content": f"message {start + i}",
                "timestamp": "",
                "ts": T0 + start + i,
            },
        )
        for i, vector in enumerate(vectors)
    ]


async def _fill(store: EdgeStore, person: str, vectors: np.ndarray) -> list[MemoryPoint]:
    points = _points(person, vectors)
    for i in range(0, len(points), 500):
        await store.upsert("verbatim", points[i : i + 500])
    return points


async def _until(predicate: object, seconds: float) -> None:
    with anyio.fail_after(seconds):
        while not predicate():  # type: ignore[operator]
            await anyio.sleep(0.05)


async def test_the_index_is_built_in_the_background_once_the_store_is_quiet(
    tmp_path: Path,
) -> None:
    store = EdgeStore(tmp_path, index_quiet_s=0.3)
    await store.ensure(DIM)
    try:
        await _fill(store, "alice", _vectors(2000, 1))
        assert store.index_backlog() == 2000
        assert await store.indexed_points() == 0  # nothing is indexed on the write path
        await _until(lambda: store.index_backlog() == 0, 90)
        await _until(lambda: store._indexer.runs > 0, 90)
        assert await store.indexed_points() >= 1000
    finally:
        await store.close()


async def test_the_indexer_waits_while_the_store_is_in_use(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path, index_quiet_s=1.0)
    await store.ensure(DIM)
    try:
        points = await _fill(store, "alice", _vectors(1500, 2))
        query = points[0].vector or []
        busy_until = time.monotonic() + 2.5
        while time.monotonic() < busy_until:  # a read every 0.1 s keeps the store busy
            await store.search("verbatim", "alice", query, limit=5)
            await anyio.sleep(0.1)
        assert store._indexer.runs == 0
        assert store.index_backlog() == 1500
        await _until(lambda: store.index_backlog() == 0 and store._indexer.runs > 0, 90)
    finally:
        await store.close()


async def test_an_indexed_search_finds_the_callers_points_and_never_anyone_elses(
    tmp_path: Path,
) -> None:
    store = EdgeStore(tmp_path, index_quiet_s=0.1)
    await store.ensure(DIM)
    try:
        alice = await _fill(store, "alice", _vectors(2000, 3))
        bob = await _fill(store, "bob", _vectors(1000, 4))
        await _until(lambda: store.index_backlog() == 0 and store._indexer.runs > 0, 90)
        assert await store.indexed_points() > 0
        alice_ids = {p.id for p in alice}
        for target in alice[:20]:
            hits = await store.search("verbatim", "alice", target.vector or [], limit=5)
            assert hits[0].id == target.id
            assert {h.id for h in hits} <= alice_ids
        for target in bob[:20]:  # bob's own vectors, searched as alice, find only alice's
            hits = await store.search("verbatim", "alice", target.vector or [], limit=5)
            assert len(hits) == 5
            assert {h.id for h in hits} <= alice_ids
    finally:
        await store.close()


async def test_an_indexed_search_ranks_by_the_true_cosine_and_finds_the_exact_top_five(
    tmp_path: Path,
) -> None:
    # The graph is walked on int8 copies of the vectors; ranking its hits by those estimates
    # lost ~5% of the exact top 5 on clustered vectors, where many points are almost as near.
    store = EdgeStore(tmp_path, index_quiet_s=0.1)
    await store.ensure(DIM)
    try:
        vectors = _clustered(3000, 1)
        points = await _fill(store, "alice", vectors)
        await _fill(store, "bob", _clustered(500, 2))
        await _until(lambda: store.index_backlog() == 0 and store._indexer.runs > 0, 90)
        assert await store.indexed_points() >= 3000
        ids = [p.id for p in points]
        found = 0
        queries = _clustered(60, 3)
        for query in queries:
            exact = vectors @ query
            hits = await store.search("verbatim", "alice", query.tolist(), limit=5)
            assert len(hits) == 5
            for hit in hits:  # the score is the cosine of the stored vector, not an estimate
                assert hit.score == pytest.approx(float(exact[ids.index(hit.id)]), abs=1e-4)
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            found += len({h.id for h in hits} & {ids[i] for i in np.argsort(-exact)[:5]})
        assert found >= 0.98 * 5 * len(queries)
    finally:
        await store.close()


async def test_the_search_visits_as_many_candidates_as_the_setting_says(tmp_path: Path) -> None:
    environ = {"MERCURY_DATA_DIR": str(tmp_path), "MERCURY_EDGE_SEARCH_EF": "12"}
    store = build_memory(load_settings(environ, tmp_path))
    assert isinstance(store, EdgeStore)
    assert store._search.hnsw_ef == 12
    default = build_memory(load_settings({"MERCURY_DATA_DIR": str(tmp_path)}, tmp_path))
    assert isinstance(default, EdgeStore)
    assert default._search.hnsw_ef == 32


async def test_a_new_fact_or_episode_shows_in_the_next_read_of_a_kept_primer(
    tmp_path: Path,
) -> None:
    store = EdgeStore(tmp_path)
    await store.ensure(4)
    try:

        def fact(topic: str, ts: float, person: str = "alice") -> MemoryPoint:
            payload = {
                "personKey": person,
                "topic": topic,
                "value": topic.upper(),
                "timestamp": "",
                "ts": ts,
            }
            return MemoryPoint(str(uuid.uuid4()), [1.0, 0.0, 0.0, 0.0], payload)

        await store.upsert("semantic", [fact("tea", T0)])
        assert [f.topic for f in await store.facts("alice", limit=20)] == ["tea"]
        assert await store.latest_episode("alice") is None
        await store.upsert("semantic", [fact("bikes", T0 + 1), fact("dogs", T0 + 2, "bob")])
        assert [f.topic for f in await store.facts("alice", limit=20)] == ["bikes", "tea"]
        assert [f.topic for f in await store.facts("bob", limit=20)] == ["dogs"]
        episode = {
            "personKey": "alice",
            "sessionKey": "alice:s",
            "summary": "Talked tea.",
            "timestamp": "",
            "ts": T0 + 3,
        }
        await store.upsert("episodic", [MemoryPoint(str(uuid.uuid4()), None, episode)])
        found = await store.latest_episode("alice")
        assert found is not None and found.summary == "Talked tea."
        assert await store.delete_facts("alice", "tea") == 1
        assert [f.topic for f in await store.facts("alice", limit=20)] == ["bikes"]
    finally:
        await store.close()


# -- merging the segments in a child process ---------------------------------------------


async def _merged(store: EdgeStore, seconds: float = 150) -> None:
    await _until(store.merging, seconds)
    await _until(lambda: not store.merging(), seconds)


async def _segmented(store: EdgeStore, person: str, seed: int, rounds: int) -> list[MemoryPoint]:
    """``rounds`` batches of 1,000 points, each indexed before the next: one segment each."""
    points: list[MemoryPoint] = []
    for r in range(rounds):
        batch = _points(person, _vectors(1000, seed * 100 + r), start=r * 1000)
        await store.upsert("verbatim", batch)
        await store.optimize()
        points += batch
    return points


async def test_a_merge_joins_the_segments_and_still_finds_only_the_callers_points(
    tmp_path: Path,
) -> None:
    store = EdgeStore(tmp_path, index_quiet_s=3600, merge_above=99)  # merged by hand below
    await store.ensure(DIM)
    try:
        alice = await _segmented(store, "alice", 5, 3)
        bob = await _segmented(store, "bob", 6, 1)
        before = await store.segments("verbatim")
        assert before >= 3
        store._indexer.merge_above, store._indexer.quiet_s = 1, 0.1
        store._indexer.start()  # the indexer finds the segments piled up and merges them
        await _merged(store)
        assert await store.segments("verbatim") < before
        assert await store.indexed_points() >= len(alice) + len(bob)
        alice_ids = {p.id for p in alice}
        for target in alice[::200]:
            hits = await store.search("verbatim", "alice", target.vector or [], limit=5)
            assert hits[0].id == target.id
            assert {h.id for h in hits} <= alice_ids
        for target in bob[::100]:  # bob's own vectors, searched as alice, find only alice's
            hits = await store.search("verbatim", "alice", target.vector or [], limit=5)
            assert len(hits) == 5
            assert {h.id for h in hits} <= alice_ids
            hits = await store.search("verbatim", "bob", target.vector or [], limit=5)
            assert hits[0].id == target.id
    finally:
        await store.close()


async def test_reads_and_writes_during_a_merge_are_right_and_the_writes_survive_the_swap(
    tmp_path: Path,
) -> None:
    store = EdgeStore(tmp_path, index_quiet_s=3600, merge_above=99)
    await store.ensure(DIM)
    try:
        alice = await _segmented(store, "alice", 7, 3)
        await _segmented(store, "carol", 8, 1)
        store._indexer.merge_above, store._indexer.quiet_s = 1, 0.1
        store._indexer.start()
        await _until(store.merging, 60)
        # While the child builds: searches answer from the live shard, writes and deletes land.
        searched = 0
        late = _points("alice", _vectors(50, 9), start=10_000)
        await store.upsert("verbatim", late)
        assert await store._delete("verbatim", Scope(person_key="carol")) == 1000
        while store.merging():
            target = alice[searched * 97 % len(alice)]
            hits = await store.search("verbatim", "alice", target.vector or [], limit=5)
            assert hits[0].id == target.id
            searched += 1
            await anyio.sleep(0.05)
        assert searched > 0
        assert store._shards["verbatim"].merged_into > 0  # the merged copy took the place
        for target in late[::10]:  # written after the copy: replayed on the merged shard
            hits = await store.search("verbatim", "alice", target.vector or [], limit=1)
            assert hits[0].id == target.id
        assert await store.search("verbatim", "carol", late[0].vector or [], limit=5) == []
    finally:
        await store.close()
    reopened = EdgeStore(tmp_path)  # and all of it is on disk
    await reopened.ensure(DIM)
    try:
        hits = await reopened.search("verbatim", "alice", late[1].vector or [], limit=1)
        assert hits[0].id == late[1].id
        assert await reopened.search("verbatim", "carol", late[0].vector or [], limit=5) == []
    finally:
        await reopened.close()


async def test_a_swap_cut_short_by_a_crash_reopens_the_shard_set_aside(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path)
    await store.ensure(DIM)
    points = _points("alice", _vectors(20, 10))
    await store.upsert("verbatim", points)
    await store.close()
    live = tmp_path / "verbatim_archive"
    # The crash came after the live shard was set aside and a merged copy (here: an empty
    # one, as if its journal were never replayed) had taken its place.
    live.rename(tmp_path / "verbatim_archive.old")
    (live / "segments").mkdir(parents=True)
    (tmp_path / "verbatim_archive.merging").mkdir()
    reopened = EdgeStore(tmp_path)
    await reopened.ensure(DIM)
    try:
        hits = await reopened.search("verbatim", "alice", points[3].vector or [], limit=1)
        assert hits[0].id == points[3].id
        assert not (tmp_path / "verbatim_archive.old").exists()
        assert not (tmp_path / "verbatim_archive.merging").exists()
    finally:
        await reopened.close()


async def test_the_exact_search_scans_only_the_callers_points(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path)
    await store.ensure(DIM)
    try:
        alice = _points("alice", _vectors(30, 11))
        bob = _points("bob", _vectors(30, 12))
        await store.upsert("verbatim", alice + bob)
        for target in bob[:5]:
            hits = await store.exact_search("verbatim", "alice", target.vector or [], limit=5)
            assert len(hits) == 5
            assert {h.id for h in hits} <= {p.id for p in alice}
        hits = await store.exact_search("verbatim", "bob", bob[7].vector or [], limit=3)
        assert hits[0].id == bob[7].id
    finally:
        await store.close()
