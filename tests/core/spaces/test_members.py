from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.clock import ManualClock
from core.people.directory import DirectoryPerson, DirectoryUnavailable
from core.people.directory_static import StaticDirectory
from core.people.i18n import Catalogs
from core.people.linking import Linking
from core.people.people import People
from core.people.principal import Person, Principal
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


@pytest.mark.parametrize(
    "space_id", ["slack:G0PRIVATE", "slack:C0PUBLIC", "discord:@group:1200000000000000050"]
)
async def test_a_slack_channel_but_a_d_one_is_a_group_where_speaking_first_makes_no_admin(
    spaces: Spaces, space_id: str
) -> None:
    # Issue #34: G… (a legacy private channel or a group DM of several people) was a DM; so
    # was a Discord group DM (#44).
    assert parse_space_id(space_id).is_dm is False
    assert parse_space_id("slack:D0DIRECT").is_dm is True
    assert parse_space_id("discord:@me:1200000000000000040").is_dm is True
    assert (await spaces.open(parse_space_id(space_id))).is_dm is False
    await spaces.join(space_id, "people:ivan")
    assert await spaces.role(space_id, "people:ivan") == "member"


def test_members_read_preferences_and_settings_and_only_admins_change_them_or_mute() -> None:
    assert allows("admin", "prefs.get") and allows("member", "prefs.get")
    assert allows("admin", "prefs.set") and not allows("member", "prefs.set")
    assert allows("admin", "mute") and not allows("member", "mute")
    assert allows("admin", "config.get") and allows("member", "config.get")
    assert allows("admin", "config.set") and not allows("member", "config.set")
    assert allows("admin", "usage.get") and not allows("member", "usage.get")
    assert not any(allows(None, permission) for permission in PERMISSIONS)
    assert allows("admin", "space.delete") and not allows("member", "space.delete")
    assert set(PERMISSIONS) == {
        "prefs.get",
        "prefs.set",
        "mute",
        "config.get",
        "config.set",
        "usage.get",
        "space.delete",
    }


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


ALICE = DirectoryPerson(id="alice", identities=("static:alice", "slack:UALICE"))


class _CountingDirectory:
    """The static directory of Alice, counting how often it is asked; down when told."""

    name = "people"

    def __init__(self) -> None:
        self.asked = 0
        self.down = False
        self._found = StaticDirectory({name: ALICE for name in ALICE.identities})

    async def resolve(self, user_key: str) -> DirectoryPerson | None:
        self.asked += 1
        if self.down:
            raise DirectoryUnavailable("The directory is down.")
        return await self._found.resolve(user_key)


async def test_an_entry_of_the_file_gives_its_role_to_every_account_the_directory_gives_her(
    db: Database, clock: ManualClock
) -> None:
    people = People(_CountingDirectory(), access_unknown="allow", clock=clock)
    config = {
        GROUP: SpaceConfig(admins=("static:alice",)),
        OTHER: SpaceConfig(members=("static:alice",)),
    }
    spaces = Spaces(db, config, people=people, clock=clock)
    # Alice speaks on Slack: the pipeline passes her person key and the ids she spoke by.
    assert await spaces.role(GROUP, "people:alice", ["slack:UALICE"]) == "admin"
    assert await spaces.role(OTHER, "people:alice", ["slack:UALICE"]) == "member"
    assert await spaces.is_admin(GROUP, "people:alice", ["slack:UALICE"])
    assert [s.id for s in await spaces.spaces_of("people:alice", ["slack:UALICE"])] == [
        GROUP,
        OTHER,
    ]
    assert await spaces.role(GROUP, "people:bob", ["slack:U02BOB"]) is None


async def test_an_entry_of_the_file_gives_its_role_to_the_account_it_is_linked_to(
    db: Database, clock: ManualClock
) -> None:
    people = People(None, access_unknown="allow", clock=clock)
    linking = Linking(db, people, clock=clock)
    spaces = Spaces(db, {GROUP: SpaceConfig(admins=("slack:UALICE",))}, people=people, clock=clock)
    assert await spaces.role(GROUP, "static:alice", ["static:alice"]) is None
    code = await linking.start(Principal(id="alice", provider="static"), Person(key="static:alice"))
    translator = Catalogs.load().translator("en")
    for _ in range(2):
        await linking.redeem(Principal(id="UALICE", provider="slack"), code.code, translator)
    # Over HTTP she is static:alice; the file names her Slack account, now linked to it.
    assert await spaces.role(GROUP, "static:alice", ["static:alice"]) == "admin"


async def test_a_role_asks_the_directory_once_per_entry_and_time_to_live_not_per_message(
    db: Database, clock: ManualClock
) -> None:
    directory = _CountingDirectory()
    people = People(directory, access_unknown="allow", clock=clock)
    config = {GROUP: SpaceConfig(admins=("static:alice",), members=("slack:U02BOB",))}
    spaces = Spaces(db, config, people=people, clock=clock)
    await spaces.join(GROUP, "people:carol")
    for _ in range(50):
        assert await spaces.role(GROUP, "people:carol", ["slack:UCAROL"]) == "member"
    assert directory.asked == 2  # each entry once
    clock.advance(people.ttl)
    assert await spaces.role(GROUP, "people:carol", ["slack:UCAROL"]) == "member"
    assert directory.asked == 4  # asked again once their time is up


