"""POST /turn against a real uvicorn and the Ollama stand-in, read as a client reads it."""

from __future__ import annotations

import asyncio
import itertools
import time

import anyio
import httpx
import pytest

from tests.conftest import ALICE, BOB
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.support.sse import turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_a_turn_streams_reasoning_then_text_then_a_final_equal_to_the_text(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("The answer is forty two.", thinking="Let me think hard."))
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(20):
            got = await turn(client, {"text": "Question?", "conversationId": "c1"}, ALICE)
    assert got.status == 200
    assert got.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert got.headers["cache-control"] == "no-cache, no-transform"
    assert got.headers["x-accel-buffering"] == "no"
    assert got.headers["content-language"] == "en"
    names = got.names()
    assert names[-1] == "final"
    first_text = names.index("text")
    assert set(names[: first_text - 1]) == {"reasoning"}
    assert names[first_text - 1] == "reasoning_end"
    assert len(got.of("reasoning")) >= 2 and len(got.of("text")) >= 2
    reasoning_ids = {data["id"] for data in got.of("reasoning")}
    assert reasoning_ids == {got.of("reasoning_end")[0]["id"]}
    assert got.of("reasoning_end")[0]["failed"] is False
    assert got.text == "The answer is forty two."
    assert got.final == {"text": "The answer is forty two."}


async def test_deltas_arrive_one_by_one_as_the_model_produces_them(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(content=[f"w{i} " for i in range(8)], delay_s=0.15))
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(20):
            got = await turn(client, {"text": "Go"}, ALICE)
    text_times = [t for (name, _), t in zip(got.events, got.times, strict=True) if name == "text"]
    assert len(text_times) == 8
    gaps = [b - a for a, b in itertools.pairwise(text_times)]
    # Paced at 150 ms, the deltas must be spread out, not delivered in one block at the end.
    assert sum(1 for gap in gaps if gap > 0.05) >= 5
    assert text_times[-1] - text_times[0] > 0.5


