from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from core.clock import ManualClock
from core.engine.tool_log import MAX_FIELD_CHARS, ToolLog, redact_urls
from core.state import Database
from tests.support.state import StateBackend

ALICE = "people:alice"
BOB = "people:bob"
LOGIN_URL = (
    "https://login.example.com/oauth2/authorize?client_id=mercury&response_type=code"
    "&redirect_uri=https%3A%2F%2Fmercury.example.com%2Flogin%2Fcallback&state=Zx81kQ_secret"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 3, 1, 9, 30, tzinfo=UTC))


@pytest.fixture
async def db(state: StateBackend) -> Database:
    return await state.open()


@pytest.fixture
def log(db: Database, clock: ManualClock) -> ToolLog:
    return ToolLog(db, clock=clock)


async def rows_of(db: Database, person: str) -> int:
    row = await db.fetch_one("SELECT COUNT(*) AS n FROM tool_log WHERE person_key = ?", (person,))
    assert row is not None
    return int(row["n"])


# Recording and reading


@pytest.mark.anyio
async def test_an_entry_comes_back_with_its_fields_and_an_iso_utc_timestamp(
    log: ToolLog,
) -> None:
    await log.record(ALICE, "c1", "wiki_read", '{"path":"a.md"}', "# A", "success")
    [entry] = await log.recent(ALICE)
    assert entry.timestamp == "2026-03-01T09:30:00.000Z"
    assert datetime.fromisoformat(entry.timestamp).tzinfo is not None
    assert (entry.conversation_id, entry.tool_name) == ("c1", "wiki_read")
    assert (entry.input, entry.output, entry.outcome) == ({"path": "a.md"}, "# A", "success")


@pytest.mark.anyio
async def test_a_one_off_session_is_logged_without_a_conversation(log: ToolLog) -> None:
    await log.record(ALICE, None, "jira", "issue view", "", "pending")
    [entry] = await log.recent(ALICE)
    assert entry.conversation_id is None
    assert entry.outcome == "pending"


@pytest.mark.anyio
async def test_entries_come_newest_first(log: ToolLog, clock: ManualClock) -> None:
    for index in range(5):
        await log.record(ALICE, "c1", f"tool{index}", "", "", "success")
        clock.advance(timedelta(seconds=1))
    # Two in the same instant keep the order they were written in.
    await log.record(ALICE, "c1", "tool5", "", "", "success")
    await log.record(ALICE, "c1", "tool6", "", "", "failed")
    names = [entry.tool_name for entry in await log.recent(ALICE)]
    assert names == [f"tool{index}" for index in range(6, -1, -1)]


@pytest.mark.anyio
async def test_recent_honours_its_limit(log: ToolLog) -> None:
    for index in range(10):
        await log.record(ALICE, "c1", f"tool{index}", "", "", "success")
    assert [e.tool_name for e in await log.recent(ALICE, limit=3)] == ["tool9", "tool8", "tool7"]
    assert await log.recent(ALICE, limit=0) == []


@pytest.mark.anyio
async def test_input_and_output_are_cut_to_two_thousand_characters(log: ToolLog) -> None:
    await log.record(ALICE, "c1", "grep", "i" * 5000, "o" * 2001, "success")
    await log.record(ALICE, "c1", "grep", "é" * 2000, "short", "success")
    short, long = await log.recent(ALICE)
    assert long.input == "i" * MAX_FIELD_CHARS
    assert long.output == "o" * MAX_FIELD_CHARS
    assert MAX_FIELD_CHARS == 2000
    assert short.input == "é" * 2000
    assert short.output == "short"


@pytest.mark.anyio
async def test_json_objects_and_arrays_come_back_as_values_and_anything_else_as_text(
    log: ToolLog,
) -> None:
    await log.record(ALICE, "c1", "t", ' {"topic": "cats", "n": [1, 2]}', "[]", "success")
    await log.record(ALICE, "c1", "t", "42", '{"cut": "in the mid', "success")
    await log.record(ALICE, "c1", "t", '"quoted"', "Error: no", "failed")
    third, second, first = await log.recent(ALICE)
    assert (first.input, first.output) == ({"topic": "cats", "n": [1, 2]}, [])
    assert (second.input, second.output) == ("42", '{"cut": "in the mid')
    assert (third.input, third.output) == ('"quoted"', "Error: no")


@pytest.mark.anyio
async def test_a_long_json_value_is_shortened_into_valid_json_within_the_limit(
    log: ToolLog,
) -> None:
    issues = [{"key": f"MER-{n}", "title": "t" * 120, "body": "b" * 3000} for n in range(60)]
    big = msgspec.json.encode({"issues": issues, "total": 60}).decode()
    await log.record(ALICE, "c1", "issues", '{"q": "' + "x" * 5000 + '"}', big, "success")
    [entry] = await log.recent(ALICE)
    assert isinstance(entry.input, dict) and isinstance(entry.output, dict)
    assert len(msgspec.json.encode(entry.input)) <= MAX_FIELD_CHARS
    assert len(msgspec.json.encode(entry.output)) <= MAX_FIELD_CHARS
    assert entry.input["q"].startswith("xxx") and entry.input["q"].endswith("…")
    kept = entry.output["issues"]
    assert kept[0]["key"] == "MER-0" and kept[-1].startswith("… ") and kept[-1].endswith(" more")
    assert entry.output["total"] == 60


