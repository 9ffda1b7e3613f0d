"""The model port: what the engine needs from a chat model, and the errors it reports.

Exception tree::

    ModelError                 the model could not give an answer
    ├── ModelUnreachable       nothing answered at the model's address
    ├── ModelHTTPError         the server answered the request with an HTTP error
    └── ModelBrokeOff          the stream failed after it began (error line, cut, stall)

The chunk Structs mirror Ollama's streamed ``/api/chat`` lines, so that adapter decodes a
line straight into :class:`ChatChunk` with one msgspec call; the OpenAI adapter builds them
from ``chat.completion.chunk`` events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal, Protocol

import msgspec

Role = Literal["system", "user", "assistant", "tool"]


class ToolFunction(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)


class ToolCall(msgspec.Struct, frozen=True, omit_defaults=True):
    function: ToolFunction
    id: str | None = None
    """The server's id for the call, where its protocol has one (OpenAI's does)."""


class ChatMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    """One message of a conversation as the model reads it."""

    role: Role
    content: str = ""
    thinking: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    tool_name: str | None = None
    #: Base64 images for a model that sees them (Ollama's ``images`` field).
    images: tuple[str, ...] | None = None


class ChunkMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    role: str = "assistant"
    content: str = ""
    thinking: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None


class ChatChunk(msgspec.Struct, frozen=True, omit_defaults=True):
    """One streamed piece of the model's answer."""

    message: ChunkMessage | None = None
    done: bool = False
    done_reason: str | None = None
    error: str | None = None
    prompt_eval_count: int | None = None
    """Tokens of the prompt, on the last chunk, where the server counts them."""
    eval_count: int | None = None
    """Tokens of the answer, on the last chunk, where the server counts them."""
    cached_count: int | None = None
    """Tokens of the prompt read from the server's prompt cache, where it says so (the
    OpenAI protocol's ``usage.prompt_tokens_details.cached_tokens``; Ollama has none)."""
    model: str | None = None
    """The model that answered, on the last chunk at least (Ollama names it on every line)."""


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    """A whole answer at once (:meth:`ModelClient.complete`), with what it cost.

    The counts are the server's, as on a streamed answer's last chunk (``None`` where the
    server gives none); ``model`` is the model that answered, a fallback's where one did.
    """

    text: str
    model: str
    input: int | None = None
    """Tokens of the prompt (Ollama's ``prompt_eval_count``, the OpenAI protocol's
    ``usage.prompt_tokens``)."""
    output: int | None = None
    """Tokens of the answer (``eval_count``, ``usage.completion_tokens``)."""
    cached: int | None = None
    """Tokens of the prompt read from the server's prompt cache
    (``usage.prompt_tokens_details.cached_tokens``; Ollama has none)."""


class ToolSpec(msgspec.Struct, frozen=True):
    """A tool offered to the model, in the function-calling shape Ollama takes."""

    name: str
    description: str
    parameters: dict[str, Any]


class ModelError(Exception):
    """The model could not give an answer."""

    def __init__(self, message: str, *, model: str, host: str, provider: str = "ollama") -> None:
        super().__init__(message)
        self.model = model
        self.host = host
        self.provider = provider
        """Which kind of server failed (``ollama`` or ``openai``), for the person's sentence."""


class ModelUnreachable(ModelError):
    """Nothing answered at the model's address."""


class ModelHTTPError(ModelError):
    """The model's server answered the request with an HTTP error."""

    def __init__(
        self,
        message: str,
        *,
        model: str,
        host: str,
        status: int,
        reason: str,
        provider: str = "ollama",
    ) -> None:
        super().__init__(message, model=model, host=host, provider=provider)
        self.status = status
        self.reason = reason


class ModelBrokeOff(ModelError):
    """The stream failed after it began."""


class ModelClient(Protocol):
    """A chat model that streams its answer."""

    @property
    def model(self) -> str: ...

    @property
    def host(self) -> str: ...

    def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        think: bool = False,
    ) -> AsyncIterator[Sequence[ChatChunk]]:
        """Stream the answer to ``messages``, one batch of chunks per read from the server.

        A batch is never empty. Closing the iterator ends the request. Batches, not single
        chunks: a fast model brings dozens of chunks a read, and one hand-off per read
        keeps the per-token path to a loop over a list (docs/benchmarks.md).
        """
        ...

    async def complete(self, messages: Sequence[ChatMessage]) -> Completion:
        """The whole answer at once, without tools or thinking (for summaries), with the
        tokens it used and the model that gave it."""
        ...

    async def reachable(self) -> bool: ...

    async def accepts_images(self) -> bool:
        """Whether the model reads the ``images`` of a message."""
        ...

    async def close(self) -> None: ...
