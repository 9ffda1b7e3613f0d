"""Short random codes people type back (confirmation tokens, link codes), and the time
encoding the state stores share."""

from __future__ import annotations

import secrets
import string
from datetime import UTC, datetime, timedelta
from typing import Final

#: The 62 letters and digits codes are drawn from.
ALPHABET: Final = string.ascii_letters + string.digits

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


def draw_code(groups: int) -> str:
    """``groups`` groups of four characters joined by ``-``, drawn with :mod:`secrets`."""
    return "-".join("".join(secrets.choice(ALPHABET) for _ in range(4)) for _ in range(groups))


def to_micros(moment: datetime) -> int:
    """A timezone-aware moment as whole microseconds since the epoch (exact in SQL)."""
    return (moment - _EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    return _EPOCH + micros * _MICROSECOND
