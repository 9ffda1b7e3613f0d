"""The port every auth provider implements, and what the providers share.

An auth provider turns the ``authorization`` header of a request into a
:class:`~core.people.principal.Principal`, or says it doesn't recognize it (``None``).

Exceptions::

    AuthError
    └── AuthConfigurationError   a provider can't be built from its environment

A refused token is not an exception: ``authenticate`` returns ``None``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, Protocol, runtime_checkable

from core.people.principal import Principal

__all__ = [
    "AUTH_API_VERSION",
    "AuthConfigurationError",
    "AuthError",
    "AuthProvider",
    "bearer_token",
]

AUTH_API_VERSION: Final = 1
"""The version of this contract; a provider written for another one isn't loaded."""

# "Bearer", one or more spaces, one token, optional trailing spaces or tabs. The token ends
# at ASCII whitespace only: a no-break space or U+0085 after it is part of it (and so no
# token anyone was given), never stripped as Unicode whitespace (\s) would.
_BEARER: Final = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +([^\x00-\x20\x7f]+)[ \t]*")


class AuthError(Exception):
    """Base class of every error the auth providers raise."""


class AuthConfigurationError(AuthError):
    """A provider can't be built: its environment is missing or invalid."""


@runtime_checkable
class AuthProvider(Protocol):
    """Decides who a request comes from."""

    name: str

    async def authenticate(self, headers: Mapping[str, str]) -> Principal | None:
        """The caller behind ``headers`` (lower-cased names), or ``None`` when not recognized."""
        ...


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of a ``Bearer`` ``authorization`` header, or ``None`` for anything else."""
    value = headers.get("authorization")
    if value is None:
        return None
    match = _BEARER.fullmatch(value)
    return match.group(1) if match else None
