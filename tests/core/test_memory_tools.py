"""The memory plugin's recall: the three collections are searched at once."""

from __future__ import annotations

import uuid
from pathlib import Path

import msgspec
import pytest

from core.memory import MemoryPoint
from core.memory.archive import ArchiveWriter
from core.memory.edge import EdgeStore
from core.people.i18n import Catalogs
from core.people.principal import Person, Principal
from core.tools.memory_tools import memory_plugin
from core.tools.registry import ToolCallContext
from tests.support.memory_doubles import HashEmbedder, SlowStore, hash_vector

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

DELAY_S = 2.0
"""Each search's delay: three in a row (6 s) would pass recall's 5 s budget, at once (2 s) not."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_recall_searches_its_three_collections_at_once(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path)
    await store.ensure(16)
    embedder = HashEmbedder()
    archive = ArchiveWriter(store, embedder)
    try:
        payload = {
            "personKey": "alice",
            "topic": "coffee",
            "value": "no sugar",
            "ts": 1.0,
            "timestamp": "",
        }
        point = MemoryPoint(str(uuid.uuid4()), hash_vector("coffee no sugar"), payload)
        await store.upsert("semantic", [point])
        plugin = memory_plugin(SlowStore(store, DELAY_S), archive, embedder)
        recall = next(tool for tool in plugin.tools if tool.name == "recall")
        context = ToolCallContext(
            principal=Principal(id="alice", provider="static"),
            person=Person(key="alice"),
            session_key="alice:c1",
            conversation_id="c1",
            translator=Catalogs.load().translator("en"),
        )
        found = msgspec.json.decode(await recall.run(context, {"query": "coffee sugar"}))
        # Scores only come from the similarity search; the fallback lists facts without them.
        assert set(found) == {"semantic", "episodic", "verbatim"}
        assert found["semantic"][0]["value"] == "no sugar"
        assert "score" in found["semantic"][0]
    finally:
        await store.close()
