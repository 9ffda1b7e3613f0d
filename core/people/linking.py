"""Account linking: one person, several accounts, joined by a short-lived code.

A person asks for a code on the account they already use (the *owner*), then sends it from
another of their accounts, twice, in a direct chat or over HTTP. The first send says whom the
account would be linked to and binds the code to that account, which holds it until it
expires: another account sending it is refused, never bound. The second send from the bound
account uses the code up and links the account, unless the directory knows that account as
someone else. From then on :class:`~core.people.people.People` identifies the linked account as its
owner: same person key, same roles, same private area.

A code sent where others see it (a group) is known to all of them: it is withdrawn
(:meth:`Linking.withdraw`), never redeemed (issue #34).

There are no chains: a code started from a linked account belongs to that account's owner, an
owner that has meanwhile been linked elsewhere makes its code invalid, and accounts linked to
an account that gets linked follow it to its new owner.

Codes look like ``Ab3d-9xYz-Q7mN`` (62-character alphabet, about 71 random bits), last ten
minutes and work once. They are stored as their SHA-256, never in clear, and never logged.
Codes and links live in the state store (:mod:`core.state`), so a code made through one
instance is redeemed through any other.

Runtime outcomes aren't exceptions: :meth:`Linking.redeem` answers with the text to show.
``ValueError`` is raised only for a code time to live that isn't positive.
"""

from __future__ import annotations

import hashlib
import logging
import re
from datetime import datetime, timedelta
from typing import Final

import msgspec

from core.clock import Clock, system_clock
from core.codes import ALPHABET, draw_code, to_micros
from core.people.directory import DirectoryUnavailable
from core.people.i18n import Translator
from core.people.people import People
from core.people.principal import Person, Principal
from core.state import Database, Migration, Notice, Schema

__all__ = [
    "CODE_ALPHABET",
    "DEFAULT_CODE_TTL",
    "LinkCode",
    "Linking",
    "is_link_code",
    "new_link_code",
]

CODE_ALPHABET: Final = ALPHABET
DEFAULT_CODE_TTL: Final = timedelta(minutes=10)

_CODE_PATTERN: Final = re.compile(r"[A-Za-z0-9]{4}-[A-Za-z0-9]{4}-[A-Za-z0-9]{4}")

# One code per owner (the primary key), so starting again replaces the previous one.
_SCHEMA: Final = Schema(
    "linking",
    (
        Migration(
            1,
            """
CREATE TABLE IF NOT EXISTS link_codes (
    owner_identity   TEXT PRIMARY KEY,
    code_hash        TEXT NOT NULL UNIQUE,
    owner_name       TEXT NOT NULL,
    owner_person_key TEXT NOT NULL,
    expires_at       BIGINT NOT NULL,
    bound_identity   TEXT
);
CREATE INDEX IF NOT EXISTS link_codes_expiry ON link_codes (expires_at);
CREATE TABLE IF NOT EXISTS identity_links (
    identity       TEXT PRIMARY KEY,
    owner_identity TEXT NOT NULL,
    linked_at      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS identity_links_owner ON identity_links (owner_identity);
""",
        ),
    ),
)

#: The channel every new link is announced on, with the linked account as the payload.
CHANNEL: Final = "mercury_identity_links"

logger = logging.getLogger(__name__)


class LinkCode(msgspec.Struct, frozen=True, kw_only=True):
    """A code to show the person who asked for it, once, and when it stops working."""

    code: str
    expires_at: datetime


def is_link_code(text: str) -> bool:
    """Whether ``text``, once trimmed, has a link code's shape (``Ab3d-9xYz-Q7mN``).

    A confirmation token (``k9m2-x7q4``) is shorter, so the two are never confused.
    """
    return _CODE_PATTERN.fullmatch(text.strip()) is not None


def new_link_code() -> str:
    """A fresh random code drawn with :mod:`secrets`."""
    return draw_code(3)


