from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.clock import ManualClock
from core.engine.confirmations import new_token
from core.people.directory import DirectoryPerson
from core.people.directory_static import StaticDirectory
from core.people.i18n import Translation
from core.people.linking import CODE_ALPHABET, LinkCode, Linking, is_link_code, new_link_code
from core.people.people import Admitted, People, Refused
from core.people.principal import Person, Principal
from core.state import Database
from tests.support.state import StateBackend


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


ENGLISH = Translation(language="en")

ALICE = Principal(id="alice", provider="static", display_name="Alice (token)")
ALICE_WORK = Principal(id="alice-work", provider="oidc")
ALICE_PHONE = Principal(id="alice-phone", provider="oidc", display_name="Alice's phone")
ALICE_TABLET = Principal(id="alice-tablet", provider="oidc")
BOB = Principal(id="bob", provider="static", display_name="Bob")

DIRECTORY_JSON = json.dumps(
    [
        {
            "id": "alice",
            "displayName": "Alice Liddell",
            "roles": ["finance"],
            "identities": ["static:alice", "oidc:alice-work"],
        },
        {"id": "bob", "displayName": "Bob Builder", "identities": ["static:bob"]},
    ]
)


def invalid() -> str:
    return (
        "That code isn't valid: it may have expired or been used already. Ask for a new one on "
        "the account you want to link to."
    )


def preview(name: str) -> str:
    return (
        f"This will link this account to {name}: from then on the assistant treats them as one "
        f"person, with {name}'s private area and roles. Send the same code again to confirm."
    )


def linked(name: str) -> str:
    return f"Linked: this account is now {name}."


OWN_ACCOUNT = "That code is for linking another account to this one."
HELD_ELSEWHERE = (
    "Another account has already sent this code, so it can't be used from this one. If that "
    "wasn't you, ask for a new code on the account you want to link to: the new one replaces "
    "this one."
)
IN_A_GROUP = (
    "Link codes work only in a direct chat with me. This one was shown here, so it no longer "
    "works: ask for a new one and send it to me directly."
)
CANT_CHECK = (
    "I can't check this account right now. Ask for a new code and try again in a few minutes."
)


def someone_else(name: str) -> str:
    return f"This account belongs to someone else in the directory: it can't be linked to {name}."


class SwitchableDirectory:
    """The static directory, which can be made to fail on demand."""

    def __init__(self, inner: StaticDirectory) -> None:
        self.inner = inner
        self.failing = False

    @property
    def name(self) -> str:
        return self.inner.name

    async def resolve(self, user_key: str) -> DirectoryPerson | None:
        if self.failing:
            raise ConnectionError("directory unreachable")
        return await self.inner.resolve(user_key)


class World:
    def __init__(
        self, db: Database, directory: SwitchableDirectory | None, access_unknown: str
    ) -> None:
        self.db = db
        self.clock = ManualClock(datetime(2026, 12, 2, 17, 0, tzinfo=UTC))
        self.directory = directory
        self.people = People(
            directory,
            access_unknown="allow" if access_unknown == "allow" else "refuse",
            clock=self.clock,
        )
        self.linking = Linking(db, self.people, clock=self.clock)

    async def person(self, principal: Principal) -> Person:
        identification = await self.people.identify(principal)
        assert isinstance(identification, Admitted), identification
        return identification.person

    async def code_for(self, principal: Principal) -> str:
        started = await self.linking.start(principal, await self.person(principal))
        return started.code

    async def send(self, principal: Principal, text: str) -> str | None:
        return await self.linking.redeem(principal, text, ENGLISH)


@pytest.fixture
async def db(state: StateBackend) -> Database:
    return await state.open()


@pytest.fixture
def closed(db: Database) -> World:
    """A closed instance with the static directory: Alice (two identities) and Bob."""
    return World(db, SwitchableDirectory(StaticDirectory.from_env(DIRECTORY_JSON)), "refuse")


@pytest.fixture
def bare(db: Database) -> World:
    """An instance without a directory."""
    return World(db, None, "refuse")


# --- the code's shape ---------------------------------------------------------------------


