"""Who may do what in a space, and who a mute reaches: one rule for the tools and the routes.

:func:`require` is the permission check. The agent's tools pass the role of the person whose
turn it is, the ``/spaces`` routes the caller's; both get :class:`NotPermitted` for a role
without the permission (:data:`~core.spaces.members.PERMISSIONS`), which a tool tells the
model and a route answers with 403 (#34: the tools used to check nothing).

:class:`MuteTargets` turns the name a mute is given (``slack:U0123``, ``static:alice``,
``people:alice``) into the person behind it, linked accounts and the directory included,
exactly as :class:`~core.people.people.People` identifies a sender and by the resolution the
space's roles use (:class:`~core.spaces.names.Names`). A mute is kept under that
person's key, which the pipeline checks on every message beside the sender's own id, so it
catches every account of theirs; and an admin of the space can't be muted under any of
their names (#34: an admin configured as ``static:alice`` was muted as her linked
``slack:UALICE``).

Exceptions::

    NotPermitted (PermissionError)   the role lacks the permission; ``role`` and
                                     ``permission`` say which
    MuteError (ValueError)           (from core.spaces.mutes) the target was refused:
                                     ``fault`` ``target`` (its shape), ``admin`` (an admin
                                     of the space) or ``unchecked`` (the directory can't
                                     say who it is right now)
"""

from __future__ import annotations

import msgspec

from core.people.directory import DirectoryUnavailable
from core.spaces.members import Permission, Spaces, allows
from core.spaces.mutes import MuteError, checked_target
from core.spaces.turn import Role

__all__ = ["MuteTarget", "MuteTargets", "NotPermitted", "require"]


class NotPermitted(PermissionError):
    """Someone of ``role`` in a space (``None``: not in it) lacks ``permission`` there."""

    def __init__(self, role: Role | None, permission: Permission) -> None:
        super().__init__(
            f"The {permission} permission of a space is not a {role or 'guest'}'s to use."
        )
        self.role: Role | None = role
        self.permission: Permission = permission


def require(role: Role | None, permission: Permission) -> None:
    """Nothing when ``role`` holds ``permission`` in a space; :class:`NotPermitted` otherwise."""
    if not allows(role, permission):
        raise NotPermitted(role, permission)


class MuteTarget(msgspec.Struct, frozen=True, kw_only=True):
    """A person to mute: the name given, and the key of the person it belongs to.

    ``key`` is what the mute is kept under: the person key when the name is someone's
    account (linked or in the directory), else the name itself.
    """

    given: str
    key: str

    @property
    def names(self) -> tuple[str, ...]:
        """The names a mute of this target is found or lifted by, the key first."""
        return tuple(dict.fromkeys((self.key, self.given)))


class MuteTargets:
    """Resolves the names mutes are given, and refuses admins under any of their names.

    The resolution is the space's own (:attr:`Spaces.names`), the one its roles use, so a
    mute and a role never disagree about who a name is.
    """

    def __init__(self, spaces: Spaces) -> None:
        self._spaces = spaces

    async def resolve(self, given: str) -> MuteTarget:
        """The person ``given`` names; :class:`MuteError` for a malformed name, or when the
        directory can't be asked (``unchecked``)."""
        checked_target(given)
        key = await self._spaces.names.person(given)
        if key is None:
            raise _unchecked(given)
        return MuteTarget(given=given, key=key)

    async def mutable(self, space_id: str, given: str) -> MuteTarget:
        """:meth:`resolve`, refusing (``admin``) an admin of the space under any name.

        An admin is one by the space's role rule (:meth:`Spaces.is_admin`), for the person's
        key and the name given: an admin entry of the file naming another account of the
        same person counts (the file lists static:alice, the mute names her linked
        slack:UALICE).
        """
        target = await self.resolve(given)
        try:
            admin = await self._spaces.is_admin(space_id, target.key, target.names)
        except DirectoryUnavailable:
            raise _unchecked(given) from None
        if admin:
            raise MuteError("admin", f"{given} is an admin of this space; an admin can't be muted.")
        return target


def _unchecked(name: str) -> MuteError:
    return MuteError(
        "unchecked",
        f"Who {name} is can't be checked right now (the directory doesn't answer); "
        "try again in a few minutes.",
    )
