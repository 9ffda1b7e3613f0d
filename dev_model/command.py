"""``mercury-http dev-model``, and the scripted model ``mercury-http serve --dev-model`` starts.

:func:`run` serves :class:`~dev_model.demo.DevModel` in the foreground on 127.0.0.1 until
SIGINT or SIGTERM, after printing how to point a server at it. :func:`start_beside_server`
starts it in a thread of the server's process on a free port, writes the demo settings (its
services, the demo space) beside the data, and sets the server's environment to use it;
:func:`with_demo` merges the demo settings into those in force.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import signal
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Final

import msgspec

from core.config.settings import CONFIG_FILE_VARIABLE, SETTINGS, Settings, read_settings
from dev_model.demo import DEMOS, DevModel, demo_yaml

__all__ = ["DEMO_FILE", "model_names", "run", "start_beside_server", "with_demo"]

#: The demo settings ``serve --dev-model`` writes under the data directory (never the
#: person's own settings file, which it only adds to in memory).
DEMO_FILE: Final = "dev-model.yaml"


def model_names(extra: list[str] | None = None) -> list[str]:
    """The chat and embedding models the server asks for by default, then ``extra``."""
    defaults = {s.path: s.default for s in SETTINGS}
    names = [str(defaults["ollama.model"]), str(defaults["ollama.embedding_model"])]
    return names + [name for name in extra or [] if name not in names]


def demo_list() -> str:
    return "\n".join(f"  /demo {name:<10} {what}" for name, what in DEMOS.items())


def _announce(url: str, models: list[str]) -> None:
    print(
        f"mercury-http dev-model: Ollama's protocol on {url}, OpenAI's on {url}/v1\n"
        f"Models: {', '.join(models)}\n"
        f"Point a server at it: OLLAMA_HOST={url} (or MERCURY_MODEL_PROVIDER=openai "
        f"OPENAI_BASE_URL={url}/v1 OPENAI_MODEL={models[0]} "
        f"OPENAI_EMBEDDING_MODEL={models[1]})\n"
        "Say one of these in a message (anything else is echoed):\n" + demo_list(),
        flush=True,
    )


async def _serve(model: DevModel, models: list[str]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await model.serve(stop, on_listening=lambda url: _announce(url, models))


def run(arguments: argparse.Namespace) -> int:
    """Serve the scripted model in the foreground until SIGINT or SIGTERM."""
    models = model_names(arguments.model)
    model = DevModel(port=arguments.port, models=models)
    try:
        asyncio.run(_serve(model, models))
    except OSError as error:
        print(
            f"mercury-http dev-model: can't listen on 127.0.0.1:{arguments.port} "
            f"({error.strerror}); pick another with --port.",
            file=sys.stderr,
        )
        return 1
    return 0


def start_beside_server(environ: dict[str, str], data_dir: Path) -> DevModel:
    """Start the scripted model in a thread and point the server's ``environ`` at it.

    Sets the model (Ollama's protocol, the default model names), the public URL and secret
    key a sign-in needs (unless set; the key is kept beside the development token), and
    writes the demo settings (:func:`dev_model.demo.demo_yaml`) to ``data_dir/dev-model.yaml``
    for :func:`with_demo` to merge in.
    """
    models = model_names()
    model = DevModel(models=models).start()
    for name in ("MERCURY_MODEL_PROVIDER", "OLLAMA_MODEL", "OLLAMA_EMBEDDING_MODEL"):
        environ.pop(name, None)
    environ["OLLAMA_HOST"] = model.url
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / DEMO_FILE).write_text(demo_yaml(model.url), encoding="utf-8")
    if not environ.get("HTTP_SURFACE_PUBLIC_URL"):
        host = environ.get("HTTP_SURFACE_HOST") or "127.0.0.1"
        if host in ("0.0.0.0", "::"):  # noqa: S104 - compared, not bound
            host = "127.0.0.1"
        environ["HTTP_SURFACE_PUBLIC_URL"] = (
            f"http://{host}:{environ.get('HTTP_SURFACE_PORT') or 4100}"
        )
    if not environ.get("MERCURY_SECRET_KEY"):
        path = data_dir / "dev-secret-key"
        if not path.exists():
            path.write_text(secrets.token_urlsafe(32) + "\n")
            path.chmod(0o600)
        environ["MERCURY_SECRET_KEY"] = path.read_text().strip()
    print(
        f"Scripted model (mercury-http dev-model) on {model.url}. "
        "Say one of these in a message:\n" + demo_list(),
        flush=True,
    )
    return model


def with_demo(settings: Settings, data_dir: Path, *, development_person: bool) -> Settings:
    """``settings`` with the demo settings :func:`start_beside_server` wrote merged in.

    The demo services join the declared ones (a service of the same name stays the file's);
    the demo space joins the file's spaces unless the file declares it. With the
    development token (``development_person``) and no directory configured, the demo
    directory makes ``dev`` an approver and names the demo space's people.
    """
    demo, _ = read_settings({CONFIG_FILE_VARIABLE: str(data_dir / DEMO_FILE)})
    declared = {service.name for service in settings.services}
    services = settings.services + tuple(s for s in demo.services if s.name not in declared)
    settings = msgspec.structs.replace(
        settings,
        services=services,
        spaces=MappingProxyType({**demo.spaces, **settings.spaces}),
    )
    if development_person and settings.directory.static_people is None:
        settings = msgspec.structs.replace(settings, directory=demo.directory)
    return settings
