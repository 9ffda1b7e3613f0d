"""What the bridges' end-to-end scenes share: the configuration file a server starts with,
what the model was asked, and the one sleep-based check (for what must *not* happen)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any


def config_file(tmp_path: Path, text: str) -> str:
    """``text`` written as ``mercury.yaml`` under ``tmp_path``; its path, for
    ``MERCURY_CONFIG_FILE``."""
    config = tmp_path / "mercury.yaml"
    config.write_text(text, encoding="utf-8")
    return str(config)


async def settle(seconds: float = 1.0) -> None:
    """Give the server time to do something it must not do (the only sleep-based check)."""
    await asyncio.sleep(seconds)


def user_contents(request: dict[str, Any]) -> list[str]:
    """The people's turns in a request the model stand-in received."""
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def system_of(request: dict[str, Any]) -> str:
    """The instructions a request the model stand-in received began with."""
    return str(request["messages"][0]["content"])
