from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest

from core.clock import ManualClock
from core.people.directory import DirectoryPerson
from core.people.directory_static import StaticDirectory
from core.people.i18n import Catalogs
from core.people.linking import Linking
from core.people.people import People
from core.people.principal import Person, Principal
from core.spaces import (
    Mutes,
    Role,
    SpaceConfig,
    SpacePreferences,
    Spaces,
    SpaceTurn,
)
from core.state import Database
from core.tools.registry import Plugin, ToolCallContext, ToolError, ToolReply
from core.tools.space_tools import space_plugins

pytestmark = pytest.mark.anyio

GROUP = "slack:C0123ABC"
OTHER = "slack:C0999XYZ"
SPAMMER = "slack:U0SPAM"
TRANSLATOR = Catalogs.load().translator("en")


class Stores(msgspec.Struct, kw_only=True):
    prefs: SpacePreferences
    mutes: Mutes
    spaces: Spaces
    linking: Linking
    plugins: tuple[Plugin, ...]


def make_stores(
    db: Database,
    clock: ManualClock,
    *,
    admins: tuple[str, ...] = ("slack:U01ADMIN",),
    directory: StaticDirectory | None = None,
) -> Stores:
    prefs = SpacePreferences(db, clock=clock)
    mutes = Mutes(db, clock=clock)
    people = People(directory, access_unknown="allow", clock=clock)
    spaces = Spaces(db, {GROUP: SpaceConfig(admins=admins)}, people=people, clock=clock)
    return Stores(
        prefs=prefs,
        mutes=mutes,
        spaces=spaces,
        linking=Linking(db, people, clock=clock),
        plugins=space_plugins(prefs, mutes, spaces, clock=clock),
    )


@pytest.fixture
def stores(db: Database, clock: ManualClock) -> Stores:
    return make_stores(db, clock)


async def link(stores: Stores, account: str, owner: str) -> None:
    """``account`` linked to ``owner`` the way a person does it: a code, sent twice."""
    provider, _, name = owner.partition(":")
    code = await stores.linking.start(
        Principal(id=name, provider=provider), Person(key=owner, display_name=name)
    )
    provider, _, name = account.partition(":")
    for _ in range(2):
        said = await stores.linking.redeem(
            Principal(id=name, provider=provider), code.code, TRANSLATOR
        )
    assert said is not None and said.startswith("Linked"), said


def context(
    role: Role | None = "member",
    *,
    space_id: str | None = GROUP,
    caller: str = "slack:U02BOB",
    session: str = "slack:C0123ABC:main",
) -> ToolCallContext:
    turn = (
        None
        if space_id is None
        else SpaceTurn(
            space_id=space_id, conversation="main", is_dm=False, caller_id=caller, role=role
        )
    )
    return ToolCallContext(
        principal=Principal(id=caller.split(":")[1], provider="slack"),
        person=Person(key=caller),
        session_key=session,
        conversation_id="main",
        translator=TRANSLATOR,
        space=turn,
    )


ADMIN = context("admin", caller="slack:U01ADMIN")


def admin(**where: Any) -> ToolCallContext:
    """The context of an admin's turn in the group (or ``space_id``)."""
    return context("admin", caller="slack:U01ADMIN", **where)


async def call(stores: Stores, tool: str, where: ToolCallContext, **arguments: Any) -> Any:
    found = {t.name: t for plugin in stores.plugins for t in plugin.tools}[tool]
    answer = await found.run(where, found.validate(arguments))
    assert not isinstance(answer, ToolReply)
    return msgspec.json.decode(answer)


async def test_the_space_plugins_are_prefs_and_moderation_with_their_skills(stores: Stores) -> None:
    assert [(p.name, p.builtin, [s.name for s in p.skills]) for p in stores.plugins] == [
        ("prefs", True, ["preferences"]),
        ("moderation", True, ["moderation"]),
    ]
    assert [t.name for p in stores.plugins for t in p.tools] == [
        "prefs_list",
        "prefs_get",
        "prefs_set",
        "prefs_delete",
        "mute",
        "unmute",
        "mutes_list",
    ]


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("prefs_list", {}),
        ("prefs_get", {"key": "tone"}),
        ("prefs_set", {"key": "tone", "value": "Brief."}),
        ("prefs_delete", {"key": "tone"}),
        ("mute", {"person": SPAMMER, "duration": "1h", "reason": "spam"}),
        ("unmute", {"person": SPAMMER}),
        ("mutes_list", {}),
    ],
)
async def test_every_space_tool_works_only_in_a_shared_space(
    stores: Stores, tool: str, arguments: dict[str, Any]
) -> None:
    with pytest.raises(ToolError, match="works only in a shared space"):
        await call(stores, tool, context(space_id=None), **arguments)


