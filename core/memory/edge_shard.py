"""One collection's Qdrant Edge shard, the thread that drives it, and the indexer that builds
its index in the background: what :class:`core.memory.edge.EdgeStore` stands on.

``qdrant_edge`` is synchronous, and a shard is not meant to be driven from several threads at
once, so each :class:`Shard` has one dedicated worker thread: every call on it runs there, in
order, which is also its lock. :class:`Indexer` runs the optimizer once the store has been
quiet for a while, or once enough points wait unindexed, and merges the small segments those
builds leave in a child process working on a copy (``core/memory/edge_merge.py``), replaying
the updates journaled meanwhile before the copy takes the live shard's place. The reasons and
figures are in core/memory/edge.py's docstring and docs/memory.md.
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
from pathlib import Path
from typing import Any, Final, TypeVar

import msgspec
import qdrant_edge as qe

from core.memory import (
    VECTOR_NAME,
    CollectionMismatch,
    MemoryStoreError,
    StoreUnavailable,
)

__all__ = ["Indexer", "Shard", "shard_config"]

T = TypeVar("T")

log = logging.getLogger("mercury.memory")

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


def shard_config(vector_size: int, *, merged: bool = False) -> qe.EdgeConfig:
    """A shard's configuration; ``merged`` lifts the segment cap for a merge out of process."""
    return qe.EdgeConfig(
        vectors={VECTOR_NAME: qe.EdgeVectorParams(vector_size, qe.Distance.Cosine)},
        hnsw_config=_HNSW,
        quantization_config=_QUANTIZATION,
        optimizers=_MERGED if merged else _OPTIMIZERS,
    )


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


class Shard:
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


class Indexer:
    """Runs the shards' optimizers in the background, once the store is quiet.

    A build holds the GIL (qdrant_edge doesn't release it), so it waits until no store call
    has come for ``quiet_s`` seconds; a store that is never quiet still gets indexed once
    ``force_after`` points wait, as scanning them would by then cost more than the build.
    """

    def __init__(
        self, shards: Sequence[Shard], *, quiet_s: float, force_after: int, merge_above: int
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

    def wrote(self, shard: Shard, count: int) -> None:
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

    async def _merge(self, shard: Shard, segments: int) -> None:
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
