from __future__ import annotations

import asyncio
import hashlib
import string
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.clock import ManualClock
from core.engine.confirmations import (
    REPLY_CHOICE,
    TOKEN_ALPHABET,
    ChoiceRef,
    ConfirmationStore,
    InvalidActionError,
    InvalidChoicesError,
    InvalidTTLError,
    ResumeSlots,
    StagedAction,
    StagedActionSpec,
    is_token,
    new_token,
)
from core.state import SQLITE_FILE, Database
from tests.support.state import StateBackend

SESSION = "alice:c1"
PERSON = "people:alice"
DELETE = StagedActionSpec(
    tool_name="jira",
    arguments={"args": ["issue", "delete", "OPS-1"]},
    summary="jira issue delete OPS-1",
)
NOTE_CHOICES = (("Replace the note", "replace"), ("Append to the note", "append"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def db(state: StateBackend) -> Database:
    return await state.open()


@pytest.fixture
def store(db: Database, clock: ManualClock) -> ConfirmationStore:
    return ConfirmationStore(db, clock=clock)


async def count_rows(db: Database) -> int:
    row = await db.fetch_one("SELECT COUNT(*) AS n FROM confirmations")
    assert row is not None
    return int(row["n"])


# Token shape


def test_the_alphabet_is_the_62_ascii_letters_and_digits() -> None:
    assert sorted(TOKEN_ALPHABET) == sorted(string.ascii_letters + string.digits)
    assert len(set(TOKEN_ALPHABET)) == 62


def test_every_generated_token_has_the_token_shape_and_uses_the_whole_alphabet() -> None:
    tokens = [new_token() for _ in range(2000)]
    assert all(is_token(token) for token in tokens)
    assert all(len(token) == 9 and token[4] == "-" for token in tokens)
    drawn = {char for token in tokens for char in token.replace("-", "")}
    assert drawn == set(TOKEN_ALPHABET)


@given(
    st.text(alphabet=TOKEN_ALPHABET, min_size=4, max_size=4),
    st.text(alphabet=TOKEN_ALPHABET, min_size=4, max_size=4),
    st.sampled_from(["", " ", "\n", "\t ", "  \r\n"]),
)
def test_any_two_groups_of_four_alphabet_characters_are_a_token_once_trimmed(
    first: str, second: str, padding: str
) -> None:
    assert is_token(f"{padding}{first}-{second}{padding}")


@given(st.text(max_size=12))
def test_is_token_accepts_only_four_alphanumerics_a_dash_and_four_more(text: str) -> None:
    trimmed = text.strip()
    expected = (
        len(trimmed) == 9
        and trimmed[4] == "-"
        and all(char in TOKEN_ALPHABET for char in trimmed[:4] + trimmed[5:])
    )
    assert is_token(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "k9m2x7q4",
        "k9m2-x7q",
        "k9m2-x7q4-abcd",
        "k9m2_x7q4",
        "k9m2-x7é4",
        "k9m2 - x7q4",
        "٣٣٣٣-x7q4",
    ],
)
def test_texts_that_only_look_like_tokens_are_not_tokens(text: str) -> None:
    assert not is_token(text)


@pytest.mark.anyio
async def test_every_staged_token_matches_is_token(store: ConfirmationStore) -> None:
    for _ in range(20):
        staging = await store.stage(SESSION, PERSON, DELETE, NOTE_CHOICES)
        assert all(is_token(choice.token) for choice in staging.choices)


# Staging


@pytest.mark.anyio
async def test_a_plain_staging_has_one_choice_with_an_empty_label_and_the_staging_token(
    store: ConfirmationStore, clock: ManualClock
) -> None:
    staging = await store.stage(SESSION, PERSON, DELETE)
    assert len(staging.choices) == 1
    assert staging.choices[0].label == ""
    assert staging.choices[0].token == staging.token
    assert staging.expires_at == clock() + timedelta(minutes=5)


@pytest.mark.anyio
async def test_a_staging_with_choices_gives_each_its_own_token_in_order(
    store: ConfirmationStore,
) -> None:
    staging = await store.stage(SESSION, PERSON, DELETE, NOTE_CHOICES)
    assert [choice.label for choice in staging.choices] == [
        "Replace the note",
        "Append to the note",
    ]
    assert staging.token == staging.choices[0].token
    assert len({choice.token for choice in staging.choices}) == 2


@pytest.mark.anyio
async def test_taking_a_choice_gives_back_the_action_and_the_value_chosen(
    store: ConfirmationStore,
) -> None:
    action = StagedActionSpec(
        tool_name="save_note",
        arguments={"path": "personal/todo.md", "body": "milk", "n": 2, "ok": None},
        summary="save personal/todo.md",
        hands_back=True,
    )
    staging = await store.stage(SESSION, PERSON, action, NOTE_CHOICES)
    taken = await store.take(SESSION, PERSON, staging.choices[1].token)
    assert taken is not None
    assert taken.tool_name == "save_note"
    assert taken.arguments == action.arguments
    assert taken.choice_value == "append"
    assert taken.hands_back is True
    assert taken.summary == "save personal/todo.md"


@pytest.mark.anyio
async def test_a_plain_staging_is_taken_with_no_choice_value(store: ConfirmationStore) -> None:
    staging = await store.stage(SESSION, PERSON, DELETE)
    taken = await store.take(SESSION, PERSON, f"  {staging.token}\n")
    assert taken is not None
    assert taken.choice_value is None
    assert taken.hands_back is False


@pytest.mark.anyio
async def test_taking_one_choice_kills_the_others(store: ConfirmationStore, db: Database) -> None:
    staging = await store.stage(SESSION, PERSON, DELETE, NOTE_CHOICES)
    assert await store.take(SESSION, PERSON, staging.choices[0].token) is not None
    assert await store.take(SESSION, PERSON, staging.choices[1].token) is None
    assert await count_rows(db) == 0


@pytest.mark.anyio
async def test_another_staging_in_the_same_session_is_left_alone_by_a_take(
    store: ConfirmationStore,
) -> None:
    first = await store.stage(SESSION, PERSON, DELETE)
    second = await store.stage(SESSION, PERSON, DELETE, NOTE_CHOICES)
    assert await store.take(SESSION, PERSON, first.token) is not None
    assert await store.take(SESSION, PERSON, second.choices[1].token) is not None


@pytest.mark.anyio
async def test_a_staging_answered_by_reply_shows_its_choices_alone_and_the_next_message_takes_it(
    store: ConfirmationStore, db: Database, clock: ManualClock
) -> None:
    staging = await store.stage(SESSION, PERSON, DELETE, NOTE_CHOICES, by_reply=True)
    assert [c.label for c in staging.choices] == [label for label, _ in NOTE_CHOICES]
    assert [p.summary for p in await store.pending(PERSON)] == [DELETE.summary]
    # Another person, another session or no such staging: nothing is taken.
    assert await store.take_reply(SESSION, "people:bob") is None
    assert await store.take_reply("alice:c2", PERSON) is None
    taken = await store.take_reply(SESSION, PERSON)
    assert taken is not None and taken.choice_value == REPLY_CHOICE
    assert taken.tool_name == DELETE.tool_name and taken.arguments == DELETE.arguments
    # Single use, and its buttons died with it.
    assert await store.take_reply(SESSION, PERSON) is None
    assert await store.take(SESSION, PERSON, staging.choices[0].token) is None
    assert await count_rows(db) == 0
    # A staging without the reply choice is never taken by a message; an expired one neither.
    await store.stage(SESSION, PERSON, DELETE, NOTE_CHOICES)
    assert await store.take_reply(SESSION, PERSON) is None
    await store.stage(SESSION, PERSON, DELETE, by_reply=True)
    clock.advance(timedelta(minutes=6))
    assert await store.take_reply(SESSION, PERSON) is None


@pytest.mark.anyio
async def test_a_questions_hidden_choice_is_never_listed_nor_taken_by_its_place(
    store: ConfirmationStore,
) -> None:
    """Its answer is the person's next message: it has no button, in the Pending tab or
    after a reload, and no place a page could name."""
    staging = await store.stage(
        SESSION, PERSON, DELETE, (("Decline", "decline"), ("Cancel", "cancel")), by_reply=True
    )
    [listed] = await store.pending(PERSON)
    assert [(c.label, c.kind) for c in listed.choices] == [("Decline", None), ("Cancel", "cancel")]
    assert await store.take(SESSION, PERSON, ChoiceRef(staging.id, 2)) is None
    assert len(await store.pending(PERSON)) == 1
    taken = await store.take(SESSION, PERSON, ChoiceRef(staging.id, 1))
    assert taken is not None and taken.choice_value == "cancel"


def test_arguments_that_would_not_come_back_from_json_unchanged_are_refused() -> None:
    with pytest.raises(InvalidActionError, match="JSON"):
        StagedActionSpec(tool_name="x", arguments={"when": object()}, summary="x")
    with pytest.raises(InvalidActionError, match="JSON"):
        StagedAction(tool_name="x", arguments={"s": {1, 2}}, summary="x", hands_back=False)
    with pytest.raises(InvalidActionError, match="JSON"):
        StagedActionSpec(tool_name="x", arguments={"pair": (1, 2)}, summary="x")
    with pytest.raises(InvalidActionError, match="JSON"):
        StagedActionSpec(tool_name="x", arguments={"n": {1: "one"}}, summary="x")


def test_an_action_without_a_tool_name_is_refused() -> None:
    with pytest.raises(InvalidActionError, match="tool name"):
        StagedActionSpec(tool_name=" ", arguments={}, summary="x")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "choices",
    [(), (("", "a"),), (("Same", "a"), ("Same", "b")), (("One", "a"), ("Two", "a"))],
)
async def test_empty_unlabelled_or_repeated_choices_are_refused(
    store: ConfirmationStore, db: Database, choices: tuple[tuple[str, str], ...]
) -> None:
    with pytest.raises(InvalidChoicesError):
        await store.stage(SESSION, PERSON, DELETE, choices)


