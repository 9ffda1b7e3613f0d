"""Memory over HTTP, with both adapters: the archive, transcripts, capture, tools, outages."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse

from core.engine.history import INTERRUPTED_NOTE
from core.memory import MemoryStore
from core.memory.edge import EdgeStore
from core.memory.qdrant import QdrantStore
from tests.conftest import ALICE, BOB
from tests.support.memory_doubles import DownStore, SlowStore
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.support.sse import Received, turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

Factory = Callable[..., MemoryStore]


@pytest.fixture(params=["edge", "qdrant-local"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    """A factory of stores on one persistent location, so a restart reopens the same data."""

    def make(place: str = "store") -> MemoryStore:
        if request.param == "edge":
            return EdgeStore(tmp_path / place / "edge")
        # Built on a loop of its own: the store runs local mode in a thread of its own anyway.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(
                asyncio.run, QdrantStore.local(path=tmp_path / place / "qdrant")
            ).result()

    yield make


async def post_turn(
    server: RunningServer, body: dict[str, Any], headers: dict[str, str]
) -> Received:
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(30):
            return await turn(client, body, headers)


def get(
    server: RunningServer, path: str, headers: dict[str, str] = ALICE, **params: Any
) -> httpx.Response:
    return httpx.get(server.url + path, headers=headers, params=params, timeout=10)


async def eventually(check: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("the condition never held")
        await asyncio.sleep(0.05)


def messages(
    server: RunningServer, conversation: str, headers: dict[str, str] = ALICE
) -> list[dict[str, Any]]:
    return (
        get(server, "/conversation", headers, id=conversation)["messages"]
        if False
        else (get(server, "/conversation", headers, id=conversation).json()["messages"])
    )


async def test_every_turn_is_archived_and_read_back_per_person(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    server = make_server({"memory": store_factory()})
    await post_turn(server, {"text": "pomegranate-77", "conversationId": "c1"}, ALICE)
    archived = await eventually(lambda: len(messages(server, "c1")) == 2 and messages(server, "c1"))
    assert [m["role"] for m in archived] == ["user", "assistant"]
    assert archived[0]["content"] == "pomegranate-77"
    assert archived[1]["content"].endswith("] pomegranate-77")
    assert messages(server, "c1", BOB) == []
    listed = get(server, "/conversations").json()["conversations"]
    assert [c["conversationId"] for c in listed] == ["c1"]
    assert listed[0]["preview"].endswith("pomegranate-77")
    assert get(server, "/conversations", BOB).json()["conversations"] == []
    points = get(server, "/memory/scroll", collection="verbatim_archive").json()["points"]
    assert len(points) == 2 and all(p["payload"]["personKey"] == "static:alice" for p in points)
    assert get(server, "/memory/scroll", BOB, collection="verbatim_archive").json()["points"] == []


async def test_a_turn_is_readable_as_soon_as_it_ends_while_the_archive_writes_behind(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    # The archive waits up to 10 s for more turns to write with this one: the read routes
    # (and a rebuild) get what was submitted stored first instead of waiting that long.
    server = make_server({"memory": store_factory()}, MERCURY_ARCHIVE_LINGER_MS="10000")
    await post_turn(server, {"text": "fig-31", "conversationId": "c1"}, ALICE)
    started = time.monotonic()
    assert [m["role"] for m in messages(server, "c1")] == ["user", "assistant"]
    listed = get(server, "/conversations").json()["conversations"]
    assert [c["conversationId"] for c in listed] == ["c1"]
    await post_turn(server, {"text": "fig-32", "conversationId": "c2"}, ALICE)
    points = get(server, "/memory/scroll", collection="verbatim_archive").json()["points"]
    assert len(points) == 4
    assert time.monotonic() - started < 8  # far from the linger
    # A conversation freed from the process is rebuilt with its last turn still queued.
    await post_turn(server, {"text": "fig-33", "conversationId": "c3"}, ALICE)
    server.services.manager.sessions.clear()
    await post_turn(server, {"text": "and then?", "conversationId": "c3"}, ALICE)
    assert "fig-33" in json.dumps(ollama.requests[-1]["messages"])


async def test_a_conversation_pages_across_three_pages_without_gaps_or_repeats(
    make_server: Callable[..., RunningServer], store_factory: Factory
) -> None:
    server = make_server({"memory": store_factory()})
    archive = server.services.manager.archive

    async def seed() -> None:
        for i in range(25):
            archive.submit(
                "verbatim",
                {
                    "personKey": "static:alice",
                    "sessionKey": "static:alice:long",
                    "conversationId": "long",
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"message {i}",
                },
            )

    server.call(seed())
    await eventually(
        lambda: len(get(server, "/conversation", id="long", limit=500).json()["messages"]) == 25
    )
    seen: list[str] = []
    offset = None
    pages = 0
    while True:
        params: dict[str, Any] = {"id": "long", "limit": 10}
        if offset:
            params["offset"] = offset
        page = get(server, "/conversation", **params).json()
        seen.extend(m["content"] for m in page["messages"])
        pages += 1
        offset = page["nextOffset"]
        if offset is None:
            break
    assert pages == 3
    assert seen == [f"message {i}" for i in range(25)]
    bad = get(server, "/conversation", id="long", offset="not-a-cursor")
    assert bad.status_code == 400


def test_read_queries_are_validated(
    make_server: Callable[..., RunningServer], store_factory: Factory
) -> None:
    server = make_server({"memory": store_factory()})
    assert get(server, "/conversation").status_code == 400
    assert get(server, "/conversation", id="a/b").status_code == 400
    for value in ("0", "501", "abc", "-1", "1.5"):
        assert get(server, "/conversations", limit=value).status_code == 400
    unknown = get(server, "/memory/scroll", collection="tool_corrections")
    assert unknown.json() == {"ok": False, "error": "Unknown collection: tool_corrections."}
    assert get(server, "/memory/scroll").status_code == 400


async def test_a_restart_keeps_transcripts_and_a_continued_conversation_carries_its_history(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    first = make_server({"memory": store_factory()})
    await post_turn(first, {"text": "my code word is kiwi-12", "conversationId": "trip"}, ALICE)
    await eventually(lambda: len(messages(first, "trip")) == 2)
    first.server.should_exit = True
    first.thread.join(15)
    second = make_server({"memory": store_factory()})
    assert len(messages(second, "trip")) == 2
    await post_turn(second, {"text": "what was it?", "conversationId": "trip"}, ALICE)
    sent = json.dumps(ollama.requests[-1]["messages"])
    assert "my code word is kiwi-12" in sent
    await post_turn(second, {"text": "what was it?", "conversationId": "trip"}, BOB)
    assert "kiwi-12" not in json.dumps(ollama.requests[-1]["messages"])


async def test_memory_unreachable_keeps_turns_working_and_reads_empty_then_catches_up(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    down = DownStore(store_factory())
    server = make_server({"memory": down})
    got = await post_turn(server, {"text": "while down", "conversationId": "c1"}, ALICE)
    assert got.final["text"].endswith("] while down")
    assert messages(server, "c1") == []
    assert get(server, "/conversations").json() == {"ok": True, "conversations": []}
    assert get(server, "/health").json()["qdrantReachable"] is False
    down.revive()
    await eventually(lambda: len(messages(server, "c1")) == 2)
    assert get(server, "/health").json()["qdrantReachable"] is True


async def test_a_slow_store_does_not_delay_final(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    async def time_to_final(server: RunningServer) -> float:
        best = float("inf")
        async with httpx.AsyncClient(base_url=server.url) as client:
            for i in range(5):
                started = time.monotonic()
                got = await turn(client, {"text": f"hi {i}", "conversationId": "c1"}, ALICE)
                best = min(best, got.times[-1] - started)
        return best

    fast = await time_to_final(make_server({"memory": store_factory()}))
    slow = await time_to_final(make_server({"memory": SlowStore(store_factory("slow"), 0.5)}))
    # Each store call of the slow store takes 0.5 s: none of it may stand before final.
    assert slow - fast < 0.25, (fast, slow)


def summary_responder(request: dict[str, Any]) -> ChatScript:
    if request.get("stream") is False:
        return ChatScript(
            content=[
                json.dumps(
                    {
                        "summary": "Alice planned a trip to Lisbon.",
                        "facts": [{"topic": "trip", "value": "Lisbon in May"}],
                    }
                )
            ]
        )
    return ChatScript.words("Noted.")


async def test_capture_after_enough_messages_shows_a_nameless_tool_and_stores_memory(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    server = make_server({"memory": store_factory()}, SESSION_CAPTURE_MESSAGE_THRESHOLD="4")
    ollama.responder = summary_responder
    first = await post_turn(server, {"text": "I plan a trip", "conversationId": "c1"}, ALICE)
    assert "tool" not in first.names()
    second = await post_turn(server, {"text": "to Lisbon in May", "conversationId": "c1"}, ALICE)
    assert second.names()[-3:] == ["final", "tool", "tool_finish"]
    ping = second.of("tool")[0]
    assert "name" not in ping and ping["label"] == "Noting something important…"
    assert second.of("tool_finish")[0]["outcome"] == "success"
    facts = await eventually(
        lambda: get(server, "/memory/scroll", collection="semantic_facts").json()["points"]
    )
    assert facts[0]["payload"]["topic"] == "trip"
    episodes = get(server, "/memory/scroll", collection="episodic_memory").json()["points"]
    assert episodes[0]["payload"]["summary"] == "Alice planned a trip to Lisbon."
    assert get(server, "/memory/scroll", BOB, collection="semantic_facts").json()["points"] == []
    await post_turn(server, {"text": "hello again", "conversationId": "new"}, ALICE)
    primer = ollama.requests[-1]["messages"][1]
    assert primer["role"] == "system" and "trip: Lisbon in May" in primer["content"]
    await post_turn(server, {"text": "hello", "conversationId": "new"}, BOB)
    assert "Lisbon" not in json.dumps(ollama.requests[-1]["messages"])


async def test_the_capture_line_shows_the_head_of_the_person_s_message_never_the_answer(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    """#36 follow-up: the detail was the whole answer, its raw Markdown shown after final."""
    server = make_server({"memory": store_factory()}, SESSION_CAPTURE_MESSAGE_THRESHOLD="2")
    answer = "**Lisbon** in May:\n\n- flights\n- a hotel] by the sea"

    def respond(request: dict[str, Any]) -> ChatScript:
        return (
            summary_responder(request)
            if request.get("stream") is False
            else (ChatScript(content=[answer]))
        )

    ollama.responder = respond
    said = "Plan [a trip] to Lisbon in May, " + "with flights and a hotel by the sea " * 3
    got = await post_turn(
        server, {"text": f"{said}\nand a day in Sintra", "conversationId": "c1"}, ALICE
    )
    assert got.names()[-3:] == ["final", "tool", "tool_finish"]
    detail = got.of("tool")[0]["detail"]
    assert detail == said[:79].rstrip() + "…" and len(detail) <= 80
    short = await post_turn(server, {"text": "  ok, book it  ", "conversationId": "c1"}, ALICE)
    assert short.of("tool")[0]["detail"] == "ok, book it"


