from __future__ import annotations

import asyncio
from datetime import timedelta

import anyio
import pytest

from core.clock import ManualClock
from core.people.directory import DirectoryPerson, DirectoryUnavailable
from core.people.i18n import Translation
from core.people.pairing import DmPolicy
from core.people.people import (
    SWEEP_THRESHOLD,
    AccessUnknown,
    Admitted,
    People,
    Refused,
    refusal_message,
)
from core.people.principal import Person, Principal


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


ALICE = Principal(id="alice", provider="static", display_name="Alice (token)")
ALICE_PHONE = Principal(id="alice-phone", provider="oidc", display_name="Alice's phone")
BOB = Principal(id="bob", provider="static", display_name="Bob")

ALICE_ENTRY = DirectoryPerson(
    id="alice",
    display_name="Alice Liddell",
    email="alice@example.com",
    roles=frozenset({"finance"}),
    identities=("static:alice",),
)


class RecordingDirectory:
    """A directory held in a dict that counts its calls and can fail or be held back."""

    name = "people"

    def __init__(self, people: dict[str, DirectoryPerson] | None = None) -> None:
        self.people = dict(people or {})
        self.asked: list[str] = []
        self.failure: Exception | None = None
        self.gate: asyncio.Event | None = None

    async def resolve(self, user_key: str) -> DirectoryPerson | None:
        self.asked.append(user_key)
        if self.gate is not None:
            await self.gate.wait()
        if self.failure is not None:
            raise self.failure
        return self.people.get(user_key)


class DictLinks:
    def __init__(self, links: dict[str, str], *, shared: bool = False) -> None:
        self.links = links
        self.shared = shared
        self.reads = 0

    async def owner_of(self, user_key: str) -> str | None:
        self.reads += 1
        return self.links.get(user_key)


class BrokenLinks:
    shared = False

    async def owner_of(self, user_key: str) -> str | None:
        raise OSError("disk I/O error")


def people_with(
    directory: RecordingDirectory | None,
    *,
    access_unknown: str = "refuse",
    clock: ManualClock | None = None,
    links: DictLinks | BrokenLinks | None = None,
) -> People:
    assert access_unknown in ("refuse", "allow")
    return People(
        directory,
        access_unknown="allow" if access_unknown == "allow" else "refuse",
        links=links,
        clock=clock or ManualClock(),
    )


@pytest.mark.anyio
async def test_without_a_directory_the_person_is_the_principal_with_no_roles() -> None:
    people = people_with(None)
    assert await people.identify(ALICE) == Admitted(
        person=Person(key="static:alice", display_name="Alice (token)")
    )


@pytest.mark.anyio
async def test_a_known_person_gets_the_directory_key_and_fields() -> None:
    people = people_with(RecordingDirectory({"static:alice": ALICE_ENTRY}))
    assert await people.identify(ALICE) == Admitted(
        person=Person(
            key="people:alice",
            display_name="Alice Liddell",
            email="alice@example.com",
            roles=frozenset({"finance"}),
        )
    )


@pytest.mark.anyio
async def test_two_identities_the_directory_gives_one_person_share_the_person_key() -> None:
    directory = RecordingDirectory({"static:alice": ALICE_ENTRY, "oidc:alice-phone": ALICE_ENTRY})
    people = people_with(directory)
    first = await people.identify(ALICE)
    second = await people.identify(ALICE_PHONE)
    assert isinstance(first, Admitted)
    assert first == second


@pytest.mark.anyio
async def test_someone_the_directory_does_not_know_is_refused_as_unknown() -> None:
    people = people_with(RecordingDirectory({"static:alice": ALICE_ENTRY}))
    assert await people.identify(BOB) == Refused(reason="unknown")


@pytest.mark.anyio
async def test_an_open_instance_lets_unknown_people_in_as_the_principal_says() -> None:
    people = people_with(RecordingDirectory({"static:alice": ALICE_ENTRY}), access_unknown="allow")
    assert await people.identify(BOB) == Admitted(
        person=Person(key="static:bob", display_name="Bob")
    )
    known = await people.identify(ALICE)
    assert isinstance(known, Admitted)
    assert known.person.roles == frozenset({"finance"})


