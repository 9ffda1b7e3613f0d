"""The memory store on Qdrant Edge: the Qdrant engine in-process, one shard per collection.

``qdrant_edge`` is synchronous, and a shard is not meant to be driven from several threads at
once, so each shard has one dedicated worker thread: every call on it runs there, in order,
which is also its lock (a count-then-delete is one job, so nothing slips in between). The
shards live in directories named after the collections under one root; their write-ahead log
makes each acknowledged update durable.

Edge builds no index by itself: until its optimizer runs, a search scans every vector (32 ms
at 100,000 points per person). Each shard is therefore configured for multi-tenant search
(the person key is a tenant index, the HNSW graph is built per person with ``payload_m`` and
no global graph, vectors quantized to int8 in memory, segments capped so a build stays
bounded) and an indexer task runs the optimizer in the background once the store has been
quiet for a while, or once enough points wait unindexed. ``qdrant_edge`` holds the GIL while
it optimizes, so a build stalls the event loop: that is why it waits for a quiet store, never
runs on a turn's path, and why segments are capped (docs/memory.md). The small segments those
builds leave are merged into one by a child process working on a copy of the shard
(``core/memory/edge_merge.py``); the updates made meanwhile are journaled and replayed on the
merged copy before it takes the live shard's place. The shards, their threads and the indexer
are in ``core/memory/edge_shard.py``; this module is the store: its reads, writes and what it
keeps of each person.

Exceptions (from :mod:`core.memory`)::

    MemoryStoreError
    ├── StoreUnavailable        the store is closed, or no shard exists yet (ensure() makes them)
    └── CollectionMismatch      an existing shard has another vector size
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Final

import qdrant_edge as qe

from core.memory import (
    COLLECTIONS,
    VECTOR_NAME,
    ArchivedMessage,
    Collection,
    CollectionNames,
    Episode,
    Fact,
    MemoryPoint,
    PointStoreBase,
    RawPoint,
    Scope,
    ScoredRecord,
    StoreUnavailable,
)
from core.memory.edge_shard import Indexer, Shard

log = logging.getLogger("mercury.memory")

_TIE_PAGE: Final = 256
_KEPT_PEOPLE: Final = 10_000
"""People whose primer reads are kept at most; past that the kept reads start over."""
_KNOWN_SESSIONS: Final = 100_000
"""A person's sessions listed at most; a person with more has every rebuild read."""
_LISTED_POINTS: Final = 10_000
"""A person's sessions are listed only while their archive holds at most this many points
(by the engine's estimate): the exact facet that lists them costs with the points (~5 ms at
10,000, 20-75 ms at 100,000 on two cores) and holds the shard's thread, while what it saves
is one read of ~0.3 ms per new conversation; a person past it has every rebuild read."""
#: A search visits 32 candidates per segment (HNSW ``ef``, ``MERCURY_EDGE_SEARCH_EF``): at
#: 100,000 points per person in eleven segments, 2.1 ms against 2.9 ms with the default, for
#: the five hits recall asks for. The graph is walked on the int8 vectors; each segment's best
#: ``limit * 2`` are then rescored on the original vectors, so the segments' hits are ranked
#: against each other by their true cosine (without ``rescore`` Edge returned the int8
#: estimates, and on clustered vectors 5-7% of the true top 5 lost to a point whose estimate
#: was a little high). On random vectors it finds 42% of the exact top 5 in eleven segments
#: (60% with ef 64), on clustered ones all of them; figures in benchmarks.md.
SEARCH_EF: Final = 32
_RESCORED: Final = qe.QuantizationSearchParams(rescore=True, oversampling=2.0)


def search_params(ef: int = SEARCH_EF) -> qe.SearchParams:
    """What an indexed search asks of the engine: ``ef`` candidates per segment, rescored."""
    return qe.SearchParams(hnsw_ef=ef, quantization=_RESCORED)


#: A full scan of the person's original vectors: ``exact`` makes the engine ignore the
#: quantized copies (and any graph), so this is the yardstick of the search's quality.
_EXACT: Final = qe.SearchParams(exact=True)


