from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest

from core.clock import ManualClock
from core.i18n import Catalogs
from core.principal import Person, Principal
from core.spaces import (
    Mutes,
    Role,
    SpaceConfig,
    SpacePreferences,
    Spaces,
    SpaceTurn,
)
from core.spaces.tools import space_plugins
from core.state import Database
from core.tools import Plugin, ToolCallContext, ToolError, ToolReply

pytestmark = pytest.mark.anyio

GROUP = "slack:C0123ABC"
OTHER = "slack:C0999XYZ"
SPAMMER = "slack:U0SPAM"
TRANSLATOR = Catalogs.load().translator("en")


class Stores(msgspec.Struct, kw_only=True):
    prefs: SpacePreferences
    mutes: Mutes
    spaces: Spaces
    plugins: tuple[Plugin, ...]


@pytest.fixture
def stores(db: Database, clock: ManualClock) -> Stores:
    prefs = SpacePreferences(db, clock=clock)
    mutes = Mutes(db, clock=clock)
    spaces = Spaces(db, {GROUP: SpaceConfig(admins=("slack:U01ADMIN",))}, clock=clock)
    return Stores(
        prefs=prefs,
        mutes=mutes,
        spaces=spaces,
        plugins=space_plugins(prefs, mutes, spaces, clock=clock),
    )


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
        where = context(session=f"session-{confirm}")
        arguments = {"person": SPAMMER, "duration": "1h", "reason": "spam", "confirm": confirm}
        answer = await call(stores, "mute", where, **arguments)
        assert answer["muted"] is False
        assert "warned" in answer["policy"] and "confirm: true" in answer["policy"]
        assert "another person in the chat asked" in answer["policy"]
    assert not await stores.mutes.is_muted(GROUP, [SPAMMER])


async def test_a_confirmed_second_call_mutes_for_the_duration(
    stores: Stores, clock: ManualClock
) -> None:
    await call(stores, "mute", context(), person=SPAMMER, duration="1h", reason="spam")
    clock.advance(timedelta(minutes=9))
    answer = await call(
        stores, "mute", context(), person=SPAMMER, duration="1h", reason="spam", confirm=True
    )
    assert answer == {
        "muted": True,
        "person": SPAMMER,
        "until": "2026-12-06T11:09:00Z",
        "reason": "spam",
    }
    assert await stores.mutes.is_muted(GROUP, [SPAMMER])
    assert (await stores.mutes.list(GROUP))[0].by == "slack:U02BOB"
    assert await call(stores, "mutes_list", context()) == {
        "mutes": [
            {
                "person": SPAMMER,
                "until": "2026-12-06T11:09:00Z",
                "reason": "spam",
                "by": "slack:U02BOB",
            }
        ]
    }


async def test_a_reminder_is_used_once_and_lapses_after_ten_minutes(
    stores: Stores, clock: ManualClock
) -> None:
    arguments = {"person": SPAMMER, "duration": "1h", "reason": "spam"}
    await call(stores, "mute", context(), **arguments)
    clock.advance(timedelta(minutes=10))
    late = await call(stores, "mute", context(), **arguments, confirm=True)
    assert late["muted"] is False
    assert (await call(stores, "mute", context(), **arguments, confirm=True))["muted"] is True
    await stores.mutes.unmute(GROUP, SPAMMER)
    # The confirmation was spent: confirming again starts over.
    assert (await call(stores, "mute", context(), **arguments, confirm=True))["muted"] is False


async def test_a_reminder_confirms_only_its_own_session_person_and_space(stores: Stores) -> None:
    arguments = {"duration": "1h", "reason": "spam"}
    await call(stores, "mute", context(), person=SPAMMER, **arguments)
    others = [
        (context(session="another-session"), SPAMMER),
        (context(), "slack:U0SOMEONE"),
        (context(space_id=OTHER, session="slack:C0123ABC:main"), SPAMMER),
    ]
    for where, person in others:
        answer = await call(stores, "mute", where, person=person, confirm=True, **arguments)
        assert answer["muted"] is False
    assert await stores.mutes.list(GROUP) == []
    assert await stores.mutes.list(OTHER) == []


async def test_an_admin_of_the_space_can_t_be_muted(stores: Stores) -> None:
    with pytest.raises(ToolError, match="admin"):
        await call(stores, "mute", context(), person="slack:U01ADMIN", duration="1h", reason="x")


@pytest.mark.parametrize("duration", ["31d", "0m"])
async def test_a_duration_out_of_range_is_told_to_the_model(stores: Stores, duration: str) -> None:
    with pytest.raises(ToolError, match="10m, 1h, 24h or 7d"):
        await call(stores, "mute", context(), person=SPAMMER, duration=duration, reason="x")


async def test_the_schema_refuses_a_duration_of_another_shape(stores: Stores) -> None:
    with pytest.raises(ToolError, match="do not fit its parameters"):
        await call(stores, "mute", context(), person=SPAMMER, duration="an hour", reason="x")


async def test_unmute_ends_a_mute_and_says_whether_there_was_one(stores: Stores) -> None:
    await stores.mutes.mute(GROUP, SPAMMER, timedelta(hours=1), reason="spam", by="x")
    assert await call(stores, "unmute", context(), person=SPAMMER) == {
        "person": SPAMMER,
        "unmuted": True,
    }
    assert (await call(stores, "unmute", context(), person=SPAMMER))["unmuted"] is False
    assert await call(stores, "mutes_list", context()) == {"mutes": []}
