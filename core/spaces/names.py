"""Whose the names a space is given are: the one rule for the file's entries and mutes.

A space's ``spaces:`` entries (admins, members) and a mute's target are names: a person key
(``people:alice``), an account (``static:alice``, ``slack:UALICE``) or anything else.
:meth:`Names.person` turns one into the key of the person it belongs to, exactly as
:class:`~core.people.people.People` identifies a sender, linked accounts and the directory
included. So the role of someone speaking as ``slack:UALICE`` is the one the file gives
``static:alice`` when both are hers (#34 follow-up: roles matched the literal id only), and
a mute of either reaches her and is refused if she is an admin.

A role is computed for every message, so the answers are kept per name for the
directory's time to live (:attr:`People.ttl`) and dropped as soon as People forgets its
own (a link made here or on another instance): a message costs dictionary lookups, not a
directory call or a link read per entry of the file.

:meth:`Names.display_name` is the name the same answer gives the person (the directory's
``displayName``), so a space's people are shown by name, not as ``static:alice`` (#40).

Nothing is raised here: a name the directory can't place right now is ``None``, and each
caller decides (a role falls back to the literal name, a mute is refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Final

from core.clock import Clock, system_clock
from core.people.people import Admitted
from core.people.principal import Principal

if TYPE_CHECKING:
    from core.people.people import People

__all__ = ["Names"]

# Expired answers are swept once this many are kept (mute targets are anyone's to name).
_SWEEP_AT: Final = 1000


@dataclass(frozen=True, slots=True)
class _Kept:
    key: str
    display_name: str | None
    expires_at: datetime
    generation: int


class Names:
    """Resolves names to person keys through ``people`` (``None``: each name is its own)."""

    def __init__(self, people: People | None, *, clock: Clock = system_clock) -> None:
        self._people = people
        self._clock = clock
        self._kept: dict[str, _Kept] = {}

    async def person(self, name: str) -> str | None:
        """The key of the person ``name`` belongs to; ``None`` when the directory can't say
        right now.

        A name that is no account's user key (a person key, a bare name) and an account the
        instance doesn't talk to are their own key.
        """
        kept = await self._answer(name)
        return kept if kept is None or isinstance(kept, str) else kept.key

    async def display_name(self, name: str) -> str | None:
        """The display name of the person ``name`` belongs to, as the directory gives it;
        ``None`` when there is none or it can't be asked right now."""
        kept = await self._answer(name)
        return None if kept is None or isinstance(kept, str) else kept.display_name

    async def _answer(self, name: str) -> _Kept | str | None:
        """What People says of ``name`` (kept); ``name`` itself when it is no account."""
        people = self._people
        provider, _, account = name.partition(":")
        if people is None or not provider or not account or provider == "none":
            return name
        now = self._clock()
        kept = self._kept.get(name)
        if kept is not None and now < kept.expires_at and kept.generation == people.generation:
            return kept
        generation = people.generation
        identified = await people.identify(Principal(id=account, provider=provider))
        display_name: str | None = None
        if isinstance(identified, Admitted):
            key = identified.person.key
            display_name = identified.person.display_name
        elif identified.reason == "unavailable":
            return None  # never kept: the next message asks again
        else:
            key = name  # someone the instance doesn't talk to: known by this name alone
        if len(self._kept) >= _SWEEP_AT:
            self._kept = {n: k for n, k in self._kept.items() if now < k.expires_at}
        kept = _Kept(
            key=key,
            display_name=display_name,
            expires_at=now + people.ttl,
            generation=generation,
        )
        self._kept[name] = kept
        return kept
