"""The Ollama embedder against the Ollama stand-in: vectors, keep-alive, refusals, outages."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from core.memory.embedder import EmbeddingFailed, OllamaEmbedder
from tests.support.ollama_standin import OllamaStandIn, embed_text

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


@pytest.fixture(scope="module")
def ollama() -> Iterator[OllamaStandIn]:
    with OllamaStandIn(models=["llama3.2", "nomic-embed-text"]) as standin:
        yield standin


async def test_texts_come_back_as_the_servers_vectors_in_order(ollama: OllamaStandIn) -> None:
    embedder = OllamaEmbedder(ollama.url)
    try:
        vectors = await embedder.embed(["tax forms", "a red bicycle"])
        assert vectors == [embed_text("tax forms"), embed_text("a red bicycle")]
        assert all(type(x) is float for x in vectors[0])
        assert await embedder.vector_size() == len(vectors[0])
    finally:
        await embedder.close()


async def test_successive_embeddings_share_one_keep_alive_connection(
    ollama: OllamaStandIn,
) -> None:
    embedder = OllamaEmbedder(ollama.url)
    try:
        before = ollama.connections
        for text in ("one", "two", "three", "four"):
            assert await embedder.embed([text]) == [embed_text(text)]
        assert ollama.connections - before == 1
    finally:
        await embedder.close()


async def test_a_model_the_server_lacks_is_a_refusal_naming_it(ollama: OllamaStandIn) -> None:
    embedder = OllamaEmbedder(ollama.url, "no-such-embedder")
    try:
        with pytest.raises(EmbeddingFailed, match="no-such-embedder"):
            await embedder.embed(["hello"])
        # The connection survives a refusal: the next good request still answers.
        good = OllamaEmbedder(ollama.url)
        try:
            assert await good.embed(["hello"]) == [embed_text("hello")]
        finally:
            await good.close()
    finally:
        await embedder.close()


async def test_nothing_listening_is_an_outage_naming_the_host() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    embedder = OllamaEmbedder(f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(EmbeddingFailed, match="doesn't answer"):
            await embedder.embed(["hello"])
    finally:
        await embedder.close()


async def test_no_texts_means_no_request(ollama: OllamaStandIn) -> None:
    embedder = OllamaEmbedder(ollama.url)
    try:
        before = len(ollama.embed_requests)
        assert await embedder.embed([]) == []
        assert len(ollama.embed_requests) == before
    finally:
        await embedder.close()