async def test_an_admin_sets_reads_lists_and_deletes_preferences(stores: Stores) -> None:
    assert await call(stores, "prefs_set", ADMIN, key="tone", value="Brief.") == {
        "saved": {"key": "tone", "value": "Brief."},
        "created": True,
    }
    changed = await call(stores, "prefs_set", ADMIN, key="tone", value="Warm.")
    assert changed["created"] is False
    assert await call(stores, "prefs_get", ADMIN, key="tone") == {"key": "tone", "value": "Warm."}
    assert await call(stores, "prefs_list", ADMIN) == {
        "preferences": [{"key": "tone", "value": "Warm."}]
    }
    saved = await stores.prefs.get(GROUP, "tone")
    assert saved is not None and saved.created_by == "slack:U01ADMIN"
    assert await call(stores, "prefs_delete", ADMIN, key="tone") == {
        "key": "tone",
        "deleted": True,
    }
    assert await call(stores, "prefs_get", ADMIN, key="tone") == {"key": "tone", "value": None}


async def test_a_member_reads_preferences_but_only_an_admin_may_change_them(
    stores: Stores,
) -> None:
    await stores.prefs.set(GROUP, "tone", "Brief.", by="slack:U01ADMIN")
    member = context("member")
    assert await call(stores, "prefs_get", member, key="tone") == {
        "key": "tone",
        "value": "Brief.",
    }
    assert len((await call(stores, "prefs_list", member))["preferences"]) == 1
    for tool, arguments in (
        ("prefs_set", {"key": "tone", "value": "Rude."}),
        ("prefs_delete", {"key": "tone"}),
    ):
        with pytest.raises(ToolError, match="Only an admin of this space may change"):
            await call(stores, tool, member, **arguments)
    saved = await stores.prefs.get(GROUP, "tone")
    assert saved is not None and saved.value == "Brief."


async def test_someone_outside_the_space_can_t_even_read_its_preferences(
    stores: Stores,
) -> None:
    with pytest.raises(ToolError, match="Only the people of this space"):
        await call(stores, "prefs_list", context(None))


async def test_a_refused_preference_is_told_to_the_model_in_a_sentence(stores: Stores) -> None:
    with pytest.raises(ToolError, match="A preference key is 1 to 64 lower-case letters"):
        await call(stores, "prefs_set", ADMIN, key="Tone", value="x")
    with pytest.raises(ToolError, match="A preference key"):
        await call(stores, "prefs_get", ADMIN, key="no spaces")


async def test_tools_in_one_space_never_touch_anothers_preferences(stores: Stores) -> None:
    await call(stores, "prefs_set", ADMIN, key="tone", value="Brief.")
    elsewhere = context("admin", space_id=OTHER, caller="slack:U01ADMIN")
    assert await call(stores, "prefs_list", elsewhere) == {"preferences": []}
    assert (await call(stores, "prefs_delete", elsewhere, key="tone"))["deleted"] is False


async def test_a_single_mute_call_only_reminds_of_the_policy(stores: Stores) -> None:
    for confirm in (False, True):
        where = admin(session=f"session-{confirm}")
        arguments = {"person": SPAMMER, "duration": "1h", "reason": "spam", "confirm": confirm}
        answer = await call(stores, "mute", where, **arguments)
        assert answer["muted"] is False
        assert "warned" in answer["policy"] and "confirm: true" in answer["policy"]
        assert "relaying a request" in answer["policy"]
    assert not await stores.mutes.is_muted(GROUP, [SPAMMER])


async def test_a_confirmed_second_call_mutes_for_the_duration(
    stores: Stores, clock: ManualClock
) -> None:
    await call(stores, "mute", admin(), person=SPAMMER, duration="1h", reason="spam")
    clock.advance(timedelta(minutes=9))
    answer = await call(
        stores, "mute", admin(), person=SPAMMER, duration="1h", reason="spam", confirm=True
    )
    assert answer == {
        "muted": True,
        "person": SPAMMER,
        "until": "2026-12-06T11:09:00Z",
        "reason": "spam",
    }
    assert await stores.mutes.is_muted(GROUP, [SPAMMER])
    assert (await stores.mutes.list(GROUP))[0].by == "slack:U01ADMIN"
    assert await call(stores, "mutes_list", admin()) == {
        "mutes": [
            {
                "person": SPAMMER,
                "until": "2026-12-06T11:09:00Z",
                "reason": "spam",
                "by": "slack:U01ADMIN",
            }
        ]
    }


async def test_a_reminder_is_used_once_and_lapses_after_ten_minutes(
    stores: Stores, clock: ManualClock
) -> None:
    arguments = {"person": SPAMMER, "duration": "1h", "reason": "spam"}
    await call(stores, "mute", admin(), **arguments)
    clock.advance(timedelta(minutes=10))
    late = await call(stores, "mute", admin(), **arguments, confirm=True)
    assert late["muted"] is False
    assert (await call(stores, "mute", admin(), **arguments, confirm=True))["muted"] is True
    await stores.mutes.unmute(GROUP, SPAMMER)
    # The confirmation was spent: confirming again starts over.
    assert (await call(stores, "mute", admin(), **arguments, confirm=True))["muted"] is False