def test_a_link_code_has_three_groups_of_four_and_a_token_two() -> None:
    assert is_link_code("Ab3d-9xYz-Q7mN")
    assert is_link_code("  Ab3d-9xYz-Q7mN\n")
    assert not is_link_code("Ab3d-9xYz")
    assert not is_link_code(new_token())
    assert not is_link_code("Ab3d-9xYz-Q7mN-abcd")
    assert not is_link_code("Ab3d-9xYz-Q7m!")
    assert not is_link_code("Ab3d 9xYz Q7mN")
    assert not is_link_code("my code is Ab3d-9xYz-Q7mN")
    assert not is_link_code("Ab3d-9xYz-Q7mé")


@given(
    st.text(alphabet=CODE_ALPHABET, min_size=12, max_size=12), st.sampled_from(["", " ", "\n\t"])
)
def test_any_code_shaped_text_is_a_link_code(characters: str, padding: str) -> None:
    code = f"{characters[:4]}-{characters[4:8]}-{characters[8:]}"
    assert is_link_code(padding + code + padding)


@given(st.text(max_size=40))
def test_is_link_code_never_raises_and_only_accepts_the_exact_shape(text: str) -> None:
    if is_link_code(text):
        code = text.strip()
        assert len(code) == 14
        assert code[4] == code[9] == "-"
        assert all(c in CODE_ALPHABET for c in code.replace("-", ""))


def test_fresh_codes_have_the_shape_and_differ() -> None:
    codes = {new_link_code() for _ in range(200)}
    assert len(codes) == 200
    assert all(is_link_code(code) for code in codes)


# --- start ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_code_lasts_ten_minutes(closed: World) -> None:
    started = await closed.linking.start(ALICE, await closed.person(ALICE))
    assert isinstance(started, LinkCode)
    assert is_link_code(started.code)
    assert started.expires_at == datetime(2026, 12, 2, 17, 10, tzinfo=UTC)


@pytest.mark.anyio
async def test_a_code_is_kept_only_as_its_hash(closed: World) -> None:
    code = await closed.code_for(ALICE)
    rows = await closed.db.fetch_all("SELECT * FROM link_codes")
    assert len(rows) == 1
    stored = [str(value) for value in tuple(rows[0])]
    assert code not in " ".join(stored)
    assert rows[0]["code_hash"] == hashlib.sha256(code.encode()).hexdigest()
    assert rows[0]["owner_identity"] == "static:alice"


@pytest.mark.anyio
async def test_a_new_code_replaces_the_previous_one(closed: World) -> None:
    old = await closed.code_for(ALICE)
    new = await closed.code_for(ALICE)
    assert old != new
    assert await closed.send(ALICE_PHONE, old) == invalid()
    assert await closed.send(ALICE_PHONE, new) == preview("Alice Liddell")
    assert len(await closed.db.fetch_all("SELECT * FROM link_codes")) == 1


@pytest.mark.anyio
async def test_codes_of_different_owners_live_side_by_side(closed: World) -> None:
    alices = await closed.code_for(ALICE)
    bobs = await closed.code_for(BOB)
    assert await closed.send(ALICE_PHONE, alices) == preview("Alice Liddell")
    assert await closed.send(ALICE_TABLET, bobs) == preview("Bob Builder")


@pytest.mark.anyio
async def test_a_code_time_to_live_must_be_positive(closed: World) -> None:
    with pytest.raises(ValueError, match="positive"):
        Linking(closed.db, closed.people, code_ttl=timedelta(0))


# --- redeem --------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("text", ["hello", "", "Ab3d-9xYz", "Ab3d-9xYz-Q7mN please"])
async def test_a_text_without_the_code_shape_is_not_for_linking(closed: World, text: str) -> None:
    assert await closed.send(ALICE_PHONE, text) is None


@pytest.mark.anyio
async def test_two_sends_link_an_account_the_closed_instance_did_not_know(closed: World) -> None:
    assert await closed.people.identify(ALICE_PHONE) == Refused(reason="unknown")
    code = await closed.code_for(ALICE)

    assert await closed.send(ALICE_PHONE, code) == preview("Alice Liddell")
    assert await closed.linking.owner_of("oidc:alice-phone") is None
    assert await closed.send(ALICE_PHONE, f"  {code}\n") == linked("Alice Liddell")

    assert await closed.linking.owner_of("oidc:alice-phone") == "static:alice"
    # No waiting for the cache: linking drops it.
    phone = await closed.person(ALICE_PHONE)
    assert phone == await closed.person(ALICE)
    assert phone.key == "people:alice"
    assert phone.roles == frozenset({"finance"})


