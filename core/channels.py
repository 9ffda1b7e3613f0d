"""How the core admits a channel: by the contract version the channel declares."""

from __future__ import annotations

import logging
from typing import Protocol

from core.version import CHANNEL_API_VERSION

log = logging.getLogger("mercury.channels")


class Channel(Protocol):
    """A channel declares, as a literal, the contract version it was written for."""

    @property
    def name(self) -> str: ...

    @property
    def api_version(self) -> int: ...


def admits(channel: Channel) -> bool:
    """Whether the core starts ``channel``; logs why not on a mismatch."""
    if channel.api_version != CHANNEL_API_VERSION:
        log.error(
            'channel "%s" not started: it is written for channel contract %s, '
            "and this core implements contract %s",
            channel.name,
            channel.api_version,
            CHANNEL_API_VERSION,
        )
        return False
    return True
