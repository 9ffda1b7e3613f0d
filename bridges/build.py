"""The bridges the settings turn on, each on its platform's SDK, imported only then."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from bridges.port import PlatformBridge
    from core.config.settings import Settings

__all__ = ["build_bridges"]

#: Per platform, the module and class (or builder) of its bridge; a bridge that is off never
#: loads its SDK.
BRIDGES: Final = {
    "slack": ("bridges.slack", "slack_bridge"),
    "telegram": ("bridges.telegram", "TelegramBridge"),
    "discord": ("bridges.discord", "DiscordBridge"),
    "whatsapp": ("bridges.whatsapp", "WhatsAppBridge"),
    "teams": ("bridges.teams", "TeamsBridge"),
    "matrix": ("bridges.matrix", "MatrixBridge"),
}


def build_bridges(settings: Settings) -> list[PlatformBridge]:
    """One bridge per platform switched on, each given its settings and the assistant's name."""
    built: list[PlatformBridge] = []
    for platform, (module, name) in BRIDGES.items():
        group = getattr(settings, platform)
        if group.enabled:
            bridge_type = getattr(importlib.import_module(module), name)
            built.append(bridge_type(group, bot_name=settings.trigger.name))
    return built