async def test_an_entry_the_directory_can_t_place_counts_as_written_but_is_no_sure_no(
    db: Database, clock: ManualClock
) -> None:
    directory = _CountingDirectory()
    directory.down = True
    people = People(directory, access_unknown="allow", clock=clock)
    spaces = Spaces(db, {GROUP: SpaceConfig(admins=("static:alice",))}, people=people, clock=clock)
    assert await spaces.role(GROUP, "static:alice") == "admin"
    assert await spaces.role(GROUP, "people:alice", ["slack:UALICE"]) is None
    with pytest.raises(DirectoryUnavailable):
        await spaces.is_admin(GROUP, "people:alice", ["slack:UALICE"])
    directory.down = False  # a failure isn't kept: the next message asks again
    assert await spaces.role(GROUP, "people:alice", ["slack:UALICE"]) == "admin"


async def test_is_admin_agrees_with_role_on_every_rule(db: Database, clock: ManualClock) -> None:
    config = {**CONFIG, DM: SpaceConfig(members=("people:hal",))}
    spaces = Spaces(db, config, clock=clock)
    await spaces.join(DM, "people:hal")  # he opened the DM, but the file calls him a member
    await spaces.join(GROUP, "people:erin")
    cases = [
        (GROUP, "people:alice", ()),
        (GROUP, "people:dave", ("slack:U01ADMIN",)),
        (GROUP, "people:bob", ("slack:U02BOB",)),
        (GROUP, "people:erin", ()),
        (DM, "people:hal", ()),
        (OTHER, "people:nobody", ()),
    ]
    for space_id, key, identities in cases:
        role = await spaces.role(space_id, key, identities)
        assert await spaces.is_admin(space_id, key, identities) == (role == "admin"), key
    clock.advance(timedelta(minutes=1))
    gina = Spaces(db, {}, clock=clock)
    await gina.join("slack:D0GINA", "people:gina")
    assert await gina.is_admin("slack:D0GINA", "people:gina")


async def test_the_people_of_a_space_are_those_who_spoke_and_those_the_file_names_by_name(
    spaces: Spaces,
) -> None:
    await spaces.open(parse_space_id(GROUP))
    await spaces.join(GROUP, "slack:U03DAN", name="Dan")
    await spaces.join(GROUP, "slack:U04EVE")
    await spaces.join(GROUP, "slack:U04EVE", name="Eve")
    await spaces.join(GROUP, "slack:U03DAN")  # no name given: the one seen stays
    assert await spaces.members(GROUP) == [
        ("people:alice", None),
        ("slack:U01ADMIN", None),
        ("slack:U02BOB", None),
        ("slack:U03DAN", "Dan"),
        ("slack:U04EVE", "Eve"),
    ]
    assert await spaces.names_of(GROUP, ["slack:U03DAN", "slack:U02BOB", "slack:U04EVE"]) == {
        "slack:U03DAN": "Dan",
        "slack:U04EVE": "Eve",
    }
    assert await spaces.names_of(OTHER, ["slack:U03DAN"]) == {}


class _CountingReads:
    """The real store, with its reads counted (the roster's cost, whatever the members)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.reads = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._db, name)

    async def fetch_all(self, sql: str, parameters: tuple[object, ...] = ()) -> object:
        self.reads += 1
        return await self._db.fetch_all(sql, parameters)

    async def fetch_one(self, sql: str, parameters: tuple[object, ...] = ()) -> object:
        self.reads += 1
        return await self._db.fetch_one(sql, parameters)

    async def fetch_key(self, sql: str, parameters: tuple[object, ...] = ()) -> object:
        self.reads += 1
        return await self._db.fetch_key(sql, parameters)


async def test_the_roster_costs_the_same_reads_for_three_members_or_thirty(
    db: Database, clock: ManualClock
) -> None:
    """``GET /spaces/{space}``'s people and their roles: one read of the members the file
    doesn't name, never one per member."""
    counted = _CountingReads(db)
    spaces = Spaces(counted, CONFIG, clock=clock)  # type: ignore[arg-type]
    costs = []
    for space, count in ((GROUP, 3), (OTHER, 30), (DM, 30)):
        for number in range(count):
            await spaces.join(space, f"slack:U{number:03d}", name=f"Person {number}")
        counted.reads = 0
        roster = await spaces.roster(space)
        costs.append(counted.reads)
        roles = {key: role for key, _name, role in roster}
        for key, _name, role in roster:  # the same answer role() gives, one by one
            assert role == await spaces.role(space, key), key
        assert len([r for r in roles.values() if r == "member"]) >= count - 1
    assert costs[0] == costs[1] == costs[2] <= 2, costs
    dm_roster = {key: role for key, _name, role in await spaces.roster(DM)}
    assert dm_roster["slack:U000"] == "admin"  # a DM's first person
    group = {key: (name, role) for key, name, role in await spaces.roster(GROUP)}
    assert group["people:alice"] == (None, "admin") and group["slack:U01ADMIN"][1] == "admin"
    assert group["slack:U02BOB"][1] == "member" and group["slack:U001"] == ("Person 1", "member")
