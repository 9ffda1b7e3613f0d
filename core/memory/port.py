"""Long-term memory: the per-person archive, episodes and facts, behind one port.

The engine keeps three collections per person (the verbatim archive, episodic summaries,
semantic facts). :class:`MemoryStore` is the port; ``core/memory/qdrant.py`` (a Qdrant server, or
qdrant-client's local mode) and ``core/memory/edge.py`` (Qdrant Edge, in-process) implement it on
top of :class:`PointStoreBase`, which holds the reading logic both share: cursors, ordering,
tie-breaking, and the person scope every query carries.

Every point carries ``personKey`` and ``ts`` (epoch seconds, float); reads order by ``ts`` and
break ties by point id, so a page boundary never drops or repeats a point. A point's vector is
the named vector :data:`VECTOR_NAME`; a point stored without one (the embedder was down) has
no vector at all rather than a placeholder, so it is listed by scrolls but never matched by a
search until the writer re-embeds it.

Exceptions::

    MemoryStoreError            any failure of the memory store
    ├── StoreUnavailable        the engine can't be reached or isn't set up yet; retry later
    ├── InvalidCursor           a pagination cursor this store never issued
    └── CollectionMismatch      an existing collection is configured differently (vector size)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import math
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, Final, Generic, Literal, Protocol, TypeVar, get_args

import msgspec

Collection = Literal["verbatim", "episodic", "semantic"]
COLLECTIONS: Final[tuple[Collection, ...]] = get_args(Collection)
Role = Literal["user", "assistant"]

VECTOR_NAME: Final = "content"
"""The one named vector of every collection."""

PREVIEW_CHARS: Final = 120
#: How many of a session's first messages are looked through for its first question (an
#: opening turn's greeting may come before it).
_FIRST_MESSAGES: Final = 4
_RECENT_BATCH: Final = 64

T = TypeVar("T")


class MemoryStoreError(Exception):
    """A failure of the memory store."""


class StoreUnavailable(MemoryStoreError):
    """The vector store can't be reached, or its collections don't exist yet."""


class InvalidCursor(MemoryStoreError):
    """A pagination cursor that is malformed or was never issued by this store."""


class CollectionMismatch(MemoryStoreError):
    """An existing collection is configured differently from what the engine needs."""


class CollectionNames(msgspec.Struct, frozen=True, kw_only=True):
    """The engine's collection names; each can be overridden by configuration."""

    verbatim: str = "verbatim_archive"
    episodic: str = "episodic_memory"
    semantic: str = "semantic_facts"

    def of(self, collection: Collection) -> str:
        name: str = getattr(self, collection)
        return name


class MemoryPoint(msgspec.Struct, frozen=True):
    """A point to write: a UUID, its vector (``None`` when it couldn't be embedded), its payload."""

    id: str
    vector: list[float] | None
    payload: dict[str, Any]


class RawPoint(msgspec.Struct, frozen=True):
    """A stored point as read back, without its vector."""

    id: str
    payload: dict[str, Any]


class ScoredRecord(msgspec.Struct, frozen=True):
    """A search hit: the point, its payload, its cosine similarity to the query."""

    id: str
    score: float
    payload: dict[str, Any]


class ArchivedMessage(msgspec.Struct, frozen=True, rename="camel"):
    """One message of the verbatim archive."""

    id: str
    person_key: str
    session_key: str
    role: Role
    content: str
    timestamp: str
    ts: float
    conversation_id: str | None = None
    interrupted: bool = False
    """An answer cut off before its end (the turn was cancelled or failed)."""


class Episode(msgspec.Struct, frozen=True, rename="camel"):
    """One episodic summary of a stretch of conversation."""

    id: str
    person_key: str
    session_key: str
    summary: str
    timestamp: str
    ts: float


class Fact(msgspec.Struct, frozen=True, rename="camel"):
    """One semantic fact, ``topic`` → ``value``, as extracted from a conversation."""

    id: str
    person_key: str
    topic: str
    value: str
    timestamp: str
    ts: float


class ConversationSummary(msgspec.Struct, frozen=True):
    """One of a person's sessions as the conversation list shows it.

    ``preview`` is the newest message; ``title`` the person's first question, on one line
    (empty while they have asked nothing, as after an opening turn alone).
    """

    session_key: str
    last_timestamp: str
    preview: str
    title: str = ""


