"""The one permission check of spaces, and how a mute's target becomes a person (#34)."""

from __future__ import annotations

import pytest

from core.clock import ManualClock
from core.people.directory import DirectoryPerson, DirectoryUnavailable
from core.people.people import People
from core.spaces import (
    PERMISSIONS,
    MuteError,
    MuteTargets,
    NotPermitted,
    Permission,
    Role,
    SpaceConfig,
    Spaces,
    allows,
    require,
)
from core.state import Database

pytestmark = pytest.mark.anyio

GROUP = "slack:C0123ABC"


@pytest.mark.parametrize("permission", sorted(PERMISSIONS))
@pytest.mark.parametrize("role", ["admin", "member", None])
def test_require_refuses_exactly_the_roles_the_table_leaves_out(
    role: Role | None, permission: Permission
) -> None:
    if allows(role, permission):
        require(role, permission)
        return
    with pytest.raises(NotPermitted) as refused:
        require(role, permission)
    assert (refused.value.role, refused.value.permission) == (role, permission)


class _DownDirectory:
    """A directory that can't be asked right now."""

    name = "people"

    async def resolve(self, user_key: str) -> DirectoryPerson | None:
        raise DirectoryUnavailable("The directory is down.")


async def test_a_target_the_directory_can_t_place_is_refused_not_guessed(
    db: Database, clock: ManualClock
) -> None:
    people = People(_DownDirectory(), access_unknown="allow", clock=clock)
    spaces = Spaces(db, {GROUP: SpaceConfig(admins=("static:alice",))}, people=people, clock=clock)
    targets = MuteTargets(spaces)
    with pytest.raises(MuteError) as refused:
        await targets.mutable(GROUP, "slack:UALICE")
    assert refused.value.fault == "unchecked"


async def test_a_name_that_is_no_account_is_its_own_key(db: Database, clock: ManualClock) -> None:
    people = People(None, access_unknown="allow", clock=clock)
    targets = MuteTargets(Spaces(db, {}, people=people, clock=clock))
    for name in ("people:alice", "slack:U0SPAM", "bare", "none:x"):
        target = await targets.mutable(GROUP, name)
        assert (target.key, target.names) == (name, (name,))