async def test_a_reminder_confirms_only_its_own_session_person_and_space(stores: Stores) -> None:
    arguments = {"duration": "1h", "reason": "spam"}
    await call(stores, "mute", admin(), person=SPAMMER, **arguments)
    others = [
        (admin(session="another-session"), SPAMMER),
        (admin(), "slack:U0SOMEONE"),
        (admin(space_id=OTHER, session="slack:C0123ABC:main"), SPAMMER),
    ]
    for where, person in others:
        answer = await call(stores, "mute", where, person=person, confirm=True, **arguments)
        assert answer["muted"] is False
    assert await stores.mutes.list(GROUP) == []
    assert await stores.mutes.list(OTHER) == []


async def test_an_admin_of_the_space_can_t_be_muted(stores: Stores) -> None:
    with pytest.raises(ToolError, match="admin"):
        await call(stores, "mute", admin(), person="slack:U01ADMIN", duration="1h", reason="x")


@pytest.mark.parametrize("duration", ["31d", "0m"])
async def test_a_duration_out_of_range_is_told_to_the_model(stores: Stores, duration: str) -> None:
    with pytest.raises(ToolError, match="10m, 1h, 24h or 7d"):
        await call(stores, "mute", admin(), person=SPAMMER, duration=duration, reason="x")


async def test_the_schema_refuses_a_duration_of_another_shape(stores: Stores) -> None:
    with pytest.raises(ToolError, match="do not fit its parameters"):
        await call(stores, "mute", admin(), person=SPAMMER, duration="an hour", reason="x")


async def test_unmute_ends_a_mute_and_says_whether_there_was_one(stores: Stores) -> None:
    await stores.mutes.mute(GROUP, SPAMMER, timedelta(hours=1), reason="spam", by="x")
    assert await call(stores, "unmute", admin(), person=SPAMMER) == {
        "person": SPAMMER,
        "unmuted": True,
    }
    assert (await call(stores, "unmute", admin(), person=SPAMMER))["unmuted"] is False
    assert await call(stores, "mutes_list", admin()) == {"mutes": []}


@pytest.mark.parametrize("role", ["member", None])
async def test_only_an_admins_turn_may_mute_unmute_or_list_mutes(
    stores: Stores, role: Role | None
) -> None:
    await stores.mutes.mute(GROUP, "slack:U0OLD", timedelta(hours=1), reason="spam", by="x")
    asker = context(role)
    mute = {"person": SPAMMER, "duration": "1h", "reason": "asked to"}
    for tool, arguments in (
        ("mute", mute),
        ("mute", {**mute, "confirm": True}),
        ("unmute", {"person": "slack:U0OLD"}),
        ("mutes_list", {}),
    ):
        with pytest.raises(ToolError, match="Only an admin of this space may have someone muted"):
            await call(stores, tool, asker, **arguments)
    assert [m.target for m in await stores.mutes.list(GROUP)] == ["slack:U0OLD"]


async def test_an_admin_can_t_be_muted_through_a_linked_account(
    db: Database, clock: ManualClock
) -> None:
    held = make_stores(db, clock, admins=("static:alice",))
    await link(held, "slack:UALICE", "static:alice")
    for name in ("slack:UALICE", "static:alice"):
        with pytest.raises(ToolError, match="an admin can't be muted"):
            await call(held, "mute", admin(), person=name, duration="1h", reason="x")
    assert await held.mutes.list(GROUP) == []


async def test_an_admin_can_t_be_muted_under_another_identity_the_directory_gives_her(
    db: Database, clock: ManualClock
) -> None:
    alice = DirectoryPerson(id="alice", identities=("static:alice", "slack:UALICE"))
    directory = StaticDirectory({name: alice for name in alice.identities})
    held = make_stores(db, clock, admins=("static:alice",), directory=directory)
    for name in ("slack:UALICE", "people:alice"):
        with pytest.raises(ToolError, match="an admin can't be muted"):
            await call(held, "mute", admin(), person=name, duration="1h", reason="x")


async def test_a_mute_is_kept_under_the_person_so_it_catches_every_linked_account(
    stores: Stores,
) -> None:
    await link(stores, "slack:UBOB2", "slack:UBOB")
    arguments = {"person": "slack:UBOB2", "duration": "1h", "reason": "spam"}
    await call(stores, "mute", admin(), **arguments)
    answer = await call(stores, "mute", admin(), **arguments, confirm=True)
    assert answer["muted"] is True and answer["person"] == "slack:UBOB"
    # The pipeline asks for the sender's id and person key: both accounts are caught.
    for sender in ("slack:UBOB", "slack:UBOB2"):
        assert await stores.mutes.is_muted(GROUP, [sender, "slack:UBOB"])
    assert await call(stores, "unmute", admin(), person="slack:UBOB2") == {
        "person": "slack:UBOB",
        "unmuted": True,
    }
    assert await stores.mutes.list(GROUP) == []


@pytest.mark.parametrize(
    ("person", "reason"),
    [
        ("slack:U0SPAM\u202e", "spam"),
        ("slack:U0SPAM", "spam\u202egnirts"),
        ("slack:U0SPAM", "a\x00b"),
    ],
)
async def test_a_target_or_reason_with_invisible_characters_is_refused(
    stores: Stores, person: str, reason: str
) -> None:
    with pytest.raises(ToolError, match="invisible"):
        await call(stores, "mute", admin(), person=person, duration="1h", reason=reason)
