"""Who a request comes from (the principal) and who the core talks to (the person)."""

from __future__ import annotations

from typing import Any

import msgspec


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """An authenticated caller as an auth provider recognized it."""

    id: str
    provider: str
    display_name: str | None = None
    claims: dict[str, Any] | None = None

    @property
    def user_key(self) -> str:
        """``<provider>:<id>``: two providers issuing the same id stay two identities."""
        return f"{self.provider}:{self.id}"


class Person(msgspec.Struct, frozen=True, kw_only=True):
    """The person behind a principal, as the directory (or the principal alone) says.

    ``key`` is what every per-person store is keyed by: ``people:<id>`` with a
    directory, the principal's user key without one.
    """

    key: str
    display_name: str | None = None
    email: str | None = None
    roles: frozenset[str] = frozenset()
