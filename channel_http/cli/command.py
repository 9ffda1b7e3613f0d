"""``mercury-http serve``: settings, auth, the channel check, then uvicorn."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import secrets
import signal
import socket
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Final

import msgspec
import uvicorn
import yaml

from channel_http.cli import admin, chat
from channel_http.cli.language import accept_language, argparse_speaking, translator_for
from channel_http.serving import collector, logs, switching
from channel_http.serving.accept import GreedyAccept, accept_greedily
from core.channels import admits
from core.config.settings import ConfigurationError, Settings, help_text, load_settings
from core.people.i18n import Translator
from core.version import core_version

# The server's modules (the app, the state store, tracing) are imported by the commands that
# use them: ``mercury-http chat`` starts without loading the server.

log = logging.getLogger("mercury.http")


class _Server(uvicorn.Server):
    """uvicorn, plus: on SIGTERM/SIGINT every open turn ends with an ``error`` event."""

    def __init__(
        self, config: uvicorn.Config, app: Any, *, announce: bool = True, as_log: bool = False
    ) -> None:
        super().__init__(config)
        self._app = app
        self._announce = announce
        self._as_log = as_log
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Task[None] | None = None
        self._acceptors: list[GreedyAccept] = []

    async def startup(self, sockets: list[Any] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)
        if not self.should_exit:
            # New clients are let in all at once, not one per loop iteration (accept.py).
            self._acceptors = accept_greedily(self)
            if self._announce:
                _announce(self.servers, as_log=self._as_log)
            collector.settle()  # the app is up: what lives now lives as long as the process
            switching.hand_over_sooner()  # threads answering the loop get their turn sooner

    async def shutdown(self, sockets: list[Any] | None = None) -> None:
        for acceptor in self._acceptors:
            acceptor.close()
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        loop, services = self._loop, getattr(self._app.state, "services", None)
        if loop is not None and services is not None and not self.should_exit:
            loop.call_soon_threadsafe(self._stop_turns, loop, services)
        super().handle_exit(sig, frame)

    def _stop_turns(self, loop: asyncio.AbstractEventLoop, services: Any) -> None:
        # Kept: the task waits for the turns to unwind, and a task nobody holds may vanish.
        self._stopping = loop.create_task(services.manager.stop_turns())


def _announce(servers: Sequence[Any], *, as_log: bool = False) -> None:
    """Say where the server listens, as bound: the address is never a surprise (#36).

    Printed for a person; with JSON logs, a log line like every other (``as_log``), so what
    reads the output line by line as JSON never meets a plain one.
    """
    for server in servers:
        for sock in server.sockets:
            host, port = sock.getsockname()[:2]
            _say_listening(f"[{host}]" if ":" in host else host, port, as_log=as_log)


def _say_listening(shown: str, port: int, suffix: str = "", *, as_log: bool) -> None:
    if as_log:
        log.info("listening on http://%s:%s%s", shown, port, suffix)
    else:
        print(f"mercury-http: listening on http://{shown}:{port}{suffix}", flush=True)


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

    database = await connect(
        settings.state.url,
        settings.data_dir,
        pool_size=1,
        busy_timeout_s=settings.state.busy_timeout_s,
        connect_timeout_s=settings.state.connect_timeout_s,
    )
    await database.close()


def _overrides(arguments: argparse.Namespace, environ: dict[str, str]) -> None:
    """``--config``, ``--host`` and ``--port`` win over the environment and the file."""
    if arguments.config is not None:
        environ["MERCURY_CONFIG_FILE"] = arguments.config
    if arguments.host is not None:
        environ["HTTP_SURFACE_HOST"] = arguments.host
    if arguments.port is not None:
        environ["HTTP_SURFACE_PORT"] = str(arguments.port)
    if getattr(arguments, "workers", None) is not None:
        environ["HTTP_SURFACE_WORKERS"] = str(arguments.workers)


def serve(arguments: argparse.Namespace) -> int:
    environ = dict(os.environ)
    _overrides(arguments, environ)
    token = _dev_token(environ) if arguments.dev else None
    dev_model = getattr(arguments, "dev_model", False)
    data_dir = Path(environ.get("MERCURY_DATA_DIR") or "./data")
    if dev_model:
        from dev_model.command import start_beside_server

        start_beside_server(environ, data_dir)
    try:
        settings = load_settings(environ)
        if dev_model:
            from dev_model.command import with_demo

            settings = with_demo(settings, data_dir, development_person=token is not None)
    except ConfigurationError as error:
        print(f"mercury-http: {error}", file=sys.stderr)
        return 2
    if arguments.dev:
        settings = _dev_rate_limit(settings, environ)
    if settings.http.workers > 1:
        return _serve_workers(settings, environ, token)
    return _serve_one(settings, environ, token)


#: Turns a person may start per minute under ``--dev`` when nothing sets the limit: enough to
#: walk through every demo of the scripted model without a 429.
DEV_RATE_LIMIT: Final = 60


def _dev_rate_limit(settings: Settings, environ: Mapping[str, str]) -> Settings:
    """Under ``--dev``, `DEV_RATE_LIMIT` unless the environment or the file sets the limit."""
    if environ.get("MERCURY_RATE_LIMIT_PER_USER", "").strip():
        return settings
    if settings.config_file is not None:
        with contextlib.suppress(OSError, yaml.YAMLError):
            tree = yaml.safe_load(settings.config_file.read_text(encoding="utf-8"))
            section = tree.get("rate_limit") if isinstance(tree, dict) else None
            if isinstance(section, dict) and section.get("per_user") is not None:
                return settings
    limit = msgspec.structs.replace(settings.rate_limit, per_user=DEV_RATE_LIMIT)
    return msgspec.structs.replace(settings, rate_limit=limit)


def _serve_one(
    settings: Settings,
    environ: dict[str, str],
    token: str | None,
    sockets: list[socket.socket] | None = None,
) -> int:
    """One server process: the app, the checks, then uvicorn (on ``sockets`` when given)."""
    # Imported here: `mercury-http chat` shares this entry point and must start quickly.
    from channel_http.app import HttpChannel, build_app, with_cors
    from channel_http.serving.connections import server_options
    from channel_http.tracing import configure_tracing
    from core.state import DatabaseUnavailable

    try:
        logs.configure(settings.log.level, settings.log.format)
        configure_tracing(environ)
        app = build_app(settings, dev_token=token)
    except ConfigurationError as error:
        print(f"mercury-http: {error}", file=sys.stderr)
        return 2
    if settings.state.url is not None and sockets is None:
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
    if token is not None and sockets is None:
        _print_dev_token(settings, token)
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
    server = _Server(config, app, announce=sockets is None, as_log=settings.log.format == "json")
    server.run(sockets=sockets)
    return 0


def _print_dev_token(settings: Settings, token: str) -> None:
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


def _listener(host: str, port: int) -> socket.socket:
    """A socket on ``host:port`` that other processes may bind too (``SO_REUSEPORT``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _serve_workers(settings: Settings, environ: dict[str, str], token: str | None) -> int:
    """``workers`` server processes on one port, each with a listening socket of its own.

    The kernel spreads new connections over the workers' sockets (``SO_REUSEPORT``); a
    connection, and so a stream, stays with the worker that accepted it. The parent only
    holds the port (bound, not listening, so it accepts nothing), forwards SIGTERM/SIGINT,
    and stops the others when one worker exits.
    """
    from core.state import DatabaseUnavailable

    try:
        asyncio.run(_reach_state_store(settings))
    except DatabaseUnavailable as error:
        print(f"mercury-http: {error}", file=sys.stderr)
        return 1
    try:
        holder = _listener(settings.http.host, settings.http.port)
    except OSError as error:
        print(
            f"mercury-http: can't listen on {settings.http.host}:{settings.http.port} "
            f"({error.strerror}); pick another HTTP_SURFACE_PORT.",
            file=sys.stderr,
        )
        return 1
    port = holder.getsockname()[1]
    settings = msgspec.structs.replace(
        settings, http=msgspec.structs.replace(settings.http, port=port)
    )
    multiproc: tempfile.TemporaryDirectory[str] | None = None
    if settings.metrics.enabled and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Before any worker imports prometheus_client: each writes its samples there and
        # GET /metrics on any worker adds them up (channel_http/routes/probes.py).
        multiproc = tempfile.TemporaryDirectory(prefix="mercury-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = multiproc.name
    if token is not None:
        _print_dev_token(settings, token)
    shown = f"[{settings.http.host}]" if ":" in settings.http.host else settings.http.host
    _say_listening(
        shown,
        port,
        f" ({settings.http.workers} worker processes)",
        as_log=settings.log.format == "json",
    )
    children: list[int] = []
    for _ in range(settings.http.workers):
        pid = os.fork()
        if pid == 0:  # a worker: its own listening socket on the held port, then uvicorn
            code = 1
            try:
                holder.close()
                sock = _listener(settings.http.host, port)
                sock.listen(2048)
                sock.set_inheritable(False)
                code = _serve_one(settings, environ, token, sockets=[sock])
            finally:
                os._exit(code)
        children.append(pid)
    stopping = False

    def stop(sig: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = 0
    try:
        while children:
            pid, status = os.wait()
            if pid not in children:
                continue
            children.remove(pid)
            exit_code = os.waitstatus_to_exitcode(status)
            if not stopping:
                log.error("worker %d exited (%d); stopping the others", pid, exit_code)
                code = code or exit_code or 1
                stop(signal.SIGTERM, None)
    finally:
        holder.close()
        if multiproc is not None:
            multiproc.cleanup()
    return code


def parser(tr: Translator) -> argparse.ArgumentParser:
    """``mercury-http`` and its sub-commands, their texts in ``tr``'s language.

    Built inside :func:`~channel_http.cli.language.argparse_speaking` so argparse's own
    headings come in that language too.
    """
    top = argparse.ArgumentParser(
        prog="mercury-http", description=tr.gettext("Mercury's HTTP surface.")
    )
    top.add_argument(
        "--version",
        action="version",
        version=f"mercury-http {core_version()}",
        help=tr.gettext("show program's version number and exit"),
    )
    commands = top.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser(
        "serve",
        help=tr.gettext("run the server"),
        description=tr.gettext(
            "Run the HTTP surface. Settings come from mercury.yaml and the environment."
        ),
        epilog=help_text(tr),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve_parser.add_argument(
        "--dev",
        action="store_true",
        help=tr.gettext("with no auth configured, make and print a development static token"),
    )
    serve_parser.add_argument(
        "--dev-model",
        action="store_true",
        help=tr.gettext(
            "start the scripted model (see dev-model) in this process and use it, with its "
            "demo services, instead of a model server"
        ),
    )
    serve_parser.add_argument(
        "--host",
        help=tr.gettext(
            "the address to listen on (overrides HTTP_SURFACE_HOST and the file; default "
            "127.0.0.1, this machine only: 0.0.0.0 listens on every interface)"
        ),
    )
    serve_parser.add_argument(
        "--port", type=int, help=tr.gettext("the port (overrides HTTP_SURFACE_PORT and the file)")
    )
    config_help = tr.gettext("the YAML settings file (overrides MERCURY_CONFIG_FILE)")
    serve_parser.add_argument("--config", metavar="FILE", help=config_help)
    serve_parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help=tr.gettext(
            "N server processes sharing the port (overrides HTTP_SURFACE_WORKERS); more than "
            "1 needs PostgreSQL (MERCURY_STATE_URL) and memory on a Qdrant server or off"
        ),
    )
    check_parser = commands.add_parser(
        "check-config",
        help=tr.gettext("print the effective settings and every problem found (exit 1 on any)"),
        description=tr.gettext(
            "Print the effective settings (secrets only as set or not set) and every "
            "problem found: settings, auth, directory, the models Ollama lacks. Exits 1 on any."
        ),
    )
    check_parser.add_argument("--config", metavar="FILE", help=config_help)
    init_parser = commands.add_parser(
        "init",
        help=tr.gettext("write a commented mercury.yaml with every setting at its default"),
        description=tr.gettext(
            "Write a mercury.yaml naming every setting the file may hold, at its "
            "default, with its meaning as a comment."
        ),
    )
    init_parser.add_argument(
        "--output", help=tr.gettext("where to write it (default: mercury.yaml)")
    )
    init_parser.add_argument(
        "--force", action="store_true", help=tr.gettext("replace an existing file")
    )
    dev_model_parser = commands.add_parser(
        "dev-model",
        help=tr.gettext("serve a scripted model on 127.0.0.1 (Ollama's and OpenAI's protocols)"),
        description=tr.gettext(
            "Serve a deterministic scripted model on 127.0.0.1, speaking Ollama's "
            "protocol and OpenAI's (under /v1), to try Mercury without a model server. It "
            "echoes messages; '/demo' in a message lists the events it produces on demand "
            "(reasoning, tools, confirmations, sign-ins, displays, a slow stream, an error, a "
            "stalled stream)."
        ),
    )
    dev_model_parser.add_argument(
        "--port",
        type=int,
        default=11434,
        help=tr.gettext("the port (default 11434; 0 picks a free one)"),
    )
    dev_model_parser.add_argument(
        "--model",
        action="append",
        metavar="NAME",
        help=tr.gettext(
            "another model name to answer to (repeatable); it always answers to the default "
            "chat and embedding models"
        ),
    )
    chat.add_command(commands, tr)
    admin.add_commands(commands, tr)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    logs.configure()
    # No server has answered yet: --help and usage errors speak the terminal's language.
    tr = translator_for(accept_language(os.environ))
    with argparse_speaking(tr):
        arguments = parser(tr).parse_args(argv)
    if arguments.command == "dev-model":
        from dev_model.command import run as run_dev_model

        return run_dev_model(arguments)
    if arguments.command == "chat":
        return chat.run(arguments)
    if arguments.command in admin.COMMANDS:
        return admin.run(arguments)
    if arguments.command in ("check-config", "init"):
        from channel_http.cli.config import check_config, init

        return check_config(arguments) if arguments.command == "check-config" else init(arguments)
    return serve(arguments)


if __name__ == "__main__":
    raise SystemExit(main())
