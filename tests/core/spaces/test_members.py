from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.clock import ManualClock
from core.spaces import (
    PERMISSIONS,
    InvalidSpaceId,
    Space,
    SpaceConfig,
    Spaces,
    allows,
    parse_space_id,
)
from core.state import Database
from tests.support.state import StateBackend

pytestmark = pytest.mark.anyio

GROUP = "slack:C0123ABC"
DM = "slack:D0123ABC"
OTHER = "telegram:-1001234"
NOW = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)

CONFIG = {
    GROUP: SpaceConfig(admins=("people:alice", "slack:U01ADMIN"), members=("slack:U02BOB",)),
    OTHER: SpaceConfig(members=("people:carol",)),
}


@pytest.fixture
def spaces(db: Database, clock: ManualClock) -> Spaces:
    return Spaces(db, CONFIG, clock=clock)


async def test_a_space_is_made_when_first_opened_and_got_after(
    spaces: Spaces, clock: ManualClock
) -> None:
    assert await spaces.get(GROUP) is None
    opened = await spaces.open(parse_space_id(GROUP), title="#general")
    assert opened == Space(
        id=GROUP, platform="slack", is_dm=False, title="#general", created_at=NOW
    )
    clock.advance(timedelta(days=1))
    assert await spaces.open(parse_space_id(GROUP)) == opened
    assert await spaces.get(GROUP) == opened


async def test_a_new_title_replaces_the_old_and_no_title_keeps_it(spaces: Spaces) -> None:
    await spaces.open(parse_space_id(GROUP), title="#general")
    renamed = await spaces.open(parse_space_id(GROUP), title="#all-hands")
    assert renamed.title == "#all-hands"
    assert renamed.created_at == NOW
    assert (await spaces.open(parse_space_id(GROUP))).title == "#all-hands"


async def test_a_direct_message_is_opened_as_one(spaces: Spaces) -> None:
    opened = await spaces.open(parse_space_id("telegram:42"))
    assert (opened.platform, opened.is_dm, opened.title) == ("telegram", True, None)


async def test_the_file_names_admins_and_members_by_person_key_or_identity(
    spaces: Spaces,
) -> None:
    assert await spaces.role(GROUP, "people:alice") == "admin"
    assert await spaces.role(GROUP, "people:dave", ["slack:U01ADMIN"]) == "admin"
    assert await spaces.role(GROUP, "slack:U02BOB") == "member"
    assert await spaces.role(GROUP, "people:bob", ["slack:U02BOB"]) == "member"
    assert await spaces.role(OTHER, "people:carol", ["telegram:7"]) == "member"


async def test_the_files_admin_list_wins_over_its_member_list(db: Database) -> None:
    both = Spaces(db, {GROUP: SpaceConfig(admins=("people:alice",), members=("people:alice",))})
    assert await both.role(GROUP, "people:alice") == "admin"


async def test_someone_who_spoke_in_a_space_is_a_member_and_a_stranger_nothing(
    spaces: Spaces,
) -> None:
    assert await spaces.role(GROUP, "people:erin", ["slack:U05ERIN"]) is None
    await spaces.join(GROUP, "people:erin")
    await spaces.join(GROUP, "people:erin")
    assert await spaces.role(GROUP, "people:erin", ["slack:U05ERIN"]) == "member"
    assert await spaces.role(GROUP, "people:frank") is None


async def test_joining_never_lowers_what_the_file_says(spaces: Spaces) -> None:
    await spaces.join(GROUP, "people:alice")
    assert await spaces.role(GROUP, "people:alice") == "admin"


async def test_the_person_of_a_direct_message_is_its_admin(
    spaces: Spaces, clock: ManualClock
) -> None:
    assert await spaces.role(DM, "people:gina") is None
    await spaces.join(DM, "people:gina")
    assert await spaces.role(DM, "people:gina") == "admin"
    # Should another ever join (it can't on any platform), whoever came later is a member.
    clock.advance(timedelta(minutes=1))
    await spaces.join(DM, "people:hal")
    assert await spaces.role(DM, "people:hal") == "member"
    assert await spaces.role(DM, "people:gina") == "admin"


async def test_the_first_to_speak_in_a_group_is_no_admin(spaces: Spaces) -> None:
    await spaces.join(OTHER, "people:ivan")
    assert await spaces.role(OTHER, "people:ivan") == "member"


@pytest.mark.parametrize("space_id", ["slack:G0PRIVATE", "slack:C0PUBLIC"])
async def test_a_slack_channel_but_a_d_one_is_a_group_where_speaking_first_makes_no_admin(
    spaces: Spaces, space_id: str
) -> None:
    # Issue #34: G… (a legacy private channel or a group DM of several people) was a DM.
    assert parse_space_id(space_id).is_dm is False
    assert parse_space_id("slack:D0DIRECT").is_dm is True
    assert (await spaces.open(parse_space_id(space_id))).is_dm is False
    await spaces.join(space_id, "people:ivan")
    assert await spaces.role(space_id, "people:ivan") == "member"


def test_members_read_preferences_and_only_admins_change_them_or_mute() -> None:
    assert allows("admin", "prefs.get") and allows("member", "prefs.get")
    assert allows("admin", "prefs.set") and not allows("member", "prefs.set")
    assert allows("admin", "mute") and not allows("member", "mute")
    assert not any(allows(None, permission) for permission in PERMISSIONS)
    assert set(PERMISSIONS) == {"prefs.get", "prefs.set", "mute"}


async def test_a_person_s_spaces_are_those_they_spoke_in_or_the_file_names_them_in(
    spaces: Spaces,
) -> None:
    await spaces.open(parse_space_id(DM), title="Alice")
    await spaces.join(DM, "people:alice")
    await spaces.open(parse_space_id("discord:1:2"))
    await spaces.join("discord:1:2", "people:bob")
    assert [s.id for s in await spaces.spaces_of("people:alice")] == [GROUP, DM]
    assert [s.id for s in await spaces.spaces_of("people:bob", ["slack:U02BOB"])] == [
        "discord:1:2",
        GROUP,
    ]
    assert await spaces.spaces_of("people:nobody") == []
    group = await spaces.get(GROUP)
    assert group is not None and group.created_at == NOW


async def test_deleting_a_space_forgets_it_and_its_members(spaces: Spaces) -> None:
    await spaces.open(parse_space_id(OTHER))
    await spaces.join(OTHER, "people:ivan")
    await spaces.open(parse_space_id("telegram:-99"))
    await spaces.join("telegram:-99", "people:ivan")
    assert await spaces.delete(OTHER) is True
    assert await spaces.get(OTHER) is None
    assert await spaces.role(OTHER, "people:ivan") is None
    assert [s.id for s in await spaces.spaces_of("people:ivan")] == ["telegram:-99"]
    assert await spaces.delete(OTHER) is False


async def test_spaces_and_members_are_shared_by_instances(
    state: StateBackend, clock: ManualClock
) -> None:
    first = Spaces(await state.open(), CONFIG, clock=clock)
    await first.open(parse_space_id(OTHER), title="Team")
    await first.join(OTHER, "people:ivan")
    second = Spaces(await state.open(), CONFIG, clock=clock)
    assert await second.role(OTHER, "people:ivan") == "member"
    space = await second.get(OTHER)
    assert space is not None and space.title == "Team"


async def test_a_malformed_space_id_is_refused(spaces: Spaces) -> None:
    with pytest.raises(InvalidSpaceId):
        await spaces.join("slack:lower", "people:alice")
    with pytest.raises(InvalidSpaceId):
        await spaces.role("nowhere", "people:alice")