async def test_the_model_receives_the_message_stamped_and_the_configured_model(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(20):
            got = await turn(client, {"text": "  keep my spaces ", "conversationId": "c1"}, ALICE)
    assert got.final["text"].startswith("You said:")
    request = ollama.requests[-1]
    assert request["model"] == "llama3.2"
    assert request["think"] is True
    user = request["messages"][-1]
    assert user["role"] == "user"
    assert user["content"].endswith("  keep my spaces ")
    assert user["content"].startswith("[")
    assert request["messages"][0]["role"] == "system"


async def test_a_quiet_stream_carries_heartbeat_comments(
    make_server: object, ollama: OllamaStandIn
) -> None:
    server = make_server(HTTP_SURFACE_HEARTBEAT_S="0.2")  # type: ignore[operator]
    ollama.enqueue(ChatScript(content=["late"], first_delay_s=1.2))
    raw = b""
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(20):
            async with client.stream("POST", "/turn", json={"text": "hi"}, headers=ALICE) as r:
                async for data in r.aiter_bytes():
                    raw += data
    assert raw.count(b": ping\n\n") >= 3
    # The last frame is the final answer (its usage, the stand-in's counts, after the text).
    assert raw.endswith(b"\n\n") and b'event: final\ndata: {"text":"late"' in raw[-200:]


async def test_closing_the_connection_closes_the_request_to_ollama_within_a_second(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(content=["one ", "two "], hang=True))
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(20):
            async with client.stream("POST", "/turn", json={"text": "hi"}, headers=ALICE) as r:
                async for data in r.aiter_bytes():
                    if b"event: text" in data:
                        break
            left = time.monotonic()
    closed = await ollama.wait_for_closed_async(1, timeout=5)
    assert closed[0] - left < 1.0
    await _eventually(lambda: server.services.manager.open_turns == 0)


async def test_two_turns_on_one_conversation_never_overlap_while_two_conversations_do(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    for _ in range(4):
        ollama.enqueue(ChatScript(content=["a ", "b ", "c ", "d "], delay_s=0.12))
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(30):
            same = await asyncio.gather(
                turn(client, {"text": "one", "conversationId": "same"}, ALICE),
                turn(client, {"text": "two", "conversationId": "same"}, ALICE),
            )
            other = await asyncio.gather(
                turn(client, {"text": "one", "conversationId": "x1"}, ALICE),
                turn(client, {"text": "two", "conversationId": "x2"}, ALICE),
            )
    first, second = sorted(same, key=lambda got: got.times[0])
    assert first.times[-1] <= second.times[0]  # the second began after the first ended
    a, b = sorted(other, key=lambda got: got.times[0])
    assert b.times[0] < a.times[-1]  # different conversations ran side by side
    # The two requests race to the server: whichever it took first, the second turn's model
    # request carries the first turn's words, then its own.
    order = ["one", "two"] if first is same[0] else ["two", "one"]
    contents = [m["content"] for m in ollama.requests[1]["messages"] if m["role"] != "system"]
    assert [c.rsplit("] ", 1)[-1] for c in contents if not c.startswith("a ")] == order


async def test_a_turn_waiting_behind_another_never_starts_when_its_client_leaves(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(content=["slow "] * 5, delay_s=0.2))
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(30):
            first = asyncio.create_task(
                turn(client, {"text": "first", "conversationId": "queue"}, ALICE)
            )
            await ollama.wait_for_requests_async(1)
            async with client.stream(
                "POST", "/turn", json={"text": "second", "conversationId": "queue"}, headers=ALICE
            ) as waiting:
                assert waiting.status_code == 200
            got = await first
    assert got.final["text"] == "slow " * 5
    await asyncio.sleep(0.5)
    assert len(ollama.requests) == 1


async def test_the_same_conversation_id_from_two_callers_is_two_conversations(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(20):
            await turn(client, {"text": "pomegranate-77", "conversationId": "shared"}, ALICE)
            await turn(client, {"text": "what did I say?", "conversationId": "shared"}, BOB)
    bob_saw = " ".join(m["content"] for m in ollama.requests[-1]["messages"])
    assert "pomegranate-77" not in bob_saw
    keys = set(server.services.manager.sessions)
    assert keys == {"static:alice:shared", "static:bob:shared"}


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (ChatScript(status=500, error="boom"), "answered with an error: boom"),
        (
            ChatScript(content=["a ", "b "], error_after=1, error="model exploded"),
            "answered with an error: model exploded",
        ),
        (ChatScript(content=["a ", "b ", "c "], close_after=2), "stopped answering"),
        (ChatScript(status=404, error='model "llama3.2" not found'), "not found"),
    ],
    ids=["http-error", "error-line-mid-stream", "closed-mid-stream", "unknown-model"],
)
async def test_a_failing_model_ends_the_stream_with_one_error_event(
    server: RunningServer, ollama: OllamaStandIn, script: ChatScript, expected: str
) -> None:
    ollama.enqueue(script)
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(20):
            got = await turn(client, {"text": "hi"}, ALICE)
    assert got.names()[-1] == "error"
    assert got.names().count("error") == 1
    assert "final" not in got.names()
    message = got.of("error")[0]["message"]
    assert "llama3.2" in message and ollama.url in message
    assert expected in message


async def test_an_unreachable_ollama_is_an_error_event_naming_the_model_and_where(
    make_server: object,
) -> None:
    server = make_server(OLLAMA_HOST="http://127.0.0.1:9")  # type: ignore[operator]
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(20):
            got = await turn(client, {"text": "hi"}, ALICE)
    assert got.names() == ["error"]
    assert got.of("error")[0]["message"] == (
        "The model llama3.2 at http://127.0.0.1:9 can't be reached. "
        "Check that Ollama is running there."
    )


async def test_an_error_inside_reasoning_closes_the_block_as_failed(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(thinking=["hmm ", "still "], close_after=1))
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(20):
            got = await turn(client, {"text": "hi"}, ALICE)
    assert got.names() == ["reasoning", "reasoning_end", "error"]
    assert got.of("reasoning_end")[0]["failed"] is True


async def test_think_off_is_passed_to_ollama(make_server: object, ollama: OllamaStandIn) -> None:
    server = make_server(OLLAMA_THINK="false")  # type: ignore[operator]
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(20):
            await turn(client, {"text": "hi"}, ALICE)
    assert "think" not in ollama.requests[-1] or ollama.requests[-1]["think"] is False


async def _eventually(check: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition never became true")
        await asyncio.sleep(0.05)


async def test_a_slow_reader_still_gets_every_delta_and_the_final(
    server: RunningServer, ollama: OllamaStandIn
) -> None:
    tokens = 3000  # far more than the turn's event queue holds
    ollama.enqueue(ChatScript(content=["x" * 200] * tokens))
    raw = b""
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(40):
            async with client.stream("POST", "/turn", json={"text": "hi"}, headers=ALICE) as r:
                await asyncio.sleep(1.5)  # let the socket and the queue fill up
                async for data in r.aiter_bytes():
                    raw += data
    assert raw.count(b"event: text\n") == tokens
    assert raw.endswith(b"\n\n") and b"event: final" in raw[-700_000:]
