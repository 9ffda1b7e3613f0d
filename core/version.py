"""Versions the core declares to the channels and plugins it hosts."""

from __future__ import annotations

from importlib import metadata
from typing import Final

#: The channel contract this core implements. A channel declares, as a literal, the
#: version it is written for; the core starts it only on equality.
CHANNEL_API_VERSION: Final = 6

#: The tool-plugin contract this core implements.
PLUGIN_API_VERSION: Final = 4


def core_version() -> str:
    """The core's version, ``major.minor.patch``, as the installed distribution says."""
    try:
        return metadata.version("mercury-http")
    except metadata.PackageNotFoundError:  # running from a bare source tree
        return "0.0.0"
