"""What Mercury adds to an MCP tool call, beside the same call made directly with the SDK.

One MCP server (written with the ``mcp`` SDK's server side) runs in a process of its own,
over streamable HTTP on a loopback port, or over stdio. For each transport the same tool is
called, interleaved call by call so drift on a shared machine touches both alike:

- **direct**: ``client.session.call_tool`` on an SDK client kept open;
- **mercury**: the tool as the model calls it (the plugin's ``run``: the kept connection,
  the breaker, the metrics, the span, the result turned into the model's text).

Then, on the Mercury side: tools/list calls per turn once warm (offering the tools to a
person 100 times), and 50 concurrent calls sharing the one connection. Prints a table and
writes ``bench/results/mcp.json``::

    python -m bench.mcp [--calls N] [--json PATH]   (or: scripts/bench mcp …)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from core.config.mcp import McpServerConfig
from core.observe.metrics import Metrics
from core.people.i18n import Catalogs
from core.people.principal import Person, Principal
from core.tools.mcp import McpServers
from core.tools.registry import ToolCallContext

RESULTS = Path(__file__).parent / "results"
PERSON = Person(key="bench:alice")
CONCURRENT = 50


def serve_main(transport: str, port: int) -> None:
    """The benchmark's MCP server: ``echo`` (read-only) answers at once."""
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    server = MCPServer("bench", log_level="WARNING")

    @server.tool(title="Echo", annotations=ToolAnnotations(read_only_hint=True))
    def echo(text: str) -> str:
        return text

    @server.tool(title="Wait", annotations=ToolAnnotations(read_only_hint=True))
    async def wait(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "waited"

    if transport == "stdio":
        server.run("stdio")
        return
    import uvicorn

    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def http_server() -> AsyncIterator[str]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.mcp", "--serve", "http", "--port", str(port)]
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the benchmark's MCP server did not start")
            await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(transport: str, calls: int) -> dict[str, Any]:
    stdio = StdioServerParameters(
        command=sys.executable, args=["-m", "bench.mcp", "--serve", "stdio"]
    )
    async with contextlib.AsyncExitStack() as stack:
        if transport == "http":
            url: str = await stack.enter_async_context(http_server())
            config = McpServerConfig(name="bench", title="Bench", url=url, trusted=True)
            direct_target: Any = url
        else:
            config = McpServerConfig(
                name="bench",
                title="Bench",
                command=sys.executable,
                args=("-m", "bench.mcp", "--serve", "stdio"),
                trusted=True,
            )
            direct_target = stdio
        direct = await stack.enter_async_context(Client(direct_target, cache=None))
        servers = McpServers({"bench": config}, metrics=Metrics())
        stack.push_async_callback(servers.close)
        context = ToolCallContext(
            Principal(id="alice", provider="bench"),
            PERSON,
            "bench:alice:c1",
            "c1",
            Catalogs.load().translator("en"),
        )
        (plugin,) = await servers.plugins_for(PERSON, None)
        tools = {tool.name: tool for tool in plugin.tools}
        echo = tools["bench_echo"]
        assert echo.confirm is False  # read-only on a trusted server: no confirmation
        for _ in range(20):  # warm both
            await direct.session.call_tool("echo", {"text": "hi"})
            await echo.run(context, {"text": "hi"})
        direct_ms: list[float] = []
        mercury_ms: list[float] = []
        for _ in range(calls):
            started = time.perf_counter()
            await direct.session.call_tool("echo", {"text": "hi"})
            direct_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            await echo.run(context, {"text": "hi"})
            mercury_ms.append((time.perf_counter() - started) * 1000)

        connection = servers.connection("bench", None)
        before = connection.list_calls
        for _ in range(100):
            await servers.plugins_for(PERSON, None)
        lists_per_turn = (connection.list_calls - before) / 100

        wait = tools["bench_wait"]
        opened = connection._opened
        started = time.perf_counter()
        await asyncio.gather(*(wait.run(context, {"seconds": 0.2}) for _ in range(CONCURRENT)))
        concurrent_s = time.perf_counter() - started
        return {
            "transport": transport,
            "protocol": connection.protocol_version,
            "calls": calls,
            "direct_p50_ms": statistics.median(direct_ms),
            "direct_p95_ms": _pct(direct_ms, 0.95),
            "mercury_p50_ms": statistics.median(mercury_ms),
            "mercury_p95_ms": _pct(mercury_ms, 0.95),
            "overhead_p50_ms": statistics.median(mercury_ms) - statistics.median(direct_ms),
            "list_calls_per_warm_turn": lists_per_turn,
            "concurrent_calls": CONCURRENT,
            "concurrent_wall_s": concurrent_s,
            "connections_opened_for_concurrent": connection._opened - opened,
        }


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "transport  protocol    direct p50  mercury p50  overhead p50  lists/warm turn  "
        f"{CONCURRENT} calls of 0.2 s  new connections",
    ]
    for r in results:
        lines.append(
            f"{r['transport']:<10} {r['protocol'] or '-':<11} {r['direct_p50_ms']:>8.2f} ms "
            f"{r['mercury_p50_ms']:>9.2f} ms {r['overhead_p50_ms']:>10.2f} ms "
            f"{r['list_calls_per_warm_turn']:>15.0f}  {r['concurrent_wall_s']:>12.2f} s  "
            f"{r['connections_opened_for_concurrent']:>15d}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--json", type=Path, default=RESULTS / "mcp.json")
    parser.add_argument("--serve", choices=("http", "stdio"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.serve:
        serve_main(arguments.serve, arguments.port)
        return 0

    async def run() -> list[dict[str, Any]]:
        return [await measure(t, arguments.calls) for t in ("http", "stdio")]

    results = asyncio.run(run())
    print(table(results))
    arguments.json.parent.mkdir(parents=True, exist_ok=True)
    arguments.json.write_text(json.dumps({"results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
