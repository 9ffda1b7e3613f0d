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
bounded) and an :class:`_Indexer` task runs the optimizer in the background once the store
has been quiet for a while, or once enough points wait unindexed. ``qdrant_edge`` holds the
GIL while it optimizes, so a build stalls the event loop: that is why it waits for a quiet
store, never runs on a turn's path, and why segments are capped (docs/memory.md). The small
segments those builds leave are merged into one by a child process working on a copy of the
shard (``core/memory/edge_merge.py``); the updates made meanwhile are journaled and replayed on the
merged copy before it takes the live shard's place.

Exceptions (from :mod:`core.memory`)::

    MemoryStoreError
    ├── StoreUnavailable        the store is closed, or no shard exists yet (ensure() makes them)
    └── CollectionMismatch      an existing shard has another vector size
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any, Final, TypeVar

import msgspec
import qdrant_edge as qe

from core.memory import (
    COLLECTIONS,
    VECTOR_NAME,
    ArchivedMessage,
    Collection,
    CollectionMismatch,
    CollectionNames,
    Episode,
    Fact,
    MemoryPoint,
    MemoryStoreError,
    PointStoreBase,
    RawPoint,
    Scope,
    ScoredRecord,
    StoreUnavailable,
)

T = TypeVar("T")

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
_INDEXES: Final = (
    # The tenant flag groups a person's points together on disk and lets the optimizer
    # build one HNSW graph per person (payload_m) instead of a global one.
    ("personKey", qe.KeywordIndexParams(is_tenant=True)),
    ("sessionKey", qe.PayloadSchemaType.Keyword),
    ("conversationId", qe.PayloadSchemaType.Keyword),
    ("topic", qe.PayloadSchemaType.Keyword),
    ("ts", qe.PayloadSchemaType.Float),
)


#: The optimizer's settings: per-person graphs (``m=0``, ``payload_m``), a modest
#: ``ef_construct``, one indexing thread (the other core serves turns), int8 vectors in RAM
#: (a quarter of the memory to scan and to build from), segments indexed from ~1,000 KB of vectors
#: and capped at ~10,000 KB so one build stays bounded (figures in docs/memory.md).
_HNSW: Final = qe.HnswIndexConfig(
    m=0, ef_construct=64, full_scan_threshold=1000, payload_m=16, max_indexing_threads=1
)
_QUANTIZATION: Final = qe.ScalarQuantizationConfig(qe.ScalarType.Int8, always_ram=True)
_OPTIMIZERS: Final = qe.EdgeOptimizersConfig(indexing_threshold=1000, max_segment_size=10000)
#: What a merge (``core/memory/edge_merge.py``, in a child process) optimizes a shard's copy
#: with: no segment cap and one segment as the target, so the small indexed segments become
#: one.
_MERGED: Final = qe.EdgeOptimizersConfig(
    indexing_threshold=1000, max_segment_size=2_000_000_000, default_segment_number=1
)
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


def shard_config(vector_size: int, *, merged: bool = False) -> qe.EdgeConfig:
    """A shard's configuration; ``merged`` lifts the segment cap for a merge out of process."""
    return qe.EdgeConfig(
        vectors={VECTOR_NAME: qe.EdgeVectorParams(vector_size, qe.Distance.Cosine)},
        hnsw_config=_HNSW,
        quantization_config=_QUANTIZATION,
        optimizers=_MERGED if merged else _OPTIMIZERS,
    )


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


class _StoredVectors(msgspec.Struct):
    size: int


class _StoredConfig(msgspec.Struct):
    """What a shard's ``edge_config.json`` (written by Qdrant Edge) says of its vectors."""

    vectors: dict[str, _StoredVectors]


_decode_stored_config = msgspec.json.Decoder(_StoredConfig).decode


