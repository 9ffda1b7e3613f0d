"""How often a person has been asked to sign in again for the scopes an MCP server demands.

A 403 ``insufficient_scope`` makes Mercury ask the person to sign in again with the scopes the
challenge names (step-up). A server that keeps demanding scopes its authorization server never
grants would have the person sign in again and again; :class:`StepUps` counts the step-up
sign-ins per person, server and scope set in the shared state store, so every instance sees
them, and after :data:`STEP_UP_LIMIT` within :data:`STEP_UP_WINDOW` the tool answers
:class:`ScopeRefused` instead of another login link. Showing the same pending link again (the
person hasn't signed in yet) isn't another attempt.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Final

from core.clock import Clock, system_clock
from core.codes import to_micros
from core.state import Migration, Schema
from core.tools.registry import ToolError

if TYPE_CHECKING:
    from core.tools.logins import Logins

__all__ = ["STEP_UP_LIMIT", "STEP_UP_WINDOW", "ScopeRefused", "StepUps"]

#: Step-up sign-ins per person, server and scope set within :data:`STEP_UP_WINDOW`.
STEP_UP_LIMIT: Final = 2
#: The window the step-up sign-ins are counted in, from the first one.
STEP_UP_WINDOW: Final = timedelta(minutes=15)

_SCHEMA: Final = Schema(
    "mcp_step_ups",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS mcp_step_ups (
    person_key TEXT NOT NULL,
    server     TEXT NOT NULL,
    scopes     TEXT NOT NULL,
    attempts   INTEGER NOT NULL,
    last_url   TEXT NOT NULL,
    ends_at    BIGINT NOT NULL,
    PRIMARY KEY (person_key, server, scopes)
);
""",
        ),
    ),
)


class ScopeRefused(ToolError):
    """The MCP server keeps refusing the scopes it asks for, after the person signed in again."""

    def __init__(self, title: str, scopes: tuple[str, ...]) -> None:
        asked = " ".join(scopes) or "(none named)"
        super().__init__(
            f"{title} keeps refusing access for want of the scopes {asked}, although the "
            f"person signed in again for them {STEP_UP_LIMIT} times; another sign-in won't "
            f"change that. Tell the person to ask the administrator of {title} to grant "
            "those scopes."
        )
        self.title = title
        self.scopes = scopes


class StepUps:
    """The step-up sign-ins begun per person, server and scope set, shared by every instance."""

    def __init__(
        self,
        logins: Logins,
        *,
        limit: int = STEP_UP_LIMIT,
        window: timedelta = STEP_UP_WINDOW,
        clock: Clock = system_clock,
    ) -> None:
        self._logins = logins
        self._limit = limit
        self._window = window
        self._clock = clock
        self._opened = False

    async def _open(self) -> None:
        if not self._opened:
            await self._logins.database.migrate(_SCHEMA)
            self._opened = True

    async def check(
        self, person_key: str, server: str, title: str, scopes: tuple[str, ...], service: str
    ) -> None:
        """Raise :class:`ScopeRefused` when the person may not be asked again for ``scopes``:
        the limit is reached in the window and the last link is no longer pending."""
        await self._open()
        row = await self._logins.database.fetch_one(
            "SELECT attempts, last_url FROM mcp_step_ups WHERE person_key = ? AND server = ? "
            "AND scopes = ? AND ends_at > ?",
            (person_key, server, _key(scopes), to_micros(self._clock())),
        )
        if row is None or int(row["attempts"]) < self._limit:
            return
        if await self._logins.pending_url(person_key, service) == row["last_url"]:
            return  # the person hasn't used the last link yet: it is shown again
        raise ScopeRefused(title, scopes)

    async def record(self, person_key: str, server: str, scopes: tuple[str, ...], url: str) -> None:
        """Count the step-up sign-in at ``url``, unless it is the link counted last."""
        await self._open()
        now = self._clock()
        await self._logins.database.execute(
            "INSERT INTO mcp_step_ups (person_key, server, scopes, attempts, last_url, ends_at) "
            "VALUES (?, ?, ?, 1, ?, ?) ON CONFLICT (person_key, server, scopes) DO UPDATE SET "
            "attempts = CASE WHEN mcp_step_ups.ends_at <= ? THEN 1 "
            "WHEN mcp_step_ups.last_url = excluded.last_url THEN mcp_step_ups.attempts "
            "ELSE mcp_step_ups.attempts + 1 END, "
            "ends_at = CASE WHEN mcp_step_ups.ends_at <= ? THEN excluded.ends_at "
            "ELSE mcp_step_ups.ends_at END, "
            "last_url = excluded.last_url",
            (
                person_key,
                server,
                _key(scopes),
                url,
                to_micros(now + self._window),
                to_micros(now),
                to_micros(now),
            ),
        )


def _key(scopes: tuple[str, ...]) -> str:
    return " ".join(sorted(set(scopes)))