class Page(msgspec.Struct, Generic[T], frozen=True):
    """One page of an ordered read; ``next_cursor`` is ``None`` on the last page."""

    items: list[T]
    next_cursor: str | None


class Cursor(msgspec.Struct, frozen=True, array_like=True):
    """The position after the last item of a page: its ``ts`` and point id."""

    ts: float
    id: str

    def encode(self) -> str:
        raw = msgspec.json.encode(self)
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    @classmethod
    def decode(cls, token: str) -> Cursor:
        """Parse a cursor issued by :meth:`encode`; anything else raises :class:`InvalidCursor`."""
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            cursor = msgspec.json.decode(raw, type=cls)
            point_id = str(uuid.UUID(cursor.id))
        except (binascii.Error, ValueError, msgspec.DecodeError) as exc:
            raise InvalidCursor(
                "The pagination cursor is not one this store issued; "
                "start again from the first page without a cursor."
            ) from exc
        if not math.isfinite(cursor.ts):
            raise InvalidCursor(
                "The pagination cursor holds no usable position; "
                "start again from the first page without a cursor."
            )
        return cls(cursor.ts, point_id)


class Scope(msgspec.Struct, frozen=True, kw_only=True):
    """What a query may see: always one person, optionally narrowed to a session or topic.

    Adapters turn a scope into their engine's filter starting from their ``person_filter``;
    no primitive accepts anything but a scope, so no query can leave out the person.
    """

    person_key: str
    session_key: str | None = None
    topic: str | None = None

    def __post_init__(self) -> None:
        if not self.person_key:
            raise ValueError("A memory query needs a person key; pass the caller's person key.")


class MemoryStore(Protocol):
    """The per-person long-term memory, as the engine reads and writes it."""

    async def ensure(self, vector_size: int) -> None:
        """Create the collections and payload indexes if missing; safe to call again."""
        ...

    async def reachable(self) -> bool:
        """Whether the engine answers now; never raises, returns within about a second."""
        ...

    async def close(self) -> None: ...

    async def upsert(self, collection: Collection, points: Sequence[MemoryPoint]) -> None:
        """Write points; writing the same id again replaces the point (idempotent retries)."""
        ...

    async def conversation(
        self, person_key: str, session_key: str, *, limit: int, after: str | None = None
    ) -> Page[ArchivedMessage]:
        """A session's messages in chronological order, one page at a time."""
        ...

    async def conversations(
        self, person_key: str, *, limit: int, scan: int = 500
    ) -> list[ConversationSummary]:
        """The person's sessions, most recently active first, among their newest messages."""
        ...

    async def recent_messages(
        self, person_key: str, session_key: str, *, max_chars: int
    ) -> list[ArchivedMessage]:
        """The newest messages of a session whose contents fit ``max_chars``, chronological."""
        ...

    async def scroll(
        self, collection: Collection, person_key: str, *, limit: int, after: str | None = None
    ) -> Page[RawPoint]:
        """The person's points in a collection, oldest first, one page at a time."""
        ...

    async def search(
        self, collection: Collection, person_key: str, vector: Sequence[float], *, limit: int = 5
    ) -> list[ScoredRecord]:
        """The person's points nearest to ``vector`` (points without a vector never match)."""
        ...

    async def facts(self, person_key: str, *, limit: int) -> list[Fact]:
        """The person's newest facts, newest first."""
        ...

    async def latest_episode(self, person_key: str) -> Episode | None: ...

    async def delete_facts(self, person_key: str, topic: str) -> int:
        """Delete the person's facts on ``topic``; returns how many were deleted."""
        ...


def preview_of(content: str) -> str:
    """The conversation list's preview: the text cut at 120 characters, marked with an ellipsis."""
    if len(content) <= PREVIEW_CHARS:
        return content
    return content[:PREVIEW_CHARS] + "…"


def title_of(content: str) -> str:
    """A question as the conversation list's title: one line, cut like :func:`preview_of`."""
    return preview_of(" ".join(content.split()))


class Listed(msgspec.Struct, frozen=True, rename="camel"):
    """One archived message as :func:`list_conversations` reads it."""

    session_key: str
    role: str
    content: str
    timestamp: str


