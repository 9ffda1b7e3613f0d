"""Turning text into vectors for memory: the :class:`Embedder` port, on Ollama or OpenAI's protocol.

The vector size is not configured but learnt: the first successful embedding fixes it, and
later answers of another size are refused, since a collection holds one size only.

Exceptions::

    EmbeddingFailed             the embedder didn't answer, or answered something unusable
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

import httpx
import msgspec
import ollama

from core.model import WireError, WirePool
from core.model.wire import header_lines, json_post_pool

_PROBE: Final = "vector size probe"


class EmbeddingFailed(Exception):
    """The embedder couldn't turn the texts into vectors."""


class Embedder(Protocol):
    """Turns texts into vectors of one size."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order; raises :class:`EmbeddingFailed`."""
        ...

    async def vector_size(self) -> int:
        """The size of the vectors, embedding a probe text if nothing was embedded yet."""
        ...

    async def close(self) -> None: ...


class _OllamaEmbeddings(msgspec.Struct):
    embeddings: list[list[float]]


class _OllamaError(msgspec.Struct):
    error: str = ""


_decode_ollama_embeddings = msgspec.json.Decoder(_OllamaEmbeddings).decode
_decode_ollama_error = msgspec.json.Decoder(_OllamaError).decode


class OllamaEmbedder:
    """An :class:`Embedder` on Ollama's ``/api/embed``.

    A turn embeds its query before the model is asked, so this is on every turn's path: the
    ``ollama`` client (httpx, stdlib json, a pydantic model of 768 floats) cost about 0.7 ms
    a call. The answer is decoded here with msgspec straight into floats and, on a plain-http
    host, sent over a keep-alive :class:`~core.model.wire.WirePool` (an https host goes
    through the client's httpx pool). ``ollama.AsyncClient`` still parses the host
    (``OLLAMA_HOST`` forms) and supplies its headers.
    """

    def __init__(
        self,
        host: str,
        model: str = "nomic-embed-text",
        *,
        timeout_s: float = 30.0,
    ) -> None:
        self.host = host
        self.model = model
        self._client = ollama.AsyncClient(host=host, timeout=timeout_s)
        self._http: httpx.AsyncClient = self._client._client
        self._pool, self._head = self._wire_pool(timeout_s)
        self._size: int | None = None

    def _wire_pool(self, timeout_s: float) -> tuple[WirePool | None, bytes]:
        return json_post_pool(
            self._http.base_url,
            "/api/embed",
            accept="application/json",
            extra=header_lines(self._http.headers.items()),
            connect_timeout_s=min(timeout_s, 5.0),
            read_timeout_s=timeout_s,
        )

    async def _post(self, body: bytes) -> tuple[int, bytes]:
        """The status and body of Ollama's answer to ``POST /api/embed``."""
        if self._pool is None:
            response = await self._http.post(
                "/api/embed", content=body, headers={"content-type": "application/json"}
            )
            return response.status_code, response.content
        wire = await self._pool.send(self._head + b"%d\r\n\r\n" % len(body) + body)
        try:
            if wire.status >= 400:
                return wire.status, await wire.rest()
            while not wire.done:
                wire.raise_failure()
                await wire.wait()
            # The wire hands a body out line by line; a JSON answer is one line, or a few.
            lines = b"\n".join(wire.lines)
            wire.lines.clear()
            return wire.status, lines
        finally:
            self._pool.give_back(wire)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        body = msgspec.json.encode({"model": self.model, "input": list(texts)})
        try:
            status, answer = await self._post(body)
        except (httpx.HTTPError, WireError, OSError) as exc:
            raise EmbeddingFailed(
                f"Ollama at {self.host} doesn't answer; check that it runs and "
                "that OLLAMA_HOST points at it."
            ) from exc
        if status >= 400:
            raise EmbeddingFailed(
                f"Ollama at {self.host} refused to embed with {self.model} "
                f"(status {status}: {self._reason(answer)}); check that the model is pulled "
                f"(ollama pull {self.model})."
            )
        try:
            vectors = _decode_ollama_embeddings(answer).embeddings
        except msgspec.DecodeError as exc:
            raise EmbeddingFailed(
                f"Ollama at {self.host} answered /api/embed with something that is not a list "
                f"of embeddings ({exc})."
            ) from exc
        if len(vectors) != len(texts) or not vectors or not vectors[0]:
            raise EmbeddingFailed(
                f"Ollama returned {len(vectors)} embeddings for {len(texts)} texts with "
                f"{self.model!r}; check that it is an embedding model."
            )
        size = len(vectors[0])
        if any(len(v) != size for v in vectors) or (self._size is not None and size != self._size):
            raise EmbeddingFailed(
                f"Ollama's {self.model!r} returned {size}-dimensional vectors where "
                f"{self._size or size} were expected; keep one embedding model per collection."
            )
        self._size = size
        return vectors

    @staticmethod
    def _reason(body: bytes) -> str:
        try:
            reason = _decode_ollama_error(body).error
        except msgspec.DecodeError:
            reason = body.decode("utf-8", "replace")
        return reason.strip()[:300] or "no reason given"

    async def vector_size(self) -> int:
        if self._size is None:
            await self.embed([_PROBE])
        assert self._size is not None  # noqa: S101 - set by the successful embed above
        return self._size

    async def close(self) -> None:
        """Close the HTTP connections to Ollama."""
        if self._pool is not None:
            self._pool.close()
        await self._client.close()  # type: ignore[no-untyped-call]


