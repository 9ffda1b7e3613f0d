"""The reference browser UI at ``/ui/``: its built files, and the small document it starts from.

The files are the output of ``ui/`` (``npm ci && npm run build``), shipped inside the package
under ``channel_http/ui/``. They are few and small, so they are read once when the app is built
and served from memory, gzipped where the browser takes it: no path from a request ever reaches
the file system. Every page carries a Content-Security-Policy that allows scripts, styles and
connections from this origin only (plus the OpenID provider, for the login), so model output
that slipped past the UI's sanitizer still could not run or call out.
"""

from __future__ import annotations

import gzip
import hashlib
import mimetypes
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from litestar import Request, Response, Router, get
from litestar.params import FromPath
from litestar.response import Redirect

from channel_http.errors import NotFound
from core.config.settings import Settings

UI_DIR: Final = Path(__file__).resolve().parents[1] / "ui"
PREFIX: Final = "/ui"

_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".svg": "image/svg+xml",
}


@dataclass(frozen=True, slots=True)
class _File:
    body: bytes
    gzipped: bytes
    media_type: str
    etag: str


def _load(directory: Path) -> dict[str, _File]:
    files: dict[str, _File] = {}
    if not directory.is_dir():
        return files
    for path in sorted(directory.rglob("*")):
        if not path.is_file():
            continue
        body = path.read_bytes()
        media_type = _TYPES.get(path.suffix) or (
            mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        )
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        files[path.relative_to(directory).as_posix()] = _File(
            body, gzip.compress(body, mtime=0), media_type, etag
        )
    return files


def _origin(url: str | None) -> str:
    if not url:
        return ""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _is_loopback(request: Request[Any, Any, Any]) -> bool:
    client = request.client
    if client is None:
        return False
    try:
        return ip_address(client.host).is_loopback
    except ValueError:
        return False


def ui_router(settings: Settings, *, dev_token: str | None = None) -> Router:
    """The routes of ``/ui/``; ``dev_token`` is offered only to browsers on this machine."""
    files = _load(UI_DIR)
    issuer = settings.oidc.issuer
    client_id = settings.http.ui_oidc_client_id
    oidc = (
        {"authority": issuer, "clientId": client_id, "scope": settings.http.ui_oidc_scope}
        if issuer and client_id
        else None
    )
    connect = " ".join(filter(None, ("'self'", _origin(issuer) if oidc else "")))
    security = {
        "Content-Security-Policy": (
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            f"connect-src {connect}; base-uri 'none'; form-action 'self'; "
            "frame-ancestors 'none'"
        ),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }

    @get("/", sync_to_thread=False)
    def ui_root(request: Request[Any, Any, Any]) -> Response[bytes] | Redirect:
        # The page's links are relative, so /ui must become /ui/ before it is served.
        if not request.scope.get("raw_path", b"/").endswith(b"/"):
            return Redirect(f"{PREFIX}/")
        return ui_file(request, "")

    @get("/config.json", sync_to_thread=False)
    def ui_config(request: Request[Any, Any, Any]) -> Response[Any]:
        token = dev_token if dev_token is not None and _is_loopback(request) else None
        return Response(
            {"ok": True, "server": "", "devToken": token, "oidc": oidc},
            headers={**security, "Cache-Control": "no-store"},
        )

    def ui_file(request: Request[Any, Any, Any], file_path: str) -> Response[bytes]:
        name = file_path.lstrip("/") or "index.html"
        found = files.get(name)
        if found is None:
            raise NotFound("There is no such file in the browser UI.")
        headers = {
            **security,
            "ETag": found.etag,
            "Cache-Control": "no-cache",
            "Vary": "Accept-Encoding",
        }
        if request.headers.get("if-none-match") == found.etag:
            return Response(b"", status_code=304, headers=headers)
        body = found.body
        if "gzip" in request.headers.get("accept-encoding", ""):
            body = found.gzipped
            headers["Content-Encoding"] = "gzip"
        return Response(body, media_type=found.media_type, headers=headers)

    @get("/{file_path:path}", sync_to_thread=False, name="ui_asset")
    def ui_asset(request: Request[Any, Any, Any], file_path: FromPath[str]) -> Response[bytes]:
        return ui_file(request, file_path)

    return Router(path=PREFIX, route_handlers=[ui_root, ui_config, ui_asset])