@pytest.mark.anyio
async def test_an_outcome_outside_the_three_is_refused(log: ToolLog) -> None:
    with pytest.raises(ValueError, match="success, failed or pending"):
        await log.record(ALICE, "c1", "x", "", "", "done")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_log_keeping_nothing_is_refused(db: Database, clock: ManualClock) -> None:
    with pytest.raises(ValueError, match="at least one"):
        ToolLog(db, clock=clock, keep_per_person=0)


# Pruning and isolation


@pytest.mark.anyio
async def test_only_the_newest_two_hundred_entries_of_a_person_are_kept(
    log: ToolLog, db: Database
) -> None:
    for index in range(230):
        await log.record(ALICE, "c1", f"tool{index}", "", "", "success")
    entries = await log.recent(ALICE, limit=1000)
    assert len(entries) == 200
    assert entries[0].tool_name == "tool229"
    assert entries[-1].tool_name == "tool30"
    assert await rows_of(db, ALICE) == 200


@pytest.mark.anyio
async def test_a_busy_person_never_evicts_another_persons_entries(
    db: Database, clock: ManualClock
) -> None:
    log = ToolLog(db, clock=clock, keep_per_person=5)
    await log.record(BOB, "c9", "bobs_tool", "", "", "success")
    for index in range(50):
        await log.record(ALICE, "c1", f"tool{index}", "", "", "success")
    assert [entry.tool_name for entry in await log.recent(BOB)] == ["bobs_tool"]
    assert len(await log.recent(ALICE)) == 5
    assert await rows_of(db, ALICE) == 5


@pytest.mark.anyio
async def test_a_person_sees_only_their_own_entries(log: ToolLog) -> None:
    await log.record(ALICE, "c1", "alices_tool", "", "", "success")
    await log.record(BOB, "c1", "bobs_tool", "", "", "success")
    assert [entry.tool_name for entry in await log.recent(ALICE)] == ["alices_tool"]
    assert [entry.tool_name for entry in await log.recent(BOB)] == ["bobs_tool"]
    assert await log.recent("people:carol") == []


@pytest.mark.anyio
async def test_the_log_survives_a_restart(state: StateBackend, clock: ManualClock) -> None:
    first = await state.open()
    await ToolLog(first, clock=clock).record(ALICE, "c1", "jira", "in", "out", "success")
    await first.close()
    reopened = await state.open()
    assert [e.tool_name for e in await ToolLog(reopened, clock=clock).recent(ALICE)] == ["jira"]


# Login links


def test_a_url_carrying_a_state_becomes_a_login_link_marker() -> None:
    assert redact_urls(f"Log in here: {LOGIN_URL}") == "Log in here: [login link]"


@pytest.mark.parametrize(
    "url",
    [
        "https://idp.example/auth?state=abc",
        "http://idp.example/auth?client_id=x&state=abc&nonce=1",
        "HTTPS://IDP.EXAMPLE/AUTH?STATE=abc",
        "https://idp.example/auth?client_id=x&amp;state=abc",
    ],
)
def test_every_form_of_login_link_is_redacted(url: str) -> None:
    assert redact_urls(url) == "[login link]"


def test_urls_without_a_state_parameter_are_kept() -> None:
    text = (
        "See https://example.com/docs?page=2 and https://example.com/statement "
        "and https://example.com/a?estate=1 and https://example.com/state=1"
    )
    assert redact_urls(text) == text


def test_punctuation_and_quotes_around_a_login_link_are_kept() -> None:
    assert redact_urls(f"Open ({LOGIN_URL}).") == "Open ([login link])."
    assert redact_urls(f'{{"url":"{LOGIN_URL}","ok":true}}') == '{"url":"[login link]","ok":true}'
    assert redact_urls(f"<a href='{LOGIN_URL}'>x</a>") == "<a href='[login link]'>x</a>"


def test_every_login_link_in_a_text_is_redacted() -> None:
    text = f"{LOGIN_URL}\n{LOGIN_URL} https://example.com/ok"
    assert redact_urls(text) == "[login link]\n[login link] https://example.com/ok"


@pytest.mark.anyio
async def test_recording_never_stores_a_login_link(
    log: ToolLog, db: Database, state: StateBackend
) -> None:
    await log.record(
        ALICE, "c1", "calendar", f"go {LOGIN_URL}", f'{{"login":"{LOGIN_URL}"}}', "pending"
    )
    [entry] = await log.recent(ALICE)
    assert entry.input == "go [login link]"
    assert entry.output == {"login": "[login link]"}
    stored = repr([list(row) for row in await db.fetch_all("SELECT * FROM tool_log")])
    assert "Zx81kQ_secret" not in stored
    assert "[login link]" in stored
    if state.name == "sqlite":
        on_disk = b"".join(path.read_bytes() for path in state.data_dir.glob("mercury.db*"))
        assert b"Zx81kQ_secret" not in on_disk


@pytest.mark.anyio
async def test_a_login_link_past_the_cut_is_still_redacted_not_half_kept(log: ToolLog) -> None:
    prefix = "x" * (MAX_FIELD_CHARS - 40) + " "
    await log.record(ALICE, "c1", "calendar", prefix + LOGIN_URL, "", "pending")
    [entry] = await log.recent(ALICE)
    assert entry.input == prefix + "[login link]"
    assert "state" not in entry.input
