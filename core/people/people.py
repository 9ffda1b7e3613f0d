"""People: who is behind a principal, and whether the instance talks to them at all.

Identification follows the instance's directory:

* no directory: the person is whoever the auth provider says, keyed by the user key;
* a directory that knows the identity: ``<directory name>:<id>`` with its name, email, roles;
* a directory that doesn't: refused as ``unknown``, unless unknown people are allowed in, in
  which case the person is as the auth provider says, with no roles. They are allowed in
  everywhere by ``MERCURY_ACCESS_UNKNOWN=allow``, from one chat platform by its DM policy
  ``open``, and one account at a time under its DM policy ``pairing`` once an approver let it
  in (:mod:`core.people.pairing`; asked on every such identification, never cached, so an
  approval made on any instance holds on every instance at once);
* a directory that fails, however it fails: refused as ``unavailable``, even when unknown people
  are allowed in, because an open door must not hide who has roles.

A linked account (see :mod:`core.people.linking`) is replaced by the identity it is linked to before
the directory is asked, so both accounts are one person.

Answers are cached per user key for a few minutes (unknowns too, failures never), so a revoked
role stops working within that time; concurrent lookups for one user key share one call.
Where the links live in a store several instances share, the link itself is never cached: it
is one primary-key read on every identification, so an account linked through any instance
is its owner on every instance from the moment the link is answered (a notice from the store
could arrive after the next request does). Only the directory's answer for the owner is cached.

Runtime outcomes aren't exceptions here: :meth:`People.identify` returns :class:`Refused`.
The only exception this module raises is :class:`~core.people.directory.DirectoryUnavailable`, from
:meth:`People.directory_key`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final, Literal, Protocol

import msgspec

from core.clock import Clock, system_clock
from core.people.directory import Directory, DirectoryPerson, DirectoryUnavailable
from core.people.i18n import Translator
from core.people.pairing import DmPolicy
from core.people.principal import Person, Principal

__all__ = [
    "DEFAULT_TTL",
    "SWEEP_THRESHOLD",
    "AccessUnknown",
    "AdmissionLookup",
    "Admitted",
    "Identification",
    "LinkLookup",
    "People",
    "RefusalReason",
    "Refused",
    "refusal_message",
]

DEFAULT_TTL: Final = timedelta(minutes=5)
# Expired answers are swept once the cache holds this many, so it can't grow without bound.
SWEEP_THRESHOLD: Final = 1000

AccessUnknown = Literal["refuse", "allow"]
RefusalReason = Literal["unknown", "unavailable"]

if TYPE_CHECKING:
    from collections.abc import Mapping

logger = logging.getLogger(__name__)


class Admitted(msgspec.Struct, frozen=True, kw_only=True):
    """The instance talks to this person."""

    person: Person


class Refused(msgspec.Struct, frozen=True, kw_only=True):
    """The instance doesn't talk to this principal, for ``reason``."""

    reason: RefusalReason


Identification = Admitted | Refused


def refusal_message(reason: RefusalReason, translator: Translator) -> str:
    """What to tell someone refused for ``reason``, in their language."""
    if reason == "unknown":
        return translator.gettext(
            "This assistant only talks to the people it knows. Ask an administrator for access."
        )
    return translator.gettext("I can't check who you are right now. Try again in a few minutes.")


class LinkLookup(Protocol):
    """Where linked accounts point (:class:`core.people.linking.Linking` is one)."""

    async def owner_of(self, user_key: str) -> str | None:
        """The identity ``user_key`` is linked to, or ``None`` when it isn't linked."""
        ...

    @property
    def shared(self) -> bool:
        """Whether other instances make links too (the lookup is then never cached)."""
        ...


class AdmissionLookup(Protocol):
    """Which accounts an approver let in (:class:`core.people.pairing.Pairing` is one)."""

    async def is_admitted(self, user_key: str) -> bool:
        """Whether ``user_key`` was let in."""
        ...


@dataclass(frozen=True, slots=True)
class _Answer:
    # ``effective_key`` is the user key the directory was asked about: the owner's when the
    # identity is linked. ``found`` is the directory's answer (None: unknown or no directory).
    effective_key: str
    found: DirectoryPerson | None


@dataclass(frozen=True, slots=True)
class _Entry:
    answer: _Answer
    expires_at: datetime