@lru_cache(maxsize=4096)
def person_filter(person_key: str) -> qe.Filter:
    """The condition every query carries: the point belongs to this person (built once)."""
    if not person_key:
        raise ValueError("A memory query needs a person key; pass the caller's person key.")
    return qe.Filter(must=[qe.FieldCondition("personKey", match=qe.MatchValue(person_key))])


@lru_cache(maxsize=4096)
def _scope_conditions(scope: Scope) -> tuple[Any, ...]:
    must: list[Any] = [person_filter(scope.person_key)]
    if scope.session_key is not None:
        must.append(qe.FieldCondition("sessionKey", match=qe.MatchValue(scope.session_key)))
    if scope.topic is not None:
        must.append(qe.FieldCondition("topic", match=qe.MatchValue(scope.topic)))
    return tuple(must)


@lru_cache(maxsize=4096)
def _plain_scope_filter(scope: Scope) -> qe.Filter:
    return qe.Filter(must=list(_scope_conditions(scope)))


def _scope_filter(scope: Scope, *, ts_range: qe.RangeFloat | None = None) -> qe.Filter:
    """The scope as an Edge filter; built once per scope unless a ``ts`` range narrows it."""
    if ts_range is None:
        return _plain_scope_filter(scope)
    return qe.Filter(must=[*_scope_conditions(scope), qe.FieldCondition("ts", range=ts_range)])


def _raw(record: Any) -> RawPoint:
    return RawPoint(str(record.id), dict(record.payload or {}))


