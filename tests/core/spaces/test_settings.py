"""A space's runtime settings: kept per space, checked, and in force over the file and global."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from core.clock import ManualClock
from core.config.settings import Settings, load_settings
from core.people.i18n import Catalogs
from core.people.principal import Person, Principal
from core.spaces import InvalidSpaceId, Role, SpaceTurn
from core.spaces.settings import (
    REFUSALS,
    SETTING_KEYS,
    InForce,
    SettingError,
    SpaceSettings,
    resolve,
)
from core.spaces.triggers import Trigger
from core.state import Database
from core.tools.registry import ToolCallContext, ToolError, ToolReply
from core.tools.space_tools import settings_plugin

pytestmark = pytest.mark.anyio

CONFIG = """
rate_limit: {per_user: 12}
trigger: {pattern: Hermes}
spaces:
  "slack:C1":
    admins: [slack:UADMIN]
    rate_limit: 5
    trigger: {match: prefix, media_in_groups: true}
    live_answers: false
"""
GROUP = "slack:C1"
OTHER = "slack:C2"
TRANSLATOR = Catalogs.load().translator("en")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    (tmp_path / "mercury.yaml").write_text(CONFIG, encoding="utf-8")
    return load_settings({"MERCURY_CONFIG_FILE": "mercury.yaml"}, tmp_path)


@pytest.fixture
def store(db: Database, settings: Settings, clock: ManualClock) -> SpaceSettings:
    return SpaceSettings(db, settings, clock=clock)


def sources(found: dict[Any, Any]) -> dict[str, tuple[object, str]]:
    return {key: (entry.value, entry.source) for key, entry in found.items()}


async def test_a_space_s_setting_is_its_own_then_the_file_s_then_the_global_one(
    store: SpaceSettings,
) -> None:
    assert sources(await store.listing(GROUP)) == {
        "rate_limit": (5, "file"),
        "trigger.match": ("prefix", "file"),
        "trigger.pattern": ("Hermes", "global"),
        "trigger.media_in_groups": (True, "file"),
        "ambient.max_messages": (20, "global"),
        "ambient.max_chars": (4000, "global"),
        "live_answers": (False, "file"),
        "budget.person_day": (0, "global"),
        "budget.person_month": (0, "global"),
        "budget.space_day": (0, "global"),
        "budget.space_month": (0, "global"),
    }
    assert (await store.set(GROUP, "rate_limit", 2, by="slack:UADMIN")).source == "space"
    await store.set(GROUP, "ambient.max_messages", 3, by="slack:UADMIN")
    await store.set(OTHER, "rate_limit", 7, by="slack:UADMIN")
    in_force = await store.in_force(GROUP)
    assert in_force.rate_limit == 2 and in_force.ambient_max_messages == 3
    assert in_force.trigger == Trigger(match="prefix", pattern="Hermes", media_in_groups=True)
    # Deleting the space's value falls back to the file's, then (no file value) the global.
    fallen = await store.delete(GROUP, "rate_limit")
    assert (fallen.value, fallen.source) == (5, "file")
    fallen = await store.delete(GROUP, "ambient.max_messages")
    assert (fallen.value, fallen.source) == (20, "global")
    assert (await store.in_force(OTHER)).rate_limit == 7
    assert (await store.in_force("slack:C3")).rate_limit == 12  # the global setting


async def test_the_values_are_kept_with_their_types_and_their_text_forms_are_read(
    store: SpaceSettings,
) -> None:
    for key, value, kept in (
        ("rate_limit", "40", 40),
        ("live_answers", "true", True),
        ("trigger.media_in_groups", False, False),
        ("trigger.match", "always", "always"),
        ("trigger.pattern", "  Jarvis ", "Jarvis"),
        ("ambient.max_chars", 0, 0),
    ):
        saved = await store.set(GROUP, key, value, by="slack:UADMIN")
        assert (saved.value, saved.source) == (kept, "space"), key
    assert InForce.of(await store.listing(GROUP)).trigger.pattern == "Jarvis"


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("rate_limit", 0, "rate_limit is a whole number from 1 to 1000."),
        ("rate_limit", 1001, "rate_limit is a whole number from 1 to 1000."),
        ("rate_limit", True, "rate_limit is a whole number from 1 to 1000."),
        ("rate_limit", 2.5, "rate_limit is a whole number from 1 to 1000."),
        ("ambient.max_messages", 501, "ambient.max_messages is a whole number from 0 to 500."),
        ("ambient.max_chars", -1, "ambient.max_chars is a whole number from 0 to 100000."),
        ("live_answers", "yes", "live_answers is true or false."),
        ("trigger.media_in_groups", 1, "trigger.media_in_groups is true or false."),
        ("trigger.match", "sometimes", "trigger.match is mention, prefix or always."),
        ("trigger.pattern", "  ", "trigger.pattern is the trigger word"),
        ("trigger.pattern", "x" * 65, "trigger.pattern is the trigger word"),
        ("trigger.pattern", "Mer\u202ecury", "trigger.pattern is the trigger word"),
        ("trigger.pattern", 5, "trigger.pattern is the trigger word"),
        ("trigger.pattern", "@", "trigger.pattern is the trigger word"),
        ("trigger.pattern", "@@@@", "trigger.pattern is the trigger word"),
        ("colour", "blue", '"colour" is not a setting of a space'),
    ],
)
async def test_a_value_out_of_its_rule_is_refused_with_a_sentence_and_nothing_is_kept(
    store: SpaceSettings, key: str, value: object, says: str
) -> None:
    with pytest.raises(SettingError) as refused:
        await store.set(GROUP, key, value, by="slack:UADMIN")
    assert str(refused.value).startswith(says)
    assert refused.value.fault == ("key" if key == "colour" else "value")
    assert await store.runtime(GROUP) == {}


async def test_a_malformed_space_is_refused_and_deleting_a_space_drops_its_settings(
    store: SpaceSettings,
) -> None:
    with pytest.raises(InvalidSpaceId):
        await store.set("nowhere", "rate_limit", 3, by="slack:UADMIN")
    await store.set(GROUP, "rate_limit", 3, by="slack:UADMIN")
    await store.set(GROUP, "live_answers", True, by="slack:UADMIN")
    await store.set(OTHER, "rate_limit", 4, by="slack:UADMIN")
    assert await store.delete_space(GROUP) == 2
    assert await store.runtime(GROUP) == {}
    assert await store.runtime(OTHER) == {"rate_limit": 4}


async def test_a_stored_value_that_no_longer_passes_is_passed_over(
    store: SpaceSettings, db: Database
) -> None:
    await store.set(GROUP, "rate_limit", 3, by="slack:UADMIN")
    await db.execute("UPDATE space_settings SET value = '5000' WHERE space_id = ?", (GROUP,))
    assert (await store.in_force(GROUP)).rate_limit == 5  # the file's


def test_every_key_resolves_and_every_refusal_is_a_sentence(settings: Settings) -> None:
    assert set(resolve(settings, OTHER, {})) == set(SETTING_KEYS)
    assert all(text.endswith(".") for text in REFUSALS.values())


def context(role: Role | None, *, space_id: str | None = GROUP) -> ToolCallContext:
    caller = "slack:UADMIN" if role == "admin" else "slack:UBOB"
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
        session_key="s",
        conversation_id="main",
        translator=TRANSLATOR,
        space=turn,
    )


async def call(store: SpaceSettings, where: ToolCallContext, **arguments: Any) -> Any:
    [tool] = settings_plugin(store).tools
    answer = await tool.run(where, tool.validate(arguments))
    assert not isinstance(answer, ToolReply)
    return msgspec.json.decode(answer)


async def test_the_tool_lets_an_admin_change_a_member_read_and_an_outsider_nothing(
    store: SpaceSettings,
) -> None:
    admin, member, outsider = context("admin"), context("member"), context(None)
    assert await call(store, admin, action="set", key="rate_limit", value=3) == {
        "key": "rate_limit",
        "value": 3,
        "source": "space",
    }
    read = await call(store, member, action="get", key="rate_limit")
    assert read == {"settings": [{"key": "rate_limit", "value": 3, "source": "space"}]}
    assert len((await call(store, member, action="get"))["settings"]) == len(SETTING_KEYS)
    for action in ("set", "delete"):
        with pytest.raises(ToolError, match="Only an admin of this space may change its settings"):
            await call(store, member, action=action, key="rate_limit", value=9)
    with pytest.raises(ToolError, match="Only the people of this space may read"):
        await call(store, outsider, action="get")
    with pytest.raises(ToolError, match="Only an admin"):
        await call(store, outsider, action="set", key="rate_limit", value=9)
    assert (await store.in_force(GROUP)).rate_limit == 3
    with pytest.raises(ToolError, match="works only in a shared space"):
        await call(store, context("admin", space_id=None), action="get")
    fallen = await call(store, admin, action="delete", key="rate_limit")
    assert fallen == {"key": "rate_limit", "value": 5, "source": "file"}


async def test_the_tool_refuses_a_bad_value_with_the_store_s_sentence(store: SpaceSettings) -> None:
    with pytest.raises(ToolError, match="rate_limit is a whole number from 1 to 1000"):
        await call(store, context("admin"), action="set", key="rate_limit", value=0)
    with pytest.raises(ToolError, match="new value"):
        await call(store, context("admin"), action="set", key="rate_limit")
    assert await store.runtime(GROUP) == {}