class People:
    """Identifies principals against the directory, the links and the admission policy."""

    def __init__(
        self,
        directory: Directory | None,
        *,
        access_unknown: AccessUnknown,
        links: LinkLookup | None = None,
        dm_policies: Mapping[str, DmPolicy | None] | None = None,
        admitted: AdmissionLookup | None = None,
        clock: Clock = system_clock,
        ttl: timedelta = DEFAULT_TTL,
    ) -> None:
        if ttl <= timedelta(0):
            raise ValueError(
                f"People needs a positive cache time to live, not {ttl}; the default is 5 minutes."
            )
        self._directory = directory
        self._access_unknown: AccessUnknown = access_unknown
        self._links = links
        self._dm_policies = dict(dm_policies or {})
        self._admitted = admitted
        self._clock = clock
        self._ttl = ttl
        self._cache: dict[str, _Entry] = {}
        self._pending: dict[str, asyncio.Task[_Answer | None]] = {}
        # Strong references to running lookups, even those invalidate() took out of _pending.
        self._running: set[asyncio.Task[_Answer | None]] = set()
        # Bumped by invalidate(), so a lookup that began before it can't cache a stale answer.
        self._generation = 0

    @property
    def has_directory(self) -> bool:
        """Whether a directory is declared (person keys are then ``<directory name>:<id>``)."""
        return self._directory is not None

    @property
    def ttl(self) -> timedelta:
        """How long an answer is kept: a revoked role or a new directory entry takes this long."""
        return self._ttl

    @property
    def generation(self) -> int:
        """Moves on whenever the cached answers are forgotten (a link was made, here or on
        another instance); whoever keeps answers of its own drops those of older ones."""
        return self._generation

    @property
    def cache_size(self) -> int:
        """How many answers the cache holds, expired ones not yet swept included."""
        return len(self._cache)

    def dm_policy(self, platform: str) -> DmPolicy | None:
        """The DM policy of the chat platform ``platform`` (``None`` for a provider that is
        no chat platform): as set, else ``pairing`` with a directory and ``open`` without."""
        if platform not in self._dm_policies:
            return None
        policy = self._dm_policies[platform]
        if policy is None:
            return "pairing" if self._directory is not None else "open"
        return policy

    def attach_links(self, links: LinkLookup) -> None:
        """Consult ``links`` from now on (the link store is built after this object)."""
        self._links = links
        self.invalidate()

    def invalidate(self) -> None:
        """Forget every cached answer; the next identification asks again."""
        self._generation += 1
        self._cache.clear()
        self._pending.clear()

    async def identify(self, principal: Principal) -> Identification:
        """Who ``principal`` is to the instance, or why the instance won't talk to them."""
        if principal.provider == "none":
            # Only the core's own terminal may claim "none", and it never comes through here.
            logger.warning(
                "Refused a principal claiming the reserved provider 'none' (id %r).", principal.id
            )
            return Refused(reason="unknown")
        answer = await self._answer(principal.user_key)
        if answer is None:
            return Refused(reason="unavailable")
        directory, found = self._directory, answer.found
        if directory is not None and found is not None:
            return Admitted(
                person=Person(
                    key=f"{directory.name}:{found.id}",
                    display_name=found.display_name,
                    email=found.email,
                    roles=found.roles,
                )
            )
        if directory is not None:
            let_in = await self._lets_in(principal)
            if let_in is None:
                return Refused(reason="unavailable")
            if not let_in:
                return Refused(reason="unknown")
        return Admitted(
            person=Person(key=answer.effective_key, display_name=principal.display_name)
        )

    async def _lets_in(self, principal: Principal) -> bool | None:
        """Whether someone the directory doesn't know is let in: the one rule for every path
        (``None``: whether an approver let them in can't be read now)."""
        if self._access_unknown == "allow":
            return True
        policy = self.dm_policy(principal.provider)
        if policy == "open":
            return True
        if policy != "pairing" or self._admitted is None:
            return False
        try:
            return await self._admitted.is_admitted(principal.user_key)
        except Exception:
            logger.exception(
                "Couldn't read whether %s was let in; refusing it as unavailable.",
                principal.user_key,
            )
            return None

    async def directory_key(self, user_key: str) -> str | None:
        """The person key the directory alone gives ``user_key``, links aside and uncached.

        ``None`` when the directory doesn't know it or there is no directory; raises
        :class:`DirectoryUnavailable` when the directory can't be asked.
        """
        if self._directory is None:
            return None
        try:
            found = await self._directory.resolve(user_key)
        except DirectoryUnavailable:
            raise
        except Exception as error:
            raise DirectoryUnavailable(
                f"The {self._directory.name!r} directory failed to resolve an identity: {error}"
            ) from error
        return None if found is None else f"{self._directory.name}:{found.id}"

    async def _answer(self, user_key: str) -> _Answer | None:
        links = self._links
        if links is not None and links.shared:
            try:
                owner = await links.owner_of(user_key)
            except Exception:
                logger.exception(
                    "Couldn't read the link of %s; refusing it as unavailable.", user_key
                )
                return None
            return await self._cached(owner or user_key, resolve_link=False)
        return await self._cached(user_key, resolve_link=True)

    async def _cached(self, user_key: str, *, resolve_link: bool) -> _Answer | None:
        entry = self._cache.get(user_key)
        if entry is not None and self._clock() < entry.expires_at:
            return entry.answer
        task = self._pending.get(user_key)
        if task is None:
            task = asyncio.get_running_loop().create_task(
                self._look_up(user_key, self._generation, resolve_link=resolve_link)
            )
            self._pending[user_key] = task
            self._running.add(task)
            task.add_done_callback(lambda done: self._forget_pending(user_key, done))
        # Shielded: a caller that gives up doesn't cancel the lookup others are waiting for.
        return await asyncio.shield(task)

    def _forget_pending(self, user_key: str, task: asyncio.Task[_Answer | None]) -> None:
        self._running.discard(task)
        if self._pending.get(user_key) is task:
            del self._pending[user_key]

    async def _look_up(
        self, user_key: str, generation: int, *, resolve_link: bool
    ) -> _Answer | None:
        # Never raises: a failure is None, so no waiter ever sees a stray exception and a
        # lookup nobody awaits any more can't leave an unretrieved one behind.
        try:
            effective_key = user_key
            if resolve_link and self._links is not None:
                effective_key = await self._links.owner_of(user_key) or user_key
            found = None
            if self._directory is not None:
                found = await self._directory.resolve(effective_key)
        except Exception:
            logger.exception("Couldn't identify %s; refusing it as unavailable.", user_key)
            return None
        answer = _Answer(effective_key=effective_key, found=found)
        if generation == self._generation:
            self._remember(user_key, answer)
        return answer

    def _remember(self, user_key: str, answer: _Answer) -> None:
        now = self._clock()
        if len(self._cache) >= SWEEP_THRESHOLD:
            self._cache = {
                key: entry for key, entry in self._cache.items() if now < entry.expires_at
            }
        self._cache[user_key] = _Entry(answer=answer, expires_at=now + self._ttl)
