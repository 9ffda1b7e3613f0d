"""The memory store on qdrant-client: a Qdrant server, or the client's local mode.

Remote, every call is a real ``await`` on :class:`~qdrant_client.AsyncQdrantClient`. In local
mode (``:memory:`` or a directory) the async client only wraps synchronous numpy and SQLite
work, so the client lives on an event loop of its own in one worker thread: calls never block
the caller's loop and are serialized, as local mode requires. Local mode ignores payload
indexes (and warns about them), so they are only created on a server.

Exceptions (from :mod:`core.memory`)::

    MemoryStoreError
    ├── StoreUnavailable        the server doesn't answer in time, answers 5xx or 429, refuses
    │                           the API key, or a collection doesn't exist yet
    └── CollectionMismatch      an existing collection has another vector size or layout
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Final, TypeVar

import httpx
from qdrant_client import AsyncQdrantClient, models
from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from core.memory import (
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

log = logging.getLogger(__name__)

REACHABLE_TIMEOUT_S: Final = 1.0
#: Statuses a Qdrant server answers while it (or a peer of its cluster) recovers.
_TRANSIENT_STATUSES: Final = frozenset({429, 500, 502, 503, 504})
_RETRY_BASE_S: Final = 0.2
_MAX_RETRY_AFTER_S: Final = 5
_TIE_PAGE: Final = 256

_KEYWORD_INDEXES: Final = ("sessionKey", "conversationId", "topic")


def person_filter(person_key: str) -> models.Filter:
    """The condition every query carries: the point belongs to this person."""
    if not person_key:
        raise ValueError("A memory query needs a person key; pass the caller's person key.")
    return models.Filter(
        must=[models.FieldCondition(key="personKey", match=models.MatchValue(value=person_key))]
    )


def _scope_filter(
    scope: Scope,
    *,
    ts_range: models.Range | None = None,
) -> models.Filter:
    must: list[models.Condition] = [person_filter(scope.person_key)]
    if scope.session_key is not None:
        must.append(
            models.FieldCondition(
                key="sessionKey", match=models.MatchValue(value=scope.session_key)
            )
        )
    if scope.topic is not None:
        must.append(models.FieldCondition(key="topic", match=models.MatchValue(value=scope.topic)))
    if ts_range is not None:
        must.append(models.FieldCondition(key="ts", range=ts_range))
    return models.Filter(must=must)


def _raw(record: models.Record | models.ScoredPoint) -> RawPoint:
    return RawPoint(str(record.id), dict(record.payload or {}))


class _LoopThread:
    """An event loop running in one dedicated thread, for clients that block."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        async def wrapper() -> T:
            return await work

        future = asyncio.run_coroutine_threadsafe(wrapper(), self._loop)
        return await asyncio.wrap_future(future)

    async def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.to_thread(self._thread.join)
        self._loop.close()