async def test_after_a_restart_the_first_turn_gets_its_primer_before_memory_is_ensured(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    first = make_server({"memory": store_factory()}, SESSION_CAPTURE_MESSAGE_THRESHOLD="2")
    ollama.responder = summary_responder
    await post_turn(first, {"text": "a trip to Lisbon in May", "conversationId": "c1"}, ALICE)
    await eventually(
        lambda: get(first, "/memory/scroll", collection="semantic_facts").json()["points"]
    )
    first.server.should_exit = True
    first.thread.join(15)
    # The embedding model is away after the restart (not pulled yet, or Ollama still
    # loading it), so ensure() can't learn the vector size and keeps retrying.
    before = ollama.models
    ollama.models = ["llama3.2"]
    try:
        second = make_server({"memory": store_factory()})
        await post_turn(second, {"text": "hello again", "conversationId": "new"}, ALICE)
        assert not second.services.manager.archive.ensured
    finally:
        ollama.models = before
    primer = ollama.requests[-1]["messages"][1]
    assert primer["role"] == "system" and "trip: Lisbon in May" in primer["content"]


async def test_a_fresh_store_not_ensured_yet_costs_a_first_turn_no_warning_of_its_own(
    make_server: Callable[..., RunningServer],
    store_factory: Factory,
    ollama: OllamaStandIn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Nothing was ever stored, so a new session's primer and rebuild miss nothing; why memory
    # isn't on yet is the archive's ensure loop's to say, once, not every turn's.
    caplog.set_level(logging.DEBUG)
    before = ollama.models
    ollama.models = ["llama3.2"]  # the embedding model is away: ensure() keeps retrying
    try:
        server = make_server({"memory": store_factory()})
        got = await post_turn(server, {"text": "hello", "conversationId": "c1"}, ALICE)
        assert not server.services.manager.archive.ensured
    finally:
        ollama.models = before
    assert got.final["text"].endswith("] hello")
    said = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    missed = [s for s in said if s[2].startswith(("no primer", "could not rebuild"))]
    assert len(missed) == 2 and all(level == logging.DEBUG for _, level, _ in missed), missed
    assert any(
        level == logging.WARNING and message.startswith("Memory isn't ready yet")
        for _, level, message in said
    )


async def test_a_failed_capture_is_not_a_turn_error_and_is_retried_next_time(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    server = make_server({"memory": store_factory()}, SESSION_CAPTURE_MESSAGE_THRESHOLD="2")
    ollama.responder = lambda request: (
        ChatScript(content=["not json"])
        if request.get("stream") is False
        else ChatScript.words("ok")
    )
    got = await post_turn(server, {"text": "hi", "conversationId": "c1"}, ALICE)
    assert got.names()[-3:] == ["final", "tool", "tool_finish"]
    assert got.of("tool_finish")[0]["outcome"] == "failed"
    assert "error" not in got.names()
    ollama.responder = summary_responder
    again = await post_turn(server, {"text": "hi", "conversationId": "c1"}, ALICE)
    assert again.of("tool_finish")[-1]["outcome"] == "success"


async def test_remember_recall_and_forget_with_confirmation_and_resume(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    server = make_server({"memory": store_factory()})
    steps = [
        ChatScript(
            tool_calls=[{"name": "remember", "arguments": {"topic": "Coffee", "value": "no sugar"}}]
        )
    ]
    ollama.responder = lambda request: steps.pop(0) if steps else ChatScript.words("Saved.")
    await post_turn(server, {"text": "remember I take no sugar", "conversationId": "c1"}, ALICE)
    await eventually(
        lambda: get(server, "/memory/scroll", collection="semantic_facts").json()["points"]
    )
    steps.append(
        ChatScript(tool_calls=[{"name": "recall", "arguments": {"query": "coffee sugar"}}])
    )
    await post_turn(server, {"text": "how do I take coffee?", "conversationId": "c1"}, ALICE)
    assert "no sugar" in ollama.requests[-1]["messages"][-1]["content"]
    steps.append(
        ChatScript(tool_calls=[{"name": "recall", "arguments": {"query": "coffee sugar"}}])
    )
    await post_turn(server, {"text": "how do I take coffee?", "conversationId": "c1"}, BOB)
    assert "no sugar" not in ollama.requests[-1]["messages"][-1]["content"]
    steps.append(ChatScript(tool_calls=[{"name": "forget", "arguments": {"topic": "coffee"}}]))
    staged = await post_turn(server, {"text": "forget my coffee", "conversationId": "c1"}, ALICE)
    pending = staged.of("pending")[0]
    assert pending["command"] == "Forget what I know about coffee"
    confirmed = httpx.post(
        server.url + "/confirm",
        headers=ALICE,
        json={"token": pending["token"], "conversationId": "c1"},
    )
    assert confirmed.json() == {"ok": True, "resolved": True, "resume": True}
    heard = await post_turn(server, {"resume": True, "conversationId": "c1"}, ALICE)
    assert heard.final["text"] == "Saved."
    assert '"deleted":1' in ollama.requests[-1]["messages"][-1]["content"]
    assert get(server, "/memory/scroll", collection="semantic_facts").json()["points"] == []


async def test_an_idle_session_is_captured_then_freed_and_rebuilt_from_the_archive(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    server = make_server(
        {"memory": store_factory()},
        SESSION_IDLE_TIMEOUT_MS="1000",
        SESSION_IDLE_CHECK_INTERVAL_MS="200",
    )
    ollama.responder = summary_responder
    await post_turn(server, {"text": "the gate code is 4411", "conversationId": "idle"}, ALICE)
    manager = server.services.manager
    await eventually(lambda: "static:alice:idle" not in manager.sessions, timeout=20)
    await eventually(
        lambda: get(server, "/memory/scroll", collection="episodic_memory").json()["points"]
    )
    await post_turn(server, {"text": "what is the gate code?", "conversationId": "idle"}, ALICE)
    assert "the gate code is 4411" in json.dumps(ollama.requests[-1]["messages"])


async def test_a_one_off_turn_is_archived_but_not_listed_nor_continuable(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    server = make_server({"memory": store_factory()})
    await post_turn(server, {"text": "just once"}, ALICE)
    points = await eventually(
        lambda: get(server, "/memory/scroll", collection="verbatim_archive").json()["points"]
    )
    session_key = points[0]["payload"]["sessionKey"]
    assert session_key.startswith("static:alice:.once-")
    assert get(server, "/conversations").json()["conversations"] == []
    one_off = session_key.removeprefix("static:alice:")
    assert get(server, "/conversation", id=one_off).status_code == 400
    refused = httpx.post(
        server.url + "/turn", headers=ALICE, json={"text": "again", "conversationId": one_off}
    )
    assert refused.status_code == 400


async def test_a_fact_listed_twice_in_one_capture_is_stored_once(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    server = make_server({"memory": store_factory()}, SESSION_CAPTURE_MESSAGE_THRESHOLD="2")
    twice = [
        {"topic": "Pet", "value": "A cat named Tom"},
        {"topic": "pet ", "value": "a cat  named tom"},
        {"topic": "city", "value": "Lisbon"},
        {"topic": "pet", "value": "A cat named Tom"},
    ]

    def responder(request: dict[str, Any]) -> ChatScript:
        if request.get("stream") is False:
            return ChatScript(content=[json.dumps({"summary": "Pets.", "facts": twice})])
        return ChatScript.words("ok")

    ollama.responder = responder
    got = await post_turn(server, {"text": "my cat Tom", "conversationId": "c1"}, ALICE)
    assert got.of("tool_finish")[-1]["outcome"] == "success"
    await eventually(
        lambda: (
            len(get(server, "/memory/scroll", collection="semantic_facts").json()["points"]) >= 2
        )
    )
    await asyncio.sleep(0.5)  # room for a late duplicate to land, were there one
    points = get(server, "/memory/scroll", collection="semantic_facts").json()["points"]
    stored = sorted((p["payload"]["topic"], p["payload"]["value"]) for p in points)
    assert stored == [("city", "Lisbon"), ("pet", "A cat named Tom")]


async def test_facts_consolidate_into_an_inferred_note_only_when_a_value_dominates(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    server = make_server({"memory": store_factory()}, SESSION_CAPTURE_MESSAGE_THRESHOLD="2")
    values = iter(["tea", "coffee", "coffee", "tea"])

    def responder(request: dict[str, Any]) -> ChatScript:
        if request.get("stream") is False:
            fact = {"topic": "Morning drink", "value": next(values)}
            return ChatScript(content=[json.dumps({"summary": "Drinks.", "facts": [fact]})])
        return ChatScript.words("ok")

    ollama.responder = responder

    def note() -> str:
        read = httpx.get(
            server.url + "/wiki/read",
            headers=ALICE,
            params={"path": "personal/inferred/morning-drink.md"},
        )
        return str(read.json().get("content", ""))

    def facts() -> int:
        return len(get(server, "/memory/scroll", collection="semantic_facts").json()["points"])

    for turn_number in range(1, 5):
        await post_turn(server, {"text": f"turn {turn_number}", "conversationId": "c1"}, ALICE)
        await eventually(lambda n=turn_number: facts() == n)
        if turn_number == 1:
            assert "derived_from: 1\n---\ntea" in note()  # a first value makes the note
        if turn_number == 2:
            assert "tea" in note()  # coffee 1 against the note's 1: a tie keeps it
        if turn_number == 3:
            assert "derived_from: 2\n---\ncoffee" in note()  # coffee 2 of the last 3 wins
    assert "coffee" in note()  # tea, coffee, coffee: coffee still dominates
    files = httpx.get(server.url + "/wiki/list", headers=BOB).json()["files"]
    assert "personal/inferred/morning-drink.md" not in files


def echo_or_summary(request: dict[str, Any]) -> ChatScript:
    """Streams echo the question (so an answer names its question); summaries are JSON."""
    if request.get("stream") is False:
        return summary_responder(request)
    return ChatScript.words(f"answer to {request['messages'][-1]['content'].rsplit('] ', 1)[-1]}")


def exchanges(said: list[tuple[str, str]]) -> list[str]:
    """The questions of a transcript that alternates question and answer; fails otherwise."""
    questions = []
    for (role, question), (answer_role, answer) in zip(said[::2], said[1::2], strict=True):
        assert (role, answer_role) == ("user", "assistant"), said
        assert answer == f"answer to {question}", said
        questions.append(question)
    return questions


async def test_concurrent_turns_on_one_conversation_archive_each_exchange_as_a_pair_in_order(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    # Adversarial review: the question was stamped on arrival and the answer at its end,
    # so thirty concurrent turns read back as thirty questions, then thirty answers.
    server = make_server(
        {"memory": store_factory()},
        MERCURY_RATE_LIMIT_PER_USER="100",
        SESSION_CAPTURE_MESSAGE_THRESHOLD="1000",
        SESSION_IDLE_TIMEOUT_MS="1000",
        SESSION_IDLE_CHECK_INTERVAL_MS="200",
    )
    ollama.responder = echo_or_summary
    questions = [f"q{i:02d}" for i in range(30)]
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        with anyio.fail_after(60):
            got = await asyncio.gather(
                *(turn(client, {"text": q, "conversationId": "busy"}, ALICE) for q in questions)
            )
    assert all(received.final["text"].startswith("answer to q") for received in got)
    # The order the turns ran in: the order the model was asked.
    ran = [r["messages"][-1]["content"].rsplit("] ", 1)[-1] for r in ollama.requests]
    assert sorted(ran) == questions
    transcript = await eventually(
        lambda: len(said := messages(server, "busy")) == 60 and said, timeout=20
    )
    assert exchanges([(m["role"], m["content"]) for m in transcript]) == ran
    # Rebuilt from the archive once the idle session is freed: the same pairs, same order.
    manager = server.services.manager
    await eventually(lambda: "static:alice:busy" not in manager.sessions, timeout=20)
    await post_turn(server, {"text": "q30", "conversationId": "busy"}, ALICE)
    history = [
        (m["role"], m["content"].rsplit("] ", 1)[-1])
        for m in ollama.requests[-1]["messages"]
        if m["role"] in ("user", "assistant")
    ]
    assert history[-1] == ("user", "q30")
    assert exchanges(history[:-1]) == ran


async def test_a_long_answer_is_streamed_answered_archived_and_remembered_whole(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    # The answer's pieces are joined as they pile up (core/engine/sessions.py _JOIN_PARTS): across
    # many model reads, nothing is lost, doubled or reordered.
    server = make_server({"memory": store_factory()})
    words = [f"w{i} " for i in range(1000)]
    expected = "".join(words)
    ollama.enqueue(ChatScript(content=words, coalesce=7), ChatScript.words("ok"))
    got = await post_turn(server, {"text": "a long one", "conversationId": "long1"}, ALICE)
    assert got.text == expected and got.final == {"text": expected}
    archived = await eventually(lambda: len(said := messages(server, "long1")) == 2 and said)
    assert archived[1]["content"] == expected
    await post_turn(server, {"text": "and then", "conversationId": "long1"}, ALICE)
    sent = [m["content"] for m in ollama.requests[-1]["messages"] if m["role"] == "assistant"]
    assert sent == [expected]


async def test_a_turn_left_mid_answer_keeps_its_pair_with_the_answer_marked_interrupted(
    make_server: Callable[..., RunningServer], store_factory: Factory, ollama: OllamaStandIn
) -> None:
    server = make_server(
        {"memory": store_factory()},
        SESSION_IDLE_TIMEOUT_MS="1000",
        SESSION_IDLE_CHECK_INTERVAL_MS="200",
    )
    ollama.enqueue(ChatScript.words("one two three four five six", delay_s=0.3, thinking=""))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        with anyio.fail_after(30):
            body = {"text": "count for me", "conversationId": "cut"}
            async with aconnect_sse(client, "POST", "/turn", json=body, headers=ALICE) as source:
                async for event in source.aiter_sse():
                    if event.event == "text":
                        break  # the person leaves after the first words
    ollama.wait_for_closed(1, timeout=10)
    transcript = await eventually(lambda: len(said := messages(server, "cut")) == 2 and said)
    assert [m["role"] for m in transcript] == ["user", "assistant"]
    assert transcript[1]["interrupted"] is True
    assert "one" in transcript[1]["content"] and "six" not in transcript[1]["content"]
    assert "interrupted" not in transcript[0]

    def history() -> list[tuple[str, str]]:
        return [
            (m["role"], m["content"])
            for m in ollama.requests[-1]["messages"]
            if m["role"] in ("user", "assistant")
        ]

    # The live history and the one rebuilt from the archive read the same.
    await post_turn(server, {"text": "go on", "conversationId": "cut"}, ALICE)
    live = history()
    assert [role for role, _ in live] == ["user", "assistant", "user"]
    assert live[1][1].endswith(INTERRUPTED_NOTE)
    manager = server.services.manager
    await eventually(lambda: "static:alice:cut" not in manager.sessions, timeout=20)
    await post_turn(server, {"text": "again", "conversationId": "cut"}, ALICE)
    rebuilt = history()
    assert [role for role, _ in rebuilt] == ["user", "assistant", "user", "assistant", "user"]
    assert rebuilt[1][1] == live[1][1]
    assert "interrupted" not in json.dumps(messages(server, "cut")[3])
