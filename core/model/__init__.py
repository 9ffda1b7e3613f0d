"""The model: the port the engine streams a turn through, and its adapters.

``port`` holds :class:`ModelClient`, the chunk and message Structs and the error tree;
``ollama`` and ``openai`` are the adapters on Ollama and on any server speaking OpenAI's
chat-completions protocol; ``fallback`` the chain that asks the next model when one can't
start an answer; ``wire`` the keep-alive HTTP/1.1 reader the adapters
stream on over plain http.
"""

from core.model.fallback import Breaker, FailureKind, FallbackModel
from core.model.ollama import OllamaModel
from core.model.openai import OpenAIModel
from core.model.port import (
    ChatChunk,
    ChatMessage,
    ChunkMessage,
    Completion,
    ModelBrokeOff,
    ModelClient,
    ModelError,
    ModelHTTPError,
    ModelUnreachable,
    Role,
    ToolCall,
    ToolFunction,
    ToolSpec,
)
from core.model.wire import Wire, WireError, WirePool

__all__ = [
    "Breaker",
    "ChatChunk",
    "ChatMessage",
    "ChunkMessage",
    "Completion",
    "FailureKind",
    "FallbackModel",
    "ModelBrokeOff",
    "ModelClient",
    "ModelError",
    "ModelHTTPError",
    "ModelUnreachable",
    "OllamaModel",
    "OpenAIModel",
    "Role",
    "ToolCall",
    "ToolFunction",
    "ToolSpec",
    "Wire",
    "WireError",
    "WirePool",
]
