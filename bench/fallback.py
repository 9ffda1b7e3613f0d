"""What the model fallback chain costs, against the stand-ins on loopback.

Three timings of one model call, to the end of its answer, each the median of ``--calls``:

- ``direct``: the backup model asked alone (an OpenAI-protocol stand-in);
- ``failure``: the first model failing alone (an Ollama stand-in answering 503, or nothing
  listening on its port);
- ``chain``: the chain, whose first model fails that way and whose backup answers.

``added`` is ``chain - failure - direct``: what the chain itself adds beyond the first
model's failure (the target is under 50 ms). ``cooling`` is a chain call while the failed
model cools down (not asked at all), beside ``direct``. Results go to
``bench/results/fallback.json``::

    python -m bench.fallback [--calls 30] [--json PATH]   (or: scripts/bench fallback …)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from core.model import (
    ChatMessage,
    FallbackModel,
    ModelClient,
    ModelError,
    OllamaModel,
    OpenAIModel,
)
from dev_model.ollama import ChatScript, OllamaStandIn
from dev_model.openai import OpenAIStandIn
from tests.support.ports import free_port

RESULTS = Path(__file__).resolve().parent / "results"
HELLO = [ChatMessage(role="user", content="say something short")]


async def _drain(model: ModelClient) -> None:
    async for _batch in model.chat(HELLO):
        pass


async def _fails(model: ModelClient) -> None:
    try:
        await _drain(model)
    except ModelError:
        return
    raise AssertionError("the first model was meant to fail")


async def _median_ms(
    calls: int, one: Callable[[ModelClient], Awaitable[None]], model: ModelClient
) -> float:
    await one(model)  # warm: connections open, scripts encoded
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await one(model)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def measure(calls: int) -> dict[str, Any]:
    results: dict[str, Any] = {"calls": calls}
    with OllamaStandIn() as primary, OpenAIStandIn(models=["backup"]) as backup:
        primary.responder = lambda _payload: ChatScript(status=503, error="overloaded")
        for failure, url in (
            ("http_503", primary.url),
            ("refused", f"http://127.0.0.1:{free_port()}"),
        ):
            first = OllamaModel(url, "llama3.2", connect_timeout_s=2)
            second = OpenAIModel(backup.base_url, "backup", connect_timeout_s=2)
            # A cool-down of zero: every chain call asks the failing model first again.
            chain = FallbackModel([first, second], cooldown_s=1e-9, max_cooldown_s=1e-9)
            cooling = FallbackModel(
                [OllamaModel(url, "llama3.2", connect_timeout_s=2), second], cooldown_s=3600
            )
            try:
                direct = await _median_ms(calls, _drain, second)
                failing = await _median_ms(calls, _fails, first)
                chained = await _median_ms(calls, _drain, chain)
                await _drain(cooling)  # its first model fails once, then cools
                cooled = await _median_ms(calls, _drain, cooling)
            finally:
                await chain.close()
                await cooling.models[0].close()
            results[failure] = {
                "direct_ms": round(direct, 2),
                "failure_ms": round(failing, 2),
                "chain_ms": round(chained, 2),
                "added_ms": round(chained - failing - direct, 2),
                "cooling_ms": round(cooled, 2),
            }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog="scripts/bench fallback")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--json", type=Path, default=RESULTS / "fallback.json")
    args = parser.parse_args()
    logging.getLogger("core.model.fallback").setLevel(logging.ERROR)  # a line per failure
    result = asyncio.run(measure(args.calls))
    print(
        f"{'first model':<12} {'direct':>8} {'failure':>8} {'chain':>8} {'added':>8} {'cooling':>8}"
    )
    for failure in ("http_503", "refused"):
        row = result[failure]
        print(
            f"{failure:<12} {row['direct_ms']:>6.2f}ms {row['failure_ms']:>6.2f}ms "
            f"{row['chain_ms']:>6.2f}ms {row['added_ms']:>6.2f}ms {row['cooling_ms']:>6.2f}ms"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