@pytest.mark.anyio
@pytest.mark.parametrize("access_unknown", ["refuse", "allow"])
@pytest.mark.parametrize(
    "failure", [DirectoryUnavailable("down"), RuntimeError("boom"), TimeoutError()]
)
async def test_a_failing_directory_refuses_as_unavailable_even_an_open_instance(
    access_unknown: str, failure: Exception
) -> None:
    directory = RecordingDirectory({"static:alice": ALICE_ENTRY})
    directory.failure = failure
    people = people_with(directory, access_unknown=access_unknown)
    assert await people.identify(ALICE) == Refused(reason="unavailable")
    assert await people.identify(BOB) == Refused(reason="unavailable")


@pytest.mark.anyio
async def test_a_principal_claiming_the_reserved_none_provider_is_refused_unasked() -> None:
    directory = RecordingDirectory()
    people = people_with(directory, access_unknown="allow")
    forged = Principal(id="terminal", provider="none")
    assert await people.identify(forged) == Refused(reason="unknown")
    assert await people_with(None).identify(forged) == Refused(reason="unknown")
    assert directory.asked == []


def test_refusal_messages_are_the_default_texts_in_english() -> None:
    english = Translation(language="en")
    assert refusal_message("unknown", english) == (
        "This assistant only talks to the people it knows. Ask an administrator for access."
    )
    assert refusal_message("unavailable", english) == (
        "I can't check who you are right now. Try again in a few minutes."
    )


def test_refusal_messages_go_through_the_translator() -> None:
    italian = Translation(
        language="it",
        messages={"I can't check who you are right now. Try again in a few minutes.": "Riprova."},
    )
    assert refusal_message("unavailable", italian) == "Riprova."


@pytest.mark.anyio
async def test_roles_change_only_once_the_cached_answer_expires() -> None:
    clock = ManualClock()
    directory = RecordingDirectory({"static:alice": ALICE_ENTRY})
    people = people_with(directory, clock=clock)
    await people.identify(ALICE)
    directory.people["static:alice"] = DirectoryPerson(id="alice", roles=frozenset({"admin"}))

    clock.advance(timedelta(minutes=5) - timedelta(milliseconds=1))
    cached = await people.identify(ALICE)
    assert isinstance(cached, Admitted)
    assert cached.person.roles == frozenset({"finance"})

    clock.advance(timedelta(milliseconds=1))
    fresh = await people.identify(ALICE)
    assert isinstance(fresh, Admitted)
    assert fresh.person.roles == frozenset({"admin"})
    assert directory.asked == ["static:alice", "static:alice"]


@pytest.mark.anyio
async def test_unknowns_are_cached_too() -> None:
    clock = ManualClock()
    directory = RecordingDirectory()
    people = people_with(directory, clock=clock)
    assert await people.identify(BOB) == Refused(reason="unknown")
    directory.people["static:bob"] = DirectoryPerson(id="bob")
    assert await people.identify(BOB) == Refused(reason="unknown")
    assert directory.asked == ["static:bob"]
    clock.advance(timedelta(minutes=5))
    assert isinstance(await people.identify(BOB), Admitted)


@pytest.mark.anyio
async def test_failures_are_not_cached() -> None:
    directory = RecordingDirectory({"static:alice": ALICE_ENTRY})
    directory.failure = DirectoryUnavailable("down")
    people = people_with(directory)
    assert await people.identify(ALICE) == Refused(reason="unavailable")
    directory.failure = None
    assert isinstance(await people.identify(ALICE), Admitted)
    assert len(directory.asked) == 2


