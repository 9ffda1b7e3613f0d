"""Mercury's MCP client as the conformance suite's client command.

The suite (``@modelcontextprotocol/conformance``) starts a scenario's MCP server and
authorization server, then runs ``python client.py URL`` with the scenario in
``MCP_CONFORMANCE_SCENARIO`` and, for pre-registration, the client's credentials in
``MCP_CONFORMANCE_CONTEXT``. This program is Mercury's client there, through the same code a
turn uses: an ``auth: oauth`` server in :class:`~core.tools.mcp.servers.McpServers`, one
person's connection, :class:`~core.tools.mcp.McpSignIn` on :class:`~core.tools.logins.Logins`
(a SQLite state store in a temporary folder). It lists the tools and calls each one; when
Mercury asks the person to sign in, it plays the browser: it opens the login URL (the
scenario's authorization server approves at once) and delivers the redirect's ``state``,
``code`` and ``iss`` as ``/login/callback`` does (``check_issuer``, then ``complete``). A
person signs in at most three times; then the program gives up. A tool error instead of a
sign-in (a server that keeps refusing the scopes it asks for) ends it with exit code 1.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.config.mcp import McpServerConfig
from core.state.sqlite import SqliteDatabase
from core.tools.logins import Logins
from core.tools.mcp import McpSignIn
from core.tools.mcp.connection import McpConnection
from core.tools.mcp.servers import McpServers
from core.tools.registry import LoginRequired, ToolError

#: Mercury's public URL: plain HTTP, so it registers (or uses the given client), never a
#: client metadata document (whose URL must be https).
PUBLIC_URL = "http://127.0.0.1:9"
PERSON = "static:conformance"
SIGN_INS = 3


async def main(url: str) -> int:
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    with tempfile.TemporaryDirectory() as folder:
        db = await SqliteDatabase.open(Path(folder) / "state.db")
        logins = Logins(
            secret_key="conformance-secret-key-0123456789abcdef",
            redirect_uri=PUBLIC_URL + "/login/callback",
        )
        await logins.open(db)
        server = McpServerConfig(
            name="conf",
            title="Conformance",
            url=url,
            auth="oauth",
            # The scenario's authorization server is on the same host, another port.
            allowed_hosts=(urlsplit(url).hostname or "localhost",),
            client_id=context.get("client_id"),
            client_secret=context.get("client_secret"),
            trusted=True,
        )
        servers = McpServers({"conf": server}, sign_in=McpSignIn(logins, public_url=PUBLIC_URL))
        try:
            return await use(servers.connection("conf", PERSON), logins)
        finally:
            await servers.close()
            await db.close()


async def use(connection: McpConnection, logins: Logins) -> int:
    for _ in range(SIGN_INS + 1):
        try:
            tools = await connection.tools()
            for tool in tools:
                result = await connection.call(tool.name, {})
                print(f"{tool.name}: {result}")
            return 0
        except LoginRequired as login:
            await sign_in(login.url, logins)
        except ToolError as error:
            print(f"Tool error: {error}", file=sys.stderr)
            return 1
    print("Gave up after signing in three times.", file=sys.stderr)
    return 1


async def sign_in(url: str, logins: Logins) -> None:
    async with httpx.AsyncClient(follow_redirects=False, timeout=10) as browser:
        answer = await browser.get(url)
    back = dict(parse_qsl(urlsplit(answer.headers.get("location", "")).query))
    state, iss = back.get("state", ""), back.get("iss")
    if await logins.check_issuer(state, iss):
        outcome = await logins.complete(state, back.get("code", ""), iss)
        print(f"Signed in: {outcome.status}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[-1])))
