"""The Ollama stand-in speaks Ollama's wire format to the real ``ollama`` client and to httpx."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import ollama
import pytest

from tests.support.ollama_standin import (
    ChatScript,
    OllamaStandIn,
    StandInTimeoutError,
    embed_text,
    write_lines,
)

ROOT = Path(__file__).resolve().parents[2]
USER_HELLO = [{"role": "user", "content": "hello there world"}]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def standin() -> Iterator[OllamaStandIn]:
    with OllamaStandIn(models=["qwen3", "nomic-embed-text"]) as running:
        yield running


@pytest.fixture
async def client(standin: OllamaStandIn) -> AsyncIterator[ollama.AsyncClient]:
    async with ollama.AsyncClient(host=standin.url) as opened:
        yield opened


async def collect(stream: Any) -> list[ollama.ChatResponse]:
    return [part async for part in stream]


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_a_streamed_chat_thinks_then_echoes_word_by_word_then_says_done(
    standin: OllamaStandIn, client: ollama.AsyncClient
) -> None:
    with anyio.fail_after(5):
        parts = await collect(await client.chat("qwen3", USER_HELLO, stream=True))

    thinking = [p.message.thinking for p in parts if p.message.thinking]
    content = [p.message.content for p in parts if p.message.content]
    assert thinking == ["Thinking ", "about it."]
    assert content == ["You ", "said: ", "hello ", "there ", "world"]
    last_thinking = max(i for i, p in enumerate(parts) if p.message.thinking)
    first_content = min(i for i, p in enumerate(parts) if p.message.content)
    assert last_thinking < first_content
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    done = parts[-1]
    assert done.done_reason == "stop"
    assert done.model == "qwen3"
    for counter in (
        done.total_duration,
        done.load_duration,
        done.prompt_eval_count,
        done.prompt_eval_duration,
        done.eval_count,
        done.eval_duration,
    ):
        assert isinstance(counter, int)
        assert counter > 0
    await standin.wait_until_async(
        lambda: standin.completed == 1
    )  # counted just after the last line


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_a_scripted_tool_call_arrives_as_a_tool_call_with_dict_arguments(
    standin: OllamaStandIn, client: ollama.AsyncClient
) -> None:
    arguments = {"city": "Zürich", "days": 3}
    standin.enqueue(
        ChatScript(
            thinking=["I should look it up."],
            tool_calls=[{"name": "weather", "arguments": arguments}],
        )
    )
    with anyio.fail_after(5):
        parts = await collect(await client.chat("qwen3", USER_HELLO, stream=True))

    assert parts[0].message.thinking == "I should look it up."
    calls = parts[1].message.tool_calls
    assert calls is not None
    assert len(calls) == 1
    assert isinstance(calls[0], ollama.Message.ToolCall)
    assert calls[0].function.name == "weather"
    assert dict(calls[0].function.arguments) == arguments
    assert parts[-1].done is True
    assert len(parts) == 3


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_a_chat_without_streaming_answers_with_one_whole_message(
    standin: OllamaStandIn, client: ollama.AsyncClient
) -> None:
    standin.enqueue(
        ChatScript(
            thinking=["a ", "b"],
            content=["Hello ", "you."],
            tool_calls=[{"name": "note", "arguments": {"text": "x"}}],
        )
    )
    with anyio.fail_after(5):
        answer = await client.chat("qwen3", USER_HELLO, stream=False)

    assert answer.done is True
    assert answer.done_reason == "stop"
    assert answer.message.role == "assistant"
    assert answer.message.content == "Hello you."
    assert answer.message.thinking == "a b"
    assert answer.message.tool_calls is not None
    assert answer.message.tool_calls[0].function.arguments == {"text": "x"}
    assert standin.requests[-1]["stream"] is False


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_a_request_without_a_stream_field_is_streamed_as_ndjson_like_ollama(
    standin: OllamaStandIn,
) -> None:
    standin.enqueue(ChatScript.words("one two three"))
    body = {"model": "qwen3", "messages": USER_HELLO}
    with anyio.fail_after(5):
        async with (
            httpx.AsyncClient(base_url=standin.url) as http,
            http.stream("POST", "/api/chat", json=body) as response,
        ):
            lines = [line async for line in response.aiter_lines()]
            assert response.headers["content-type"] == "application/x-ndjson"
            assert response.headers["transfer-encoding"] == "chunked"

    parts = [msgspec.json.decode(line) for line in lines]
    assert [p["message"]["content"] for p in parts[:-1]] == ["one ", "two ", "three"]
    assert parts[-1]["done"] is True


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_think_false_leaves_the_thinking_out(
    standin: OllamaStandIn, client: ollama.AsyncClient
) -> None:
    with anyio.fail_after(5):
        parts = await collect(await client.chat("qwen3", USER_HELLO, stream=True, think=False))

    assert not any(p.message.thinking for p in parts)
    assert "".join(p.message.content or "" for p in parts) == "You said: hello there world"


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_embeddings_are_unit_vectors_equal_for_equal_texts_and_distinct_otherwise(
    standin: OllamaStandIn, client: ollama.AsyncClient
) -> None:
    texts = ["cats like naps", "cats like naps", "cats like naps!", "stock prices fell"]
    with anyio.fail_after(5):
        answer = await client.embed("nomic-embed-text", texts)
        single = await client.embed("nomic-embed-text", "cats like naps")
        small = await client.embed("nomic-embed-text", "cats", dimensions=16)

    vectors = [list(v) for v in answer.embeddings]
    assert [len(v) for v in vectors] == [768] * 4
    for vector in vectors:
        assert math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-9)
    assert vectors[0] == vectors[1] == list(single.embeddings[0]) == embed_text(texts[0])
    assert vectors[0] != vectors[2]

    def cosine(a: list[float], b: list[float]) -> float:
        return math.fsum(x * y for x, y in zip(a, b, strict=True))

    assert cosine(vectors[0], vectors[2]) > cosine(vectors[0], vectors[3])
    assert len(small.embeddings[0]) == 16
    assert [r["input"] for r in standin.embed_requests] == [texts, "cats like naps", "cats"]


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_the_embedding_dimension_is_configurable() -> None:
    async with (
        OllamaStandIn(dimensions=32) as standin,
        ollama.AsyncClient(host=standin.url) as client,
    ):
        with anyio.fail_after(5):
            answer = await client.embed("any-model", ["a", "b"])
    assert [len(v) for v in answer.embeddings] == [32, 32]


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_tags_list_the_models_and_version_and_unknown_paths_answer_like_ollama(
    standin: OllamaStandIn, client: ollama.AsyncClient
) -> None:
    with anyio.fail_after(5):
        tags = await client.list()
        async with httpx.AsyncClient(base_url=standin.url) as http:
            version = await http.get("/api/version")
            missing = await http.post("/api/pull", json={"model": "qwen3"})
            root = await http.get("/")

    assert [m.model for m in tags.models] == ["qwen3:latest", "nomic-embed-text:latest"]
    assert version.json() == {"version": "0.12.0"}
    assert missing.status_code == 404
    assert "error" in missing.json()
    assert root.text == "Ollama is running"


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_an_unknown_model_is_refused_with_404_and_ollamas_sentence(
    standin: OllamaStandIn, client: ollama.AsyncClient
) -> None:
    with anyio.fail_after(5), pytest.raises(ollama.ResponseError) as raised:
        await collect(await client.chat("llama9", USER_HELLO, stream=True))
    assert raised.value.status_code == 404
    assert raised.value.error == 'model "llama9" not found, try pulling it first'
    assert standin.open_streams == 0


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_a_scripted_http_status_raises_a_response_error_with_that_status(
    standin: OllamaStandIn, client: ollama.AsyncClient
) -> None:
    standin.enqueue(
        ChatScript(status=503, error="server busy"),
        ChatScript(status=500, error="boom", first_delay_s=0.05),
    )
    with anyio.fail_after(5):
        with pytest.raises(ollama.ResponseError) as streamed:
            await collect(await client.chat("qwen3", USER_HELLO, stream=True))
        with pytest.raises(ollama.ResponseError) as whole:
            await client.chat("qwen3", USER_HELLO, stream=False)
    assert (streamed.value.status_code, streamed.value.error) == (503, "server busy")
    assert (whole.value.status_code, whole.value.error) == (500, "boom")


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_an_error_line_mid_stream_raises_in_the_client_after_the_earlier_chunks(
    standin: OllamaStandIn, client: ollama.AsyncClient
) -> None:
    standin.enqueue(ChatScript(content=["a", "b", "c", "d"], error_after=2, error="GPU fell over"))
    seen: list[str] = []
    with anyio.fail_after(5), pytest.raises(ollama.ResponseError) as raised:
        async for part in await client.chat("qwen3", USER_HELLO, stream=True):
            seen.append(part.message.content or "")
    assert seen == ["a", "b"]
    assert raised.value.error == "GPU fell over"


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_an_abrupt_close_mid_stream_raises_a_transport_error_in_the_client(
    standin: OllamaStandIn, client: ollama.AsyncClient
) -> None:
    standin.enqueue(ChatScript(content=["a", "b", "c", "d"], close_after=3))
    seen: list[str] = []
    with anyio.fail_after(5), pytest.raises(httpx.TransportError):
        async for part in await client.chat("qwen3", USER_HELLO, stream=True):
            seen.append(part.message.content or "")
    assert seen == ["a", "b", "c"]
    assert standin.completed == 0


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_a_client_leaving_while_the_script_sleeps_is_noticed_within_a_second(
    standin: OllamaStandIn, client: ollama.AsyncClient
) -> None:
    standin.enqueue(ChatScript.paced(10, rate_per_s=0.25))  # four seconds between chunks
    with anyio.fail_after(5):
        stream = await client.chat("qwen3", USER_HELLO, stream=True)
        async for _ in stream:
            break
        left_at = time.monotonic()
        await stream.aclose()
        noticed = await standin.wait_for_closed_async(1, timeout=3)

    assert 0 <= noticed[0] - left_at < 1.0
    assert (standin.disconnects, standin.completed) == (1, 0)
    await standin.wait_until_async(lambda: standin.open_streams == 0, timeout=2)


@pytest.mark.timeout(10)
def test_a_hanging_stream_is_released_when_a_blocking_client_times_out(
    standin: OllamaStandIn,
) -> None:
    standin.enqueue(ChatScript(content=["first"], hang=True))
    seen: list[str] = []
    with (
        ollama.Client(host=standin.url, timeout=httpx.Timeout(0.5)) as client,
        pytest.raises(httpx.ReadTimeout),
    ):
        for part in client.chat("qwen3", USER_HELLO, stream=True):
            seen.append(part.message.content or "")
    assert seen == ["first"]
    assert len(standin.wait_for_closed(1, timeout=3)) == 1
    standin.wait_until(lambda: standin.open_streams == 0, timeout=2, what="the stream to end")


@pytest.mark.timeout(10)
def test_a_wait_that_runs_out_of_time_says_so(standin: OllamaStandIn) -> None:
    with pytest.raises(StandInTimeoutError, match=r"waited 0\.05 s for 1 client disconnect"):
        standin.wait_for_closed(1, timeout=0.05)


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_requests_are_recorded_and_enqueued_scripts_go_first_in_first_out(
    standin: OllamaStandIn, client: ollama.AsyncClient
) -> None:
    standin.enqueue(ChatScript.words("first"), ChatScript.words("second"))
    answers = []
    with anyio.fail_after(5):
        for text in ("one", "two", "three"):
            messages = [{"role": "user", "content": text}]
            answers.append(await client.chat("qwen3", messages, options={"temperature": 0}))

    assert [a.message.content for a in answers] == ["first", "second", "You said: three"]
    assert standin.connections == 1  # one kept-alive connection carried all three
    assert [r["messages"][-1]["content"] for r in standin.requests] == ["one", "two", "three"]
    assert standin.requests[0]["options"] == {"temperature": 0}


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_a_responder_can_drive_a_tool_loop_from_the_request(
    standin: OllamaStandIn, client: ollama.AsyncClient
) -> None:
    def responder(request: dict[str, Any]) -> ChatScript:
        results = [m for m in request["messages"] if m["role"] == "tool"]
        if not results:
            return ChatScript(tool_calls=[{"name": "add", "arguments": {"a": 2, "b": 3}}])
        return ChatScript.words(f"The sum is {results[-1]['content']}.")

    standin.responder = responder
    messages: list[Any] = [{"role": "user", "content": "add 2 and 3"}]
    with anyio.fail_after(5):
        first = await client.chat("qwen3", messages, tools=[_add_tool()])
        assert first.message.tool_calls is not None
        call = first.message.tool_calls[0].function
        messages += [first.message, {"role": "tool", "content": str(sum(call.arguments.values()))}]
        second = await client.chat("qwen3", messages, tools=[_add_tool()])

    assert second.message.content == "The sum is 5."
    assert standin.requests[0]["tools"][0]["function"]["name"] == "add"
    assert standin.requests[1]["messages"][1]["tool_calls"][0]["function"]["name"] == "add"


def _add_tool() -> dict[str, Any]:
    parameters = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    return {"type": "function", "function": {"name": "add", "parameters": parameters}}


@pytest.mark.timeout(20)
@pytest.mark.anyio
async def test_two_hundred_concurrent_streams_are_served_at_once_and_all_complete(
    standin: OllamaStandIn,
) -> None:
    standin.responder = lambda _request: ChatScript.paced(8, rate_per_s=8)  # about a second
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=300)
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, standin.open_streams)
            await asyncio.sleep(0.01)

    async def one() -> str:
        parts = await collect(await client.chat("qwen3", USER_HELLO, stream=True))
        assert parts[-1].done is True
        return "".join(p.message.content or "" for p in parts)

    with anyio.fail_after(15):
        async with ollama.AsyncClient(host=standin.url, limits=limits) as client:
            watcher = asyncio.create_task(watch())
            texts = await asyncio.gather(*(one() for _ in range(200)))
            watcher.cancel()

    assert texts == ["tok " * 8] * 200
    assert standin.completed == 200
    assert peak > 100  # the two shared cores may not open all 200 within a second
    assert standin.open_streams == 0


@pytest.mark.timeout(10)
@pytest.mark.anyio
async def test_fast_tokens_stream_every_line_and_paced_tokens_keep_their_cadence(
    standin: OllamaStandIn,
) -> None:
    fast = ChatScript.fast_tokens(3000)
    standin.enqueue(fast, fast, ChatScript.paced(6, rate_per_s=50))
    body = {"model": "qwen3", "messages": USER_HELLO}
    counts = []
    with anyio.fail_after(8):
        async with httpx.AsyncClient(base_url=standin.url) as http:
            for _ in range(2):
                async with http.stream("POST", "/api/chat", json=body) as response:
                    counts.append(sum([1 async for _ in response.aiter_lines()]))
            started = time.monotonic()
            async with http.stream("POST", "/api/chat", json=body) as response:
                stamps = [time.monotonic() async for _ in response.aiter_lines()]

    assert counts == [3001, 3001]
    assert standin.connections == 1
    assert len(stamps) == 7
    assert stamps[-1] - started >= 6 * 0.02 * 0.9  # six gaps of 20 ms, the done line included


@pytest.mark.timeout(20)
def test_the_command_line_serves_in_the_foreground_until_sigterm() -> None:
    command = [sys.executable, "-m", "tests.support.ollama_standin", "--port", "0"]
    command += ["--model", "qwen3", "--fast-tokens", "5"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(  # noqa: S603 - our own interpreter and module
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("listening on http://127.0.0.1:")
            url = line.removeprefix("listening on ").strip()
            with ollama.Client(host=url, timeout=5) as client:
                answer = client.chat("qwen3", USER_HELLO)
            assert answer.message.content == "tok " * 5
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 0
        finally:
            if process.poll() is None:
                process.kill()


@pytest.mark.timeout(20)
@pytest.mark.anyio
async def test_a_request_that_arrives_during_an_answer_is_answered_after_it(
    standin: OllamaStandIn,
) -> None:
    # A kept-alive client sends its next request as soon as the last chunk reaches it, which
    # can be before the stand-in stops watching the connection for a departure: sending both
    # requests in one write makes that race certain. Both must be answered, in order.
    body = msgspec.json.encode({"model": "qwen3", "messages": USER_HELLO, "think": False})
    request = (
        b"POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", standin.port)
    try:
        writer.write(request + request)
        await writer.drain()
        received = b""
        with anyio.fail_after(10):
            while received.count(b"0\r\n\r\n") < 2:
                data = await reader.read(65536)
                assert data, received
                received += data
    finally:
        writer.close()
    assert received.count(b"HTTP/1.1 200 OK") == 2
    assert received.count(b'"done":true') == 2
    assert len(standin.requests) == 2


class _Writes:
    """A writer that notes when each write went out and how many lines it carried."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.writes: list[tuple[float, int]] = []

    def write(self, data: bytes) -> None:
        self.writes.append((self.loop.time(), data.count(b"line\n")))

    async def drain(self) -> None:
        return None