class QdrantStore(PointStoreBase):
    """:class:`~core.memory.MemoryStore` on a Qdrant server or qdrant-client's local mode."""

    def __init__(
        self,
        client: AsyncQdrantClient,
        names: CollectionNames | None = None,
        *,
        runner: _LoopThread | None = None,
        retries: int = 0,
    ) -> None:
        super().__init__(names or CollectionNames())
        self._client = client
        self._runner = runner
        self._retries = retries
        self._closed = False

    @classmethod
    def remote(
        cls,
        url: str,
        names: CollectionNames | None = None,
        *,
        api_key: str | None = None,
        timeout_s: int = 10,
        retries: int = 2,
    ) -> QdrantStore:
        """A store on the Qdrant server at ``url``; nothing is contacted until first use.

        Each request may take ``timeout_s`` (connecting included); a timeout, a refused
        connection, a 429 or a 5xx is retried ``retries`` times with a growing pause.
        """
        client = AsyncQdrantClient(
            url=url,
            api_key=api_key,
            timeout=timeout_s,  # whole seconds: qdrant-client rounds up anyway
            check_compatibility=False,
        )
        return cls(client, names, retries=retries)

    @classmethod
    async def local(
        cls, names: CollectionNames | None = None, *, path: Path | None = None
    ) -> QdrantStore:
        """A store in qdrant-client's local mode: in memory, or persisted under ``path``."""
        runner = _LoopThread("qdrant-local")

        async def build() -> AsyncQdrantClient:
            if path is None:
                return AsyncQdrantClient(location=":memory:")
            return AsyncQdrantClient(path=str(path))

        client = await runner.run(build())
        return cls(client, names, runner=runner)

    @property
    def is_local(self) -> bool:
        return self._runner is not None

    async def close(self) -> None:
        if self._closed:
            return
        try:
            await self._call(lambda: self._client.close())
        finally:
            self._closed = True
            if self._runner is not None:
                await self._runner.stop()

    async def reachable(self) -> bool:
        try:
            async with asyncio.timeout(REACHABLE_TIMEOUT_S), self._errors("(any)"):
                await self._call(lambda: self._client.get_collections())
        except (TimeoutError, MemoryStoreError):
            return False
        return True

    async def ensure(self, vector_size: int) -> None:
        for collection in ("verbatim", "episodic", "semantic"):
            name = self.names.of(collection)
            async with self._errors(name):
                exists = await self._call(partial(self._client.collection_exists, name))
                if not exists:
                    await self._create(name, vector_size)
                else:
                    await self._check(name, vector_size)
                if not self.is_local:
                    await self._indexes(name)

    async def _create(self, name: str, vector_size: int) -> None:
        params = models.VectorParams(size=vector_size, distance=models.Distance.COSINE)
        try:
            await self._call(
                lambda: self._client.create_collection(name, vectors_config={VECTOR_NAME: params})
            )
        except (UnexpectedResponse, ValueError) as exc:
            # Another instance may have created it in between (a server answers 409, or
            # 400 "already exists" before 1.x); the check below decides.
            if not await self._call(lambda: self._client.collection_exists(name)):
                raise exc
            await self._check(name, vector_size)

    async def _check(self, name: str, vector_size: int) -> None:
        info = await self._call(lambda: self._client.get_collection(name))
        vectors = info.config.params.vectors
        params = vectors.get(VECTOR_NAME) if isinstance(vectors, dict) else None
        if params is None:
            raise CollectionMismatch(
                f"The Qdrant collection {name!r} has no vector named {VECTOR_NAME!r}; "
                "point the engine at another collection name or migrate this one."
            )
        if params.size != vector_size or params.distance != models.Distance.COSINE:
            raise CollectionMismatch(
                f"The Qdrant collection {name!r} holds {params.size}-dimensional "
                f"{params.distance.value} vectors but the embedder makes {vector_size}-dimensional "
                "cosine ones; use another collection name or the embedding model it was built with."
            )

    async def _indexes(self, name: str) -> None:
        tenant = models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
        wanted: list[tuple[str, models.PayloadSchemaType | models.KeywordIndexParams]] = [
            ("personKey", tenant),
            *((field, models.PayloadSchemaType.KEYWORD) for field in _KEYWORD_INDEXES),
            ("ts", models.PayloadSchemaType.FLOAT),
        ]
        for field, schema in wanted:
            try:
                await self._call(partial(self._client.create_payload_index, name, field, schema))
            except UnexpectedResponse as exc:
                # Several instances ensure at once: a server may refuse the second creation
                # of an index; what counts is that it exists now.
                if exc.status_code not in (400, 409) or not await self._has_index(name, field):
                    raise

    async def _has_index(self, name: str, field: str) -> bool:
        info = await self._call(lambda: self._client.get_collection(name))
        return field in info.payload_schema

    # -- primitives --------------------------------------------------------------------

    async def _write(self, collection: Collection, points: Sequence[MemoryPoint]) -> None:
        name = self.names.of(collection)
        structs = [
            models.PointStruct(
                id=p.id,
                vector={VECTOR_NAME: p.vector} if p.vector is not None else {},
                payload=p.payload,
            )
            for p in points
        ]
        async with self._errors(name):
            await self._call(lambda: self._client.upsert(name, structs, wait=True))

    async def _ordered(
        self,
        collection: Collection,
        scope: Scope,
        *,
        beyond: float | None,
        descending: bool,
        limit: int,
    ) -> list[RawPoint]:
        name = self.names.of(collection)
        ts_range = None
        if beyond is not None:
            ts_range = models.Range(lt=beyond) if descending else models.Range(gt=beyond)
        direction = models.Direction.DESC if descending else models.Direction.ASC
        async with self._errors(name):
            records, _ = await self._call(
                lambda: self._client.scroll(
                    name,
                    scroll_filter=_scope_filter(scope, ts_range=ts_range),
                    limit=limit,
                    order_by=models.OrderBy(key="ts", direction=direction),
                    with_payload=True,
                    with_vectors=False,
                )
            )
        return [_raw(r) for r in records]

    async def _tied(self, collection: Collection, scope: Scope, ts: float) -> list[RawPoint]:
        name = self.names.of(collection)
        flt = _scope_filter(scope, ts_range=models.Range(gte=ts, lte=ts))
        found: list[RawPoint] = []
        offset: models.ExtendedPointId | None = None
        async with self._errors(name):
            while True:
                records, offset = await self._call(
                    partial(
                        self._client.scroll,
                        name,
                        scroll_filter=flt,
                        limit=_TIE_PAGE,
                        offset=offset,
                        with_payload=True,
                    )
                )
                found += [_raw(r) for r in records]
                if offset is None:
                    return found

    async def _nearest(
        self, collection: Collection, scope: Scope, vector: Sequence[float], limit: int
    ) -> list[ScoredRecord]:
        name = self.names.of(collection)
        async with self._errors(name):
            response = await self._call(
                lambda: self._client.query_points(
                    name,
                    query=list(vector),
                    using=VECTOR_NAME,
                    query_filter=_scope_filter(scope),
                    limit=limit,
                    with_payload=True,
                )
            )
        return [ScoredRecord(str(p.id), p.score, dict(p.payload or {})) for p in response.points]

    async def _delete(self, collection: Collection, scope: Scope) -> int:
        name = self.names.of(collection)
        flt = _scope_filter(scope)
        async with self._errors(name):
            counted = await self._call(
                lambda: self._client.count(name, count_filter=flt, exact=True)
            )
            if counted.count:
                await self._call(
                    lambda: self._client.delete(
                        name, points_selector=models.FilterSelector(filter=flt), wait=True
                    )
                )
        return counted.count

    # -- plumbing ----------------------------------------------------------------------

    async def _call(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run one client call; on a server, retry what may pass a moment later."""
        if self._closed:
            raise StoreUnavailable("The memory store is closed; build a new one to reopen it.")
        if self._runner is not None:
            return await self._runner.run(make())
        for attempt in range(self._retries + 1):
            try:
                return await make()
            except (
                ResponseHandlingException,
                ResourceExhaustedResponse,
                UnexpectedResponse,
            ) as exc:
                pause = _transient_pause(exc, attempt)
                if pause is None or attempt == self._retries:
                    raise
                log.info(
                    "Qdrant call failed (%s); retry %d in %.1f s.", _brief(exc), attempt + 1, pause
                )
                await asyncio.sleep(pause)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    @asynccontextmanager
    async def _errors(self, name: str) -> AsyncIterator[None]:
        """Turn qdrant-client's failures into the memory store's errors (docs/memory.md)."""
        try:
            yield
        except MemoryStoreError:
            raise
        except (ResponseHandlingException, httpx.TransportError, ConnectionError) as exc:
            raise StoreUnavailable(
                f"Qdrant doesn't answer for the collection {name!r} in time; check that it "
                "runs and that QDRANT_URL points at it."
            ) from exc
        except ResourceExhaustedResponse as exc:
            raise StoreUnavailable(
                f"Qdrant is overloaded on the collection {name!r} and asks to wait "
                f"{exc.retry_after_s} s; memory catches up once it has room."
            ) from exc
        except UnexpectedResponse as exc:
            raise _refusal(name, exc) from exc
        except ValueError as exc:
            # Local mode reports a missing collection as a ValueError ("Collection … not found").
            if "not found" in str(exc):
                raise StoreUnavailable(
                    f"The collection {name!r} doesn't exist yet; memory switches on "
                    "once the engine has created it."
                ) from exc
            raise MemoryStoreError(
                f"qdrant-client refused a request on the collection {name!r}: {exc}"
            ) from exc


def _refusal(name: str, exc: UnexpectedResponse) -> MemoryStoreError:
    """The memory store's error for a status Qdrant answered with."""
    status = exc.status_code
    if status in (401, 403):
        return StoreUnavailable(
            f"Qdrant refused the API key on the collection {name!r} (status {status}); "
            "set QDRANT_API_KEY to a key the server accepts."
        )
    if status == 404:
        return StoreUnavailable(
            f"The Qdrant collection {name!r} doesn't exist yet; memory switches on "
            "once the engine has created it."
        )
    if status == 429 or (status is not None and status >= 500):
        return StoreUnavailable(
            f"Qdrant failed on the collection {name!r} (status {status}); "
            "memory catches up once it has recovered."
        )
    return MemoryStoreError(
        f"Qdrant refused a request on the collection {name!r} "
        f"(status {status}): {exc.content[:200]!r}."
    )


def _transient_pause(exc: Exception, attempt: int) -> float | None:
    """Seconds to wait before retrying after ``exc``, or ``None`` when retrying can't help.

    Every call the store makes is idempotent (upserts carry their ids, deletes a filter), so
    a call that timed out after the server acted is safe to send again.
    """
    if isinstance(exc, ResourceExhaustedResponse):
        wait: int = exc.retry_after_s
        return float(min(wait, _MAX_RETRY_AFTER_S))
    if isinstance(exc, UnexpectedResponse) and exc.status_code not in _TRANSIENT_STATUSES:
        return None
    return _RETRY_BASE_S * 3.0**attempt


def _brief(exc: Exception) -> str:
    if isinstance(exc, UnexpectedResponse):
        return f"status {exc.status_code}"
    if isinstance(exc, ResponseHandlingException):
        return type(exc.source).__name__
    return type(exc).__name__
