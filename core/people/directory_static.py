"""A directory declared in one setting, ``DIRECTORY_STATIC_PEOPLE``: a JSON list of people.

Each entry is ``{"id", "displayName"?, "email"?, "roles"?: [str], "identities": [str]}``::

    [{"id": "alice", "displayName": "Alice", "roles": ["mercury.act-as-self"],
      "identities": ["static:alice", "oidc:314159"]}]

Person keys are ``people:<id>``. Every mistake in the setting is a
:class:`~core.people.directory.DirectoryConfigurationError` raised at start-up, naming the entry and
the field; nothing is guessed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from core.people.directory import DirectoryConfigurationError, DirectoryPerson

__all__ = ["SETTING", "StaticDirectory"]

SETTING: Final = "DIRECTORY_STATIC_PEOPLE"

_ID_PATTERN: Final = re.compile(r"[a-z0-9][a-z0-9._-]{0,47}")
# ``<provider>:<id>``: a provider name without colons or spaces, then a non-empty id.
_IDENTITY_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*:\S(?:.*\S)?", re.DOTALL)
_FIELDS: Final = ("id", "displayName", "email", "roles", "identities")
_FIELD_LIST: Final = "id, displayName, email, roles and identities"


def _fail(message: str) -> DirectoryConfigurationError:
    return DirectoryConfigurationError(f"{SETTING}{message}")


class StaticDirectory:
    """People listed in configuration; resolving an identity is a dictionary lookup."""

    name: Final = "people"

    def __init__(self, people: Mapping[str, DirectoryPerson]) -> None:
        """``people`` maps each identity to its person; prefer :meth:`from_env`."""
        self._by_identity = dict(people)

    @classmethod
    def from_env(cls, raw_json: str) -> StaticDirectory:
        """Build the directory from the setting's value, or say exactly what's wrong with it."""
        try:
            entries: Any = msgspec.json.decode(raw_json)
        except msgspec.DecodeError as error:
            raise _fail(
                f" is not valid JSON ({error}); give a JSON list of people such as "
                '[{"id": "alice", "identities": ["static:alice"]}].'
            ) from None
        if not isinstance(entries, list):
            raise _fail(
                f" must be a JSON list of people, not {_describe(entries)}; wrap the entries "
                "in [ ]."
            )
        if not entries:
            raise _fail(" lists nobody; list at least one person, or don't declare the directory.")
        ids: set[str] = set()
        owners: dict[str, str] = {}
        by_identity: dict[str, DirectoryPerson] = {}
        for index, entry in enumerate(entries):
            person = _person(index, entry)
            if person.id in ids:
                raise _fail(
                    f' lists the id "{person.id}" more than once; give each person one entry.'
                )
            ids.add(person.id)
            for identity in person.identities:
                if identity in owners:
                    raise _fail(
                        f': "{identity}" belongs to both "{owners[identity]}" and "{person.id}"; '
                        "give each identity to one person."
                    )
                owners[identity] = person.id
                by_identity[identity] = person
        return cls(by_identity)

    async def resolve(self, user_key: str) -> DirectoryPerson | None:
        """The person ``user_key`` is listed under, as a copy, or ``None``."""
        person = self._by_identity.get(user_key)
        return None if person is None else msgspec.structs.replace(person)


def _describe(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if value is None:
        return "null"
    return "a list"


def _person(index: int, entry: object) -> DirectoryPerson:
    where = f"[{index}]"
    if not isinstance(entry, dict):
        raise _fail(f"{where} must be an object with an id and identities, not {_describe(entry)}.")
    unknown = sorted(set(entry) - set(_FIELDS))
    if unknown:
        raise _fail(
            f'{where} has the unknown field "{unknown[0]}"; a person has only {_FIELD_LIST}.'
        )
    person_id = entry.get("id")
    if person_id is None:
        raise _fail(f'{where} has no id; give every person an id such as "alice".')
    if not isinstance(person_id, str):
        raise _fail(f"{where}.id must be a string, not {_describe(person_id)}.")
    if _ID_PATTERN.fullmatch(person_id) is None:
        raise _fail(
            f'{where}.id "{person_id}" is not a valid id; use 1 to 48 lowercase letters, '
            "digits, dots, underscores or hyphens, starting with a letter or a digit."
        )
    where = f'{where} ("{person_id}")'
    display_name = _optional_text(entry, "displayName", where)
    email = _optional_text(entry, "email", where)
    roles = _texts(entry, "roles", where)
    if "identities" not in entry:
        raise _fail(f'{where} has no identities; list at least one, such as "static:{person_id}".')
    identities = _texts(entry, "identities", where)
    if not identities:
        raise _fail(
            f'{where}.identities is empty; list at least one, such as "static:{person_id}".'
        )
    for identity in identities:
        if _IDENTITY_PATTERN.fullmatch(identity) is None:
            raise _fail(
                f'{where}.identities has "{identity}", which is not "<provider>:<id>"; '
                f'write it as, for example, "static:{person_id}".'
            )
    return DirectoryPerson(
        id=person_id,
        display_name=display_name,
        email=email,
        roles=frozenset(roles),
        # A repeated identity within one person is harmless; keep the first of each.
        identities=tuple(dict.fromkeys(identities)),
    )


def _optional_text(entry: dict[str, Any], field: str, where: str) -> str | None:
    value = entry.get(field)
    if value is None or isinstance(value, str):
        return value
    raise _fail(f"{where}.{field} must be a string, not {_describe(value)}.")


def _texts(entry: dict[str, Any], field: str, where: str) -> list[str]:
    value = entry.get(field)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _fail(f"{where}.{field} must be a list of strings, not {_describe(value)}.")
    for item in value:
        if not isinstance(item, str):
            raise _fail(f"{where}.{field} must hold only strings, not {_describe(item)}.")
        if not item:
            raise _fail(f"{where}.{field} holds an empty string; remove it.")
    return value