@pytest.mark.anyio
async def test_a_window_that_is_not_positive_is_refused(db: Database, clock: ManualClock) -> None:
    with pytest.raises(InvalidTTLError, match="positive"):
        ConfirmationStore(db, clock=clock, ttl=timedelta(seconds=-1))
    with pytest.raises(InvalidTTLError, match="positive"):
        ResumeSlots(db, str, clock=clock, ttl=timedelta(0))


# Who may take


@pytest.mark.anyio
async def test_a_token_taken_from_another_session_stays_pending_for_its_owner(
    store: ConfirmationStore,
) -> None:
    staging = await store.stage(SESSION, PERSON, DELETE)
    assert await store.take("alice:c2", PERSON, staging.token) is None
    assert await store.take(SESSION, PERSON, staging.token) is not None


@pytest.mark.anyio
async def test_another_persons_take_is_refused_and_the_action_stays_pending(
    store: ConfirmationStore,
) -> None:
    staging = await store.stage(SESSION, PERSON, DELETE)
    assert await store.take(SESSION, "people:bob", staging.token) is None
    assert len(await store.pending(PERSON)) == 1
    assert await store.take(SESSION, PERSON, staging.token) is not None


@pytest.mark.anyio
async def test_a_token_is_single_use(store: ConfirmationStore) -> None:
    staging = await store.stage(SESSION, PERSON, DELETE)
    assert await store.take(SESSION, PERSON, staging.token) is not None
    assert await store.take(SESSION, PERSON, staging.token) is None


