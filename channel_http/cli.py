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

from channel_http import chat_client, logs
from core.channels import admits
from core.config import ConfigurationError, Settings, help_text, load_settings
from core.version import core_version

# The server's modules (the app, the state store, tracing) are imported by the commands that
# use them: ``mercury-http chat`` starts without loading the server.

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


async def _reach_state_store(settings: Settings) -> None:
    from core.state import connect

    database = await connect(settings.state.url, settings.data_dir, pool_size=1)
    await database.close()


def _overrides(arguments: argparse.Namespace, environ: dict[str, str]) -> None:
    """``--config``, ``--host`` and ``--port`` win over the environment and the file."""
    if arguments.config is not None:
        environ["MERCURY_CONFIG_FILE"] = arguments.config
    if arguments.host is not None:
        environ["HTTP_SURFACE_HOST"] = arguments.host
    if arguments.port is not None:
        environ["HTTP_SURFACE_PORT"] = str(arguments.port)


def serve(arguments: argparse.Namespace) -> int:
    # Imported here: `mercury-http chat` shares this entry point and must start quickly.
    from channel_http.app import HttpChannel, build_app, with_cors
    from channel_http.connections import server_options
    from channel_http.tracing import configure_tracing
    from core.state import DatabaseUnavailable

    environ = dict(os.environ)
    _overrides(arguments, environ)
    token = _dev_token(environ) if arguments.dev else None
    if token is not None and "HTTP_SURFACE_HOST" not in environ:
        # Development mode stays on this machine unless a host is asked for explicitly.
        environ["HTTP_SURFACE_HOST"] = "127.0.0.1"
    try:
        settings = load_settings(environ)
        logs.configure(settings.log.level, settings.log.format)
        configure_tracing(environ)
        app = build_app(settings, dev_token=token)
    except ConfigurationError as error:
        print(f"mercury-http: {error}", file=sys.stderr)
        return 2
    if settings.state.url is not None:
        try:
            asyncio.run(_reach_state_store(settings))
        except DatabaseUnavailable as error:
            # Said in one line before anything starts, rather than as a start-up traceback.
            print(f"mercury-http: {error}", file=sys.stderr)
            return 1
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
        lifespan="on",
        log_level=settings.log.level,
        log_config=None,  # uvicorn's lines go through our handler, in our format
        timeout_graceful_shutdown=math.ceil(settings.http.graceful_timeout_s),
        proxy_headers=False,
        access_log=False,  # ours (access_log.py) logs the route template, never the query
        server_header=False,
        **server_options(settings),
    )
    server = _Server(config, app)
    server.run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    logs.configure()
    parser = argparse.ArgumentParser(prog="mercury-http", description="Mercury's HTTP surface.")
    parser.add_argument("--version", action="version", version=f"mercury-http {core_version()}")
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
        help="with no auth configured, make and print a development static token, and "
        "listen on 127.0.0.1 only unless --host or HTTP_SURFACE_HOST says otherwise",
    )
    serve_parser.add_argument(
        "--host", help="the address to listen on (overrides HTTP_SURFACE_HOST and the file)"
    )
    serve_parser.add_argument(
        "--port", type=int, help="the port (overrides HTTP_SURFACE_PORT and the file)"
    )
    serve_parser.add_argument(
        "--config", metavar="FILE", help="the YAML settings file (overrides MERCURY_CONFIG_FILE)"
    )
    check_parser = commands.add_parser(
        "check-config",
        help="print the effective settings and every problem found (exit 1 on any)",
        description="Print the effective settings (secrets only as set or not set) and every "
        "problem found: settings, auth, directory, the models Ollama lacks. Exits 1 on any.",
    )
    check_parser.add_argument(
        "--config", metavar="FILE", help="the YAML settings file (overrides MERCURY_CONFIG_FILE)"
    )
    init_parser = commands.add_parser(
        "init",
        help="write a commented mercury.yaml with every setting at its default",
        description="Write a mercury.yaml naming every setting the file may hold, at its "
        "default, with its meaning as a comment.",
    )
    init_parser.add_argument("--output", help="where to write it (default: mercury.yaml)")
    init_parser.add_argument("--force", action="store_true", help="replace an existing file")
    chat_client.add_command(commands)
    arguments = parser.parse_args(argv)
    if arguments.command == "chat":
        return chat_client.run(arguments)
    if arguments.command in ("check-config", "init"):
        from channel_http.config_commands import check_config, init

        return check_config(arguments) if arguments.command == "check-config" else init(arguments)
    return serve(arguments)


if __name__ == "__main__":
    raise SystemExit(main())