@pytest.mark.anyio
async def test_paced_lines_keep_to_their_schedule_when_the_stand_in_runs_late() -> None:
    # A stand-in serving hundreds of streams on one core wakes late; pausing a fixed delay
    # after each write would add that lateness to every line. Here the loop is stalled
    # 50 ms ten times during a 0.6 s stream: the stream still ends near its schedule, no
    # line goes out before it is due, and every line goes out once, in order.
    writer = _Writes()
    lines, delay = [b"line\n"] * 60, 0.01

    async def stall() -> None:
        for _ in range(10):
            await asyncio.sleep(0.02)
            time.sleep(0.05)

    staller = asyncio.create_task(stall())
    with anyio.fail_after(10):
        await write_lines(writer, lines, len(lines), delay, 1)  # type: ignore[arg-type]
    await staller
    first, _ = writer.writes[0]
    assert sum(count for _, count in writer.writes) == len(lines)
    sent = 0
    for at, count in writer.writes:
        assert at >= first + sent * delay - 0.002  # never ahead of the schedule
        sent += count
    ideal = (len(lines) - 1) * delay
    last, _ = writer.writes[-1]
    assert last - first < ideal + 0.25  # 0.5 s of stalls were not added to the stream
    assert len(writer.writes) < len(lines)  # lines that fell due together went out together