def list_conversations(
    newest_first: Iterable[Listed], *, limit: int
) -> tuple[list[ConversationSummary], dict[str, str]]:
    """The first ``limit`` sessions of ``newest_first``, and the oldest question seen of each.

    The questions are the titles when the messages read hold each session's beginning; a
    caller that read only the newest of the person's messages looks the first ones up.
    """
    seen: dict[str, ConversationSummary] = {}
    questions: dict[str, str] = {}
    for message in newest_first:
        key = message.session_key
        if key not in seen:
            if len(seen) == limit:
                continue
            seen[key] = ConversationSummary(key, message.timestamp, preview_of(message.content))
        if message.role == "user":
            questions[key] = message.content
    return list(seen.values()), questions


def titled(
    summaries: Sequence[ConversationSummary], questions: dict[str, str]
) -> list[ConversationSummary]:
    """``summaries`` with their first questions as titles."""
    return [
        msgspec.structs.replace(item, title=title_of(questions.get(item.session_key, "")))
        for item in summaries
    ]


def _ts(point: RawPoint) -> float:
    return float(point.payload["ts"])


def _key(point: RawPoint) -> tuple[float, str]:
    return (_ts(point), point.id)


def _as(record_type: type[T], point: RawPoint) -> T:
    return msgspec.convert({**point.payload, "id": point.id}, record_type, strict=False)


