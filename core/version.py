"""Versions the core declares to the channels and plugins it hosts."""

from __future__ import annotations

from typing import Final

#: The distribution's version, ``major.minor.patch``: the one place it is written
#: (``pyproject.toml`` reads it from here through hatch), so a source checkout and an
#: installed wheel answer the same.
__version__ = "0.1.0"

#: The channel contract this core implements. A channel declares, as a literal, the
#: version it is written for; the core starts it only on equality.
CHANNEL_API_VERSION: Final = 6

#: The tool-plugin contract this core implements.
PLUGIN_API_VERSION: Final = 4


def core_version() -> str:
    """The core's version, ``major.minor.patch``."""
    return __version__
