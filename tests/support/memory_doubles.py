"""Real implementations of the memory ports for tests: slow, down, and hashing stand-ins."""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Sequence

from core.memory import (
    ArchivedMessage,
    Collection,
    ConversationSummary,
    Episode,
    Fact,
    MemoryPoint,
    MemoryStore,
    Page,
    RawPoint,
    ScoredRecord,
    StoreUnavailable,
)
from core.memory.embedder import EmbeddingFailed


class SlowStore:
    """A :class:`MemoryStore` that answers like ``store``, ``delay_s`` later."""

    def __init__(self, store: MemoryStore, delay_s: float) -> None:
        self.store = store
        self.delay_s = delay_s

    async def _wait(self) -> None:
        await asyncio.sleep(self.delay_s)

    async def ensure(self, vector_size: int) -> None:
        await self._wait()
        await self.store.ensure(vector_size)

    async def reachable(self) -> bool:
        await self._wait()
        return await self.store.reachable()

    async def close(self) -> None:
        await self.store.close()

    async def upsert(self, collection: Collection, points: Sequence[MemoryPoint]) -> None:
        await self._wait()
        await self.store.upsert(collection, points)

    async def conversation(
        self, person_key: str, session_key: str, *, limit: int, after: str | None = None
    ) -> Page[ArchivedMessage]:
        await self._wait()
        return await self.store.conversation(person_key, session_key, limit=limit, after=after)

    async def conversations(
        self, person_key: str, *, limit: int, scan: int = 500
    ) -> list[ConversationSummary]:
        await self._wait()
        return await self.store.conversations(person_key, limit=limit, scan=scan)

    async def recent_messages(
        self, person_key: str, session_key: str, *, max_chars: int
    ) -> list[ArchivedMessage]:
        await self._wait()
        return await self.store.recent_messages(person_key, session_key, max_chars=max_chars)

    async def scroll(
        self, collection: Collection, person_key: str, *, limit: int, after: str | None = None
    ) -> Page[RawPoint]:
        await self._wait()
        return await self.store.scroll(collection, person_key, limit=limit, after=after)

    async def search(
        self, collection: Collection, person_key: str, vector: Sequence[float], *, limit: int = 5
    ) -> list[ScoredRecord]:
        await self._wait()
        return await self.store.search(collection, person_key, vector, limit=limit)

    async def facts(self, person_key: str, *, limit: int) -> list[Fact]:
        await self._wait()
        return await self.store.facts(person_key, limit=limit)

    async def latest_episode(self, person_key: str) -> Episode | None:
        await self._wait()
        return await self.store.latest_episode(person_key)

    async def delete_facts(self, person_key: str, topic: str) -> int:
        await self._wait()
        return await self.store.delete_facts(person_key, topic)


class DownStore(SlowStore):
    """A :class:`MemoryStore` that is unreachable until :meth:`revive`, then is ``store``.

    It counts the calls it refused and records each accepted upsert, in order.
    """

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store, 0.0)
        self.down = True
        self.refused = 0
        self.upserts: list[tuple[Collection, list[str]]] = []

    def revive(self) -> None:
        self.down = False

    async def _wait(self) -> None:
        await asyncio.sleep(0)
        if self.down:
            self.refused += 1
            raise StoreUnavailable("The test store is down; revive() it to bring it back.")

    async def reachable(self) -> bool:
        return not self.down

    async def upsert(self, collection: Collection, points: Sequence[MemoryPoint]) -> None:
        await super().upsert(collection, points)
        self.upserts.append((collection, [p.id for p in points]))


def hash_vector(text: str, size: int = 16) -> list[float]:
    """A deterministic unit vector: each word adds to a bucket chosen by its hash."""
    vector = [0.0] * size
    for word in text.lower().split() or [""]:
        digest = hashlib.sha256(word.encode()).digest()
        vector[digest[0] % size] += 1.0 if digest[1] % 2 else -1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    if norm == 1.0 and not any(vector):
        vector[0] = 1.0
    return [x / norm for x in vector]


class HashEmbedder:
    """An :class:`~core.memory.embedder.Embedder` hashing words into a small vector.

    It can be taken down.
    """

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self.down = False
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        await asyncio.sleep(0)
        self.calls += 1
        if self.down:
            raise EmbeddingFailed("The test embedder is down; set down = False to bring it back.")
        return [hash_vector(t, self.size) for t in texts]

    async def vector_size(self) -> int:
        return self.size

    async def close(self) -> None:
        return None