def _stored_vector_size(path: Path) -> int | None:
    """The vector size of the shard at ``path``, from the configuration Qdrant Edge keeps in
    its directory; None when no shard is there. (``qdrant_edge`` has no call that tells a
    loaded shard's configuration; the contract tests notice if the file moves.)"""
    try:
        raw = (path / "edge_config.json").read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MemoryStoreError(
            f"Can't read the memory shard's configuration at {path}: {exc}"
        ) from exc
    try:
        vectors = _decode_stored_config(raw).vectors
    except msgspec.DecodeError as exc:
        raise MemoryStoreError(
            f"The memory shard's configuration at {path} isn't what Qdrant Edge writes: {exc}"
        ) from exc
    if VECTOR_NAME not in vectors:
        raise CollectionMismatch(
            f"The memory shard at {path} holds no {VECTOR_NAME!r} vectors; use another "
            "collection name."
        )
    return vectors[VECTOR_NAME].size


def _since(started: float) -> float:
    return time.perf_counter() - started


def _raw(record: Any) -> RawPoint:
    return RawPoint(str(record.id), dict(record.payload or {}))


class _Journaled:
    """The shard as a job sees it while a merge runs on a copy: each update is also journaled,
    to be replayed on the merged copy before it takes the shard's place."""

    __slots__ = ("_journal", "_shard")

    def __init__(self, shard: Any, journal: list[Any]) -> None:
        self._shard = shard
        self._journal = journal

    def update(self, operation: Any) -> None:
        self._shard.update(operation)
        self._journal.append(operation)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shard, name)


