"""The directory port: who the people an instance knows are, looked up by identity.

A directory maps an identity (a principal's user key, ``<provider>:<id>``) to the person it
belongs to. Every per-person store is then keyed by ``<directory name>:<person id>``, so two
identities of one person share one private area and one set of roles.

Exception tree::

    DirectoryConfigurationError   a directory's settings are malformed (fix them and restart)
    DirectoryUnavailable          a directory couldn't answer right now (a runtime outcome)

The two are kept apart on purpose: the first is a deployment mistake found at start-up, the
second is something the core turns into a polite "try again later" for the person.
"""

from __future__ import annotations

from typing import Protocol

import msgspec

__all__ = [
    "Directory",
    "DirectoryConfigurationError",
    "DirectoryPerson",
    "DirectoryUnavailable",
]


class DirectoryConfigurationError(ValueError):
    """A directory's configuration can't be used as it is; the message names the field."""


class DirectoryUnavailable(Exception):
    """The directory couldn't be asked right now; nothing is known about the identity."""


class DirectoryPerson(msgspec.Struct, frozen=True, kw_only=True):
    """A person as the directory describes them."""

    id: str
    display_name: str | None = None
    email: str | None = None
    roles: frozenset[str] = frozenset()
    identities: tuple[str, ...] = ()


class Directory(Protocol):
    """Resolves identities to people.

    ``name`` prefixes person keys (``people`` gives ``people:alice``); it must differ from every
    auth provider's name, or a person key could clash with a user key.
    """

    @property
    def name(self) -> str:
        """The prefix of the person keys this directory hands out."""
        ...

    async def resolve(self, user_key: str) -> DirectoryPerson | None:
        """The person ``user_key`` belongs to, or ``None`` when the directory doesn't know it.

        Raises :class:`DirectoryUnavailable` (or anything else) when it can't tell.
        """
        ...