@pytest.mark.anyio
async def test_unknown_and_malformed_tokens_take_nothing(store: ConfirmationStore) -> None:
    await store.stage(SESSION, PERSON, DELETE)
    assert await store.take(SESSION, PERSON, "zzzz-zzzz") is None
    assert await store.take(SESSION, PERSON, "not a token") is None
    assert await store.take(SESSION, PERSON, "") is None
    assert len(await store.pending(PERSON)) == 1


@pytest.mark.anyio
async def test_two_concurrent_takes_of_one_token_have_exactly_one_winner(
    store: ConfirmationStore,
) -> None:
    for _ in range(10):
        staging = await store.stage(SESSION, PERSON, DELETE)
        results = await asyncio.gather(
            store.take(SESSION, PERSON, staging.token),
            store.take(SESSION, PERSON, staging.token),
        )
        assert sum(result is not None for result in results) == 1


@pytest.mark.anyio
async def test_two_concurrent_takes_of_rival_choices_have_exactly_one_winner(
    store: ConfirmationStore,
) -> None:
    for _ in range(10):
        staging = await store.stage(SESSION, PERSON, DELETE, NOTE_CHOICES)
        results = await asyncio.gather(
            *(store.take(SESSION, PERSON, choice.token) for choice in staging.choices)
        )
        assert sum(result is not None for result in results) == 1


