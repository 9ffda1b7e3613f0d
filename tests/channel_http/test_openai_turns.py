"""POST /turn on the OpenAI-protocol adapter, against its stand-in, read as a client reads it."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from core.config.settings import ConfigurationError, load_settings
from core.memory.embedder import OpenAIEmbedder
from core.model import ChatMessage, OpenAIModel
from tests.conftest import ALICE
from tests.support.ollama_standin import embed_text
from tests.support.openai_standin import CompletionScript, OpenAIStandIn
from tests.support.server import RunningServer
from tests.support.sse import Received, turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

MODEL = "qwen3-8b"


@pytest.fixture(scope="module")
def openai_session() -> Iterator[OpenAIStandIn]:
    with OpenAIStandIn(models=[MODEL, "embedder"]) as standin:
        yield standin


@pytest.fixture
def openai(openai_session: OpenAIStandIn) -> Iterator[OpenAIStandIn]:
    openai_session.reset()
    yield openai_session
    openai_session.reset()


def openai_env(standin: OpenAIStandIn) -> dict[str, str]:
    return {
        "MERCURY_MODEL_PROVIDER": "openai",
        "OPENAI_BASE_URL": standin.base_url,
        "OPENAI_MODEL": MODEL,
    }


@pytest.fixture
def server(make_server: Callable[..., RunningServer], openai: OpenAIStandIn) -> RunningServer:
    return make_server(**openai_env(openai))


async def post(server: RunningServer, body: dict[str, Any]) -> Received:
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(20):
            return await turn(client, body, ALICE)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_then_text_then_a_final_equal_to_the_text(
    server: RunningServer, openai: OpenAIStandIn, field: Any
) -> None:
    openai.enqueue(
        CompletionScript.words(
            "The answer is forty two.", thinking="Let me think hard.", reasoning_field=field
        )
    )
    got = await post(server, {"text": "Question?", "conversationId": "c1"})
    names = got.names()
    first_text = names.index("text")
    assert set(names[: first_text - 1]) == {"reasoning"}
    assert names[first_text - 1] == "reasoning_end"
    assert names[-1] == "final" and names.count("final") == 1
    assert "".join(r["chunk"] for r in got.of("reasoning")) == "Let me think hard."
    assert got.text == "The answer is forty two."
    assert got.final == {"text": "The answer is forty two."}


async def test_the_request_names_the_model_streams_and_asks_for_usage(
    server: RunningServer, openai: OpenAIStandIn
) -> None:
    got = await post(server, {"text": "  keep my spaces ", "conversationId": "c1"})
    assert got.final["text"].startswith("You said:")
    request = openai.requests[-1]
    assert request["model"] == MODEL
    assert request["stream"] is True
    assert request["stream_options"] == {"include_usage": True}
    assert request["messages"][0]["role"] == "system"
    assert request["messages"][-1]["role"] == "user"
    assert request["messages"][-1]["content"].endswith("  keep my spaces ")
    assert {t["type"] for t in request["tools"]} == {"function"}


async def test_deltas_arrive_one_by_one_as_the_server_sends_them(
    server: RunningServer, openai: OpenAIStandIn
) -> None:
    openai.enqueue(CompletionScript(content=[f"w{i} " for i in range(8)], delay_s=0.15))
    got = await post(server, {"text": "Go"})
    times = [t for (name, _), t in zip(got.events, got.times, strict=True) if name == "text"]
    assert len(times) == 8
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert sum(1 for gap in gaps if gap > 0.05) >= 5
    assert got.final["text"] == "".join(f"w{i} " for i in range(8))


async def test_tool_calls_streamed_in_pieces_are_assembled_run_and_answered_by_id(
    server: RunningServer, openai: OpenAIStandIn
) -> None:
    arguments = {"path": "personal/notes/ü é.md", "content": 'ü é, a "quoted" {brace}'}
    openai.enqueue(
        CompletionScript(
            content=["Looking. "],
            tool_calls=[
                {"name": "wiki_write", "arguments": arguments},
                {"name": "wiki_list", "arguments": {}},
            ],
            tool_piece=1,  # one character an event: the JSON is cut everywhere
        ),
        CompletionScript.words("Done."),
    )
    got = await post(server, {"text": "write it", "conversationId": "t1"})
    assert [t["name"] for t in got.of("tool")] == ["wiki_write", "wiki_list"]
    assert [f["outcome"] for f in got.of("tool_finish")] == ["success", "success"]
    assert got.final == {"text": "Looking. Done."}
    second = openai.wait_for_requests(2)[1]["messages"]
    assistant = next(m for m in second if m["role"] == "assistant" and m.get("tool_calls"))
    calls = assistant["tool_calls"]
    assert [c["id"] for c in calls] == ["call_standin_0", "call_standin_1"]
    assert calls[0]["function"]["name"] == "wiki_write"
    assert json.loads(calls[0]["function"]["arguments"]) == arguments
    results = [m for m in second if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["call_standin_0", "call_standin_1"]


async def test_an_http_error_is_one_error_event_with_the_servers_message(
    server: RunningServer, openai: OpenAIStandIn
) -> None:
    openai.enqueue(CompletionScript(status=400, error="context length exceeded (9000 > 8192)"))
    got = await post(server, {"text": "hi"})
    assert got.names() == ["error"]
    message = got.of("error")[0]["message"]
    assert MODEL in message and openai.base_url in message
    assert "context length exceeded (9000 > 8192)" in message


async def test_an_unknown_model_is_an_error_event_naming_it(
    make_server: Callable[..., RunningServer], openai: OpenAIStandIn
) -> None:
    server = make_server(**{**openai_env(openai), "OPENAI_MODEL": "nope"})
    got = await post(server, {"text": "hi"})
    assert got.names() == ["error"]
    assert "nope" in got.of("error")[0]["message"]
    assert "does not exist" in got.of("error")[0]["message"]


async def test_an_unreachable_server_is_an_error_event_naming_the_model_and_where(
    make_server: Callable[..., RunningServer], openai: OpenAIStandIn
) -> None:
    server = make_server(**{**openai_env(openai), "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    got = await post(server, {"text": "hi"})
    assert got.names() == ["error"]
    assert got.of("error")[0]["message"] == (
        f"The model {MODEL} at http://127.0.0.1:9/v1 can't be reached. "
        "Check that its model server is running there."
    )


@pytest.mark.parametrize("form", ["data", "error"])
async def test_an_error_mid_stream_follows_the_text_as_one_error_event(
    server: RunningServer, openai: OpenAIStandIn, form: Any
) -> None:
    openai.enqueue(
        CompletionScript(
            content=["one ", "two ", "three "],
            error_after=3,
            error="out of memory",
            error_event=form,
        )
    )
    got = await post(server, {"text": "hi"})
    assert got.names() == ["text", "text", "error"]
    assert "out of memory" in got.of("error")[0]["message"]
    assert MODEL in got.of("error")[0]["message"]


async def test_a_malformed_chunk_is_one_error_event(
    server: RunningServer, openai: OpenAIStandIn
) -> None:
    openai.enqueue(
        CompletionScript(content=["one ", "two "], malformed_after=3)
    )  # the role event, then two texts
    got = await post(server, {"text": "hi"})
    assert got.names() == ["text", "text", "error"]
    message = got.of("error")[0]["message"]
    assert MODEL in message and openai.base_url in message


@pytest.mark.parametrize(
    "script",
    [
        CompletionScript(content=["one ", "two "], close_after=3),
        CompletionScript(content=["one ", "two "], finish=False),
    ],
    ids=["abrupt-close", "no-finish"],
)
async def test_a_stream_cut_short_is_one_error_event(
    server: RunningServer, openai: OpenAIStandIn, script: CompletionScript
) -> None:
    openai.enqueue(script)
    got = await post(server, {"text": "hi"})
    assert got.names() == ["text", "text", "error"]
    assert "stopped answering" in got.of("error")[0]["message"]


async def test_closing_the_connection_closes_the_request_upstream_within_a_second(
    server: RunningServer, openai: OpenAIStandIn
) -> None:
    openai.enqueue(CompletionScript(content=["one ", "two "], hang=True))
    async with httpx.AsyncClient(base_url=server.url) as client:
        with anyio.fail_after(20):
            async with client.stream("POST", "/turn", json={"text": "hi"}, headers=ALICE) as r:
                async for data in r.aiter_bytes():
                    if b"event: text" in data:
                        break
            left = time.monotonic()
    closed = await openai.wait_for_closed_async(1, timeout=5)
    assert closed[0] - left < 1.0


async def test_health_reports_whether_the_configured_model_server_answers(
    make_server: Callable[..., RunningServer], openai: OpenAIStandIn
) -> None:
    up = make_server(**openai_env(openai))
    down = make_server(**{**openai_env(openai), "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    async with httpx.AsyncClient() as client:
        assert (await client.get(up.url + "/health", headers=ALICE)).json()[
            "ollamaReachable"
        ] is True
        assert (await client.get(down.url + "/health", headers=ALICE)).json()[
            "ollamaReachable"
        ] is False


async def test_the_adapter_reads_usage_and_the_finish_reason(openai: OpenAIStandIn) -> None:
    openai.enqueue(CompletionScript(content=["a ", "b ", "c "], done_reason="length"))
    model = OpenAIModel(openai.base_url, MODEL)
    try:
        with anyio.fail_after(10):
            batches = [b async for b in model.chat([ChatMessage(role="user", content="x y z")])]
    finally:
        await model.close()
    assert all(batches), "the adapter hands out no empty batch"
    chunks = [chunk for batch in batches for chunk in batch]
    last = chunks[-1]
    assert last.done and last.done_reason == "length"
    assert last.prompt_eval_count == 3
    assert last.eval_count is not None and last.eval_count >= 3
    assert "".join(c.message.content for c in chunks if c.message) == "a b c "


async def test_one_connection_carries_consecutive_streams(openai: OpenAIStandIn) -> None:
    model = OpenAIModel(openai.base_url, MODEL)
    try:
        with anyio.fail_after(10):
            for _ in range(3):
                openai.enqueue(CompletionScript(content=["x"]))
                _ = [c async for c in model.chat([ChatMessage(role="user", content="hi")])]
    finally:
        await model.close()
    assert openai.connections == 1


async def test_a_summary_is_one_non_streamed_completion(openai: OpenAIStandIn) -> None:
    openai.enqueue(CompletionScript(content=["A ", "summary."]))
    model = OpenAIModel(openai.base_url, MODEL)
    try:
        with anyio.fail_after(10):
            answer = await model.complete([ChatMessage(role="user", content="sum it up")])
    finally:
        await model.close()
    assert answer.text == "A summary."
    assert openai.requests[-1]["stream"] is False


async def test_memory_embeds_through_the_embeddings_route(openai: OpenAIStandIn) -> None:
    embedder = OpenAIEmbedder(openai.base_url, "embedder")
    try:
        vectors = await embedder.embed(["first text", "second"])
        size = await embedder.vector_size()
    finally:
        await embedder.close()
    assert vectors == [embed_text("first text"), embed_text("second")]
    assert size == len(vectors[0])
    assert openai.embed_requests[0] == {"model": "embedder", "input": ["first text", "second"]}


def test_the_openai_provider_without_a_model_or_an_embedder_is_refused(tmp_path: Path) -> None:
    env = {
        "MERCURY_CONFIG_FILE": "",
        "MERCURY_DATA_DIR": str(tmp_path),
        "MERCURY_MODEL_PROVIDER": "openai",
    }
    with pytest.raises(ConfigurationError, match="OPENAI_MODEL"):
        load_settings({**env, "MERCURY_MEMORY_STORE": "off"}, cwd=tmp_path)
    with pytest.raises(ConfigurationError, match="OPENAI_EMBEDDING_MODEL"):
        load_settings({**env, "OPENAI_MODEL": "m"}, cwd=tmp_path)
    settings = load_settings(
        {**env, "OPENAI_MODEL": "m", "MERCURY_MEMORY_STORE": "off"}, cwd=tmp_path
    )
    assert settings.model.provider == "openai"
    assert settings.openai.base_url == "http://127.0.0.1:8080/v1"
