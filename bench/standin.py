"""The model stand-in for the benchmark (Ollama's or, with ``--protocol openai``, OpenAI's).

The last user message picks the script.

``fast N`` answers N content chunks as fast as the stand-in can (32 lines a write), and
``paced N RATE`` N chunks at RATE a second; anything else is echoed. A memory capture's
request gets a summary object. Scripts are kept per
shape, so their lines are encoded once::

    python -m bench.standin --port 11500 [--cpu 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
from typing import Any, Final

import uvloop

from channel_http.serving import collector
from dev_model.ollama import ChatScript, OllamaStandIn, echo_script
from dev_model.openai import CompletionScript, OpenAIStandIn, completion_echo

_scripts: dict[str, ChatScript] = {}
_openai = False


#: What a memory capture gets back: a summary and no facts, as a model would answer it.
CAPTURE_ANSWER = '{"summary": "A benchmark conversation.", "facts": []}'


def respond(payload: dict[str, Any]) -> ChatScript:
    messages = payload.get("messages") or []
    first = messages[0] if messages and isinstance(messages[0], dict) else {}
    if str(first.get("content")).startswith("You keep the long-term memory of an assistant"):
        return (CompletionScript if _openai else ChatScript).words(CAPTURE_ANSWER)  # type: ignore[return-value]
    last = ""
    for message in reversed(payload.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            last = str(message.get("content") or "")
            break
    # A chat turn's words come inside a <caller …> element (bench/chat.py): tags aside.
    words = re.sub(r"<[^>]*>", " ", last).split()
    # The engine prefixes the person's local time in brackets; the shape is at the end.
    for i, word in enumerate(words):
        if word in ("fast", "paced"):
            words = words[i:]
            break
    key = " ".join(words)
    script = _scripts.get(key)
    if script is None:
        kind = CompletionScript if _openai else ChatScript
        if len(words) == 2 and words[0] == "fast":
            script = kind.fast_tokens(int(words[1]))
        elif len(words) == 3 and words[0] == "paced":
            script = kind.paced(int(words[1]), float(words[2]))
        else:
            return completion_echo(payload) if _openai else echo_script(payload)
        _scripts[key] = script
    return script


#: The chat model bench/server.py asks for, and the embedding model its memory uses.
MODELS: Final = ("bench", "nomic-embed-text")


async def _serve(port: int) -> None:
    if _openai:
        standin: OllamaStandIn | OpenAIStandIn = OpenAIStandIn(port=port, responder=respond)
    else:
        # The models bench/server.py names, so its start finds them (no "lacks the model").
        standin = OllamaStandIn(port=port, responder=respond, models=MODELS)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await standin.serve(stop, on_listening=lambda url: print(f"listening on {url}", flush=True))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.standin")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cpu", type=int, default=None)
    parser.add_argument("--protocol", choices=["ollama", "openai"], default="ollama")
    args = parser.parse_args()
    global _openai
    _openai = args.protocol == "openai"
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    collector.settle()  # as the server and the load client: no full passes while streaming
    uvloop.run(_serve(args.port))


if __name__ == "__main__":
    main()
