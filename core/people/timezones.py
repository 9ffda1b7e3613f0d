"""Time zones: IANA names made canonical, and the time stamp the model reads on each message.

A zone is an IANA name the system's tz database knows (``Europe/Rome``, ``UTC``,
``Etc/GMT-2``), matched without regard to case and returned as the database spells it.
A bare offset such as ``+02:00`` or ``UTC+2`` is not a zone's name: it says nothing about
summer time, so it is refused rather than guessed at.

Each message the model reads starts with when the person wrote it, where they are::

    [2026-12-02 17:05 Wednesday, Europe/Rome (UTC+01:00)] Shall we meet tomorrow?

That is ``[YYYY-MM-DD HH:MM <English weekday>, <zone> (UTC±HH:MM)] `` followed by the text
unchanged: local time to the minute, the weekday in English whatever the host's locale, and the
offset in force at that moment. The same inputs always give the same stamp.

Exceptions::

    UnknownTimeZoneError (ValueError)   stamp() was given a zone that isn't a canonical zone name
"""

from __future__ import annotations

import functools
import zoneinfo
from datetime import datetime, timedelta
from typing import Final

__all__ = [
    "MAX_ZONE_NAME_CHARS",
    "UnknownTimeZoneError",
    "canonical_zone",
    "choose_zone",
    "stamp",
]

# The longest IANA name is 32 characters; anything much longer is not worth a lookup.
MAX_ZONE_NAME_CHARS: Final = 64

# In available_timezones() but not places: "localtime" is whatever the host is set to and
# "Factory" is the tz database's placeholder for "not configured yet".
_NOT_ZONES: Final = frozenset({"localtime", "Factory"})

_WEEKDAYS: Final = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


class UnknownTimeZoneError(ValueError):
    """A time zone name the tz database doesn't know."""


@functools.cache
def _zones_by_lowercase() -> dict[str, str]:
    # Read once: available_timezones() walks the tz database on disk.
    return {name.lower(): name for name in zoneinfo.available_timezones() - _NOT_ZONES}


@functools.lru_cache(maxsize=64)
def _zone(name: str) -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(name)


def canonical_zone(name: str) -> str | None:
    """``name`` as the tz database spells it (``europe/rome`` → ``Europe/Rome``), else ``None``.

    Surrounding spaces are ignored. Never raises, whatever the input.
    """
    if not isinstance(name, str) or len(name) > MAX_ZONE_NAME_CHARS:
        return None
    return _zones_by_lowercase().get(name.strip().lower())


def choose_zone(saved: str | None, header: str | None, default: str) -> str:
    """The zone a person's messages are stamped in.

    Their saved zone, else the one the request names (``header``), else ``default``; a name
    that isn't a zone's is passed over.
    """
    for candidate in (saved, header):
        if candidate is not None:
            zone = canonical_zone(candidate)
            if zone is not None:
                return zone
    return default


def stamp(text: str, when: datetime, zone: str) -> str:
    """``text`` preceded by the local time of ``when`` in ``zone``, as the module describes.

    ``when`` must be timezone-aware and ``zone`` canonical (what :func:`choose_zone` gives).
    """
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(
            "stamp() needs a timezone-aware time; build it with datetime.now(UTC) or the clock."
        )
    if canonical_zone(zone) != zone:
        raise UnknownTimeZoneError(
            f"{zone!r} isn't a canonical time zone name; pass what choose_zone() returns."
        )
    local = when.astimezone(_zone(zone))
    offset = local.utcoffset() or timedelta(0)
    return (
        f"[{local:%Y-%m-%d %H:%M} {_WEEKDAYS[local.weekday()]}, {zone} "
        f"(UTC{_offset(offset)})] {text}"
    )


def _offset(offset: timedelta) -> str:
    # Historical zones (local mean time) have offsets in seconds; round to the minute.
    minutes = round(offset.total_seconds() / 60)
    sign = "-" if minutes < 0 else "+"
    hours, minutes = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{minutes:02d}"