class _Shard:
    """One collection's shard and the single thread that drives it."""

    def __init__(self, path: Path, name: str) -> None:
        self.path = path
        self.name = name
        self.shard: Any = None
        self.vector_size: int | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"edge-{name}")
        self._closed = False
        self.pending = 0
        """Points written since the optimizer last ran (or found unindexed at opening)."""
        self.journal: list[Any] | None = None
        """The updates applied since a merge copied the shard (None when no merge runs)."""
        self.merged_into = 0
        """How many segments the last merge left (a merge waits until there are more)."""

    async def run(self, job: Callable[[Any], T]) -> T:
        def guarded() -> T:
            try:
                if self.shard is None:
                    self._open_stored()
                if self.journal is None:
                    return job(self.shard)
                return job(_Journaled(self.shard, self.journal))
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
            if self.shard is None:
                self._recover()
                self._load(vector_size)
            elif self.vector_size != vector_size:
                raise CollectionMismatch(
                    f"The memory shard {self.name!r} at {self.path} holds "
                    f"{self.vector_size}-dimensional vectors, not {vector_size}; use another "
                    "collection name or the embedding model it was built with."
                )

        await asyncio.get_running_loop().run_in_executor(self._executor, job)

    def _open_stored(self) -> None:
        """Open the shard an earlier run left here, at the vector size it was built for.

        ensure() opens the shards once the embedder has told the vector size, which takes a
        round trip to it at best and never comes while it is away; what the shard already
        holds (a new session's primer, a conversation's rebuild) is read meanwhile. Runs in
        the shard's thread; raises :class:`StoreUnavailable` when no shard was made here yet.
        """
        self._recover()
        vector_size = _stored_vector_size(self.path)
        if vector_size is None:
            raise StoreUnavailable(
                f"The memory shard {self.name!r} doesn't exist yet; memory switches on once "
                "ensure() has created it."
            )
        self._load(vector_size)

    def _load(self, vector_size: int) -> None:
        """Open the shard, or create it when none is on disk (runs in the shard's thread)."""
        config = shard_config(vector_size)
        try:
            if self.path.exists() and any(self.path.iterdir()):
                shard = qe.EdgeShard.load(str(self.path), config)
            else:
                shard = qe.EdgeShard.create(str(self.path), config)
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
        try:
            # Creating an index that exists is a no-op.
            for field, schema in _INDEXES:
                shard.update(qe.UpdateOperation.create_field_index(field, schema))
            info = shard.info()
        except Exception:
            shard.close()
            raise
        self.shard = shard
        self.vector_size = vector_size
        self.pending += max(0, int(info.points_count) - int(info.indexed_vectors_count))

    # -- merging the segments in a child process (core/memory/edge_merge.py) ------------------

    def _beside(self, suffix: str) -> Path:
        return self.path.with_name(self.path.name + suffix)

    def _recover(self) -> None:
        """Undo a swap that a crash interrupted: until the merged copy has its journal
        replayed and flushed, the shard set aside (``.old``) is the complete one."""
        old = self._beside(".old")
        if old.exists():
            shutil.rmtree(self.path, ignore_errors=True)
            old.rename(self.path)
        for leftover in (self._beside(".merging"), self._beside(".retired")):
            shutil.rmtree(leftover, ignore_errors=True)

    async def segments(self) -> int:
        return await self.run(lambda s: int(s.info().segments_count))

    async def merge(self, vector_size: int, quiet: Callable[[], Awaitable[None]]) -> int:
        """Merge the shard's segments into one, built in a child process on a copy; returns
        the segment count after the swap. Reads and writes go on meanwhile: the updates made
        after the copy are journaled and replayed on the merged copy (in the shard's thread,
        once ``quiet`` returns), so none is lost."""
        copy = self._beside(".merging")

        def snapshot(shard: Any) -> None:
            shutil.rmtree(copy, ignore_errors=True)
            shard.flush()
            shutil.copytree(self.path, copy)
            self.journal = []

        await quiet()  # the copy holds the shard's queue for a moment
        started = time.perf_counter()
        await self.run(snapshot)
        log.info("memory shard %s copied for a merge in %.1f s", self.name, _since(started))
        try:
            child = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "core.memory.edge_merge",
                str(copy),
                str(vector_size),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                _, err = await child.communicate()
            finally:
                if child.returncode is None:  # cancelled: the store is closing
                    child.kill()
                    await child.wait()
            if child.returncode != 0:
                raise MemoryStoreError(
                    f"Merging the memory shard {self.name!r} failed: "
                    f"{err.decode(errors='replace').strip()[-400:]}"
                )
            await quiet()
            started = time.perf_counter()
            count = await self.run(lambda shard: self._swap(shard, copy, vector_size))
            log.info("memory shard %s swapped for its merge in %.1f s", self.name, _since(started))
            return count
        finally:
            self.journal = None
            # In the shard's thread, after a swap that a cancellation may have left running.
            try:
                self._executor.submit(shutil.rmtree, copy, ignore_errors=True)
            except RuntimeError:  # the store closed its thread
                shutil.rmtree(copy, ignore_errors=True)

    def _swap(self, shard: Any, copy: Path, vector_size: int) -> int:
        """Put the merged copy in the shard's place (runs in the shard's thread)."""
        journal, self.journal = self.journal or [], None
        old, retired = self._beside(".old"), self._beside(".retired")
        shard.flush()
        shard.close()
        self.shard = None
        self.path.rename(old)
        copy.rename(self.path)
        merged = None
        try:
            merged = qe.EdgeShard.load(str(self.path), shard_config(vector_size))
            for operation in journal:
                merged.update(operation)
            merged.flush()
        except Exception:
            if merged is not None:
                merged.close()
            self._recover()
            self.shard = qe.EdgeShard.load(str(self.path), shard_config(vector_size))
            raise
        self.shard = merged
        old.rename(retired)  # from here on the merged shard is the one a restart opens
        shutil.rmtree(retired, ignore_errors=True)
        info = merged.info()
        self.pending += max(0, int(info.points_count) - int(info.indexed_vectors_count))
        self.merged_into = int(info.segments_count)
        return self.merged_into

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


