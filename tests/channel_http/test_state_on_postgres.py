"""The whole surface on a PostgreSQL state store: two servers sharing one database."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import httpx
import pytest

from tests.conftest import ALICE, BOB
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.postgres import PostgresServer
from tests.support.server import RunningServer
from tests.support.sse import Received, turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def pair(
    make_server: Callable[..., RunningServer], postgres_server: PostgresServer, tmp_path: Path
) -> tuple[RunningServer, RunningServer]:
    """Two instances on one database, each with a data directory of its own."""
    url = postgres_server.create_database()
    shared = {
        "MERCURY_STATE_URL": url,
        "MERCURY_RATE_LIMIT_PER_USER": "3",
        "MERCURY_RATE_LIMIT_WINDOW_MS": "60000",
    }
    return (
        make_server(MERCURY_DATA_DIR=str(tmp_path / "a"), **shared),
        make_server(MERCURY_DATA_DIR=str(tmp_path / "b"), **shared),
    )


async def post_turn(
    server: RunningServer, body: dict[str, str], headers: dict[str, str]
) -> Received:
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(30):
            return await turn(client, body, headers)


async def test_a_turn_streams_with_the_state_on_postgresql(
    pair: tuple[RunningServer, RunningServer], ollama: OllamaStandIn
) -> None:
    first, _ = pair
    ollama.enqueue(ChatScript.words("Hello from PostgreSQL."))
    got = await post_turn(first, {"text": "Hi", "conversationId": "c1"}, ALICE)
    assert got.status == 200
    assert got.final == {"text": "Hello from PostgreSQL."}
    assert not (first.services.settings.data_dir / "mercury.db").exists()


async def test_a_persons_rate_limit_counts_across_both_instances(
    pair: tuple[RunningServer, RunningServer], ollama: OllamaStandIn
) -> None:
    first, second = pair
    for server in (first, second, first):
        ollama.enqueue(ChatScript.words("ok"))
        assert (await post_turn(server, {"text": "hi"}, ALICE)).status == 200
    refused = await post_turn(second, {"text": "hi"}, ALICE)
    assert refused.status == 429
    # The window is 60 s from the first turn, a moment ago (more on a loaded machine).
    assert 50 <= int(refused.headers["retry-after"]) <= 60
    ollama.enqueue(ChatScript.words("ok"))
    assert (await post_turn(second, {"text": "hi"}, BOB)).status == 200


async def test_a_setting_saved_through_one_instance_is_read_through_the_other(
    pair: tuple[RunningServer, RunningServer],
) -> None:
    first, second = pair
    async with httpx.AsyncClient() as client:
        # The second instance reads (and caches) Alice's settings first.
        assert (await client.get(second.url + "/me", headers=ALICE)).json()["timeZone"] is None
        for zone in ("Europe/Rome", "Asia/Tokyo", "America/New_York"):
            saved = await client.patch(first.url + "/me", headers=ALICE, json={"timeZone": zone})
            assert saved.status_code == 200
            read = await client.get(second.url + "/me", headers=ALICE)
            assert read.json()["timeZone"] == zone