class _Embedding(msgspec.Struct):
    embedding: list[float]
    index: int = 0


class _Embeddings(msgspec.Struct):
    data: list[_Embedding]


class _EmbeddingError(msgspec.Struct):
    message: str = ""


class _EmbeddingErrorBody(msgspec.Struct):
    error: _EmbeddingError | str | None = None


_decode_embeddings = msgspec.json.Decoder(_Embeddings).decode
_decode_embedding_error = msgspec.json.Decoder(_EmbeddingErrorBody).decode


class OpenAIEmbedder:
    """An :class:`Embedder` on OpenAI's ``POST {base}/embeddings`` (vLLM, llama-server, …)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=self.base_url + "/", headers=headers, timeout=timeout_s
        )
        self._size: int | None = None

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        body = msgspec.json.encode({"model": self.model, "input": list(texts)})
        try:
            response = await self._client.post(
                "embeddings", content=body, headers={"content-type": "application/json"}
            )
        except httpx.HTTPError as exc:
            raise EmbeddingFailed(
                f"The model server at {self.base_url} doesn't answer ({exc!r}); check that it "
                "runs and that OPENAI_EMBEDDING_BASE_URL (or OPENAI_BASE_URL) points at it."
            ) from exc
        if response.status_code >= 400:
            raise EmbeddingFailed(
                f"The model server at {self.base_url} refused to embed with {self.model!r} "
                f"(status {response.status_code}): {self._reason(response.content)}; check "
                "that it serves that embedding model."
            )
        try:
            data = sorted(_decode_embeddings(response.content).data, key=lambda e: e.index)
        except msgspec.DecodeError as exc:
            raise EmbeddingFailed(
                f"The model server at {self.base_url} answered /embeddings with something that "
                f"is not a list of embeddings ({exc})."
            ) from exc
        vectors = [item.embedding for item in data]
        if len(vectors) != len(texts) or not vectors[0]:
            raise EmbeddingFailed(
                f"The model server returned {len(vectors)} embeddings for {len(texts)} texts "
                f"with {self.model!r}; check that it is an embedding model."
            )
        size = len(vectors[0])
        if any(len(v) != size for v in vectors) or (self._size is not None and size != self._size):
            raise EmbeddingFailed(
                f"{self.model!r} returned {size}-dimensional vectors where "
                f"{self._size or size} were expected; keep one embedding model per collection."
            )
        self._size = size
        return vectors

    @staticmethod
    def _reason(body: bytes) -> str:
        try:
            error = _decode_embedding_error(body).error
        except msgspec.DecodeError:
            return body.decode("utf-8", "replace").strip()[:300] or "no reason given"
        text = error.message if isinstance(error, _EmbeddingError) else (error or "")
        return text.strip()[:300] or "no reason given"

    async def vector_size(self) -> int:
        if self._size is None:
            await self.embed([_PROBE])
        assert self._size is not None  # noqa: S101 - set by the successful embed above
        return self._size

    async def close(self) -> None:
        """Close the HTTP connections to the server."""
        await self._client.aclose()