# Expiry


@pytest.mark.anyio
async def test_a_token_taken_after_five_minutes_is_gone_and_its_rows_deleted(
    store: ConfirmationStore, clock: ManualClock, db: Database
) -> None:
    staging = await store.stage(SESSION, PERSON, DELETE, NOTE_CHOICES)
    clock.advance(timedelta(minutes=5))
    assert await store.take(SESSION, PERSON, staging.token) is None
    assert await count_rows(db) == 0


@pytest.mark.anyio
async def test_a_token_taken_just_before_five_minutes_still_works(
    store: ConfirmationStore, clock: ManualClock
) -> None:
    staging = await store.stage(SESSION, PERSON, DELETE)
    clock.advance(timedelta(minutes=5) - timedelta(milliseconds=1))
    assert await store.take(SESSION, PERSON, staging.token) is not None


@pytest.mark.anyio
async def test_purging_deletes_only_expired_stagings(
    store: ConfirmationStore, clock: ManualClock, db: Database
) -> None:
    await store.stage(SESSION, PERSON, DELETE, NOTE_CHOICES)
    clock.advance(timedelta(minutes=3))
    fresh = await store.stage(SESSION, PERSON, DELETE)
    clock.advance(timedelta(minutes=2))
    assert await store.purge_expired() == 2
    assert await count_rows(db) == 1
    assert await store.take(SESSION, PERSON, fresh.token) is not None


# Listing


@pytest.mark.anyio
async def test_pending_lists_one_summary_per_staging_without_tokens(
    store: ConfirmationStore,
) -> None:
    plain = await store.stage(SESSION, PERSON, DELETE)
    other = StagedActionSpec(tool_name="promote_note", arguments={}, summary="promote x.md")
    multi = await store.stage("alice:c2", PERSON, other, NOTE_CHOICES)
    pending = await store.pending(PERSON)
    assert [(p.session_key, p.summary) for p in pending] == [
        (SESSION, "jira issue delete OPS-1"),
        ("alice:c2", "promote x.md"),
    ]
    assert pending[0].expires_at == plain.expires_at
    tokens = [plain.token, *(choice.token for choice in multi.choices)]
    listed = repr(pending)
    assert not any(token in listed for token in tokens)


@pytest.mark.anyio
async def test_pending_shows_only_the_persons_own_and_unexpired_stagings(
    store: ConfirmationStore, clock: ManualClock
) -> None:
    await store.stage(SESSION, PERSON, DELETE)
    await store.stage("bob:c1", "people:bob", DELETE)
    assert [p.session_key for p in await store.pending("people:bob")] == ["bob:c1"]
    clock.advance(timedelta(minutes=5))
    assert await store.pending(PERSON) == []


@pytest.mark.anyio
async def test_a_taken_staging_is_no_longer_pending(store: ConfirmationStore) -> None:
    staging = await store.stage(SESSION, PERSON, DELETE, NOTE_CHOICES)
    await store.take(SESSION, PERSON, staging.choices[1].token)
    assert await store.pending(PERSON) == []


# Persistence


@pytest.mark.anyio
async def test_pending_confirmations_survive_a_restart(
    state: StateBackend, clock: ManualClock
) -> None:
    first = await state.open()
    staging = await ConfirmationStore(first, clock=clock).stage(SESSION, PERSON, DELETE)
    await first.close()

    reopened = await state.open()
    store = ConfirmationStore(reopened, clock=clock)
    assert [p.summary for p in await store.pending(PERSON)] == ["jira issue delete OPS-1"]
    taken = await store.take(SESSION, PERSON, staging.token)
    assert taken is not None
    assert taken.arguments == DELETE.arguments


