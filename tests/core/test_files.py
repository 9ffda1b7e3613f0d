"""A person's inbox and outbox on disk: names, types, limits, and no way out of the area."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.workspace.file_types import describe_size, sniff
from core.workspace.files import (
    FileError,
    FileLimits,
    FileNotFound,
    FileTooLarge,
    IncomingFile,
    InvalidFileName,
    PersonFiles,
    checked_name,
)

pytestmark = pytest.mark.anyio

PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452")
PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize(
    "name", ["report.pdf", "Notes 2026.md", "città.txt", "a" * 200, "x..y", "100%.csv"]
)
def test_ordinary_names_pass_unchanged(name: str) -> None:
    assert checked_name(name) == name


@pytest.mark.parametrize(
    ("name", "fault"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("a/b", "path"),
        ("a\\b", "path"),
        ("..", "path"),
        ("a\uff0fb", "path"),  # a full-width solidus folds into "/"
        (".env", "hidden"),
        ("\uff0eenv", "hidden"),  # a full-width full stop folds into "."
        ("tab\there", "invisible"),
        ("zero\u200bwidth", "invisible"),
        (" lead", "spaces"),
        ("é" * 101, "long"),
    ],
)
def test_names_that_steer_hide_or_smuggle_are_refused(name: str, fault: str) -> None:
    with pytest.raises(InvalidFileName) as refused:
        checked_name(name)
    assert refused.value.fault == fault


def test_the_type_comes_from_the_bytes() -> None:
    assert sniff(PNG, "photo.txt") == "image/png"
    assert sniff(PDF, "notes.md") == "application/pdf"
    assert sniff(b"a,b\n1,2\n", "table.png") == "text/plain"
    assert sniff(b"a,b\n1,2\n", "table.csv") == "text/csv"
    assert sniff(b"\x00\x01\x02", "data.csv") == "application/octet-stream"
    assert sniff("ciao è".encode()[:-1], "cut.txt") == "text/plain"  # cut mid-character
    assert sniff(b"", "empty.txt") == "text/plain"


def test_sizes_read_as_people_say_them() -> None:
    assert describe_size(10 * 1024 * 1024) == "10 MiB"
    assert describe_size(1536) == "1.5 KiB"
    assert describe_size(300) == "300 bytes"


async def test_a_received_file_is_stamped_and_a_clash_gets_a_number(tmp_path: Path) -> None:
    files = PersonFiles(tmp_path)
    saved = await files.receive(
        "static:alice",
        [IncomingFile("a.txt", b"one"), IncomingFile("a.txt", b"two")],
        now_ms=1000,
    )
    assert [s.path for s in saved] == ["inbox/1000-a.txt", "inbox/1000-a-2.txt"]
    area = tmp_path / "users" / "static%3Aalice" / "inbox"
    assert (area / "1000-a-2.txt").read_bytes() == b"two"
    assert oct(area.stat().st_mode & 0o777) == "0o700"


async def test_limits_are_checked_before_anything_is_written(tmp_path: Path) -> None:
    files = PersonFiles(tmp_path, FileLimits(max_file_bytes=4, max_turn_bytes=6))
    with pytest.raises(FileTooLarge) as one:
        await files.receive("p", [IncomingFile("ok.txt", b"1"), IncomingFile("big", b"12345")])
    assert (one.value.per, one.value.limit) == ("file", 4)
    with pytest.raises(FileTooLarge) as together:
        await files.receive("p", [IncomingFile("a", b"1234"), IncomingFile("b", b"123")])
    assert together.value.per == "turn"
    with pytest.raises(InvalidFileName):
        await files.receive("p", [IncomingFile("ok.txt", b"1"), IncomingFile("../x", b"1")])
    assert not (tmp_path / "users").exists()


async def test_a_symlink_leads_nowhere(tmp_path: Path) -> None:
    files = PersonFiles(tmp_path)
    await files.receive("alice", [IncomingFile("secret.txt", b"alice's")], now_ms=1)
    alice_inbox = tmp_path / "users" / "alice" / "inbox"
    # Bob's inbox holding a link to Alice's file, and Carol's inbox being a link to Alice's.
    bob_inbox = tmp_path / "users" / "bob" / "inbox"
    bob_inbox.mkdir(parents=True)
    os.symlink(alice_inbox / "1-secret.txt", bob_inbox / "1-secret.txt")
    (tmp_path / "users" / "carol").mkdir()
    os.symlink(alice_inbox, tmp_path / "users" / "carol" / "inbox")
    for person in ("bob", "carol"):
        assert await files.list(person) == []
        with pytest.raises(FileNotFound):
            await files.read(person, "inbox/1-secret.txt")
    await files.write_outbox("alice", "mine.txt", b"alice's answer")
    os.symlink(tmp_path / "users" / "alice" / "outbox", tmp_path / "users" / "carol" / "outbox")
    with pytest.raises(FileError):
        await files.write_outbox("carol", "planted.txt", b"carol's")
    assert [f.name for f in await files.list("alice", "outbox")] == ["mine.txt"]
    assert await files.list("carol", "outbox") == []
    stored, data = await files.read("alice", "inbox/1-secret.txt")
    assert (stored.mime_type, data) == ("text/plain", b"alice's")


async def test_outbox_changes_are_told_by_name_inode_time_and_size(tmp_path: Path) -> None:
    files = PersonFiles(tmp_path)
    await files.write_outbox("p", "old.txt", b"kept")
    before = await files.list("p", "outbox")
    assert await files.changed_since("p", before) == []
    await files.write_outbox("p", "old.txt", b"kept")  # same bytes, rewritten: a new inode
    await files.write_outbox("p", "new.csv", b"a,b\n")
    changed = await files.changed_since("p", before)
    assert [(f.name, f.mime_type) for f in changed] == [
        ("old.txt", "text/plain"),
        ("new.csv", "text/csv"),
    ]