@pytest.mark.anyio
async def test_each_principal_has_its_own_cache_entry() -> None:
    directory = RecordingDirectory({"static:alice": ALICE_ENTRY})
    people = people_with(directory, access_unknown="allow")
    for _ in range(3):
        await people.identify(ALICE)
        await people.identify(BOB)
        await people.identify(ALICE_PHONE)
    assert sorted(directory.asked) == ["oidc:alice-phone", "static:alice", "static:bob"]
    assert people.cache_size == 3


@pytest.mark.anyio
async def test_concurrent_lookups_for_one_principal_share_one_directory_call() -> None:
    directory = RecordingDirectory({"static:alice": ALICE_ENTRY})
    directory.gate = asyncio.Event()
    people = people_with(directory)
    results: list[object] = []

    async def identify(principal: Principal) -> None:
        results.append(await people.identify(principal))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            for _ in range(20):
                group.start_soon(identify, ALICE)
            group.start_soon(identify, BOB)
            while len(directory.asked) < 2:
                await anyio.sleep(0.01)
            directory.gate.set()
    assert sorted(directory.asked) == ["static:alice", "static:bob"]
    assert results.count(Refused(reason="unknown")) == 1
    assert len(results) == 21
    assert all(
        isinstance(result, Admitted) for result in results if result != Refused(reason="unknown")
    )


@pytest.mark.anyio
async def test_a_waiter_that_gives_up_does_not_cancel_the_shared_lookup() -> None:
    directory = RecordingDirectory({"static:alice": ALICE_ENTRY})
    directory.gate = asyncio.Event()
    people = people_with(directory)
    with anyio.fail_after(10):
        impatient = asyncio.create_task(people.identify(ALICE))
        patient = asyncio.create_task(people.identify(ALICE))
        while not directory.asked:
            await anyio.sleep(0.01)
        impatient.cancel()
        with pytest.raises(asyncio.CancelledError):
            await impatient
        directory.gate.set()
        assert isinstance(await patient, Admitted)
    assert directory.asked == ["static:alice"]


@pytest.mark.anyio
async def test_a_concurrent_failure_reaches_every_waiter_and_is_not_cached() -> None:
    directory = RecordingDirectory({"static:alice": ALICE_ENTRY})
    directory.gate = asyncio.Event()
    directory.failure = RuntimeError("boom")
    people = people_with(directory)
    with anyio.fail_after(10):
        waiters = [asyncio.create_task(people.identify(ALICE)) for _ in range(5)]
        while not directory.asked:
            await anyio.sleep(0.01)
        directory.gate.set()
        assert [await waiter for waiter in waiters] == [Refused(reason="unavailable")] * 5
    assert directory.asked == ["static:alice"]
    assert people.cache_size == 0


@pytest.mark.anyio
async def test_expired_answers_are_swept_once_the_cache_is_full() -> None:
    clock = ManualClock()
    people = people_with(None, clock=clock)
    for number in range(SWEEP_THRESHOLD):
        await people.identify(Principal(id=f"user{number}", provider="static"))
    assert people.cache_size == SWEEP_THRESHOLD
    clock.advance(timedelta(minutes=5))
    await people.identify(ALICE)
    assert people.cache_size == 1


@pytest.mark.anyio
async def test_fresh_answers_survive_the_sweep() -> None:
    clock = ManualClock()
    people = people_with(None, clock=clock)
    for number in range(SWEEP_THRESHOLD - 1):
        await people.identify(Principal(id=f"user{number}", provider="static"))
    clock.advance(timedelta(minutes=5))
    await people.identify(BOB)  # the 1000th entry: nothing swept yet
    assert people.cache_size == SWEEP_THRESHOLD
    await people.identify(ALICE)  # the cache is full: the 999 expired ones go, Bob stays
    assert people.cache_size == 2


@pytest.mark.anyio
async def test_a_linked_identity_is_replaced_by_its_owner_before_the_directory_is_asked() -> None:
    directory = RecordingDirectory({"static:alice": ALICE_ENTRY})
    people = people_with(directory, links=DictLinks({"oidc:alice-phone": "static:alice"}))
    phone = await people.identify(ALICE_PHONE)
    assert phone == await people.identify(ALICE)
    assert isinstance(phone, Admitted)
    assert phone.person.key == "people:alice"
    assert phone.person.roles == frozenset({"finance"})
    assert directory.asked == ["static:alice", "static:alice"]


