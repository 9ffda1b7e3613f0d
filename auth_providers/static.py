"""Fixed bearer tokens from the environment, for the test bed and end-to-end tests.

``AUTH_STATIC_TOKENS`` is a JSON object from token to user::

    {"<token>": {"id": "alice", "displayName": "Alice"}}

Only SHA-256 digests of the tokens are kept, and a presented token is looked up by its
digest: one lookup however many tokens are declared. Neither the memory nor the timing
tells a token: the lookup's time depends on the presented token's digest, which says
nothing of a declared token unless one could find a preimage of it.

Exceptions::

    AuthError
    └── AuthConfigurationError   AUTH_STATIC_TOKENS is missing or invalid
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from auth_providers.provider import AuthConfigurationError, bearer_token
from core.people.principal import Principal

__all__ = ["StaticTokenProvider", "StaticUser"]

_VARIABLE: Final = "AUTH_STATIC_TOKENS"
_FIELDS: Final = frozenset({"id", "displayName"})


class StaticUser(msgspec.Struct, frozen=True, kw_only=True):
    """Who one static token stands for."""

    id: str
    display_name: str | None = None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def _user(entry: object) -> StaticUser:
    # Messages name the variable and the field, never the token the entry belongs to.
    if not isinstance(entry, dict):
        raise AuthConfigurationError(
            f"{_VARIABLE} must be an object from token to user, and a user is an object "
            'such as {"id": "alice"}; write every user as an object.'
        )
    if "roles" in entry:
        raise AuthConfigurationError(
            f'{_VARIABLE} gives a user "roles", which static tokens no longer carry; '
            "declare roles in the directory (DIRECTORY_STATIC_PEOPLE) instead."
        )
    unknown = sorted(str(key) for key in entry if key not in _FIELDS)
    if unknown:
        raise AuthConfigurationError(
            f"{_VARIABLE}: a user has unknown fields ({', '.join(unknown)}); "
            'a user has only "id" and optionally "displayName".'
        )
    user_id = entry.get("id")
    if user_id is None:
        raise AuthConfigurationError(
            f'{_VARIABLE}: the user of a token has no "id"; give every user an "id".'
        )
    if not isinstance(user_id, str) or not user_id.strip():
        raise AuthConfigurationError(
            f'{_VARIABLE}: the user of a token has an "id" that isn\'t a non-empty string; '
            'write every "id" as a string such as "alice".'
        )
    display_name = entry.get("displayName")
    if display_name is not None and not isinstance(display_name, str):
        raise AuthConfigurationError(
            f'{_VARIABLE}: a user has a "displayName" that isn\'t a string; '
            "write it as a string or leave it out."
        )
    return StaticUser(id=user_id, display_name=display_name or None)


class StaticTokenProvider:
    """Recognizes the tokens declared in ``AUTH_STATIC_TOKENS``."""

    name: str = "static"

    def __init__(self, users: Mapping[str, StaticUser]) -> None:
        if not users:
            raise AuthConfigurationError(
                f"{_VARIABLE} declares no token; declare at least one token and its user."
            )
        if any(not token for token in users):
            raise AuthConfigurationError(
                f"{_VARIABLE} declares an empty token; give every token at least one character."
            )
        if any(char.isspace() for token in users for char in token):
            raise AuthConfigurationError(
                f"{_VARIABLE} declares a token with whitespace in it, which no Bearer header "
                "can carry; write every token without spaces."
            )
        self._users: dict[bytes, StaticUser] = {
            _digest(token): user for token, user in users.items()
        }

    @classmethod
    def from_env(cls, raw: str | None) -> StaticTokenProvider:
        """Build the provider from the value of ``AUTH_STATIC_TOKENS``."""
        if raw is None or not raw.strip():
            raise AuthConfigurationError(
                f"{_VARIABLE} is missing; set it to a JSON object from token to user, "
                'such as {"<token>": {"id": "alice"}}.'
            )
        try:
            document: Any = json.loads(raw)
        except ValueError:
            # The decoder's message quotes the input, which holds tokens: leave it out.
            raise AuthConfigurationError(
                f"{_VARIABLE} isn't valid JSON; write it as a JSON object from token to user."
            ) from None
        if not isinstance(document, dict):
            raise AuthConfigurationError(
                f"{_VARIABLE} must be an object from token to user, "
                'such as {"<token>": {"id": "alice"}}.'
            )
        return cls({token: _user(entry) for token, entry in document.items()})

    async def authenticate(self, headers: Mapping[str, str]) -> Principal | None:
        """The user of the presented token, found by the token's digest."""
        token = bearer_token(headers)
        if token is None:
            return None
        found = self._users.get(_digest(token))
        if found is None:
            return None
        return Principal(id=found.id, provider="static", display_name=found.display_name)
