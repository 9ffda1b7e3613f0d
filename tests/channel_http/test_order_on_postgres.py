"""Turns on a real uvicorn over a real PostgreSQL: many clients at once, and a lapsed claim.

The conversation order (core/engine/conversation_order.py) keeps each conversation's turns one at
a time across instances with claims renewed on the shared store. Under concurrent clients
every turn is answered and each conversation's record holds whole exchanges in the order
they ran; when an instance stalls past its lease and the conversation moves on, the stalled
turn ends with an ``error`` event (never ``final``) and nothing is left unretrieved.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest

from tests.conftest import ALICE, BOB
from tests.reliability.support import Outcome, read_turn
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.postgres import PostgresServer
from tests.support.server import RunningServer, serve

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

CLIENTS = 8
TURNS = 5
#: Conversations two clients write to at once; the other turns each open a new one.
SHARED = 3


def _records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{record.name}: {record.getMessage()}"
        for record in caplog.records
        if record.levelno >= logging.WARNING
        and (
            "OrderError" in record.getMessage()
            or "lost its place" in record.getMessage()
            or "never retrieved" in record.getMessage()
            or record.levelno >= logging.ERROR
        )
    ]


async def _shown(url: str, key: str) -> list[tuple[str, str]]:
    async with await psycopg.AsyncConnection.connect(url) as db:
        cursor = await db.execute(
            "SELECT role, content FROM conversation_messages WHERE session_key = %s ORDER BY seq",
            (key,),
        )
        return [(str(role), str(content)) for role, content in await cursor.fetchall()]


async def test_concurrent_clients_get_every_turn_answered_and_each_conversation_in_order(
    make_server: Callable[..., RunningServer],
    postgres_server: PostgresServer,
    ollama: OllamaStandIn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    state_url = postgres_server.create_database()
    server = make_server(
        MERCURY_STATE_URL=state_url,
        MERCURY_STATE_POOL_SIZE="3",  # far fewer connections than turns at once
        MERCURY_RATE_LIMIT_PER_USER="1000",
    )
    ollama.responder = lambda request: ChatScript(content=["Noted", "."])

    async def client(i: int) -> list[tuple[str, Outcome]]:
        person = ALICE if i % 2 else BOB
        seen = []
        limits = httpx.Limits(max_connections=1)  # one kept-alive connection per client
        async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as http:
            for n in range(TURNS):
                # Every other turn continues a conversation another client writes to too.
                conversation = f"shared-{i % SHARED}" if n % 2 else f"own-{i}-{n}"
                text = f"client {i} turn {n}"
                body = {"text": text, "conversationId": conversation}
                seen.append((text, await read_turn(http, body, person, deadline_s=90)))
        return seen

    results = await asyncio.gather(*(client(i) for i in range(CLIENTS)))

    for seen in results:
        for text, outcome in seen:
            assert outcome.status == 200, (text, outcome)
            assert outcome.names()[-1] == "final", (text, outcome.events)
            assert "error" not in outcome.names(), (text, outcome.events)
    total = 0
    for person in ("alice", "bob"):
        for c in range(SHARED):
            shown = await _shown(state_url, f"static:{person}:shared-{c}")
            total += len(shown)
            # Whole exchanges, never interleaved: each message is followed by its answer.
            assert shown, f"nothing on record for {person}'s shared-{c}"
            assert [role for role, _ in shown] == ["user", "assistant"] * (len(shown) // 2)
            assert all(answer == "Noted." for role, answer in shown if role == "assistant")
            # Each client's turns in the order it sent them.
            for i in range(CLIENTS):
                mine = [text for role, text in shown if text.startswith(f"client {i} ")]
                assert mine == sorted(mine, key=lambda t: int(t.rsplit(" ", 1)[1]))
    assert total == 2 * CLIENTS * (TURNS // 2)  # every shared turn's message and answer
    assert _records(caplog) == []


async def test_a_turn_whose_claim_lapses_ends_with_an_error_event_and_the_next_one_runs(
    make_server: Callable[..., RunningServer],
    postgres_server: PostgresServer,
    ollama: OllamaStandIn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    state_url = postgres_server.create_database()
    lease = 2
    server = make_server(MERCURY_STATE_URL=state_url, MERCURY_CONVERSATION_LEASE_S=str(lease))
    order: Any = server.services.manager.order
    # The first answer streams slowly, far past the lease; the second is the default echo.
    ollama.enqueue(ChatScript(content=[f"w{n} " for n in range(12)], delay_s=0.5))

    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        first = asyncio.create_task(
            read_turn(http, {"text": "slow", "conversationId": "x"}, ALICE, deadline_s=60)
        )
        await ollama.wait_until_async(lambda: ollama.open_streams >= 1, timeout=30)
        server.call(order.stop_renewing())  # the instance stalls: its claims lapse
        second = await read_turn(
            http, {"text": "next", "conversationId": "x"}, ALICE, deadline_s=60
        )
        stalled = await first

    assert second.names()[-1] == "final", second.events
    # The stalled turn hears that it failed, and never reports an answer as given.
    assert stalled.status == 200 and stalled.broke_off is None, stalled
    assert stalled.names()[-1] == "error", stalled.events
    assert "final" not in stalled.names(), stalled.events
    shown = await _shown(state_url, "static:alice:x")
    # The stalled turn's words were on record before it ran; its lost answer never is.
    assert [(role, content) for role, content in shown][:2] == [("user", "slow"), ("user", "next")]
    assert [role for role, _ in shown] == ["user", "user", "assistant"], shown
    assert not any(content.startswith("w0") for _, content in shown), shown
    messages = [record.getMessage() for record in caplog.records]
    assert not any("never retrieved" in message for message in messages), messages
    assert any("lost its place" in message for message in messages), messages


async def test_a_shutdown_puts_the_turns_it_cuts_off_on_record_before_giving_back_claims(
    make_settings: Callable[..., Any],
    postgres_server: PostgresServer,
    ollama: OllamaStandIn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    state_url = postgres_server.create_database()
    ollama.enqueue(ChatScript(content=[f"w{n} " for n in range(40)], delay_s=0.25))
    with serve(make_settings(MERCURY_STATE_URL=state_url)) as server:
        manager: Any = server.services.manager
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            cut = asyncio.create_task(
                read_turn(http, {"text": "long one", "conversationId": "s"}, ALICE)
            )
            await ollama.wait_until_async(lambda: ollama.open_streams >= 1, timeout=30)
            # What SIGTERM and then the lifespan's end do, back to back.
            server.call(manager.stop_turns(), timeout=30)
            server.call(manager.order.stop(), timeout=30)
            outcome = await cut

    assert outcome.names()[-1] == "error", outcome.events
    async with await psycopg.AsyncConnection.connect(state_url) as db:
        cursor = await db.execute(
            "SELECT message FROM conversation_transcript WHERE session_key = %s ORDER BY seq",
            ("static:alice:s",),
        )
        recorded = [json.loads(row[0]) for row in await cursor.fetchall()]
    # The person's words and the answer as far as it streamed, marked as cut off.
    assert [message["role"] for message in recorded] == ["user", "assistant"], recorded
    messages = [record.getMessage() for record in caplog.records]
    assert not any("not put on record" in message for message in messages), messages
    assert not any("never retrieved" in message for message in messages), messages
