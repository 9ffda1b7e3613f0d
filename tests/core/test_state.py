"""The state store's port, on SQLite and on a real PostgreSQL, and what instances share."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.clock import ManualClock
from core.engine.confirmations import ConfirmationStore, StagedActionSpec
from core.people.person_settings import PersonSettings
from core.state import (
    SQLITE_FILE,
    Database,
    DatabaseBusy,
    DatabaseUnavailable,
    DuplicateRow,
    Migration,
    Notice,
    Schema,
    StateError,
    connect,
)
from core.state.postgres import postgres_sql
from tests.support.postgres import PostgresServer
from tests.support.state import StateBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

THINGS = Schema(
    "things",
    (
        Migration(1, "CREATE TABLE IF NOT EXISTS things (id {id}, name TEXT NOT NULL UNIQUE);\n"),
        Migration(2, "ALTER TABLE things ADD COLUMN body {blob};\n"),
    ),
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def db(state: StateBackend) -> Database:
    database = await state.open()
    await database.migrate(THINGS)
    return database


async def names(db: Database) -> list[str]:
    return [row["name"] for row in await db.fetch_all("SELECT name FROM things ORDER BY id")]


# --- one SQL for both -------------------------------------------------------------------


def test_placeholders_become_psycopg_ones_outside_literals_only() -> None:
    assert postgres_sql("SELECT ? WHERE a = '?' AND b LIKE '5%' AND c % 2 = ?") == (
        "SELECT %s WHERE a = '?' AND b LIKE '5%%' AND c %% 2 = %s"
    )


async def test_rows_read_by_name_and_by_position_and_bytes_round_trip(db: Database) -> None:
    assert (
        await db.execute("INSERT INTO things (name, body) VALUES (?, ?)", ("a", b"\x00\xff")) == 1
    )
    row = await db.fetch_one("SELECT id, name, body FROM things WHERE name = ?", ("a",))
    assert row is not None
    assert row["name"] == row[1] == "a"
    assert bytes(row["body"]) == b"\x00\xff"
    assert isinstance(row["id"], int)
    assert row.keys() == ["id", "name", "body"]


async def test_the_numbered_key_follows_insertion_order(db: Database) -> None:
    await db.execute_many("INSERT INTO things (name) VALUES (?)", [("b",), ("a",), ("c",)])
    assert await names(db) == ["b", "a", "c"]


async def test_a_write_returning_rows_is_committed(state: StateBackend, db: Database) -> None:
    await db.execute_many("INSERT INTO things (name) VALUES (?)", [("a",), ("b",)])
    gone = await db.fetch_all("DELETE FROM things WHERE name = ? RETURNING name", ("a",))
    assert [row["name"] for row in gone] == ["a"]
    other = await state.open()
    assert await names(other) == ["b"]


async def test_a_unique_collision_is_a_duplicate_row_and_leaves_the_store_usable(
    db: Database,
) -> None:
    await db.execute("INSERT INTO things (name) VALUES (?)", ("a",))
    with pytest.raises(DuplicateRow):
        await db.execute("INSERT INTO things (name) VALUES (?)", ("a",))
    with pytest.raises(DuplicateRow):
        await db.execute_many("INSERT INTO things (name) VALUES (?)", [("b",), ("a",)])
    # The failed batch wrote nothing, and no transaction was left open behind it.
    assert await names(db) == ["a"]
    await db.execute("INSERT INTO things (name) VALUES (?)", ("c",))
    assert await names(db) == ["a", "c"]


async def test_a_failed_transaction_is_rolled_back_whole(state: StateBackend, db: Database) -> None:
    with pytest.raises(DuplicateRow):
        async with db.transaction() as transaction:
            await transaction.execute("INSERT INTO things (name) VALUES (?)", ("x",))
            await transaction.execute("INSERT INTO things (name) VALUES (?)", ("x",))
    with pytest.raises(RuntimeError):
        async with db.transaction() as transaction:
            await transaction.execute("INSERT INTO things (name) VALUES (?)", ("y",))
            raise RuntimeError("the caller changed its mind")
    assert await names(db) == []
    assert await names(await state.open()) == []
    async with db.transaction() as transaction:
        await transaction.execute("INSERT INTO things (name) VALUES (?)", ("z",))
    assert await names(await state.open()) == ["z"]


async def test_a_cancelled_transaction_is_rolled_back_and_the_store_stays_usable(
    db: Database,
) -> None:
    entered = asyncio.Event()

    async def interrupted() -> None:
        async with db.transaction() as transaction:
            await transaction.execute("INSERT INTO things (name) VALUES (?)", ("half",))
            entered.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(interrupted())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await db.execute("INSERT INTO things (name) VALUES (?)", ("whole",))
    assert await names(db) == ["whole"]


async def test_transactions_holding_one_lock_run_one_at_a_time_across_instances(
    state: StateBackend, db: Database
) -> None:
    instances = [db, await state.open()]
    await db.execute("INSERT INTO things (name) VALUES (?)", ("0",))

    async def increment(database: Database) -> None:
        # Read, then write what was read plus one: only right if nobody ran in between.
        async with database.transaction(lock="counter") as transaction:
            row = await transaction.fetch_one("SELECT name FROM things")
            assert row is not None
            await asyncio.sleep(0)
            await transaction.execute("UPDATE things SET name = ?", (str(int(row[0]) + 1),))

    await asyncio.gather(*(increment(instances[i % 2]) for i in range(20)))
    assert await names(db) == ["20"]


async def holders_at_once(instances: list[Database]) -> int:
    inside = 0
    most = 0

    async def hold(database: Database) -> None:
        nonlocal inside, most
        async with database.lock("refresh:alice"):
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.01)  # the network, between two statements
            inside -= 1

    await asyncio.gather(*(hold(instances[i % len(instances)]) for i in range(8)))
    return most


async def test_a_lock_held_across_awaits_excludes_every_other_holder(db: Database) -> None:
    assert await holders_at_once([db]) == 1
    # Another key isn't held back by this one.
    async with asyncio.timeout(10), db.lock("refresh:alice"), db.lock("refresh:bob"):
        pass


async def test_a_lock_excludes_holders_on_other_instances(shared_state: StateBackend) -> None:
    instances = [await shared_state.open(), await shared_state.open()]
    assert await holders_at_once(instances) == 1


async def test_a_notice_sent_in_a_transaction_is_heard_only_if_it_commits(
    state: StateBackend, db: Database
) -> None:
    heard: list[Notice] = []
    await db.subscribe("things", heard.append)
    with pytest.raises(RuntimeError):
        async with db.transaction() as transaction:
            await transaction.notify("things", "rolled back")
            raise RuntimeError("changed its mind")
    async with db.transaction() as transaction:
        await transaction.notify("things", "committed")
    async with asyncio.timeout(10):
        while "committed" not in heard:
            await asyncio.sleep(0.01)
    await db.notify("things", "marker")
    async with asyncio.timeout(10):
        while "marker" not in heard:
            await asyncio.sleep(0.01)
    assert "rolled back" not in heard


# --- migrations -------------------------------------------------------------------------


async def test_migrations_run_once_and_record_the_version(state: StateBackend) -> None:
    first = await state.open()
    await first.migrate(THINGS)
    await first.execute("INSERT INTO things (name, body) VALUES (?, ?)", ("kept", b"1"))
    again = await state.open()
    await again.migrate(THINGS)  # nothing left to run: the row and the column stay
    row = await again.fetch_one(
        "SELECT version FROM schema_versions WHERE component = ?", ("things",)
    )
    assert row is not None
    assert row[0] == 2
    assert await names(again) == ["kept"]


async def test_instances_starting_together_migrate_once(state: StateBackend) -> None:
    instances = [await state.open(pool_size=2) for _ in range(5)]
    await asyncio.gather(*(instance.migrate(THINGS) for instance in instances))
    await instances[0].execute("INSERT INTO things (name, body) VALUES (?, ?)", ("a", b""))
    assert await names(instances[4]) == ["a"]


async def test_a_store_migrated_by_a_newer_build_is_refused(state: StateBackend) -> None:
    newer = await state.open()
    await newer.migrate(THINGS)
    older = await state.open()
    with pytest.raises(StateError, match="newer than this build knows"):
        await older.migrate(Schema("things", THINGS.migrations[:1]))


async def test_a_sqlite_file_from_before_versioned_schemas_is_adopted_in_order(
    tmp_path: Path,
) -> None:
    legacy = sqlite3.connect(tmp_path / SQLITE_FILE)
    legacy.executescript(
        """
        CREATE TABLE confirmations (
            token_hash TEXT PRIMARY KEY, group_id TEXT NOT NULL, session_key TEXT NOT NULL,
            person_key TEXT NOT NULL, tool_name TEXT NOT NULL, arguments_json TEXT NOT NULL,
            choice_value TEXT, choice_label TEXT NOT NULL, summary TEXT NOT NULL,
            hands_back INTEGER NOT NULL, created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL, state TEXT NOT NULL DEFAULT 'pending');
        """
    )
    far = 4_102_444_800_000_000  # 2100-01-01 in microseconds
    for group, summary in (("g2", "second"), ("g1", "first")):
        legacy.execute(
            "INSERT INTO confirmations VALUES (?, ?, 's', 'p', 't', '{}', NULL, '', ?, 0, 1, ?, "
            "'pending')",
            (f"hash-{group}", group, summary, far),
        )
    legacy.commit()
    legacy.close()
    database = await connect(None, tmp_path)
    try:
        store = ConfirmationStore(database, clock=ManualClock())
        # Staged at the same instant: the order they were written in is kept.
        assert [p.summary for p in await store.pending("p")] == ["second", "first"]
        spec = StagedActionSpec(tool_name="t", arguments={}, summary="third")
        await store.stage("s", "p", spec)
        assert [p.summary for p in await store.pending("p")][-1] == "third"
    finally:
        await database.close()


# --- PostgreSQL out of reach ------------------------------------------------------------


# Connecting is retried for connect_timeout_s (10 s by default); one second says the same.


async def test_an_unreachable_server_is_unavailable_without_its_password_in_the_message(
    postgres_server: PostgresServer,
) -> None:
    url = f"postgresql://mercury:hunter2secret@127.0.0.1:{postgres_server.port + 1}/nowhere"
    with pytest.raises(DatabaseUnavailable) as raised:
        await connect(url, Path("unused"), connect_timeout_s=1)
    assert "hunter2secret" not in str(raised.value)
    assert "127.0.0.1" in str(raised.value)


async def test_a_wrong_password_is_unavailable_without_the_password_in_the_message(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.url().replace(postgres_server.password, "hunter2secret")
    with pytest.raises(DatabaseUnavailable) as raised:
        await connect(url, Path("unused"), connect_timeout_s=1)
    assert "hunter2secret" not in str(raised.value)


# --- SQLite locked by another process ---------------------------------------------------


async def test_a_sqlite_write_waits_its_busy_timeout_for_another_process_then_is_busy(
    tmp_path: Path,
) -> None:
    quick = await connect(None, tmp_path, busy_timeout_s=0.5)
    patient = await connect(None, tmp_path)  # the default: 10 s
    try:
        await quick.migrate(THINGS)
        holder = sqlite3.connect(tmp_path / SQLITE_FILE, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            started = asyncio.get_running_loop().time()
            with pytest.raises(DatabaseBusy):
                await quick.execute("INSERT INTO things (name) VALUES ('quick')")
            waited = asyncio.get_running_loop().time() - started
            assert waited >= 0.25  # it waited for the lock, not refused at once
            # A write with the default wait outlasts a lock released meanwhile.
            writing = asyncio.ensure_future(
                patient.execute("INSERT INTO things (name) VALUES ('patient')")
            )
            await asyncio.sleep(max(2 * waited, 1.0))  # longer than the quick one waited
            assert not writing.done()
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await writing
        assert await names(quick) == ["patient"]
    finally:
        await quick.close()
        await patient.close()


# --- reads beside the writes -----------------------------------------------------------


async def test_a_read_does_not_wait_for_a_transaction_in_progress(db: Database) -> None:
    # On SQLite a SELECT goes to a reader connection: it sees what was committed and does
    # not queue behind a transaction another task holds open (PostgreSQL: another
    # connection of the pool, the same).
    await db.execute("INSERT INTO things (name) VALUES ('before')")
    holding, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with db.transaction() as transaction:
            await transaction.execute("INSERT INTO things (name) VALUES ('inside')")
            holding.set()
            await release.wait()

    holder = asyncio.ensure_future(hold())
    await holding.wait()
    try:
        seen = await asyncio.wait_for(names(db), 5)
        found = await asyncio.wait_for(
            db.fetch_key("SELECT name FROM things WHERE name = ?", ("before",)), 5
        )
        missing = await asyncio.wait_for(
            db.fetch_key("SELECT name FROM things WHERE name = ?", ("inside",)), 5
        )
    finally:
        release.set()
        await holder
    assert seen == ["before"]
    assert found is not None and found["name"] == "before"
    assert missing is None  # not committed yet
    # Once committed, both reads see it.
    assert await names(db) == ["before", "inside"]
    inside = await db.fetch_key("SELECT name FROM things WHERE name = ?", ("inside",))
    assert inside is not None and inside["name"] == "inside"


async def test_a_key_lookup_is_a_select_only(db: Database) -> None:
    with pytest.raises(ValueError, match="SELECT"):
        await db.fetch_key("DELETE FROM things WHERE name = ?", ("a",))


async def test_a_key_lookup_on_a_busy_sqlite_file_takes_the_readers_thread(
    tmp_path: Path,
) -> None:
    # The lookup answered on the event loop never sleeps on the file's lock (its timeout is
    # 0): when SQLite says busy (a checkpoint, another process), the reader connection
    # answers it, waiting its busy timeout in its own thread.
    db = await connect(None, tmp_path)

    class Busy:
        def execute(self, sql: str, parameters: object) -> None:
            raise sqlite3.OperationalError("database is locked")

    try:
        await db.migrate(THINGS)
        await db.execute("INSERT INTO things (name) VALUES ('a')")
        db._at_hand = Busy()  # type: ignore[attr-defined]
        row = await db.fetch_key("SELECT name FROM things WHERE name = ?", ("a",))
        assert row is not None and row["name"] == "a"
    finally:
        db._at_hand = sqlite3.connect(":memory:")  # type: ignore[attr-defined]
        await db.close()


async def test_a_key_lookup_that_fails_otherwise_says_so(db: Database) -> None:
    with pytest.raises(Exception, match="missing"):
        await db.fetch_key("SELECT missing FROM things WHERE name = ?", ("a",))


# --- what instances share ---------------------------------------------------------------


async def test_a_notice_reaches_every_instance_listening(shared_state: StateBackend) -> None:
    first, second = await shared_state.open(), await shared_state.open()
    heard: dict[str, list[Notice]] = {"first": [], "second": []}
    await first.subscribe("things", heard["first"].append)
    await second.subscribe("things", heard["second"].append)
    await first.notify("things", "alice")
    async with asyncio.timeout(10):
        while heard != {"first": ["alice"], "second": ["alice"]}:
            await asyncio.sleep(0.01)


async def test_a_dropped_listener_says_notices_were_missed_and_comes_back(
    shared_state: StateBackend, postgres_server: PostgresServer
) -> None:
    first, second = await shared_state.open(), await shared_state.open()
    heard: list[Notice] = []
    subscription = await second.subscribe("things", heard.append)
    assert subscription.live
    await first.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'"
    )
    async with asyncio.timeout(20):
        while None not in heard:
            await asyncio.sleep(0.01)
        while not subscription.live:
            await asyncio.sleep(0.01)
    heard.clear()
    await first.notify("things", "after")
    async with asyncio.timeout(10):
        while "after" not in heard:
            await asyncio.sleep(0.01)


async def test_a_setting_saved_through_one_instance_is_what_the_next_read_through_another_gets(
    shared_state: StateBackend,
) -> None:
    clock = ManualClock(datetime(2026, 12, 3, 9, 0, tzinfo=UTC))
    first = PersonSettings(await shared_state.open(), clock=clock)
    second = PersonSettings(await shared_state.open(), clock=clock)
    for language in ("de", "fr", "it", "es"):
        await first.set_language("people:alice", language)
        assert (await second.get("people:alice")).language == language
    assert second.cached == 0  # a shared store is never cached: no notice could be in time


async def test_settings_are_cached_on_a_store_one_process_owns(tmp_path: Path) -> None:
    database = await connect(None, tmp_path)
    try:
        settings = PersonSettings(database, clock=ManualClock())
        await settings.set_language("people:alice", "de")
        assert (await settings.get("people:alice")).language == "de"
        assert settings.cached == 1
        await settings.set_language("people:alice", "fr")
        assert settings.cached == 0
        assert (await settings.get("people:alice")).language == "fr"
    finally:
        await database.close()


async def test_a_confirmation_raced_through_two_instances_is_taken_once(
    state: StateBackend,
) -> None:
    clock = ManualClock()
    stores = [ConfirmationStore(await state.open(), clock=clock) for _ in range(2)]
    spec = StagedActionSpec(tool_name="jira", arguments={"issue": "OPS-1"}, summary="delete")
    for _ in range(5):
        staging = await stores[0].stage("alice:c1", "people:alice", spec, (("A", "a"), ("B", "b")))
        tokens = [choice.token for choice in staging.choices]
        taken = await asyncio.gather(
            *(stores[i % 2].take("alice:c1", "people:alice", tokens[i % 2]) for i in range(6))
        )
        assert sum(action is not None for action in taken) == 1
