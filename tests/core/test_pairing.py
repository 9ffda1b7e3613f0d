"""The pairing store on SQLite and PostgreSQL: codes, one per sender, re-sending, expiry, the
bound per platform, approval and denial, and what a second instance sees."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from core.clock import ManualClock
from core.people.pairing import (
    CODE_ALPHABET,
    CODE_LENGTH,
    CODE_TTL,
    RESEND_AFTER,
    Pairing,
    normalized_code,
)
from tests.support.state import StateBackend

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 12, 7, 1, 0, tzinfo=UTC)
REACH = '{"platform":"telegram","thread_id":"telegram:42"}'


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture
async def pairing(state: StateBackend, clock: ManualClock) -> Pairing:
    return Pairing(await state.open(), clock=clock, max_pending=3)


async def ask(pairing: Pairing, account: str, platform: str = "telegram") -> tuple[str, str]:
    asked = await pairing.ask(platform, account, name=f"N{account}", language="fr", reach=REACH)
    return asked.outcome, asked.request.code if asked.request is not None else ""


async def test_a_sender_gets_one_short_unambiguous_code_and_asking_again_gives_it_back(
    pairing: Pairing, clock: ManualClock
) -> None:
    outcome, code = await ask(pairing, "42")
    assert outcome == "new"
    assert len(code) == CODE_LENGTH and all(c in CODE_ALPHABET for c in code)
    assert not set(code) & set("01OIL")
    assert await ask(pairing, "42") == ("quiet", "")
    clock.advance(RESEND_AFTER)
    assert await ask(pairing, "42") == ("again", code)
    assert await ask(pairing, "42") == ("quiet", "")
    [pending] = await pairing.pending()
    assert (pending.code, pending.platform, pending.account, pending.name) == (
        code,
        "telegram",
        "42",
        "N42",
    )
    assert (pending.language, pending.reach) == ("fr", REACH)
    assert (pending.requested_at, pending.expires_at) == (NOW, NOW + CODE_TTL)
    assert pending.user_key == "telegram:42"


async def test_approving_admits_the_account_on_every_instance_and_the_code_is_spent(
    pairing: Pairing, state: StateBackend, clock: ManualClock
) -> None:
    other = Pairing(await state.open(), clock=clock)
    _, code = await ask(pairing, "42")
    assert not await other.is_admitted("telegram:42")
    approved = await other.approve(code, by="people:alice")
    assert approved is not None and approved.user_key == "telegram:42"
    assert await pairing.is_admitted("telegram:42")
    assert not await pairing.is_admitted("discord:42")
    account = await pairing.admitted("telegram:42")
    assert account is not None
    assert (account.approved_by, account.approved_at, account.name) == ("people:alice", NOW, "N42")
    assert await pairing.pending() == []
    assert await pairing.approve(code, by="people:alice") is None
    assert not await pairing.deny(code)


async def test_denying_lists_nothing_admits_nobody_and_silences_the_sender_until_expiry(
    pairing: Pairing, clock: ManualClock
) -> None:
    _, code = await ask(pairing, "42")
    assert await pairing.deny(code)
    assert await pairing.pending() == []
    assert await pairing.approve(code, by="people:alice") is None
    assert not await pairing.deny(code)
    assert not await pairing.is_admitted("telegram:42")
    clock.advance(RESEND_AFTER * 2)
    assert await ask(pairing, "42") == ("denied", "")
    clock.advance(CODE_TTL)
    outcome, fresh = await ask(pairing, "42")
    assert outcome == "new" and fresh != code


async def test_a_code_expires_after_an_hour_and_the_next_message_gets_a_new_one(
    pairing: Pairing, clock: ManualClock
) -> None:
    _, code = await ask(pairing, "42")
    clock.advance(CODE_TTL - timedelta(seconds=1))
    assert [p.code for p in await pairing.pending()] == [code]
    clock.advance(timedelta(seconds=1))
    assert await pairing.pending() == []
    assert await pairing.approve(code, by="people:alice") is None
    assert not await pairing.deny(code)
    assert await pairing.purge_expired() == 1
    outcome, fresh = await ask(pairing, "42")
    assert outcome == "new" and fresh != code


async def test_a_platform_holds_a_bounded_number_of_requests(
    pairing: Pairing, clock: ManualClock
) -> None:
    codes = [(await ask(pairing, str(n)))[1] for n in range(3)]
    assert await ask(pairing, "99") == ("full", "")
    assert await ask(pairing, "100") == ("full", "")
    assert (await ask(pairing, "7", platform="slack"))[0] == "new"  # another platform's room
    assert await pairing.deny(codes[0])  # a denied request keeps its place until it expires
    assert await ask(pairing, "99") == ("full", "")
    assert await pairing.approve(codes[1], by="people:alice") is not None
    assert (await ask(pairing, "99"))[0] == "new"
    clock.advance(CODE_TTL)
    assert {(await ask(pairing, str(n)))[0] for n in range(200, 203)} == {"new"}
    assert len(await pairing.pending()) == 3


async def test_the_bound_holds_exactly_when_many_strangers_ask_at_once_on_many_instances(
    state: StateBackend, clock: ManualClock
) -> None:
    """Four instances (each with its own pool), and on each of 10 platforms 40 strangers
    asking at once: exactly the platform's bound of requests is kept, every other sender is
    told it is full."""
    instances = [Pairing(await state.open(), clock=clock, max_pending=2) for _ in range(4)]
    await asyncio.gather(*(instance.ensure_schema() for instance in instances))
    if state.name == "postgresql":
        # A slow server: each row takes 50 ms to go in, so instances asking at once are
        # surely asking while another's insert is under way (SQLite has one writer).
        db = await state.open()
        await db.execute(
            "CREATE FUNCTION slow_insert() RETURNS trigger AS $$ "
            "BEGIN PERFORM pg_sleep(0.05); RETURN NEW; END $$ LANGUAGE plpgsql"
        )
        await db.execute(
            "CREATE TRIGGER slow_insert BEFORE INSERT ON pairing_requests "
            "FOR EACH ROW EXECUTE FUNCTION slow_insert()"
        )
    for platform in (f"chat{n}" for n in range(10)):
        asked = await asyncio.gather(*(ask(instances[n % 4], str(n), platform) for n in range(40)))
        outcomes = [outcome for outcome, _ in asked]
        assert outcomes.count("new") == 2, (platform, outcomes)
        assert outcomes.count("full") == 38, (platform, outcomes)
    assert len(await instances[0].pending()) == 20


async def test_revoking_an_account_lets_it_out_on_every_instance(
    pairing: Pairing, state: StateBackend, clock: ManualClock
) -> None:
    other = Pairing(await state.open(), clock=clock)
    _, code = await ask(pairing, "42")
    assert await pairing.approve(code, by="people:alice") is not None
    assert [a.user_key for a in await other.admitted_accounts()] == ["telegram:42"]
    assert await other.revoke("telegram:42")
    assert not await pairing.is_admitted("telegram:42")
    assert await pairing.admitted_accounts() == []
    assert not await pairing.revoke("telegram:42")  # once
    outcome, fresh = await ask(pairing, "42")  # asking again starts afresh
    assert outcome == "new" and fresh != code


@pytest.mark.parametrize(
    ("text", "code"),
    [("ABCD2345", "ABCD2345"), ("abcd-2345", "ABCD2345"), (" abcd 2345 ", "ABCD2345")],
)
def test_a_code_is_read_without_regard_to_case_blanks_or_dashes(text: str, code: str) -> None:
    assert normalized_code(text) == code


@pytest.mark.parametrize("text", ["", "ABCD234", "ABCD23456", "ABCD0345", "ABCDI345", "ABC%2345"])
def test_anything_else_is_no_code(text: str) -> None:
    assert normalized_code(text) is None