def _hash(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


class Linking:
    """Link codes and the links they make, in the state store.

    Building it attaches it to ``people`` (:meth:`People.attach_links`), so identification
    follows the links from then on; the two can't be built the other way round.
    """

    def __init__(
        self,
        db: Database,
        people: People,
        *,
        clock: Clock = system_clock,
        code_ttl: timedelta = DEFAULT_CODE_TTL,
    ) -> None:
        if code_ttl <= timedelta(0):
            raise ValueError(
                f"Link codes need a positive time to live, not {code_ttl}; the default is "
                "10 minutes."
            )
        self._db = db
        self._people = people
        self._clock = clock
        self.code_ttl = code_ttl
        self._ready = False
        people.attach_links(self)

    async def ensure_schema(self) -> None:
        """Create the tables and hear other instances' links; lazily by every call."""
        if not self._ready:
            await self._db.migrate(_SCHEMA)
            # People caches who an account is; a link made anywhere must empty that cache
            # here too, or this instance would go on treating the account as its own person.
            await self._db.subscribe(CHANNEL, self._heard)
            self._ready = True

    def _heard(self, _notice: Notice) -> None:
        self._people.invalidate()

    @property
    def shared(self) -> bool:
        """Whether the links live in a store other instances share (PostgreSQL)."""
        return self._db.shared

    async def owner_of(self, user_key: str) -> str | None:
        """The identity ``user_key`` is linked to, or ``None`` when it isn't linked."""
        await self.ensure_schema()
        row = await self._db.fetch_key(
            "SELECT owner_identity FROM identity_links WHERE identity = ?", (user_key,)
        )
        return None if row is None else str(row["owner_identity"])

    async def start(self, principal: Principal, person: Person) -> LinkCode:
        """A new code for linking another account to ``principal``'s person.

        ``person`` is what :meth:`People.identify` admitted ``principal`` as. The code belongs
        to the principal's identity, or to its owner when the principal is itself a linked
        account, and replaces any code that owner had.
        """
        await self.ensure_schema()
        owner = await self.owner_of(principal.user_key) or principal.user_key
        now = self._clock()
        expires_at = now + self.code_ttl
        code = new_link_code()
        await self._db.execute("DELETE FROM link_codes WHERE expires_at <= ?", (to_micros(now),))
        await self._db.execute(
            "INSERT INTO link_codes (owner_identity, code_hash, owner_name, "
            "owner_person_key, expires_at, bound_identity) VALUES (?, ?, ?, ?, ?, NULL) "
            "ON CONFLICT (owner_identity) DO UPDATE SET code_hash = excluded.code_hash, "
            "owner_name = excluded.owner_name, owner_person_key = excluded.owner_person_key, "
            "expires_at = excluded.expires_at, bound_identity = NULL",
            (
                owner,
                _hash(code),
                person.display_name or person.key,
                person.key,
                to_micros(expires_at),
            ),
        )
        return LinkCode(code=code, expires_at=expires_at)

    async def redeem(self, principal: Principal, text: str, translator: Translator) -> str | None:
        """Answer a message that may be a link code; ``None`` when it hasn't a code's shape.

        The first send from an account previews the link and holds the code for it, the
        second from the same account makes it. The answer is in ``translator``'s language.
        Only for a direct chat or HTTP: a code sent in a group goes to :meth:`withdraw`.
        """
        if not is_link_code(text):
            return None
        await self.ensure_schema()
        code_hash = _hash(text.strip())
        now = to_micros(self._clock())
        row = await self._db.fetch_one(
            "SELECT owner_identity, owner_name, owner_person_key, expires_at, bound_identity "
            "FROM link_codes WHERE code_hash = ?",
            (code_hash,),
        )
        if row is None or row["expires_at"] <= now:
            if row is not None:
                await self._db.execute("DELETE FROM link_codes WHERE code_hash = ?", (code_hash,))
            return self._invalid(translator)
        owner: str = row["owner_identity"]
        name: str = row["owner_name"]
        account = principal.user_key
        bound_here = row["bound_identity"] == account
        # A confirming send goes on to take the code even when the account is linked to the
        # owner by now: that is a racing confirmation which lost, and it must hear the code
        # is used up, not that it is the owner's own.
        if account == owner or (not bound_here and await self.owner_of(account) == owner):
            return translator.gettext("That code is for linking another account to this one.")
        if await self.owner_of(owner) is not None:
            # The owner became someone else's linked account after asking: linking to it now
            # would make a chain, so its code is dead.
            await self._db.execute("DELETE FROM link_codes WHERE code_hash = ?", (code_hash,))
            return self._invalid(translator)
        if not bound_here:
            # The first account to send the code holds it: of two sending at once, one binds.
            bound = await self._db.execute(
                "UPDATE link_codes SET bound_identity = ? WHERE code_hash = ? "
                "AND (bound_identity IS NULL OR bound_identity = ?)",
                (account, code_hash, account),
            )
            if bound != 1:
                return translator.gettext(
                    "Another account has already sent this code, so it can't be used from this "
                    "one. If that wasn't you, ask for a new code on the account you want to "
                    "link to: the new one replaces this one."
                )
            return translator.gettext(
                "This will link this account to %(name)s: from then on the assistant treats "
                "them as one person, with %(name)s's private area and roles. Send the same "
                "code again to confirm."
            ) % {"name": name}
        # Second send from the bound account: the code is used up whatever happens next, and
        # only one of two racing sends can take it.
        taken = await self._db.execute(
            "DELETE FROM link_codes WHERE code_hash = ? AND bound_identity = ?",
            (code_hash, account),
        )
        if taken != 1:
            return self._invalid(translator)
        try:
            known_as = await self._people.directory_key(account)
        except DirectoryUnavailable:
            logger.warning("Couldn't check %s against the directory; not linking it.", account)
            return translator.gettext(
                "I can't check this account right now. Ask for a new code and try again in a "
                "few minutes."
            )
        if known_as is not None and known_as != row["owner_person_key"]:
            logger.warning(
                "Refused to link %s to %s: the directory knows it as %s.", account, owner, known_as
            )
            return translator.gettext(
                "This account belongs to someone else in the directory: it can't be linked to "
                "%(name)s."
            ) % {"name": name}
        await self._link(account, owner)
        return translator.gettext("Linked: this account is now %(name)s.") % {"name": name}

    async def withdraw(self, text: str, translator: Translator) -> str | None:
        """Answer a link code sent in a group; ``None`` when ``text`` hasn't a code's shape.

        Everyone there has seen it, so it is never redeemed: a live code stops working at
        once (its owner asks for a new one). The answer is the same for a live code and any
        other code-shaped text, so a group learns nothing about which codes exist.
        """
        if not is_link_code(text):
            return None
        await self.ensure_schema()
        await self._db.execute("DELETE FROM link_codes WHERE code_hash = ?", (_hash(text.strip()),))
        return translator.gettext(
            "Link codes work only in a direct chat with me. This one was shown here, so it no "
            "longer works: ask for a new one and send it to me directly."
        )

    async def _link(self, account: str, owner: str) -> None:
        linked_at = self._clock().isoformat()
        async with self._db.transaction() as transaction:
            await transaction.execute(
                "INSERT INTO identity_links (identity, owner_identity, linked_at) "
                "VALUES (?, ?, ?) ON CONFLICT (identity) DO UPDATE SET "
                "owner_identity = excluded.owner_identity, linked_at = excluded.linked_at",
                (account, owner, linked_at),
            )
            # Accounts already linked to this one follow it, so no link ever points at a link.
            followers = await transaction.execute(
                "UPDATE identity_links SET owner_identity = ? WHERE owner_identity = ?",
                (owner, account),
            )
            # Every instance forgets whom it took the account for, once this commits.
            await transaction.notify(CHANNEL, account)
        self._people.invalidate()
        logger.info(
            "Linked %s to %s%s.",
            account,
            owner,
            f" (with {followers} account(s) already linked to it)" if followers else "",
        )

    @staticmethod
    def _invalid(translator: Translator) -> str:
        return translator.gettext(
            "That code isn't valid: it may have expired or been used already. Ask for a new "
            "one on the account you want to link to."
        )