@pytest.mark.anyio
async def test_tokens_are_never_stored_in_clear(db: Database, clock: ManualClock) -> None:
    staging = await ConfirmationStore(db, clock=clock).stage(SESSION, PERSON, DELETE, NOTE_CHOICES)
    rows = repr([list(row) for row in await db.fetch_all("SELECT * FROM confirmations")])
    assert len(staging.choices) == 2
    for choice in staging.choices:
        assert choice.token not in rows
        assert hashlib.sha256(choice.token.encode()).hexdigest() in rows


@pytest.mark.anyio
async def test_tokens_are_never_written_to_the_database_files_in_clear(
    tmp_path: Path, clock: ManualClock
) -> None:
    sqlite = StateBackend("sqlite", tmp_path, None)
    db = await sqlite.open()
    db_path = tmp_path / SQLITE_FILE
    staging = await ConfirmationStore(db, clock=clock).stage(SESSION, PERSON, DELETE, NOTE_CHOICES)
    tokens = [choice.token for choice in staging.choices]
    on_disk_open = b"".join(path.read_bytes() for path in tmp_path.glob(SQLITE_FILE + "*"))
    await sqlite.close()
    on_disk_closed = db_path.read_bytes()

    for token in tokens:
        digest = hashlib.sha256(token.encode()).hexdigest().encode()
        assert token.encode() not in on_disk_open
        assert token.encode() not in on_disk_closed
        # The hashes are there, so the bytes searched are the ones the store wrote.
        assert digest in on_disk_closed


# Resume slots


@pytest.fixture
def slots(db: Database, clock: ManualClock) -> ResumeSlots[str]:
    return ResumeSlots(db, str, clock=clock)


@pytest.mark.anyio
async def test_a_resume_slot_is_taken_once(db: Database, clock: ManualClock) -> None:
    slots = ResumeSlots(db, dict[str, str], clock=clock)
    await slots.put(SESSION, {"result": "done"})
    assert await slots.take(SESSION) == {"result": "done"}
    assert await slots.take(SESSION) is None


@pytest.mark.anyio
async def test_a_resume_slot_belongs_to_its_session(slots: ResumeSlots[str]) -> None:
    await slots.put(SESSION, "done")
    assert await slots.take("alice:c2") is None
    assert await slots.take(SESSION) == "done"


@pytest.mark.anyio
async def test_a_resume_slot_is_gone_after_five_minutes(
    slots: ResumeSlots[str], clock: ManualClock
) -> None:
    await slots.put(SESSION, "done")
    clock.advance(timedelta(minutes=5))
    assert await slots.take(SESSION) is None


@pytest.mark.anyio
async def test_a_resume_slot_is_still_there_just_before_five_minutes(
    slots: ResumeSlots[str], clock: ManualClock
) -> None:
    await slots.put(SESSION, "done")
    clock.advance(timedelta(minutes=4, seconds=59))
    assert await slots.take(SESSION) == "done"


@pytest.mark.anyio
async def test_a_second_put_replaces_the_first_and_expired_slots_are_forgotten(
    slots: ResumeSlots[str], clock: ManualClock
) -> None:
    await slots.put(SESSION, "first")
    await slots.put(SESSION, "second")
    await slots.put("alice:c2", "other")
    clock.advance(timedelta(minutes=5))
    await slots.put("alice:c3", "late")
    assert await slots.count() == 1
    assert await slots.take(SESSION) is None
    assert await slots.take("alice:c3") == "late"


@pytest.mark.anyio
async def test_a_slot_put_through_one_instance_is_taken_once_through_another(
    state: StateBackend, clock: ManualClock
) -> None:
    first = ResumeSlots(await state.open(), str, clock=clock)
    second = ResumeSlots(await state.open(), str, clock=clock)
    await first.put(SESSION, "done")
    taken = await asyncio.gather(*(s.take(SESSION) for s in (first, second, first, second)))
    assert taken.count("done") == 1
    assert taken.count(None) == 3
