"""An MCP server of the tests' own, written with the ``mcp`` SDK's server side.

:func:`mcp_server` is an issue tracker whose tools cover what Mercury must handle: a read-only
tool, a destructive one, tools that ask the person (a form question, on their own or after a
confirmation, and a link to open) and a slow one. :class:`McpHttp` serves it over streamable
HTTP under uvicorn on a loopback port, and can stop and start it again on the same port.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Annotated, Any

import mcp_types as types
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

__all__ = [
    "Confirm",
    "McpHttp",
    "NewIssue",
    "Tracker",
    "archive_question",
    "file_question",
    "mcp_server",
]


class Tracker:
    """What the MCP server was asked, and a slow tool's fate."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.slow_started = threading.Event()
        self.slow_cancelled = threading.Event()


class Confirm(BaseModel):
    confirm: bool


async def archive_question(key: str) -> Elicit[Confirm]:
    # Module level: the annotations are strings, read against the module's names.
    return Elicit(f"Archive {key} for good?", Confirm)


class NewIssue(BaseModel):
    title: str = Field(title="Title", description="One line that names the problem")
    hours: int = Field(title="Hours", description="The estimate", ge=1, le=40)


async def file_question(project: str) -> Elicit[NewIssue]:
    return Elicit(f"Describe the new issue for {project}.", NewIssue)


def mcp_server(tracker: Tracker) -> MCPServer:
    server = MCPServer("tracker")

    @server.tool(title="Read an issue", annotations=ToolAnnotations(read_only_hint=True))
    def get_issue(key: str) -> str:
        tracker.calls.append(("get_issue", {"key": key}))
        return f"{key}: Fix the login page"

    @server.tool(title="Delete an issue", annotations=ToolAnnotations(destructive_hint=True))
    def delete_issue(key: str) -> str:
        tracker.calls.append(("delete_issue", {"key": key}))
        return f"deleted {key}"

    @server.tool(title="Archive an issue", annotations=ToolAnnotations(read_only_hint=True))
    def archive_issue(key: str, answer: Annotated[Confirm, Resolve(archive_question)]) -> str:
        tracker.calls.append(("archive_issue", {"key": key, "confirm": answer.confirm}))
        return f"archived {key}" if answer.confirm else f"kept {key}"

    @server.tool(title="Purge an issue", annotations=ToolAnnotations(destructive_hint=True))
    def purge_issue(key: str, answer: Annotated[Confirm, Resolve(archive_question)]) -> str:
        tracker.calls.append(("purge_issue", {"key": key, "confirm": answer.confirm}))
        return f"purged {key}" if answer.confirm else f"kept {key}"

    @server.tool(title="File an issue", annotations=ToolAnnotations(read_only_hint=True))
    def file_issue(project: str, issue: Annotated[NewIssue, Resolve(file_question)]) -> str:
        tracker.calls.append(("file_issue", {"project": project, **issue.model_dump()}))
        return f"filed {project}-1: {issue.title} ({issue.hours} h)"

    @server.tool(title="Sign a document", annotations=ToolAnnotations(read_only_hint=True))
    def sign_document(doc: str, ctx: Context) -> str | types.InputRequiredResult:
        answers = ctx.input_responses or {}
        if "signed" not in answers:
            return types.InputRequiredResult(
                input_requests={
                    "signed": types.ElicitRequest(
                        params=types.ElicitRequestURLParams(
                            message=f"Sign {doc} on the signing site",
                            url=f"https://sign.example.test/sign?doc={doc}",
                            elicitation_id="sig-1",
                        )
                    )
                },
                request_state=f"doc={doc}",
            )
        answer = answers["signed"]
        tracker.calls.append(("sign_document", {"doc": doc, "state": ctx.request_state}))
        return f"{doc}: {getattr(answer, 'action', '?')}"

    @server.tool(title="Wait a while", annotations=ToolAnnotations(read_only_hint=True))
    async def slow(seconds: float) -> str:
        tracker.calls.append(("slow", {"seconds": seconds}))
        tracker.slow_started.set()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            tracker.slow_cancelled.set()
            raise
        return "waited"

    return server


class McpHttp:
    """The MCP server under uvicorn on a loopback port, stopped and started again at will."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.port = 0
        self._uvicorn: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        app = self.server.streamable_http_app()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
        )
        self._uvicorn = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._uvicorn.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._uvicorn.started:
            assert time.monotonic() < deadline, "the MCP server did not start"
            time.sleep(0.01)
        self.port = self._uvicorn.servers[0].sockets[0].getsockname()[1]

    def stop(self) -> None:
        assert self._uvicorn is not None and self._thread is not None
        self._uvicorn.force_exit = True
        self._uvicorn.should_exit = True
        self._thread.join(10)
