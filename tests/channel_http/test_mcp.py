"""MCP servers' tools through real turns: confirmations, questions, failures, who sees what.

Real peers only: an MCP server written with the ``mcp`` SDK's own server side, served over
streamable HTTP by uvicorn on a loopback port (both protocol revisions: the client speaks
2026-07-28 by default and the 2025-11-25 handshake with ``protocol: legacy``) and in
process; the Ollama stand-in as the model; Mercury on uvicorn.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from mcp.server.mcpserver import MCPServer
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.subscriptions import ToolsListChanged

from channel_http.cli.command import main
from core.config.settings import Settings
from tests.conftest import ALICE, BOB, TOKENS
from tests.support.contract import check_response
from tests.support.mcp_tracker import McpHttp, Tracker, mcp_server
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer, serve
from tests.support.sse import Received, turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def tracker() -> Tracker:
    return Tracker()


@pytest.fixture(scope="module")
def mcp_http(tracker: Tracker) -> Iterator[McpHttp]:
    http = McpHttp(mcp_server(tracker))
    http.start()
    yield http
    http.stop()


def config_file(folder: Path, url: str) -> Path:
    servers = {
        "trk": {"url": url, "title": "Tracker", "trusted": True},
        "untr": {"url": url, "title": "Untrusted", "trusted": False, "tools": {"allow": ["get_*"]}},
        "old": {
            "url": url,
            "title": "Old tracker",
            "trusted": True,
            "protocol": "legacy",
            "tools": {"allow": ["get_*", "delete_*", "archive_*", "file_*"]},
            "confirm": {"get_*": "always", "delete_*": "never"},
        },
        "adm": {"url": url, "roles": ["admin"], "tools": {"allow": ["get_*"]}},
        "room": {"url": url, "spaces": ["slack:C1"], "tools": {"allow": ["get_*"]}},
        "local": {"command": "unused-in-process", "trusted": True, "tools": {"allow": ["get_*"]}},
    }
    path = folder / "mercury.yaml"
    path.write_text(yaml.safe_dump({"mcp": {"servers": servers}}))
    return path


@pytest.fixture
def mercury(
    tmp_path: Path,
    make_settings: Callable[..., Settings],
    mcp_http: McpHttp,
    tracker: Tracker,
) -> Iterator[RunningServer]:
    tracker.calls.clear()
    settings = make_settings(MERCURY_CONFIG_FILE=str(config_file(tmp_path, mcp_http.url)))
    with serve(settings, mcp_targets={"local": mcp_server(tracker)}) as running:
        yield running


def call(name: str, **arguments: Any) -> ChatScript:
    return ChatScript(tool_calls=[{"name": name, "arguments": arguments}])


async def ask(client: httpx.AsyncClient, text: str, headers: dict[str, str] = ALICE) -> Received:
    return await turn(client, {"text": text, "conversationId": "c1"}, headers)


def offered(ollama: OllamaStandIn) -> set[str]:
    return {tool["function"]["name"] for tool in ollama.requests[-1].get("tools") or []}


# --- tests -----------------------------------------------------------------------------


async def test_a_destructive_tool_is_staged_and_reaches_the_server_only_once_confirmed(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    ollama.enqueue(call("trk_delete_issue", key="TRK-1"), ChatScript.words("Confirm it."))
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        received = await ask(client, "delete TRK-1")
        (tool,) = received.of("tool")
        assert "Tracker: Delete an issue" in tool["label"]
        (pending,) = received.of("pending")
        assert "Tracker: Delete an issue" in pending["command"]
        assert "TRK-1" in pending["command"]
        assert [c["label"] for c in pending["choices"]] == ["Confirm", "Cancel"]
        assert tracker.calls == []  # nothing reached the server before confirming

        confirm = next(c for c in pending["choices"] if c["label"] == "Confirm")
        answer = await client.post(
            "/confirm", json={"token": confirm["token"], "conversationId": "c1"}, headers=ALICE
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["resume"] is True
        assert tracker.calls == [("delete_issue", {"key": "TRK-1"})]

        ollama.enqueue(ChatScript.words("Deleted."))
        resumed = await turn(client, {"resume": True, "conversationId": "c1"}, ALICE)
        assert resumed.final["text"] == "Deleted."
        heard = ollama.requests[-1]["messages"]
        assert any("deleted TRK-1" in (m.get("content") or "") for m in heard)


async def test_cancelling_a_staged_call_sends_nothing(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    ollama.enqueue(call("trk_delete_issue", key="TRK-2"), ChatScript.words("Confirm it."))
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        (pending,) = (await ask(client, "delete TRK-2")).of("pending")
        cancel = next(c for c in pending["choices"] if c["label"] == "Cancel")
        answer = await client.post(
            "/confirm", json={"token": cancel["token"], "conversationId": "c1"}, headers=ALICE
        )
        assert answer.status_code == 200, answer.text
    assert tracker.calls == []


async def test_a_read_only_tool_runs_at_once_on_a_trusted_server_and_is_staged_on_an_untrusted(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    """And the calls are counted per server and outcome, no person or argument in a label."""
    ollama.enqueue(
        call("trk_get_issue", key="TRK-3"),
        ChatScript.words("Here."),
        call("untr_get_issue", key="TRK-4"),
        ChatScript.words("Confirm."),
    )
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        trusted = await ask(client, "show TRK-3")
        assert trusted.of("pending") == []
        assert [f["outcome"] for f in trusted.of("tool_finish")] == ["success"]
        assert tracker.calls == [("get_issue", {"key": "TRK-3"})]
        untrusted = await ask(client, "show TRK-4")
        assert len(untrusted.of("pending")) == 1
        assert tracker.calls == [("get_issue", {"key": "TRK-3"})]
        metrics = (await client.get("/metrics", headers=ALICE)).text
    assert 'mercury_mcp_calls_total{outcome="success",server="trk"} 1.0' in metrics
    assert "mercury_mcp_call_seconds_count" in metrics
    assert "TRK-3" not in metrics and "alice" not in metrics


async def test_the_rules_of_the_configuration_beat_the_annotations_on_the_2025_11_25_revision(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    ollama.enqueue(
        call("old_delete_issue", key="TRK-5"),
        ChatScript.words("Done."),
        call("old_get_issue", key="TRK-6"),
        ChatScript.words("Confirm."),
    )
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        never = await ask(client, "delete TRK-5")
        assert never.of("pending") == []
        assert tracker.calls == [("delete_issue", {"key": "TRK-5"})]
        always = await ask(client, "show TRK-6")
        assert len(always.of("pending")) == 1
    health = httpx.get(f"{mercury.url}/health", headers=ALICE).json()
    old = next(s for s in health["mcpServers"] if s["name"] == "old")
    assert old["protocol"] == "2025-11-25" and old["status"] == "up"
    trk = next(s for s in health["mcpServers"] if s["name"] == "trk")
    assert trk["protocol"] == "2026-07-28"


async def test_a_form_question_becomes_choices_and_the_answer_goes_back_through_confirm(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    ollama.enqueue(call("trk_archive_issue", key="TRK-7"), ChatScript.words("Answer it."))
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        (pending,) = (await ask(client, "archive TRK-7")).of("pending")
        assert "Archive TRK-7 for good?" in pending["command"]
        labels = [c["label"] for c in pending["choices"]]
        assert labels == ["Yes", "No", "Decline", "Cancel"]
        assert tracker.calls == []
        yes = pending["choices"][0]
        answer = await client.post(
            "/confirm", json={"token": yes["token"], "conversationId": "c1"}, headers=ALICE
        )
        assert answer.status_code == 200, answer.text
        assert tracker.calls == [("archive_issue", {"key": "TRK-7", "confirm": True})]
        # Single use: the same token again finds nothing.
        again = await client.post(
            "/confirm", json={"token": yes["token"], "conversationId": "c1"}, headers=ALICE
        )
        assert again.status_code != 200 or again.json().get("resume") is not True
    assert tracker.calls == [("archive_issue", {"key": "TRK-7", "confirm": True})]


async def test_an_in_process_server_is_offered_like_the_others(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    ollama.enqueue(call("local_get_issue", key="TRK-8"), ChatScript.words("Here."))
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        received = await ask(client, "show TRK-8")
    assert received.of("pending") == []
    assert tracker.calls == [("get_issue", {"key": "TRK-8"})]


async def test_a_role_or_a_space_that_may_not_use_a_server_never_sees_its_tools(
    mercury: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Hi."), ChatScript.words("Hi."))
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        await ask(client, "hello")
        seen = offered(ollama)
        assert "trk_get_issue" in seen and "local_get_issue" in seen
        assert not any(name.startswith(("adm_", "room_")) for name in seen)
        # The untrusted server's allow list keeps only get_*.
        assert "untr_get_issue" in seen and "untr_delete_issue" not in seen
        await ask(client, "hello", BOB)
        assert not any(name.startswith(("adm_", "room_")) for name in offered(ollama))


async def test_the_tool_list_is_not_asked_again_once_warm(
    mercury: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Hi."), ChatScript.words("Hi."), ChatScript.words("Hi."))
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        await ask(client, "hello")
        mcp = mercury.services.mcp
        before = sum(c.list_calls for c in mcp._shared.values())
        await ask(client, "hello")
        await ask(client, "hello")
        assert sum(c.list_calls for c in mcp._shared.values()) == before


async def test_a_slow_call_is_cancelled_when_the_client_goes_away(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    tracker.slow_started.clear()
    tracker.slow_cancelled.clear()
    ollama.enqueue(call("trk_slow", seconds=30))
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:

        async def start() -> None:
            await ask(client, "wait")

        task = asyncio.create_task(start())
        assert await asyncio.to_thread(tracker.slow_started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert await asyncio.to_thread(tracker.slow_cancelled.wait, 10)


async def test_a_server_that_dies_mid_call_gives_a_clear_error_and_the_next_turn_works(
    tmp_path: Path,
    make_settings: Callable[..., Settings],
    ollama: OllamaStandIn,
) -> None:
    own = Tracker()
    http = McpHttp(mcp_server(own))
    http.start()
    settings = make_settings(MERCURY_CONFIG_FILE=str(config_file(tmp_path, http.url)))
    try:
        with serve(settings) as running:
            ollama.enqueue(call("trk_slow", seconds=20), ChatScript.words("It failed."))
            async with httpx.AsyncClient(base_url=running.url, timeout=30) as client:
                waiting = asyncio.create_task(ask(client, "wait"))
                assert await asyncio.to_thread(own.slow_started.wait, 10)
                http.stop()
                received = await asyncio.wait_for(waiting, 20)
                assert received.final["text"] == "It failed."
                assert [f["outcome"] for f in received.of("tool_finish")] == ["failed"]
                told = ollama.requests[-1]["messages"][-1]["content"]
                assert any(
                    clear in told
                    for clear in ("unknown whether", "can't be reached", "unavailable")
                ), told

                # While it is down: clear errors, and no storm of connection attempts.
                for _ in range(5):
                    ollama.enqueue(call("trk_get_issue", key="X"), ChatScript.words("Down."))
                    down = await ask(client, "show X")
                    assert [f["outcome"] for f in down.of("tool_finish")] == ["failed"]
                    # Its last list is still offered: the tool answers a clear error.
                    assert "trk_get_issue" in offered(ollama)
                    told = ollama.requests[-1]["messages"][-1]["content"]
                    assert "The MCP server Tracker" in told, told
                connection = running.services.mcp._shared["trk"]
                assert connection._opened <= 4
                ollama.models = ["llama3.2"]  # the model is there: only the MCP server is down
                try:
                    ready = await client.get("/readyz")
                finally:
                    ollama.models = None
                assert ready.status_code == 200, ready.text  # never failed by one server
                health = (await client.get("/health", headers=ALICE)).json()
                trk = next(s for s in health["mcpServers"] if s["name"] == "trk")
                assert trk["status"] == "down" and trk["error"]

                http.start()  # the same port again
                await asyncio.sleep(max(0.0, connection._retry_at - connection.clock()) + 0.1)
                ollama.enqueue(call("trk_get_issue", key="TRK-9"), ChatScript.words("Back."))
                back = await ask(client, "show TRK-9")
                assert [f["outcome"] for f in back.of("tool_finish")] == ["success"]
                assert ("get_issue", {"key": "TRK-9"}) in own.calls
    finally:
        http.stop()


async def test_a_url_question_shows_a_link_naming_the_host_and_done_retries_the_call(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    ollama.enqueue(call("trk_sign_document", doc="D-1"), ChatScript.words("Sign it."))
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        received = await ask(client, "sign D-1")
        (login,) = received.of("login")
        assert login["url"] == "https://sign.example.test/sign?doc=D-1"
        assert "sign.example.test" in login["service"]
        (pending,) = received.of("pending")
        assert [c["label"] for c in pending["choices"]] == ["Done", "Decline", "Cancel"]
        assert tracker.calls == []
        done = pending["choices"][0]
        answer = await client.post(
            "/confirm", json={"token": done["token"], "conversationId": "c1"}, headers=ALICE
        )
        assert answer.status_code == 200, answer.text
    assert tracker.calls == [("sign_document", {"doc": "D-1", "state": "doc=D-1"})]


async def test_past_the_tool_budget_a_search_loads_the_schemas_it_finds(
    tmp_path: Path,
    make_settings: Callable[..., Settings],
    mcp_http: McpHttp,
    ollama: OllamaStandIn,
    tracker: Tracker,
) -> None:
    tracker.calls.clear()
    settings = make_settings(
        MERCURY_CONFIG_FILE=str(config_file(tmp_path, mcp_http.url)),
        MERCURY_MCP_TOOL_BUDGET="5",
    )
    with serve(settings, mcp_targets={"local": mcp_server(tracker)}) as running:
        ollama.enqueue(
            call("search_tools", query="delete an issue"),
            call("old_delete_issue", key="TRK-10"),
            ChatScript.words("Deleted."),
        )
        async with httpx.AsyncClient(base_url=running.url, timeout=30) as client:
            received = await ask(client, "delete TRK-10")
        first, second, _ = ollama.requests[-3:]
        listed = {tool["function"]["name"] for tool in first["tools"]}
        assert "search_tools" in listed
        assert not any(name.startswith(("trk_", "old_", "untr_", "local_")) for name in listed)
        loaded = {tool["function"]["name"] for tool in second["tools"]} - listed
        assert "old_delete_issue" in loaded and "trk_delete_issue" in loaded
        assert received.final["text"] == "Deleted."
    assert tracker.calls == [("delete_issue", {"key": "TRK-10"})]


async def test_a_question_asked_after_the_person_confirmed_is_shown_by_the_resuming_turn(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    ollama.enqueue(call("trk_purge_issue", key="TRK-11"), ChatScript.words("Confirm it."))
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:

        async def confirm(token: str) -> None:
            answer = await client.post(
                "/confirm", json={"token": token, "conversationId": "c1"}, headers=ALICE
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["resume"] is True

        (pending,) = (await ask(client, "purge TRK-11")).of("pending")
        await confirm(pending["choices"][0]["token"])  # Confirm
        assert tracker.calls == []  # the server asked before doing anything

        ollama.enqueue(ChatScript.words("It asks whether to archive."))
        resumed = await turn(client, {"resume": True, "conversationId": "c1"}, ALICE)
        (question,) = resumed.of("pending")
        assert "Archive TRK-11 for good?" in question["command"]
        assert [c["label"] for c in question["choices"]] == ["Yes", "No", "Decline", "Cancel"]

        await confirm(question["choices"][1]["token"])  # No
        assert tracker.calls == [("purge_issue", {"key": "TRK-11", "confirm": False})]
        ollama.enqueue(ChatScript.words("Kept."))
        done = await turn(client, {"resume": True, "conversationId": "c1"}, ALICE)
        assert done.of("pending") == []
        heard = ollama.requests[-1]["messages"]
        assert any("kept TRK-11" in (m.get("content") or "") for m in heard)


async def test_on_2025_11_25_a_question_asked_mid_call_waits_for_the_persons_choice(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    ollama.enqueue(call("old_archive_issue", key="TRK-12"), ChatScript.words("Answer it."))
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        received = await ask(client, "archive TRK-12")
        (pending,) = received.of("pending")
        assert "Archive TRK-12 for good?" in pending["command"]
        assert [c["label"] for c in pending["choices"]] == ["Yes", "No", "Decline", "Cancel"]
        assert tracker.calls == []  # the call is open on the server, waiting
        answer = await client.post(
            "/confirm",
            json={"token": pending["choices"][0]["token"], "conversationId": "c1"},
            headers=ALICE,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["resume"] is True
    assert tracker.calls == [("archive_issue", {"key": "TRK-12", "confirm": True})]


def heard(ollama: OllamaStandIn) -> str:
    """Everything the model was sent in its last request, as one text."""
    return "\n".join(m.get("content") or "" for m in ollama.requests[-1]["messages"])


async def test_a_free_text_form_is_asked_in_the_conversation_and_the_next_message_answers(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    ollama.enqueue(
        call("trk_file_issue", project="TRK"),
        ChatScript.words("What should its title be, and how many hours?"),
        ChatScript.words("Filed it."),
    )
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        asked = await ask(client, "file an issue in TRK")
        (pending,) = asked.of("pending")
        assert "Describe the new issue for TRK." in pending["command"]
        assert "Title, Hours" in pending["command"]
        assert [c["label"] for c in pending["choices"]] == ["Decline", "Cancel"]
        assert asked.final["text"] == "What should its title be, and how many hours?"
        # The server's words reach the model as data in their elements, escaped.
        told = heard(ollama)
        assert "<question>Describe the new issue for TRK.</question>" in told
        assert '<field name="hours" type="integer" required="yes">' in told
        assert tracker.calls == []
        requests = len(ollama.requests)

        # A bad answer: a sentence naming the field and the question again; no model, no call.
        bad = await ask(client, "Title: Login page is blank\nHours: 99")
        assert "Hours must be at most 40." in bad.final["text"]
        (again,) = bad.of("pending")
        assert [c["label"] for c in again["choices"]] == ["Decline", "Cancel"]
        assert again["choices"][1]["token"] != pending["choices"][1]["token"]
        assert len(ollama.requests) == requests and tracker.calls == []

        good = await ask(client, "Title: Login page is blank\nHours: 3")
        assert tracker.calls == [
            ("file_issue", {"project": "TRK", "title": "Login page is blank", "hours": 3})
        ]
        assert good.final["text"] == "Filed it."
        told = heard(ollama)
        assert "filed TRK-1: Login page is blank (3 h)" in told
        # The answer was not also a turn of its own: the model never read it as the
        # person's words.
        users = [m["content"] for m in ollama.requests[-1]["messages"] if m["role"] == "user"]
        assert not any("Hours: 3" in content for content in users)
        # Single use: the next message is an ordinary turn again.
        ollama.enqueue(ChatScript.words("Anything else?"))
        after = await ask(client, "thanks")
        assert after.final["text"] == "Anything else?"
        assert len(tracker.calls) == 1


async def test_on_chat_the_next_message_answers_the_question_too(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    ollama.enqueue(call("trk_file_issue", project="CHT"), ChatScript.words("Title and hours?"))
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        body = {"text": "file an issue in CHT", "conversationId": "chat1"}
        staged = await client.post("/chat", json=body, headers=ALICE)
        check_response(staged)
        assert "Describe the new issue for CHT." in staged.json()["pending"]["command"]
        bad = await client.post(
            "/chat", json={"text": "Chat form\n41", "conversationId": "chat1"}, headers=ALICE
        )
        check_response(bad)
        assert "Hours must be at most 40." in bad.json()["reply"]
        assert bad.json()["pending"]["choices"][1]["label"] == "Cancel"
        ollama.enqueue(ChatScript.words("Filed through chat."))
        done = await client.post(
            "/chat", json={"text": "Chat form\n5", "conversationId": "chat1"}, headers=ALICE
        )
        check_response(done)
        assert done.json()["reply"] == "Filed through chat."
    assert tracker.calls == [("file_issue", {"project": "CHT", "title": "Chat form", "hours": 5})]


async def test_cancel_typed_as_the_answer_cancels_the_question(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    ollama.enqueue(
        call("trk_file_issue", project="TRK"),
        ChatScript.words("Title and hours?"),
        ChatScript.words("Cancelled."),
    )
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        (pending,) = (await ask(client, "file an issue in TRK")).of("pending")
        cancelled = await ask(client, "cancel")
        assert cancelled.final["text"] == "Cancelled."
        assert cancelled.of("pending") == []
        assert tracker.calls == []
        assert "Answered by the person's message" in heard(ollama)
        # Its buttons died with it.
        stale = await client.post(
            "/confirm",
            json={"token": pending["choices"][0]["token"], "conversationId": "c1"},
            headers=ALICE,
        )
        assert stale.status_code != 200 or stale.json().get("resolved") is not True


async def test_on_2025_11_25_a_free_text_question_mid_call_takes_the_next_message(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    ollama.enqueue(
        call("old_file_issue", project="OLD"), ChatScript.words("Title and hours, please.")
    )
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        (pending,) = (await ask(client, "file an issue in OLD")).of("pending")
        assert "Describe the new issue for OLD." in pending["command"]
        assert tracker.calls == []  # the call is open on the server, waiting
        # Not a number: asked again while the server keeps waiting.
        bad = await ask(client, "Printer on fire\nabout two")
        assert "Hours must be a number." in bad.final["text"]
        assert tracker.calls == []
        # The lines in the fields' order, with the other person's message in between
        # answering nothing of Alice's question.
        ollama.enqueue(ChatScript.words("Hello Bob."))
        assert (await ask(client, "hello", BOB)).final["text"] == "Hello Bob."
        ollama.enqueue(ChatScript.words("Filed."))
        done = await ask(client, "Printer on fire\n2")
        assert done.final["text"] == "Filed."
    assert tracker.calls == [
        ("file_issue", {"project": "OLD", "title": "Printer on fire", "hours": 2})
    ]


def test_check_config_says_which_servers_answer_and_which_secret_is_missing(
    tmp_path: Path,
    mcp_http: McpHttp,
    ollama: OllamaStandIn,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in list(os.environ):
        if name.startswith(("MERCURY_", "OLLAMA_", "AUTH_", "HTTP_SURFACE_", "QDRANT_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OLLAMA_HOST", ollama.url)
    monkeypatch.setenv("MERCURY_MEMORY_STORE", "off")
    monkeypatch.setenv("MERCURY_AUTH", "static")
    monkeypatch.setenv("AUTH_STATIC_TOKENS", json.dumps(TOKENS))
    servers = {
        "trk": {"url": mcp_http.url},
        "gone": {"url": "http://127.0.0.1:9/mcp", "connect_timeout": 3},
        "tok": {"url": mcp_http.url, "auth": "bearer", "bearer_env": "TOK_MCP_TOKEN"},
    }
    path = tmp_path / "mercury.yaml"
    path.write_text(yaml.safe_dump({"mcp": {"servers": servers}}))
    ollama.models = ["llama3.2"]
    try:
        assert main(["check-config", "--config", str(path)]) == 1
    finally:
        ollama.models = None
    lines = capsys.readouterr().out.splitlines()
    assert "Note: The MCP server 'trk' answers." in lines
    problems = [line for line in lines if line.startswith("Problem:")]
    assert len(problems) == 2, problems
    assert "'tok' reads its bearer token from TOK_MCP_TOKEN, which is not set" in problems[0]
    assert "The MCP server gone can't be reached" in problems[1]


async def test_a_changed_tool_list_is_read_again_on_the_servers_notice_and_only_then(
    tmp_path: Path, make_settings: Callable[..., Settings], ollama: OllamaStandIn
) -> None:
    bus = InMemorySubscriptionBus()
    server = MCPServer("changing", subscriptions=bus)

    @server.tool()
    def first() -> str:
        return "1"

    def second() -> str:
        return "2"

    path = tmp_path / "mercury.yaml"
    path.write_text(yaml.safe_dump({"mcp": {"servers": {"lc": {"command": "in-process"}}}}))
    settings = make_settings(MERCURY_CONFIG_FILE=str(path))
    with serve(settings, mcp_targets={"lc": server}) as running:
        ollama.enqueue(*(ChatScript.words("Hi.") for _ in range(3)))
        async with httpx.AsyncClient(base_url=running.url, timeout=30) as client:
            await ask(client, "hello")
            assert {n for n in offered(ollama) if n.startswith("lc_")} == {"lc_first"}
            await ask(client, "hello")
            connection = running.services.mcp._shared["lc"]
            listed = connection.list_calls

            async def change() -> None:
                server.add_tool(second)
                await bus.publish(ToolsListChanged())

            running.call(change())
            await asyncio.sleep(0.3)
            await ask(client, "hello")
            assert {n for n in offered(ollama) if n.startswith("lc_")} == {"lc_first", "lc_second"}
            assert connection.list_calls == listed + 1


async def test_the_model_cannot_pass_what_only_a_staging_may(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    ollama.enqueue(
        call("trk_archive_issue", key="TRK-13", __mcp_input={"open": "x", "field": "confirm"}),
        ChatScript.words("No."),
    )
    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        received = await ask(client, "archive TRK-13")
    assert [f["outcome"] for f in received.of("tool_finish")] == ["failed"]
    assert received.of("pending") == []
    assert "reserved key" in ollama.requests[-1]["messages"][-1]["content"]
    assert tracker.calls == []


async def test_on_ui_stream_a_staged_call_is_an_approval_that_cancels_when_denied(
    mercury: RunningServer, ollama: OllamaStandIn, tracker: Tracker
) -> None:
    """useChat's approval answers an MCP call's Confirm and Cancel, in any language."""
    from httpx_sse import aconnect_sse

    async def stream(client: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
        chunks: list[dict[str, Any]] = []
        headers = {**ALICE, "accept-language": "it"}
        async with aconnect_sse(client, "POST", "/ui-stream", json=body, headers=headers) as sse:
            assert sse.response.status_code == 200
            async for event in sse.aiter_sse():
                if event.data != "[DONE]":
                    chunks.append(json.loads(event.data))
        return chunks

    def user(text: str) -> dict[str, Any]:
        return {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}

    async with httpx.AsyncClient(base_url=mercury.url, timeout=30) as client:
        for approved, calls in ((False, []), (True, [("delete_issue", {"key": "TRK-9"})])):
            tracker.calls.clear()
            ollama.enqueue(call("trk_delete_issue", key="TRK-9"), ChatScript.words("Confirm."))
            chat = f"approve-{approved}"
            first = await stream(client, {"id": chat, "messages": [user("delete TRK-9")]})
            (request,) = [c for c in first if c["type"] == "tool-approval-request"]
            yes, _, no = request["approvalId"].partition(".")
            assert yes and no  # a Confirm and a Cancel (Conferma, Annulla), one approval
            assert tracker.calls == []
            answered = {
                "id": "a1",
                "role": "assistant",
                "parts": [
                    {
                        "type": "tool-trk_delete_issue",
                        "toolCallId": request["toolCallId"],
                        "state": "approval-responded",
                        "approval": {"id": request["approvalId"], "approved": approved},
                    }
                ],
            }
            if approved:  # the model hears the result and answers; a denial asks nothing
                ollama.enqueue(ChatScript.words("Done."))
            body = {"id": chat, "messages": [user("delete TRK-9"), answered]}
            second = await stream(client, body)
            kinds = [c["type"] for c in second]
            assert ("tool-output-available" in kinds) is approved
            assert ("tool-output-denied" in kinds) is not approved
            assert tracker.calls == calls
            # Either way the staging is settled: its tokens are gone.
            again = await client.post(
                "/confirm", json={"token": yes, "conversationId": chat}, headers=ALICE
            )
            assert again.status_code == 200 and again.json()["resolved"] is False