class _Indexer:
    """Runs the shards' optimizers in the background, once the store is quiet.

    A build holds the GIL (qdrant_edge doesn't release it), so it waits until no store call
    has come for ``quiet_s`` seconds; a store that is never quiet still gets indexed once
    ``force_after`` points wait, as scanning them would by then cost more than the build.
    """

    def __init__(
        self, shards: Sequence[_Shard], *, quiet_s: float, force_after: int, merge_above: int
    ) -> None:
        self.shards = shards
        self.quiet_s = quiet_s
        self.force_after = force_after
        self.merge_above = merge_above
        self.last_use = time.monotonic()
        self.runs = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._merging: dict[str, asyncio.Task[None]] = {}

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="edge-indexer")
        self._wake.set()

    def used(self) -> None:
        self.last_use = time.monotonic()

    def wrote(self, shard: _Shard, count: int) -> None:
        shard.pending += count
        self._wake.set()

    def pending(self) -> int:
        return sum(shard.pending for shard in self.shards)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.pending():
                wait = self.quiet_s - (time.monotonic() - self.last_use)
                if wait > 0 and self.pending() < self.force_after:
                    await asyncio.sleep(wait)
                    continue
                for shard in self.shards:
                    if not shard.pending:
                        continue
                    count, shard.pending = shard.pending, 0
                    started = time.perf_counter()
                    try:
                        await shard.run(lambda s: bool(s.optimize()))
                    except StoreUnavailable:
                        return  # closed: nothing left to index
                    except MemoryStoreError as error:
                        # Searches still scan what isn't indexed; the next writes try again.
                        log.warning("indexing the memory shard %s failed: %s", shard.name, error)
                        continue
                    self.runs += 1
                    log.info(
                        "memory shard %s indexed %d new points in %.1f s",
                        shard.name,
                        count,
                        time.perf_counter() - started,
                    )
            await self._merge_piled_up()

    def merging(self) -> bool:
        return bool(self._merging)

    async def _merge_piled_up(self) -> None:
        """Start a merge for each shard whose indexed segments have piled up past the limit
        (``merge_above``; 0 never merges)."""
        if self.merge_above <= 0:
            return
        for shard in self.shards:
            if shard.name in self._merging or shard.vector_size is None:
                continue
            try:
                count = await shard.segments()
            except MemoryStoreError:
                return  # closed or refusing: nothing to merge now
            if count > max(self.merge_above, shard.merged_into):
                task = asyncio.create_task(
                    self._merge(shard, count), name=f"edge-merge-{shard.name}"
                )
                self._merging[shard.name] = task

    async def _merge(self, shard: _Shard, segments: int) -> None:
        started = time.perf_counter()
        try:
            count = await shard.merge(shard.vector_size or 0, self._until_quiet)
        except StoreUnavailable:
            return
        except (MemoryStoreError, OSError) as error:
            # The shard stays as it was and searches still work; the next try waits for more
            # segments, so a full disk doesn't bring a copy of the shard on every write.
            shard.merged_into = max(shard.merged_into, segments)
            log.warning("merging the memory shard %s failed: %s", shard.name, error)
            return
        finally:
            self._merging.pop(shard.name, None)
        log.info(
            "memory shard %s merged into %d segments in %.1f s",
            shard.name,
            count,
            time.perf_counter() - started,
        )
        self._wake.set()  # what was written during the merge waits to be indexed

    async def _until_quiet(self) -> None:
        """Wait for a quiet store before a swap (a shard's load holds the GIL), but no longer
        than twelve quiet periods: a store that is never quiet gets its merge anyway."""
        deadline = time.monotonic() + 12 * self.quiet_s
        while (wait := self.quiet_s - (time.monotonic() - self.last_use)) > 0:
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(min(wait, deadline - time.monotonic()))

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._merging.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task = None


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
        self._shards = {c: _Shard(root / self.names.of(c), self.names.of(c)) for c in COLLECTIONS}
        self._closed = False
        self._indexer = _Indexer(
            list(self._shards.values()),
            quiet_s=index_quiet_s,
            force_after=index_force_after,
            merge_above=merge_above,
        )
        self._generation: dict[str, int] = {}
        self._facts: dict[tuple[str, int], list[Fact]] = {}
        self._episodes: dict[str, Episode | None] = {}
        self._sessions: dict[str, set[str]] = {}
        """Per person, every session with verbatim points (a superset: writes add first)."""
        self._listing: dict[str, set[str]] = {}
        """Per person whose sessions are being listed, the sessions written meanwhile."""
        self._unlisted: set[str] = set()
        """People whose sessions are not listed (too many points or sessions): read each time."""

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
        known = self._sessions.get(person_key)
        if known is not None or person_key in self._listing or person_key in self._unlisted:
            return known
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
        if listed is None or len(listed) > _KNOWN_SESSIONS:
            if len(self._unlisted) >= _KEPT_PEOPLE:
                self._unlisted.clear()
            self._unlisted.add(person_key)
            return None
        if len(self._sessions) >= _KEPT_PEOPLE:
            self._sessions.clear()
        self._sessions[person_key] = known = {*listed, *written}
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
