"""The wire reader against a model server that answers badly: bounded, refused, never a hang."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from core.model import ChatMessage, ModelError, OllamaModel

pytestmark = pytest.mark.anyio

HELLO = [ChatMessage(role="user", content="hi")]
OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\n"


async def serve(answer: Callable[[asyncio.StreamWriter], object]) -> AsyncIterator[str]:
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            await reader.readuntil(b"\r\n\r\n")
            result = answer(writer)
            if asyncio.iscoroutine(result):
                await result
            await writer.drain()
            await reader.read()  # keeps the connection open: the client must give up itself
        except (ConnectionError, asyncio.IncompleteReadError):
            pass

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        for writer in writers:
            writer.close()
        await server.wait_closed()
        await asyncio.sleep(0.05)  # the handlers see their connections close


async def chat_fails(answer: Callable[[asyncio.StreamWriter], object]) -> ModelError:
    async for host in serve(answer):
        model = OllamaModel(host, "m", read_timeout_s=60.0)
        try:
            with pytest.raises(ModelError) as caught:
                async with asyncio.timeout(20):
                    async for _ in model.chat(HELLO, tools=[], think=None):
                        pass
        finally:
            await model.close()
        return caught.value
    raise AssertionError("unreachable")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_an_endless_head_is_refused_not_buffered() -> None:
    await chat_fails(lambda w: w.write(OK_HEAD + b"x-filler: " + b"a" * 200_000))


async def test_a_content_length_that_is_not_a_length_is_refused() -> None:
    await chat_fails(lambda w: w.write(OK_HEAD + b"content-length: " + b"9" * 5000 + b"\r\n\r\n"))


async def test_an_endless_chunk_size_is_refused() -> None:
    head = OK_HEAD + b"transfer-encoding: chunked\r\n\r\n"
    await chat_fails(lambda w: w.write(head + b"f" * 5000))


async def test_a_line_without_end_is_refused_past_its_bound() -> None:
    head = OK_HEAD + b"transfer-encoding: chunked\r\n\r\n"
    piece = b"a" * (1024 * 1024)
    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"

    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(head)
        for _ in range(20):  # 20 MiB of one JSON line that never ends
            writer.write(chunk)
            await writer.drain()

    await chat_fails(answer)
