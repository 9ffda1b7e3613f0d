"""Long-term memory: the port, its adapters, and what writes to and reads from it.

``port`` holds :class:`MemoryStore`, the points and the reading logic both adapters share
(:class:`PointStoreBase`); ``edge`` (Qdrant Edge, in-process, with ``edge_merge`` run in a
child process) and ``qdrant`` (a Qdrant server, or qdrant-client's local mode) are the
adapters; ``archive`` writes a turn's messages behind it (``spill``: the rows it holds
outside memory, each claimed by one writer), ``embedder`` turns text into
vectors, ``capture`` distils episodes and facts and the primer a new session starts with.
The adapters are imported by name (``core.memory.edge``, ``core.memory.qdrant``), never
here: each pulls in its engine's library.
"""

from core.memory.port import (
    COLLECTIONS,
    PREVIEW_CHARS,
    VECTOR_NAME,
    ArchivedMessage,
    Collection,
    CollectionMismatch,
    CollectionNames,
    ConversationSummary,
    Cursor,
    Episode,
    Fact,
    InvalidCursor,
    Listed,
    MemoryPoint,
    MemoryStore,
    MemoryStoreError,
    Page,
    PointStoreBase,
    RawPoint,
    Role,
    Scope,
    ScoredRecord,
    StoreUnavailable,
    list_conversations,
    preview_of,
    title_of,
    titled,
)

__all__ = [
    "COLLECTIONS",
    "PREVIEW_CHARS",
    "VECTOR_NAME",
    "ArchivedMessage",
    "Collection",
    "CollectionMismatch",
    "CollectionNames",
    "ConversationSummary",
    "Cursor",
    "Episode",
    "Fact",
    "InvalidCursor",
    "Listed",
    "MemoryPoint",
    "MemoryStore",
    "MemoryStoreError",
    "Page",
    "PointStoreBase",
    "RawPoint",
    "Role",
    "Scope",
    "ScoredRecord",
    "StoreUnavailable",
    "list_conversations",
    "preview_of",
    "title_of",
    "titled",
]