@pytest.mark.anyio
async def test_a_code_works_once(closed: World) -> None:
    code = await closed.code_for(ALICE)
    await closed.send(ALICE_PHONE, code)
    assert await closed.send(ALICE_PHONE, code) == linked("Alice Liddell")
    assert await closed.send(ALICE_PHONE, code) == invalid()
    assert await closed.send(ALICE_TABLET, code) == invalid()


@pytest.mark.anyio
async def test_an_unknown_code_and_an_expired_one_get_the_same_answer(closed: World) -> None:
    assert await closed.send(ALICE_PHONE, "Ab3d-9xYz-Q7mN") == invalid()
    code = await closed.code_for(ALICE)
    closed.clock.advance(timedelta(minutes=10))
    assert await closed.send(ALICE_PHONE, code) == invalid()


@pytest.mark.anyio
async def test_a_code_that_expires_between_the_two_sends_links_nothing(closed: World) -> None:
    code = await closed.code_for(ALICE)
    closed.clock.advance(timedelta(minutes=9, seconds=59))
    assert await closed.send(ALICE_PHONE, code) == preview("Alice Liddell")
    closed.clock.advance(timedelta(seconds=1))
    assert await closed.send(ALICE_PHONE, code) == invalid()
    assert await closed.linking.owner_of("oidc:alice-phone") is None


@pytest.mark.anyio
async def test_the_first_account_to_send_a_code_holds_it_and_another_is_refused(
    closed: World,
) -> None:
    # Issue #34: the code used to bind to whoever sent it last, so someone who saw it could
    # take it over between the owner's two sends and become the owner's linked account.
    code = await closed.code_for(ALICE)
    assert await closed.send(ALICE_PHONE, code) == preview("Alice Liddell")
    assert await closed.send(ALICE_TABLET, code) == HELD_ELSEWHERE
    assert await closed.send(ALICE_TABLET, code) == HELD_ELSEWHERE  # never bound
    assert await closed.send(ALICE_PHONE, code) == linked("Alice Liddell")
    assert await closed.linking.owner_of("oidc:alice-tablet") is None
    assert await closed.send(ALICE_TABLET, code) == invalid()


@pytest.mark.anyio
async def test_a_new_code_frees_the_owner_from_an_account_that_held_the_old_one(
    closed: World,
) -> None:
    stolen = await closed.code_for(ALICE)
    assert await closed.send(BOB, stolen) == preview("Alice Liddell")
    fresh = await closed.code_for(ALICE)
    assert await closed.send(BOB, stolen) == invalid()
    assert await closed.send(ALICE_PHONE, fresh) == preview("Alice Liddell")
    assert await closed.send(ALICE_PHONE, fresh) == linked("Alice Liddell")


@pytest.mark.anyio
async def test_of_two_accounts_sending_a_code_at_once_only_one_holds_it(closed: World) -> None:
    code = await closed.code_for(ALICE)
    answers = await asyncio.gather(closed.send(ALICE_PHONE, code), closed.send(BOB, code))
    assert sorted(answer or "" for answer in answers) == sorted(
        [preview("Alice Liddell"), HELD_ELSEWHERE]
    )


@pytest.mark.anyio
async def test_a_code_shown_in_a_group_is_withdrawn_and_no_account_can_redeem_it(
    closed: World,
) -> None:
    code = await closed.code_for(ALICE)
    assert await closed.linking.withdraw(code, ENGLISH) == IN_A_GROUP
    assert await closed.send(BOB, code) == invalid()
    assert await closed.send(ALICE_PHONE, code) == invalid()
    # Any code-shaped text gets the same answer: a group learns nothing of which are live.
    assert await closed.linking.withdraw("Ab3d-9xYz-Q7mN", ENGLISH) == IN_A_GROUP
    assert await closed.linking.withdraw("hello", ENGLISH) is None


@pytest.mark.anyio
async def test_the_owner_sending_their_own_code_is_refused(closed: World) -> None:
    code = await closed.code_for(ALICE)
    assert await closed.send(ALICE, code) == OWN_ACCOUNT
    assert await closed.send(ALICE, code) == OWN_ACCOUNT
    # The code is still good for another account.
    assert await closed.send(ALICE_PHONE, code) == preview("Alice Liddell")


