"""The memory store on Qdrant Edge: the Qdrant engine in-process, one shard per collection.

``qdrant_edge`` is synchronous, and a shard is not meant to be driven from several threads at
once, so each shard has one dedicated worker thread: every call on it runs there, in order,
which is also its lock (a count-then-delete is one job, so nothing slips in between). The
shards live in directories named after the collections under one root; their write-ahead log
makes each acknowledged update durable.

Exceptions (from :mod:`core.memory`)::

    MemoryStoreError
    ├── StoreUnavailable        the store is closed, or ensure() hasn't opened the shards yet
    └── CollectionMismatch      an existing shard has another vector size
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar

import qdrant_edge as qe

from core.memory import (
    COLLECTIONS,
    VECTOR_NAME,
    Collection,
    CollectionMismatch,
    CollectionNames,
    MemoryPoint,
    MemoryStoreError,
    PointStoreBase,
    RawPoint,
    Scope,
    ScoredRecord,
    StoreUnavailable,
)

T = TypeVar("T")

_TIE_PAGE: Final = 256
_INDEXES: Final = (
    ("personKey", qe.PayloadSchemaType.Keyword),
    ("sessionKey", qe.PayloadSchemaType.Keyword),
    ("conversationId", qe.PayloadSchemaType.Keyword),
    ("topic", qe.PayloadSchemaType.Keyword),
    ("ts", qe.PayloadSchemaType.Float),
)


def person_filter(person_key: str) -> qe.Filter:
    """The condition every query carries: the point belongs to this person."""
    if not person_key:
        raise ValueError("A memory query needs a person key; pass the caller's person key.")
    return qe.Filter(must=[qe.FieldCondition("personKey", match=qe.MatchValue(person_key))])


def _scope_filter(scope: Scope, *, ts_range: qe.RangeFloat | None = None) -> qe.Filter:
    must: list[Any] = [person_filter(scope.person_key)]
    if scope.session_key is not None:
        must.append(qe.FieldCondition("sessionKey", match=qe.MatchValue(scope.session_key)))
    if scope.topic is not None:
        must.append(qe.FieldCondition("topic", match=qe.MatchValue(scope.topic)))
    if ts_range is not None:
        must.append(qe.FieldCondition("ts", range=ts_range))
    return qe.Filter(must=must)


def _raw(record: Any) -> RawPoint:
    return RawPoint(str(record.id), dict(record.payload or {}))


class _Shard:
    """One collection's shard and the single thread that drives it."""

    def __init__(self, path: Path, name: str) -> None:
        self.path = path
        self.name = name
        self.shard: Any = None
        self.vector_size: int | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"edge-{name}")
        self._closed = False

    async def run(self, job: Callable[[Any], T]) -> T:
        def guarded() -> T:
            if self.shard is None:
                raise StoreUnavailable(
                    f"The memory shard {self.name!r} isn't open; memory switches on once "
                    "ensure() has opened it."
                )
            try:
                return job(self.shard)
            except MemoryStoreError:
                raise
            except Exception as exc:  # qdrant_edge raises bare Exception with a message
                raise MemoryStoreError(
                    f"Qdrant Edge refused a request on the shard {self.name!r}: {exc}"
                ) from exc

        if self._closed:
            raise StoreUnavailable(
                f"The memory shard {self.name!r} is closed; build a new store to reopen it."
            )
        return await asyncio.get_running_loop().run_in_executor(self._executor, guarded)

    async def open(self, vector_size: int) -> None:
        def job() -> None:
            config = qe.EdgeConfig(
                vectors={VECTOR_NAME: qe.EdgeVectorParams(vector_size, qe.Distance.Cosine)}
            )
            if self.shard is None:
                try:
                    if self.path.exists() and any(self.path.iterdir()):
                        self.shard = qe.EdgeShard.load(str(self.path), config)
                    else:
                        self.shard = qe.EdgeShard.create(str(self.path), config)
                except Exception as exc:
                    if "incompatible" in str(exc).lower():
                        raise CollectionMismatch(
                            f"The memory shard {self.name!r} at {self.path} was built for "
                            f"other vectors than {vector_size}-dimensional cosine ones; use "
                            "another collection name or the embedding model it was built with."
                        ) from exc
                    raise MemoryStoreError(
                        f"Qdrant Edge can't open the shard {self.name!r} at {self.path}: {exc}"
                    ) from exc
            elif self.vector_size != vector_size:
                raise CollectionMismatch(
                    f"The memory shard {self.name!r} is open with {self.vector_size}-dimensional "
                    f"vectors, not {vector_size}; restart with one embedding model."
                )
            # Creating an index that exists is a no-op, so ensure() stays idempotent.
            for field, schema in _INDEXES:
                self.shard.update(qe.UpdateOperation.create_field_index(field, schema))
            self.vector_size = vector_size

        await asyncio.get_running_loop().run_in_executor(self._executor, job)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        def job() -> None:
            if self.shard is not None:
                self.shard.flush()
                self.shard.close()
                self.shard = None

        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, job)
        finally:
            self._executor.shutdown(wait=False)


class EdgeStore(PointStoreBase):
    """:class:`~core.memory.MemoryStore` on Qdrant Edge shards under ``root``."""

    def __init__(self, root: Path, names: CollectionNames | None = None) -> None:
        super().__init__(names or CollectionNames())
        self.root = root
        self._shards = {c: _Shard(root / self.names.of(c), self.names.of(c)) for c in COLLECTIONS}
        self._closed = False

    async def ensure(self, vector_size: int) -> None:
        if self._closed:
            raise StoreUnavailable("The memory store is closed; build a new one to reopen it.")
        self.root.mkdir(parents=True, exist_ok=True)
        for shard in self._shards.values():
            await shard.open(vector_size)

    async def reachable(self) -> bool:
        # In-process: it answers as long as it is open.
        return not self._closed

    async def optimize(self) -> bool:
        """Run the shards' segment optimizers (HNSW build, vacuum); for a quiet moment.

        Edge only optimizes when asked; until then a search scans its segments in full.
        """
        optimized = False
        for shard in self._shards.values():
            optimized = await shard.run(lambda s: bool(s.optimize())) or optimized
        return optimized

    async def close(self) -> None:
        self._closed = True
        for shard in self._shards.values():
            await shard.close()

    # -- primitives --------------------------------------------------------------------

    async def _write(self, collection: Collection, points: Sequence[MemoryPoint]) -> None:
        structs = [
            qe.Point(p.id, {VECTOR_NAME: p.vector} if p.vector is not None else {}, p.payload)
            for p in points
        ]
        await self._shards[collection].run(
            lambda s: s.update(qe.UpdateOperation.upsert_points(structs))
        )

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

        return await self._shards[collection].run(job)

    async def _nearest(
        self, collection: Collection, scope: Scope, vector: Sequence[float], limit: int
    ) -> list[ScoredRecord]:
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(list(vector), using=VECTOR_NAME),
            filter=_scope_filter(scope),
            with_payload=True,
            with_vector=False,
        )
        hits = await self._shards[collection].run(lambda s: s.query(request))
        return [ScoredRecord(str(h.id), float(h.score), dict(h.payload or {})) for h in hits]

    async def _delete(self, collection: Collection, scope: Scope) -> int:
        flt = _scope_filter(scope)

        def job(shard: Any) -> int:
            count = int(shard.count(qe.CountRequest(exact=True, filter=flt)))
            if count:
                shard.update(qe.UpdateOperation.delete_points_by_filter(flt))
            return count

        return await self._shards[collection].run(job)
