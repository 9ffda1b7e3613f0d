"""``mercury-http serve``: settings, auth, the channel check, then uvicorn."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from channel_http import chat_client
from core.channels import admits
from core.config import ConfigurationError, help_text, load_settings

log = logging.getLogger("mercury.http")


class _Server(uvicorn.Server):
    """uvicorn, plus: on SIGTERM/SIGINT every open turn ends with an ``error`` event."""

    def __init__(self, config: uvicorn.Config, app: Any) -> None:
        super().__init__(config)
        self._app = app
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[Any] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        loop, services = self._loop, getattr(self._app.state, "services", None)
        if loop is not None and services is not None and not self.should_exit:
            loop.call_soon_threadsafe(lambda: loop.create_task(services.manager.stop_turns()))
        super().handle_exit(sig, frame)


def _dev_token(environ: dict[str, str]) -> str | None:
    """With nothing configured, a development static token kept under the data dir."""
    if environ.get("MERCURY_AUTH") or environ.get("AUTH_STATIC_TOKENS"):
        return None
    data_dir = Path(environ.get("MERCURY_DATA_DIR") or "./data")
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "dev-token"
    if path.exists():
        token = path.read_text().strip()
    else:
        token = "dev-" + secrets.token_urlsafe(18)
        path.write_text(token + "\n")
        path.chmod(0o600)
    environ["MERCURY_AUTH"] = "static"
    environ["AUTH_STATIC_TOKENS"] = json.dumps({token: {"id": "dev", "displayName": "Developer"}})
    return token


def serve(arguments: argparse.Namespace) -> int:
    # Imported here: `mercury-http chat` shares this entry point and must start quickly.
    from channel_http.app import HttpChannel, build_app, with_cors

    environ = dict(os.environ)
    token = _dev_token(environ) if arguments.dev else None
    try:
        settings = load_settings(environ)
        app = build_app(settings, dev_token=token)
    except ConfigurationError as error:
        print(f"mercury-http: {error}", file=sys.stderr)
        return 2
    channel = HttpChannel()
    if not admits(channel):
        print("mercury-http: the core does not run this channel; see the log.", file=sys.stderr)
        return 1
    if token is not None:
        host = "127.0.0.1" if settings.http.host in ("0.0.0.0", "::") else settings.http.host  # noqa: S104
        print(f"Development token (static auth, user 'dev'): {token}", flush=True)
        print(
            f"Try: curl -N -X POST http://{host}:{settings.http.port}/turn "
            f"-H 'content-type: application/json' -H 'authorization: Bearer {token}' "
            """-d '{"text":"Hello!","conversationId":"first"}'""",
            flush=True,
        )
        if settings.http.ui:
            print(f"Or open the browser UI: http://{host}:{settings.http.port}/ui/", flush=True)
    config = uvicorn.Config(
        with_cors(app, settings),
        host=settings.http.host,
        port=settings.http.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        log_level="info",
        timeout_graceful_shutdown=math.ceil(settings.http.graceful_timeout_s),
        proxy_headers=False,
        access_log=False,  # its lines would carry the login callback's code and state
        server_header=False,
    )
    server = _Server(config, app)
    server.run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    parser = argparse.ArgumentParser(prog="mercury-http", description="Mercury's HTTP surface.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser(
        "serve",
        help="run the server",
        description="Run the HTTP surface. Settings come from mercury.yaml and the environment.",
        epilog=help_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve_parser.add_argument(
        "--dev",
        action="store_true",
        help="with no auth configured, make and print a development static token",
    )
    chat_client.add_command(commands)
    arguments = parser.parse_args(argv)
    if arguments.command == "chat":
        return chat_client.run(arguments)
    return serve(arguments)


if __name__ == "__main__":
    raise SystemExit(main())