class EdgeStore(PointStoreBase):
    """:class:`~core.memory.MemoryStore` on Qdrant Edge shards under ``root``.

    The store is the only writer of its shards (one process: see ``serve --workers``), so it
    keeps what a new session reads first, a person's newest facts and latest episode, until
    that person's facts or episodes change; and which sessions a person has in the archive
    (read once per person from the shard, which holds earlier runs' sessions too, then kept up
    to date by the writes), so rebuilding a conversation that was never archived reads nothing.
    A person whose archive is larger than ``list_sessions_up_to`` points is not listed: their
    rebuilds read each time.
    """

    list_sessions_up_to: int = _LISTED_POINTS

    def __init__(
        self,
        root: Path,
        names: CollectionNames | None = None,
        *,
        index_quiet_s: float = 5.0,
        index_force_after: int = 50_000,
        merge_above: int = 0,
        search_ef: int = SEARCH_EF,
    ) -> None:
        super().__init__(names or CollectionNames())
        self._search = search_params(search_ef)
        self.root = root
        self._shards = {c: Shard(root / self.names.of(c), self.names.of(c)) for c in COLLECTIONS}
        self._closed = False
        self._indexer = Indexer(
            list(self._shards.values()),
            quiet_s=index_quiet_s,
            force_after=index_force_after,
            merge_above=merge_above,
        )
        self._generation: dict[str, int] = {}
        self._facts: dict[tuple[str, int], list[Fact]] = {}
        self._episodes: dict[str, Episode | None] = {}
        self._sessions: dict[str, set[str] | None] = {}
        """Per person, every session with verbatim points (a superset: writes add first), or
        None for a person not listed (too many points or sessions): read each time."""
        self._listing: dict[str, set[str]] = {}
        """Per person whose sessions are being listed, the sessions written meanwhile."""

    async def ensure(self, vector_size: int) -> None:
        if self._closed:
            raise StoreUnavailable("The memory store is closed; build a new one to reopen it.")
        self.root.mkdir(parents=True, exist_ok=True)
        for shard in self._shards.values():
            await shard.open(vector_size)
        self._indexer.start()

    def index_backlog(self) -> int:
        """How many points wait for the background indexer (0 once it caught up)."""
        return self._indexer.pending()

    def merging(self) -> bool:
        """Whether a merge of a shard's segments runs in a child process right now."""
        return self._indexer.merging()

    async def segments(self, collection: Collection) -> int:
        """How many segments a search of ``collection`` visits."""
        return await self._shards[collection].segments()

    async def indexed_points(self) -> int:
        """How many points of all collections are in an HNSW index."""
        total = 0
        for shard in self._shards.values():
            total += await shard.run(lambda s: int(s.info().indexed_vectors_count))
        return total

    async def reachable(self) -> bool:
        # In-process: it answers as long as it is open.
        return not self._closed

    async def optimize(self) -> bool:
        """Run the shards' segment optimizers (HNSW build, vacuum); for a quiet moment.

        Edge only optimizes when asked; until then a search scans its segments in full.
        """
        optimized = False
        for shard in self._shards.values():
            shard.pending = 0
            optimized = await shard.run(lambda s: bool(s.optimize())) or optimized
        return optimized

    async def close(self) -> None:
        self._closed = True
        await self._indexer.stop()
        for shard in self._shards.values():
            await shard.close()

    # -- what a new session reads first, kept until it changes --------------------------

    def _changed(self, collection: Collection, person_keys: set[str]) -> None:
        if collection == "verbatim":
            return
        for key in person_keys:
            self._generation[key] = self._generation.get(key, 0) + 1
            self._episodes.pop(key, None)
            for cached in [k for k in self._facts if k[0] == key]:
                del self._facts[cached]

    async def facts(self, person_key: str, *, limit: int) -> list[Fact]:
        cached = self._facts.get((person_key, limit))
        if cached is not None:
            return list(cached)
        generation = self._generation.get(person_key, 0)
        found = await super().facts(person_key, limit=limit)
        if self._generation.get(person_key, 0) == generation:  # no write overtook the read
            if len(self._facts) >= _KEPT_PEOPLE:
                self._facts.clear()
            self._facts[(person_key, limit)] = found
        return list(found)

    async def latest_episode(self, person_key: str) -> Episode | None:
        if person_key in self._episodes:
            return self._episodes[person_key]
        generation = self._generation.get(person_key, 0)
        found = await super().latest_episode(person_key)
        if self._generation.get(person_key, 0) == generation:
            if len(self._episodes) >= _KEPT_PEOPLE:
                self._episodes.clear()
            self._episodes[person_key] = found
        return found

    # -- which sessions a person has, so a new conversation's rebuild reads nothing ------

    async def recent_messages(
        self, person_key: str, session_key: str, *, max_chars: int
    ) -> list[ArchivedMessage]:
        known = await self._known_sessions(person_key)
        if known is not None and session_key not in known:
            return []  # never archived, in this run or an earlier one
        return await super().recent_messages(person_key, session_key, max_chars=max_chars)

    async def _known_sessions(self, person_key: str) -> set[str] | None:
        """The person's archived sessions, listed from the shard on first use; ``None`` when
        they can't be listed whole (too many, or a listing already in flight)."""
        if person_key in self._sessions:
            return self._sessions[person_key]
        if person_key in self._listing:
            return None
        written: set[str] = set()
        self._listing[person_key] = written
        flt = person_filter(person_key)
        most = self.list_sessions_up_to

        def job(shard: Any) -> list[str] | None:
            if shard.count(qe.CountRequest(filter=flt, exact=False)) > most:
                return None  # the listing would cost more than the reads it saves
            request = qe.FacetRequest(
                "sessionKey", limit=_KNOWN_SESSIONS + 1, exact=True, filter=flt
            )
            return [str(hit.value) for hit in shard.facet(request).hits]

        self._indexer.used()
        try:
            listed = await self._shards["verbatim"].run(job)
        finally:
            del self._listing[person_key]
        known = None if listed is None or len(listed) > _KNOWN_SESSIONS else {*listed, *written}
        if len(self._sessions) >= _KEPT_PEOPLE:
            self._sessions.clear()
        self._sessions[person_key] = known
        return known

    def _archived(self, points: Sequence[MemoryPoint]) -> None:
        """Note the sessions of verbatim points about to be written (before: a superset)."""
        for point in points:
            person, session = point.payload["personKey"], point.payload.get("sessionKey")
            if not isinstance(session, str):
                continue
            for known in (self._sessions.get(person), self._listing.get(person)):
                if known is not None:
                    known.add(session)

    # -- primitives --------------------------------------------------------------------

    async def _write(self, collection: Collection, points: Sequence[MemoryPoint]) -> None:
        def job(shard: Any) -> None:
            # Built here, not on the event loop: a payload costs ~4 µs per field to convert.
            structs = [
                qe.Point(p.id, {VECTOR_NAME: p.vector} if p.vector is not None else {}, p.payload)
                for p in points
            ]
            shard.update(qe.UpdateOperation.upsert_points(structs))

        self._indexer.used()
        people: set[str] = set()
        if collection == "verbatim":
            self._archived(points)
        else:
            people = {str(p.payload["personKey"]) for p in points}
        self._changed(collection, people)
        shard = self._shards[collection]
        await shard.run(job)
        self._changed(collection, people)
        self._indexer.wrote(shard, len(points))

    async def _ordered(
        self,
        collection: Collection,
        scope: Scope,
        *,
        beyond: float | None,
        descending: bool,
        limit: int,
    ) -> list[RawPoint]:
        ts_range = None
        if beyond is not None:
            ts_range = qe.RangeFloat(lt=beyond) if descending else qe.RangeFloat(gt=beyond)
        request = qe.ScrollRequest(
            limit=limit,
            filter=_scope_filter(scope, ts_range=ts_range),
            with_payload=True,
            with_vector=False,
            order_by=qe.OrderBy("ts", qe.Direction.Desc if descending else qe.Direction.Asc),
        )
        self._indexer.used()
        records, _ = await self._shards[collection].run(lambda s: s.scroll(request))
        return [_raw(r) for r in records]

    async def _tied(self, collection: Collection, scope: Scope, ts: float) -> list[RawPoint]:
        flt = _scope_filter(scope, ts_range=qe.RangeFloat(gte=ts, lte=ts))

        def job(shard: Any) -> list[RawPoint]:
            found: list[RawPoint] = []
            offset = None
            while True:
                request = qe.ScrollRequest(
                    offset=offset, limit=_TIE_PAGE, filter=flt, with_payload=True
                )
                records, offset = shard.scroll(request)
                found += [_raw(r) for r in records]
                if offset is None:
                    return found

        self._indexer.used()
        return await self._shards[collection].run(job)

    async def exact_search(
        self, collection: Collection, person_key: str, vector: Sequence[float], *, limit: int = 5
    ) -> list[ScoredRecord]:
        """:meth:`search` by a full scan of the original vectors: the yardstick of the index's
        quality (bench/recall.py), never a turn's path."""
        return await self._nearest(collection, Scope(person_key=person_key), vector, limit, _EXACT)

    async def _nearest(
        self,
        collection: Collection,
        scope: Scope,
        vector: Sequence[float],
        limit: int,
        params: qe.SearchParams | None = None,
    ) -> list[ScoredRecord]:
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(list(vector), using=VECTOR_NAME),
            filter=_scope_filter(scope),
            params=params or self._search,
            with_payload=True,
            with_vector=False,
        )
        self._indexer.used()
        hits = await self._shards[collection].run(lambda s: s.query(request))
        return [ScoredRecord(str(h.id), float(h.score), dict(h.payload or {})) for h in hits]

    async def _delete(self, collection: Collection, scope: Scope) -> int:
        flt = _scope_filter(scope)

        def job(shard: Any) -> int:
            count = int(shard.count(qe.CountRequest(exact=True, filter=flt)))
            if count:
                shard.update(qe.UpdateOperation.delete_points_by_filter(flt))
            return count

        self._indexer.used()
        self._changed(collection, {scope.person_key})
        try:
            return await self._shards[collection].run(job)
        finally:
            self._changed(collection, {scope.person_key})