@pytest.mark.anyio
async def test_without_a_directory_a_linked_account_is_keyed_by_its_owner() -> None:
    people = people_with(None, links=DictLinks({"oidc:alice-phone": "static:alice"}))
    phone = await people.identify(ALICE_PHONE)
    assert phone == Admitted(person=Person(key="static:alice", display_name="Alice's phone"))


@pytest.mark.anyio
async def test_a_link_store_that_fails_refuses_as_unavailable() -> None:
    people = people_with(None, links=BrokenLinks(), access_unknown="allow")
    assert await people.identify(ALICE) == Refused(reason="unavailable")


@pytest.mark.anyio
async def test_invalidate_drops_every_cached_answer() -> None:
    directory = RecordingDirectory({"static:alice": ALICE_ENTRY})
    links = DictLinks({})
    people = people_with(directory, links=links)
    assert await people.identify(ALICE_PHONE) == Refused(reason="unknown")
    links.links["oidc:alice-phone"] = "static:alice"
    assert await people.identify(ALICE_PHONE) == Refused(reason="unknown")
    people.invalidate()
    assert people.cache_size == 0
    phone = await people.identify(ALICE_PHONE)
    assert isinstance(phone, Admitted)
    assert phone.person.key == "people:alice"


@pytest.mark.anyio
async def test_on_a_shared_store_a_link_counts_at_the_next_identification() -> None:
    directory = RecordingDirectory({"static:alice": ALICE_ENTRY})
    links = DictLinks({}, shared=True)
    people = people_with(directory, links=links, access_unknown="allow")
    before = await people.identify(ALICE_PHONE)
    assert isinstance(before, Admitted) and before.person.key == "oidc:alice-phone"
    links.links["oidc:alice-phone"] = "static:alice"  # linked through another instance
    after = await people.identify(ALICE_PHONE)
    assert isinstance(after, Admitted)
    assert after.person.key == "people:alice"
    assert links.reads == 2  # the link is read each time; the directory's answer is cached


@pytest.mark.anyio
async def test_on_a_shared_store_the_owners_directory_answer_is_still_cached() -> None:
    directory = RecordingDirectory({"static:alice": ALICE_ENTRY})
    links = DictLinks({"oidc:alice-phone": "static:alice"}, shared=True)
    people = people_with(directory, links=links)
    for _ in range(3):
        phone = await people.identify(ALICE_PHONE)
        assert isinstance(phone, Admitted) and phone.person.key == "people:alice"
    assert directory.asked == ["static:alice"]


@pytest.mark.anyio
async def test_a_lookup_under_way_when_the_cache_is_dropped_is_not_cached() -> None:
    directory = RecordingDirectory({"static:alice": ALICE_ENTRY})
    directory.gate = asyncio.Event()
    people = people_with(directory)
    with anyio.fail_after(10):
        before = asyncio.create_task(people.identify(ALICE))
        while not directory.asked:
            await anyio.sleep(0.01)
        people.invalidate()
        directory.gate.set()
        assert isinstance(await before, Admitted)
    assert people.cache_size == 0


@pytest.mark.anyio
async def test_attaching_links_later_applies_them_and_drops_the_cache() -> None:
    people = people_with(None)
    assert await people.identify(ALICE_PHONE) == Admitted(
        person=Person(key="oidc:alice-phone", display_name="Alice's phone")
    )
    people.attach_links(DictLinks({"oidc:alice-phone": "static:alice"}))
    phone = await people.identify(ALICE_PHONE)
    assert isinstance(phone, Admitted)
    assert phone.person.key == "static:alice"


