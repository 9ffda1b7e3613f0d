"""The tests' Ollama stand-in: the scripted model's Ollama protocol (:mod:`dev_model.ollama`).

One implementation serves the tests and ``mercury-http dev-model``; the tests script it
(``enqueue``, ``responder``, the ``wait_*`` helpers) exactly as before. Also runs in the
foreground: ``python -m tests.support.ollama_standin --port N``.
"""

from __future__ import annotations

from dev_model.ollama import (
    DEFAULT_DIMENSIONS,
    VERSION,
    ChatScript,
    OllamaStandIn,
    Responder,
    StandInError,
    StandInTimeoutError,
    echo_script,
    embed_text,
    main,
    write_lines,
)

__all__ = [
    "DEFAULT_DIMENSIONS",
    "VERSION",
    "ChatScript",
    "OllamaStandIn",
    "Responder",
    "StandInError",
    "StandInTimeoutError",
    "echo_script",
    "embed_text",
    "main",
    "write_lines",
]

if __name__ == "__main__":
    raise SystemExit(main())
