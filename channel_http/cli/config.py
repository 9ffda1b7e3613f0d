"""``mercury-http check-config`` and ``mercury-http init``: the settings, shown and started.

``check-config`` prints the effective settings (secrets only as "set"/"not set") and every
problem it finds, and exits 1 on any; a rule between settings that doesn't hold (a bridge
on without its secret) is a problem printed after the settings, not instead of them.
``init`` writes a ``mercury.yaml`` naming every setting
the file may hold at its default, each with its meaning as a comment.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Final, TextIO

import yaml

from channel_http.app import HttpChannel, build_auth, build_directory
from channel_http.routes.probes import fetch_hint, missing_models, model_names, model_server
from core.channels import admits
from core.config.settings import SETTINGS, ConfigurationError, Setting, read_settings

#: The file ``init`` writes when none is named.
INIT_FILE: Final = "mercury.yaml"
#: No auth configured is what the quickstart starts with: ``serve --dev`` makes a token.
DEV_MODE_NOTE: Final = (
    "No auth provider is configured. Development mode (scripts/serve, or mercury-http serve "
    "--dev) makes a static token for you, kept in {token}; plain "
    "mercury-http serve refuses to start. To let other people in, set MERCURY_AUTH "
    "and its settings (docs/auth.md)."
)


def check_config(arguments: argparse.Namespace, out: TextIO | None = None) -> int:
    """Print the effective settings and every problem; 0 when there is none, else 1."""
    out = out or sys.stdout
    environ = dict(os.environ)
    if arguments.config is not None:
        environ["MERCURY_CONFIG_FILE"] = arguments.config
    try:
        settings, problems = read_settings(environ)
    except ConfigurationError as error:  # a value that can't be read: no settings to show
        print(f"Problem: {error}", file=out)
        return 1
    print(settings.redacted(), file=out)
    notes: list[str] = []
    if not settings.auth.providers and not environ.get("AUTH_STATIC_TOKENS"):
        notes.append(DEV_MODE_NOTE.format(token=settings.data_dir / "dev-token"))
    else:
        try:
            build_auth(settings)
        except ConfigurationError as error:
            problems.append(str(error))
    try:
        build_directory(settings)
    except ConfigurationError as error:
        problems.append(str(error))
    if not admits(HttpChannel()):
        problems.append("The core does not run this channel's contract version; upgrade both.")
    names = model_names(settings, memory_on=settings.memory.store != "off")
    missing = asyncio.run(missing_models(settings, names, 3.0))
    server = model_server(settings)
    if missing is None:
        where = "OPENAI_BASE_URL" if settings.model.provider == "openai" else "OLLAMA_HOST"
        problems.append(f"{server} doesn't answer; start it, or set {where} to where it runs.")
    elif missing:
        problems.append(f"{server} lacks {', '.join(missing)}; {fetch_hint(settings, missing)}")
    print("", file=out)
    for note in notes:
        print(f"Note: {note}", file=out)
    if not problems:
        print("No problems found.", file=out)
        return 0
    for problem in problems:
        print(f"Problem: {problem}", file=out)
    return 1


def init(arguments: argparse.Namespace, out: TextIO | None = None) -> int:
    """Write the commented default file; never over an existing one unless ``--force``."""
    out = out or sys.stdout
    path = Path(arguments.output or INIT_FILE)
    if path.exists() and not arguments.force:
        print(
            f"mercury-http: {path} exists already; name another file with --output, or "
            "pass --force to replace it.",
            file=sys.stderr,
        )
        return 1
    path.write_text(default_file(), encoding="utf-8")
    print(f"Wrote {path}: every setting at its default; edit what you need.", file=out)
    return 0


def default_file() -> str:
    """The YAML of every setting the file may hold, at its default, with its meaning."""
    lines = [
        "# Mercury HTTP settings: every setting the file may hold, at its default.",
        "# An environment variable, when set, wins over this file. Secrets are read only",
        "# from the environment; they are listed at the end as a reminder.",
        "# Reference: docs/configuration.md.",
    ]
    opened: list[str] = []
    secrets: list[Setting] = []
    for setting in SETTINGS:
        if not setting.in_file:
            secrets.append(setting)
            continue
        *sections, key = setting.path.split(".")
        common = 0
        while common < min(len(opened), len(sections)) and opened[common] == sections[common]:
            common += 1
        opened = opened[:common]
        for depth in range(common, len(sections)):
            if depth == 0:
                lines.append("")
            lines.append("  " * depth + f"{sections[depth]}:")
            opened.append(sections[depth])
        indent = "  " * len(sections)
        if not sections:
            lines.append("")
        env = f" ({setting.env})" if setting.env else ""
        lines.append(f"{indent}# {setting.doc}{env}")
        value = _yaml_value(setting.default)
        if value is None:
            lines.append(f"{indent}# {key}:   (not set)")
        else:
            lines.append(f"{indent}{key}: {value}")
    lines.append("")
    lines.append("# Secrets, from the environment only:")
    lines.extend(f"#   {setting.env}: {setting.doc}" for setting in secrets if setting.env)
    return "\n".join(lines) + "\n"


def _yaml_value(default: object) -> str | None:
    if default is None:
        return None
    if isinstance(default, Path):
        default = str(default)
    elif isinstance(default, tuple):
        default = list(default)
    elif not isinstance(default, str | int | float | bool | list | dict):
        default = dict(default)  # type: ignore[call-overload]
    text: str = yaml.safe_dump(default, default_flow_style=True, width=1000)
    return text.removesuffix("\n...\n").strip()