@pytest.mark.anyio
async def test_an_account_already_linked_to_the_owner_is_its_own_account(closed: World) -> None:
    first = await closed.code_for(ALICE)
    await closed.send(ALICE_PHONE, first)
    await closed.send(ALICE_PHONE, first)
    second = await closed.code_for(ALICE)
    assert await closed.send(ALICE_PHONE, second) == OWN_ACCOUNT


@pytest.mark.anyio
async def test_a_code_started_from_a_linked_account_links_to_its_owner(closed: World) -> None:
    first = await closed.code_for(ALICE)
    await closed.send(ALICE_PHONE, first)
    await closed.send(ALICE_PHONE, first)

    from_phone = await closed.code_for(ALICE_PHONE)
    assert await closed.send(ALICE, from_phone) == OWN_ACCOUNT
    assert await closed.send(ALICE_TABLET, from_phone) == preview("Alice Liddell")
    assert await closed.send(ALICE_TABLET, from_phone) == linked("Alice Liddell")
    assert await closed.linking.owner_of("oidc:alice-tablet") == "static:alice"
    assert (await closed.person(ALICE_TABLET)).key == "people:alice"


@pytest.mark.anyio
async def test_a_code_from_the_owner_and_from_its_linked_account_replace_each_other(
    closed: World,
) -> None:
    first = await closed.code_for(ALICE)
    await closed.send(ALICE_PHONE, first)
    await closed.send(ALICE_PHONE, first)
    from_alice = await closed.code_for(ALICE)
    from_phone = await closed.code_for(ALICE_PHONE)
    assert await closed.send(ALICE_TABLET, from_alice) == invalid()
    assert await closed.send(ALICE_TABLET, from_phone) == preview("Alice Liddell")


@pytest.mark.anyio
async def test_an_account_the_directory_knows_as_someone_else_is_refused(closed: World) -> None:
    code = await closed.code_for(ALICE)
    assert await closed.send(BOB, code) == preview("Alice Liddell")
    assert await closed.send(BOB, code) == someone_else("Alice Liddell")
    assert await closed.linking.owner_of("static:bob") is None
    assert (await closed.person(BOB)).key == "people:bob"
    # The code was used up by the attempt.
    assert await closed.send(BOB, code) == invalid()


@pytest.mark.anyio
async def test_an_account_the_directory_knows_as_the_owner_links(closed: World) -> None:
    code = await closed.code_for(ALICE)
    await closed.send(ALICE_WORK, code)
    assert await closed.send(ALICE_WORK, code) == linked("Alice Liddell")
    assert await closed.linking.owner_of("oidc:alice-work") == "static:alice"


@pytest.mark.anyio
async def test_when_the_directory_fails_at_the_second_send_nothing_is_linked(
    closed: World,
) -> None:
    code = await closed.code_for(ALICE)
    assert await closed.send(ALICE_PHONE, code) == preview("Alice Liddell")
    assert closed.directory is not None
    closed.directory.failing = True
    assert await closed.send(ALICE_PHONE, code) == CANT_CHECK
    closed.directory.failing = False
    assert await closed.linking.owner_of("oidc:alice-phone") is None
    assert await closed.send(ALICE_PHONE, code) == invalid()


@pytest.mark.anyio
async def test_an_owner_linked_elsewhere_in_the_meantime_makes_its_code_invalid(
    db: Database,
) -> None:
    world = World(db, SwitchableDirectory(StaticDirectory.from_env(DIRECTORY_JSON)), "allow")
    from_phone = await world.code_for(ALICE_PHONE)  # the phone is its own person for now
    assert await world.send(ALICE_TABLET, from_phone) == preview("Alice's phone")

    from_alice = await world.code_for(ALICE)
    await world.send(ALICE_PHONE, from_alice)
    assert await world.send(ALICE_PHONE, from_alice) == linked("Alice Liddell")

    assert await world.send(ALICE_TABLET, from_phone) == invalid()
    assert await world.linking.owner_of("oidc:alice-tablet") is None


