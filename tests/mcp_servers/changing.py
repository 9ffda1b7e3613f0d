"""An MCP server over stdio, written with the ``mcp`` SDK, whose tool list changes.

Run as ``python changing.py RECORD``: it serves MCP on its stdin and stdout and appends to
``RECORD`` one JSON object a line for what the tests look for on the server's side: every
``tools/list`` request and every ``notifications/cancelled`` as they arrive on the wire
(``{"method": …, "params": …}``), and a slow call's fate (``{"slow": "started"}``,
``{"slow": "interrupted"}``). Its tools: ``grow`` adds the tool ``second`` and sends
``notifications/tools/list_changed``; ``slow`` waits ``seconds``. It advertises
``tools.listChanged``, and speaks whichever revision the client's first message chooses.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import ToolAnnotations

_WATCHED = ("tools/list", "notifications/cancelled")


def record(path: str, entry: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(entry) + "\n")


def build(path: str) -> MCPServer:
    server = MCPServer("changing")

    def second() -> str:
        """The tool ``grow`` adds."""
        return "2"

    @server.tool(title="Add a tool", annotations=ToolAnnotations(read_only_hint=True))
    async def grow(ctx: Context) -> str:
        server.add_tool(second)
        await ctx.session.send_tool_list_changed()
        return "added second"

    @server.tool(title="Wait a while", annotations=ToolAnnotations(read_only_hint=True))
    async def slow(seconds: float) -> str:
        record(path, {"slow": "started"})
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            record(path, {"slow": "interrupted"})
            raise
        return "waited"

    return server


async def main(path: str) -> None:
    server = build(path)
    lowlevel = server._lowlevel_server  # its own options: to advertise tools.listChanged
    options = lowlevel.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read, write):
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)

        async def tee() -> None:
            async with send:
                async for item in read:
                    if isinstance(item, SessionMessage):
                        method = getattr(item.message, "method", None)
                        if method in _WATCHED:
                            params = getattr(item.message, "params", None)
                            record(path, {"method": method, "params": params})
                    await send.send(item)

        async with anyio.create_task_group() as group:
            group.start_soon(tee)
            await lowlevel.run(receive, write, options)
            group.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