class PointStoreBase(ABC):
    """The reads every adapter shares, built on five engine primitives.

    Ordering is by ``ts`` then id. Engines can order by a payload field but can't resume such
    an ordering from an offset, so a page is read as: the rest of the cursor's tie group
    (points with the cursor's ``ts``, sorted by id), then points strictly beyond that ``ts``;
    when that second read fills up, its last ``ts`` group may be cut, so it is read whole.
    """

    def __init__(self, names: CollectionNames) -> None:
        self.names = names

    # -- engine primitives -------------------------------------------------------------

    @abstractmethod
    async def _ordered(
        self,
        collection: Collection,
        scope: Scope,
        *,
        beyond: float | None,
        descending: bool,
        limit: int,
    ) -> list[RawPoint]:
        """Up to ``limit`` points in scope ordered by ``ts``, strictly past ``beyond``."""

    @abstractmethod
    async def _tied(self, collection: Collection, scope: Scope, ts: float) -> list[RawPoint]:
        """Every point in scope whose ``ts`` equals ``ts``."""

    @abstractmethod
    async def _nearest(
        self, collection: Collection, scope: Scope, vector: Sequence[float], limit: int
    ) -> list[ScoredRecord]: ...

    @abstractmethod
    async def _write(self, collection: Collection, points: Sequence[MemoryPoint]) -> None: ...

    @abstractmethod
    async def _delete(self, collection: Collection, scope: Scope) -> int: ...

    # -- the port ----------------------------------------------------------------------

    async def upsert(self, collection: Collection, points: Sequence[MemoryPoint]) -> None:
        if collection not in COLLECTIONS:
            raise ValueError(f"Unknown memory collection {collection!r}; use one of {COLLECTIONS}.")
        checked = []
        for point in points:
            if (
                not isinstance(point.payload.get("personKey"), str)
                or not point.payload["personKey"]
            ):
                raise ValueError(
                    f"Memory point {point.id} has no personKey; set it in the payload."
                )
            if not isinstance(point.payload.get("ts"), int | float):
                raise ValueError(
                    f"Memory point {point.id} has no numeric ts; set it in the payload."
                )
            checked.append(MemoryPoint(str(uuid.UUID(point.id)), point.vector, point.payload))
        if checked:
            await self._write(collection, checked)

    async def conversation(
        self, person_key: str, session_key: str, *, limit: int, after: str | None = None
    ) -> Page[ArchivedMessage]:
        scope = Scope(person_key=person_key, session_key=session_key)
        page = await self._page("verbatim", scope, limit=limit, after=after, descending=False)
        return Page([_as(ArchivedMessage, p) for p in page.items], page.next_cursor)

    async def conversations(
        self, person_key: str, *, limit: int, scan: int = 500
    ) -> list[ConversationSummary]:
        if limit <= 0:
            return []
        page = await self._page(
            "verbatim", Scope(person_key=person_key), limit=scan, after=None, descending=True
        )
        summaries, questions = list_conversations(
            (_as(Listed, point) for point in page.items), limit=limit
        )
        if page.next_cursor is not None:
            # Older messages exist: a session's beginning may lie before the ones read.
            firsts = await asyncio.gather(
                *(self._first_question(person_key, s.session_key) for s in summaries)
            )
            for item, first in zip(summaries, firsts, strict=True):
                if first is not None:
                    questions[item.session_key] = first
        return titled(summaries, questions)

    async def _first_question(self, person_key: str, session_key: str) -> str | None:
        scope = Scope(person_key=person_key, session_key=session_key)
        page = await self._page(
            "verbatim", scope, limit=_FIRST_MESSAGES, after=None, descending=False
        )
        listed = (_as(Listed, point) for point in page.items)
        return next((m.content for m in listed if m.role == "user"), None)

    async def recent_messages(
        self, person_key: str, session_key: str, *, max_chars: int
    ) -> list[ArchivedMessage]:
        scope = Scope(person_key=person_key, session_key=session_key)
        kept: list[ArchivedMessage] = []
        budget = max_chars
        after: str | None = None
        while budget > 0:
            page = await self._page(
                "verbatim", scope, limit=_RECENT_BATCH, after=after, descending=True
            )
            for point in page.items:
                message = _as(ArchivedMessage, point)
                if len(message.content) > budget:
                    return kept[::-1]
                budget -= len(message.content)
                kept.append(message)
            if page.next_cursor is None:
                break
            after = page.next_cursor
        return kept[::-1]

    async def scroll(
        self, collection: Collection, person_key: str, *, limit: int, after: str | None = None
    ) -> Page[RawPoint]:
        return await self._page(
            collection, Scope(person_key=person_key), limit=limit, after=after, descending=False
        )

    async def search(
        self, collection: Collection, person_key: str, vector: Sequence[float], *, limit: int = 5
    ) -> list[ScoredRecord]:
        if limit <= 0:
            return []
        return await self._nearest(collection, Scope(person_key=person_key), vector, limit)

    async def facts(self, person_key: str, *, limit: int) -> list[Fact]:
        page = await self._page(
            "semantic", Scope(person_key=person_key), limit=limit, after=None, descending=True
        )
        return [_as(Fact, p) for p in page.items]

    async def latest_episode(self, person_key: str) -> Episode | None:
        page = await self._page(
            "episodic", Scope(person_key=person_key), limit=1, after=None, descending=True
        )
        return _as(Episode, page.items[0]) if page.items else None

    async def delete_facts(self, person_key: str, topic: str) -> int:
        return await self._delete("semantic", Scope(person_key=person_key, topic=topic))

    # -- paging ------------------------------------------------------------------------

    async def _page(
        self,
        collection: Collection,
        scope: Scope,
        *,
        limit: int,
        after: str | None,
        descending: bool,
    ) -> Page[RawPoint]:
        cursor = Cursor.decode(after) if after is not None else None
        if limit <= 0:
            return Page([], None)
        want = limit + 1  # one more than asked tells whether another page exists
        found: list[RawPoint] = []
        beyond: float | None = None
        if cursor is not None:
            ties = sorted(await self._tied(collection, scope, cursor.ts), key=_key)
            if descending:
                found = [p for p in reversed(ties) if p.id < cursor.id][:want]
            else:
                found = [p for p in ties if p.id > cursor.id][:want]
            beyond = cursor.ts
        if len(found) < want:
            asked = want - len(found)
            batch = await self._ordered(
                collection, scope, beyond=beyond, descending=descending, limit=asked
            )
            if len(batch) == asked:
                # The last ts group may continue past the limit: read it whole.
                edge_ts = _ts(batch[-1])
                batch = [p for p in batch if _ts(p) != edge_ts]
                batch += await self._tied(collection, scope, edge_ts)
            found += sorted(batch, key=_key, reverse=descending)
        items = found[:limit]
        more = len(found) > limit
        next_cursor = Cursor(_ts(items[-1]), items[-1].id).encode() if more else None
        return Page(items, next_cursor)