@pytest.mark.anyio
async def test_accounts_linked_to_an_account_follow_it_when_it_is_linked(bare: World) -> None:
    from_phone = await bare.code_for(ALICE_PHONE)
    await bare.send(ALICE_TABLET, from_phone)
    assert await bare.send(ALICE_TABLET, from_phone) == linked("Alice's phone")
    assert await bare.linking.owner_of("oidc:alice-tablet") == "oidc:alice-phone"

    from_alice = await bare.code_for(ALICE)
    await bare.send(ALICE_PHONE, from_alice)
    assert await bare.send(ALICE_PHONE, from_alice) == linked("Alice (token)")
    assert await bare.linking.owner_of("oidc:alice-tablet") == "static:alice"
    assert (await bare.person(ALICE_TABLET)).key == "static:alice"


@pytest.mark.anyio
async def test_without_a_directory_a_linked_account_takes_the_owners_user_key(
    bare: World,
) -> None:
    nameless = Principal(id="alice", provider="static")
    code = await bare.code_for(nameless)
    assert await bare.send(ALICE_PHONE, code) == preview("static:alice")
    assert await bare.send(ALICE_PHONE, code) == linked("static:alice")
    phone = await bare.person(ALICE_PHONE)
    assert phone == Person(key="static:alice", display_name="Alice's phone")


@pytest.mark.anyio
async def test_the_answers_are_in_the_translators_language(closed: World) -> None:
    italian = Translation(
        language="it",
        messages={
            preview("%(name)s"): "Collegherò questo account a %(name)s. Rimanda il codice.",
            linked("%(name)s"): "Fatto: ora sei %(name)s.",
        },
    )
    code = await closed.code_for(ALICE)
    first = await closed.linking.redeem(ALICE_PHONE, code, italian)
    assert first == "Collegherò questo account a Alice Liddell. Rimanda il codice."
    assert (
        await closed.linking.redeem(ALICE_PHONE, code, italian) == "Fatto: ora sei Alice Liddell."
    )


@pytest.mark.anyio
async def test_of_two_racing_confirmations_only_one_links(closed: World) -> None:
    code = await closed.code_for(ALICE)
    await closed.send(ALICE_PHONE, code)
    answers = await asyncio.gather(*(closed.send(ALICE_PHONE, code) for _ in range(4)))
    assert sorted(answer or "" for answer in answers) == sorted(
        [linked("Alice Liddell")] + [invalid()] * 3
    )


@pytest.mark.anyio
async def test_links_outlive_the_process(state: StateBackend) -> None:
    first = await state.open()
    world = World(first, None, "refuse")
    code = await world.code_for(ALICE)
    await world.send(ALICE_PHONE, code)
    await world.send(ALICE_PHONE, code)
    await first.close()
    again = World(await state.open(), None, "refuse")
    assert (await again.person(ALICE_PHONE)).key == "static:alice"


@pytest.mark.anyio
async def test_a_code_made_through_one_instance_is_redeemed_through_another(
    shared_state: StateBackend,
) -> None:
    first = World(await shared_state.open(), None, "refuse")
    second = World(await shared_state.open(), None, "refuse")
    code = await first.code_for(ALICE)
    # The first instance has met the phone as a person of its own, and caches that.
    assert (await first.person(ALICE_PHONE)).key != (await first.person(ALICE)).key
    assert await second.send(ALICE_PHONE, code) != invalid()
    answers = await asyncio.gather(first.send(ALICE_PHONE, code), second.send(ALICE_PHONE, code))
    assert sorted(answer or "" for answer in answers) == sorted(
        [linked("Alice (token)"), invalid()]
    )
    # The link, made through one of them, reaches the other's cache.
    async with asyncio.timeout(10):
        while (await first.person(ALICE_PHONE)).key != (await first.person(ALICE)).key:
            await asyncio.sleep(0.01)
    assert (await second.person(ALICE_PHONE)).key == (await first.person(ALICE)).key


@pytest.mark.anyio
async def test_codes_never_reach_the_log(closed: World, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    codes = [await closed.code_for(ALICE) for _ in range(2)]
    await closed.send(ALICE_PHONE, codes[-1])
    await closed.send(BOB, codes[-1])
    await closed.send(ALICE_PHONE, codes[-1])
    await closed.send(ALICE_PHONE, codes[-1])
    third = await closed.code_for(ALICE)
    await closed.send(BOB, third)
    await closed.send(BOB, third)
    assert "Linked oidc:alice-phone to static:alice" in caplog.text
    for code in [*codes, third]:
        assert code not in caplog.text
