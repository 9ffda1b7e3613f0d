"""Whether a platform message is recent enough to run: the stale-message window.

Every platform stamps a message with the time it was sent (Slack's ``event_time``,
Telegram's ``date``, WhatsApp's ``timestamp``, Discord's snowflake). A signed delivery
captured and replayed once de-duplication has forgotten its id, or a message stamped years
ago, carries an old stamp: a message older than ``bridges.max_message_age_s`` (one day by
default, seven at most, always shorter than the days de-duplication remembers an id) is
acknowledged and runs nothing. A stamp ahead of our clock is allowed :data:`FUTURE_SKEW`,
for clocks that differ; further ahead it is refused too, or it would outlive the window.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = ["FUTURE_SKEW", "epoch", "staleness"]

#: How far ahead of this server's clock a message's stamp may be and still run.
FUTURE_SKEW: Final = timedelta(minutes=5)


def staleness(sent_at: datetime | None, now: datetime, max_age: timedelta) -> str | None:
    """Why a message stamped ``sent_at`` must not run at ``now``, for the log; None when it
    may (a message without a stamp may: the platform gave nothing to check)."""
    if sent_at is None:
        return None
    if sent_at.tzinfo is None:
        sent_at = sent_at.replace(tzinfo=UTC)
    age = now - sent_at
    if age > max_age:
        return f"it was sent {_span(age)} ago, past the {_span(max_age)} window"
    if -age > FUTURE_SKEW:
        return f"it is stamped {_span(-age)} ahead of this server's clock"
    return None


def epoch(seconds: object) -> datetime | None:
    """A platform's epoch seconds (a number, or a number as text) as an aware UTC time;
    None for anything else, or a number no calendar holds."""
    if isinstance(seconds, bool):
        return None
    try:
        value = float(seconds) if isinstance(seconds, int | float | str) else None
    except ValueError:
        return None
    if value is None:
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds >= 2 * 86_400:
        return f"{seconds // 86_400} days"
    if seconds >= 2 * 3600:
        return f"{seconds // 3600} hours"
    if seconds >= 120:
        return f"{seconds // 60} minutes"
    return f"{seconds} seconds"
