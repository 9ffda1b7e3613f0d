"""An MCP server's HTTP face as an OAuth 2.1 resource server, for the sign-in tests.

It answers ``POST /mcp`` (a JSON-RPC ``tools/call``) only with a JWT the tests' OpenID
provider issued for it: signed by the provider's key, ``iss`` the provider, ``aud`` this
server's URL (the RFC 8707 resource). Without one it answers 401 with
``WWW-Authenticate: Bearer resource_metadata="…", scope="mcp:read"``; the tool ``write``
wants ``mcp:write`` as well and answers 403 ``insufficient_scope`` without it. Its protected
resource metadata (RFC 9728) is at ``/.well-known/oauth-protected-resource/mcp``, or where
``metadata_path`` says (then only the challenge tells where);
``authorization_servers`` can be changed to name another server (the SSRF tests).

Given an ``app`` (an ``mcp`` SDK server's ``streamable_http_app()``), it is that server's
gate instead: a request with a valid token goes through to it, ``sub`` in ``subjects``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import jwt
import msgspec
import uvicorn

__all__ = ["ProtectedMcp", "serving"]

PRM_PATH = "/.well-known/oauth-protected-resource/mcp"


class ProtectedMcp:
    """The resource server; ``url`` is set once it listens (``<origin>/mcp``)."""

    def __init__(self, issuer: str, app: Any = None) -> None:
        self.issuer = issuer
        self.app = app
        self.subjects: list[str] = []  # whom the requests let through to ``app`` came from
        self.keys = jwt.PyJWKSet.from_dict(httpx.get(f"{issuer}/jwks", timeout=10).json())
        self.origin = ""
        self.authorization_servers: list[str] = [issuer]
        #: Where the resource metadata is served (and the challenge says it is).
        self.metadata_path = PRM_PATH
        self.metadata_reads = 0
        self.bearers: list[str] = []  # every Authorization header received

    @property
    def url(self) -> str:
        return self.origin + "/mcp"

    @property
    def metadata_url(self) -> str:
        return self.origin + self.metadata_path

    def claims(self, token: str) -> dict[str, Any] | None:
        try:
            kid = jwt.get_unverified_header(token)["kid"]
            key = next(k for k in self.keys.keys if k.key_id == kid)
            found: dict[str, Any] = jwt.decode(
                token, key.key, algorithms=["RS256"], audience=self.url, issuer=self.issuer
            )
        except (jwt.PyJWTError, StopIteration, KeyError):
            return None
        return found

    def _answer(
        self, path: str, method: str, headers: dict[bytes, bytes], raw: bytes
    ) -> tuple[int, dict[str, str], Any]:
        if method == "GET" and path == self.metadata_path:
            self.metadata_reads += 1
            return (
                200,
                {},
                {
                    "resource": self.url,
                    "authorization_servers": self.authorization_servers,
                    "scopes_supported": ["mcp:read"],
                    "bearer_methods_supported": ["header"],
                },
            )
        if path != "/mcp" or method != "POST":
            return 404, {}, {"error": "not found"}
        value = headers.get(b"authorization", b"").decode()
        if value:
            self.bearers.append(value)
        scheme, _, token = value.partition(" ")
        claims = self.claims(token) if scheme.lower() == "bearer" and token else None
        if claims is None:
            challenge = f'Bearer resource_metadata="{self.metadata_url}", scope="mcp:read"'
            return 401, {"www-authenticate": challenge}, {"error": "invalid_token"}
        request = msgspec.json.decode(raw) if raw else {}
        name = request.get("params", {}).get("name")
        granted = str(claims.get("scope", "")).split()
        if name == "write" and "mcp:write" not in granted:
            challenge = (
                f'Bearer error="insufficient_scope", scope="mcp:read mcp:write", '
                f'resource_metadata="{self.metadata_url}"'
            )
            return 403, {"www-authenticate": challenge}, {"error": "insufficient_scope"}
        text = f"{name} as {claims['sub']}"
        return (
            200,
            {},
            {
                "jsonrpc": "2.0",
                "id": request.get("id"),
                "result": {"content": [{"type": "text", "text": text}]},
            },
        )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            assert self.app is not None, scope["type"]
            await self.app(scope, receive, send)  # the SDK app's lifespan
            return
        if self.app is not None and scope["path"] != self.metadata_path:
            await self._gate(scope, receive, send)
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        status, extra, body = self._answer(
            scope["path"], scope["method"], dict(scope["headers"]), raw
        )
        headers = [(b"content-type", b"application/json")]
        headers += [(k.encode(), v.encode()) for k, v in extra.items()]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": msgspec.json.encode(body)})

    async def _gate(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        value = dict(scope["headers"]).get(b"authorization", b"").decode()
        if value:
            self.bearers.append(value)
        scheme, _, token = value.partition(" ")
        claims = self.claims(token) if scheme.lower() == "bearer" and token else None
        if claims is not None:
            self.subjects.append(str(claims["sub"]))
            await self.app(scope, receive, send)
            return
        challenge = f'Bearer resource_metadata="{self.metadata_url}", scope="mcp:read"'
        headers = [
            (b"content-type", b"application/json"),
            (b"www-authenticate", challenge.encode()),
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"error": "invalid_token"}'})


@contextmanager
def serving(app: Any, *, lifespan: bool = False, port: int = 0) -> Iterator[str]:
    """``app`` (ASGI) under uvicorn on 127.0.0.1 in a thread (on ``port``, 0: any); its origin."""
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            lifespan="on" if lifespan else "off",
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server didn't start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