@pytest.mark.anyio
async def test_the_directory_key_ignores_links_and_the_cache() -> None:
    directory = RecordingDirectory({"static:alice": ALICE_ENTRY})
    people = people_with(directory, links=DictLinks({"oidc:alice-phone": "static:alice"}))
    assert await people.directory_key("static:alice") == "people:alice"
    assert await people.directory_key("static:alice") == "people:alice"
    assert await people.directory_key("oidc:alice-phone") is None
    assert directory.asked == ["static:alice", "static:alice", "oidc:alice-phone"]
    assert await people_with(None).directory_key("static:alice") is None


@pytest.mark.anyio
@pytest.mark.parametrize("failure", [DirectoryUnavailable("down"), RuntimeError("boom")])
async def test_the_directory_key_reports_any_failure_as_unavailable(failure: Exception) -> None:
    directory = RecordingDirectory()
    directory.failure = failure
    with pytest.raises(DirectoryUnavailable):
        await people_with(directory).directory_key("static:alice")


def test_a_cache_time_to_live_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        People(None, access_unknown="refuse", ttl=timedelta(0))


# ---------------------------------------------------------------- DM policies, pairing (#40)

ZED = Principal(id="42", provider="telegram", display_name="Zed")
ZED_ON_SLACK = Principal(id="42", provider="slack", display_name="Zed")


class SetAdmitted:
    """Accounts an approver let in, counting its reads; ``broken`` fails every read."""

    def __init__(self, *keys: str) -> None:
        self.keys = set(keys)
        self.reads = 0
        self.broken = False

    async def is_admitted(self, user_key: str) -> bool:
        self.reads += 1
        if self.broken:
            raise OSError("disk I/O error")
        return user_key in self.keys


def policed(
    admitted: SetAdmitted,
    *,
    directory: RecordingDirectory | None = None,
    telegram: DmPolicy | None = None,
    access_unknown: AccessUnknown = "refuse",
) -> People:
    return People(
        RecordingDirectory({"static:alice": ALICE_ENTRY}) if directory is None else directory,
        access_unknown=access_unknown,
        dm_policies={"telegram": telegram, "slack": "allowlist"},
        admitted=admitted,
        clock=ManualClock(),
    )


@pytest.mark.anyio
async def test_under_pairing_an_account_an_approver_let_in_is_admitted_at_once() -> None:
    admitted = SetAdmitted()
    people = policed(admitted)
    assert people.dm_policy("telegram") == "pairing"  # the default with a directory
    assert await people.identify(ZED) == Refused(reason="unknown")
    admitted.keys.add("telegram:42")  # approved, here or on another instance
    assert await people.identify(ZED) == Admitted(
        person=Person(key="telegram:42", display_name="Zed")
    )
    assert admitted.reads == 2  # never cached
    # Another platform, under allowlist, doesn't ask; nor does a provider with no DM policy.
    assert await people.identify(ZED_ON_SLACK) == Refused(reason="unknown")
    assert await people.identify(BOB) == Refused(reason="unknown")
    assert admitted.reads == 2 and people.dm_policy("static") is None


@pytest.mark.anyio
async def test_allowlist_ignores_approvals_open_and_allow_let_everyone_in() -> None:
    admitted = SetAdmitted("telegram:42")
    assert await policed(admitted, telegram="allowlist").identify(ZED) == Refused(reason="unknown")
    for people in (
        policed(admitted, telegram="open"),
        policed(admitted, telegram="allowlist", access_unknown="allow"),
    ):
        assert await people.identify(ZED) == Admitted(
            person=Person(key="telegram:42", display_name="Zed")
        )
    assert admitted.reads == 0
    assert (
        People(None, access_unknown="refuse", dm_policies={"telegram": None}).dm_policy("telegram")
        == "open"
    )


@pytest.mark.anyio
async def test_an_approval_that_cant_be_read_refuses_as_unavailable() -> None:
    admitted = SetAdmitted("telegram:42")
    admitted.broken = True
    assert await policed(admitted).identify(ZED) == Refused(reason="unavailable")
