"""The wiki vault: each person's view, the path rules, atomic writes, RE2 grep and the tools."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import anyio
import jsonschema
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.tools.wiki_tools import (
    PROMOTE_NOTE,
    WIKI_GREP,
    WIKI_LIST,
    WIKI_READ,
    WIKI_TOOLS,
    WIKI_WRITE,
    detail_for,
    run_promote_note,
    run_wiki_grep,
    run_wiki_list,
    run_wiki_read,
    run_wiki_write,
    wiki_write_needs_confirmation,
)
from core.workspace.wiki import (
    LAYOUT,
    MAX_NOTE_BYTES,
    GrepMatch,
    InvalidPath,
    InvalidPattern,
    NoteNotFound,
    NoteTooLarge,
    Vault,
    WriteResult,
)

ALICE = "static:alice"
BOB = "static:bob"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def vault(tmp_path: Path) -> Vault:
    vault = Vault(tmp_path / "vault")
    await vault.init()
    return vault


def notes_of(vault: Vault, person_key: str) -> Path:
    return vault.root / "users" / person_key.replace(":", "%3A") / "notes"


def all_files(folder: Path) -> list[str]:
    return sorted(
        str(Path(parent, name).relative_to(folder))
        for parent, _dirs, files in os.walk(folder)
        for name in files
    )


# -- layout and views ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_init_creates_the_layout_and_can_run_again_without_touching_notes(
    tmp_path: Path,
) -> None:
    vault = Vault(tmp_path / "vault")
    await vault.init()
    (vault.root / "curated" / "team.md").write_text("team")
    await vault.init()
    for folder in LAYOUT:
        assert (vault.root / folder).is_dir()
    assert (vault.root / "curated" / "team.md").read_text() == "team"
    assert not (vault.root / ".git").exists()


@pytest.mark.anyio
async def test_each_person_sees_curated_and_only_their_own_notes_as_personal(
    vault: Vault,
) -> None:
    (vault.root / "curated" / "design" / "api.md").write_text("shared")
    (vault.root / "curated" / "design" / "diagram.png").write_bytes(b"png")
    (vault.root / "raw" / "dump.md").write_text("raw")
    await vault.write_note(ALICE, "personal/notes/a.md", "alice secret")
    await vault.write_note(BOB, "personal/notes/a.md", "bob secret")
    inferred = vault.root / "users" / "static%3Aalice" / "inferred"
    inferred.mkdir()
    (inferred / "topic.md").write_text("inferred")

    assert await vault.list(ALICE) == [
        "curated/design/api.md",
        "personal/inferred/topic.md",
        "personal/notes/a.md",
    ]
    assert await vault.list(BOB) == ["curated/design/api.md", "personal/notes/a.md"]
    assert await vault.read(ALICE, "personal/notes/a.md") == "alice secret"
    assert await vault.read(BOB, "personal/notes/a.md") == "bob secret"
    assert await vault.read(BOB, "personal/inferred/topic.md") is None
    assert await vault.read(BOB, "curated/design/api.md") == "shared"
    assert (notes_of(vault, ALICE) / "a.md").read_text() == "alice secret"


@pytest.mark.anyio
async def test_grep_finds_nothing_in_another_persons_notes(vault: Vault) -> None:
    await vault.write_note(ALICE, "personal/notes/isolation.md", "pomegranate-77")
    assert await vault.grep(BOB, "pomegranate") == []
    assert await vault.grep(ALICE, "pomegranate") == [
        GrepMatch(path="personal/notes/isolation.md", line=1, text="pomegranate-77")
    ]


@pytest.mark.anyio
async def test_a_person_key_that_would_name_no_folder_sees_only_curated(vault: Vault) -> None:
    (vault.root / "curated" / "team.md").write_text("team")
    (vault.root / "users" / "notes").mkdir()
    (vault.root / "users" / "notes" / "x.md").write_text("x")
    for key in ("", ".", ".."):
        assert await vault.list(key) == ["curated/team.md"]
        assert vault.resolve(key, "personal/notes/x.md") is None
        with pytest.raises(InvalidPath):
            await vault.write_note(key, "personal/notes/x.md", "x")


# -- the path rules -----------------------------------------------------------------------

REFUSED_PATHS = [
    "../users/static%3Abob/notes/b.md",
    "users/static%3Abob/notes/b.md",
    "users/static:bob/notes/b.md",
    "personal/../../x.md",
    "personal/notes/../../../static%3Abob/notes/b.md",
    "curated/../raw/dump.md",
    "curated/./team.md",
    "/etc/passwd",
    "/curated/team.md",
    "curated/%2e%2e/x.md",
    "curated%2fteam.md",
    "curated/%5c..%5cx.md",
    "curated\\team.md",
    "curated/..\\raw\\dump.md",
    "curated/team.md\x00",
    "curated/te\x00am.md",
    "curated/te\nam.md",
    "curated//team.md",
    "curated/team.md/",
    "curated/.hidden.md",
    "curated/.md",
    "curated/team.txt",
    "curated/team.MD",
    "curated/team",
    "curated",
    "curated/",
    "personal/notes",
    "personal/secret/b.md",
    "raw/dump.md",
    "curated\uff0fteam.md",
    "curated/\uff0e\uff0e/raw/dump.md",
    "curated/\u2025/raw/dump.md",
    "curated/\u202eteam.md",
    "",
    "curated/" + "a" * 600 + ".md",
]


@pytest.mark.anyio
@pytest.mark.parametrize("path", REFUSED_PATHS)
async def test_a_path_outside_the_view_resolves_to_nothing(vault: Vault, path: str) -> None:
    (vault.root / "curated" / "team.md").write_text("team")
    (vault.root / "raw" / "dump.md").write_text("raw")
    (vault.root / "curated" / "team.txt").write_text("txt")
    await vault.write_note(BOB, "personal/notes/b.md", "bob")
    assert vault.resolve(ALICE, path) is None
    assert await vault.read(ALICE, path) is None
    assert not await vault.note_exists(ALICE, path)
    with pytest.raises(InvalidPath):
        await vault.write_note(ALICE, path, "overwritten")
    assert (notes_of(vault, BOB) / "b.md").read_text() == "bob"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "path",
    [
        "personal/notes/../../../static%3Abob/notes/b.md",
        "personal/notes/%2e%2e/x.md",
        "personal/notes/a\\b.md",
        "personal/notes/.a.md",
        "personal/notes/a.txt",
        "personal/notes/a\x00.md",
        "personal/notes/\uff0e\uff0e/x.md",
        "personal/inferred/a.md",
        "curated/a.md",
    ],
)
async def test_a_note_can_only_be_written_inside_personal_notes(vault: Vault, path: str) -> None:
    with pytest.raises(InvalidPath):
        await vault.write_note(ALICE, path, "x")
    with pytest.raises(InvalidPath):
        await vault.append_note(ALICE, path, "x")
    assert all_files(vault.root) == []


@pytest.fixture
async def linked_vault(tmp_path: Path) -> Vault:
    """Alice's notes hold symlinks to Bob's note, to a file and a folder outside the vault."""
    vault = Vault(tmp_path / "vault")
    await vault.init()
    await vault.write_note(BOB, "personal/notes/b.md", "bob secret")
    await vault.write_note(ALICE, "personal/notes/own.md", "alice")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "o.md").write_text("outside secret")
    alice = notes_of(vault, ALICE)
    (alice / "bob.md").symlink_to(notes_of(vault, BOB) / "b.md")
    (alice / "out.md").symlink_to(outside / "o.md")
    (alice / "bobdir").symlink_to(notes_of(vault, BOB))
    (vault.root / "curated" / "escape").symlink_to(outside)
    return vault


@pytest.mark.anyio
@pytest.mark.parametrize(
    "path",
    [
        "personal/notes/bob.md",
        "personal/notes/out.md",
        "personal/notes/bobdir/b.md",
        "curated/escape/o.md",
    ],
)
async def test_a_symlink_never_leads_out_of_the_view(linked_vault: Vault, path: str) -> None:
    assert linked_vault.resolve(ALICE, path) is None
    assert await linked_vault.read(ALICE, path) is None
    assert not await linked_vault.note_exists(ALICE, path)
    assert await linked_vault.list(ALICE) == ["personal/notes/own.md"]
    assert await linked_vault.grep(ALICE, "secret") == []


@pytest.mark.anyio
async def test_writing_through_a_symlink_is_refused_and_changes_nothing(
    linked_vault: Vault, tmp_path: Path
) -> None:
    for path in ("personal/notes/bob.md", "personal/notes/out.md", "personal/notes/bobdir/b.md"):
        with pytest.raises(InvalidPath):
            await linked_vault.write_note(ALICE, path, "overwritten")
        with pytest.raises(InvalidPath):
            await linked_vault.append_note(ALICE, path, "overwritten")
    assert (notes_of(linked_vault, BOB) / "b.md").read_text() == "bob secret"
    assert (tmp_path / "outside" / "o.md").read_text() == "outside secret"
    assert sorted(os.listdir(notes_of(linked_vault, BOB))) == ["b.md"]


@pytest.mark.anyio
async def test_a_symlinked_personal_area_shows_nothing(vault: Vault) -> None:
    await vault.write_note(BOB, "personal/notes/b.md", "bob secret")
    area = vault.root / "users" / "static%3Aalice"
    area.symlink_to(vault.root / "users" / "static%3Abob")
    assert await vault.list(ALICE) == []
    assert vault.resolve(ALICE, "personal/notes/b.md") is None
    with pytest.raises(InvalidPath):
        await vault.write_note(ALICE, "personal/notes/b.md", "overwritten")
    assert (notes_of(vault, BOB) / "b.md").read_text() == "bob secret"


@pytest.mark.anyio
async def test_a_fifo_named_like_a_note_is_neither_listed_nor_read(vault: Vault) -> None:
    os.mkfifo(vault.root / "curated" / "pipe.md")
    assert await vault.list(ALICE) == []
    with anyio.fail_after(5):
        assert await vault.read(ALICE, "curated/pipe.md") is None


# -- writing ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_writing_says_whether_it_created_or_overwrote_and_leaves_no_temporary_files(
    vault: Vault,
) -> None:
    first = await vault.write_note(ALICE, "personal/notes/deep/er/a.md", "one")
    second = await vault.write_note(ALICE, "personal/notes/deep/er/a.md", "two")
    await vault.append_note(ALICE, "personal/notes/deep/er/a.md", "three")
    assert first == WriteResult(path="personal/notes/deep/er/a.md", created=True)
    assert second == WriteResult(path="personal/notes/deep/er/a.md", created=False)
    assert await vault.read(ALICE, "personal/notes/deep/er/a.md") == "two\nthree"
    assert all_files(vault.root) == ["users/static%3Aalice/notes/deep/er/a.md"]


@pytest.mark.anyio
async def test_concurrent_appends_keep_every_line(vault: Vault) -> None:
    async with anyio.create_task_group() as group:
        for number in range(40):
            group.start_soon(vault.append_note, ALICE, "personal/notes/log.md", f"line {number}\n")
    content = await vault.read(ALICE, "personal/notes/log.md")
    assert content is not None
    assert sorted(content.splitlines()) == sorted(f"line {number}" for number in range(40))


@pytest.mark.anyio
async def test_a_cancelled_append_still_lets_the_next_one_see_its_line(vault: Vault) -> None:
    await vault.write_note(ALICE, "personal/notes/log.md", "first\n")
    task = asyncio.ensure_future(vault.append_note(ALICE, "personal/notes/log.md", "second\n"))
    await asyncio.sleep(0)
    task.cancel()
    await vault.append_note(ALICE, "personal/notes/log.md", "third\n")
    with pytest.raises(asyncio.CancelledError):
        await task
    content = await vault.read(ALICE, "personal/notes/log.md")
    assert content is not None
    assert content.splitlines()[0] == "first"
    assert content.splitlines()[-1] == "third"


@pytest.mark.anyio
async def test_notes_over_one_mebibyte_are_refused(vault: Vault) -> None:
    with pytest.raises(NoteTooLarge, match="1 MiB"):
        await vault.write_note(ALICE, "personal/notes/big.md", "a" * (MAX_NOTE_BYTES + 1))
    await vault.write_note(ALICE, "personal/notes/big.md", "a" * MAX_NOTE_BYTES)
    with pytest.raises(NoteTooLarge):
        await vault.append_note(ALICE, "personal/notes/big.md", "more")
    (vault.root / "curated" / "huge.md").write_bytes(b"b" * (MAX_NOTE_BYTES + 1))
    with pytest.raises(NoteTooLarge):
        await vault.read(ALICE, "curated/huge.md")
    await vault.write_note(ALICE, "personal/notes/big.md", "small again")
    assert await vault.read(ALICE, "personal/notes/big.md") == "small again"


@pytest.mark.anyio
async def test_promote_copies_a_personal_note_into_curated(vault: Vault) -> None:
    await vault.write_note(ALICE, "personal/notes/api.md", "the api")
    assert await vault.promote(ALICE, "personal/notes/api.md") == "curated/api.md"
    assert await vault.promote(ALICE, "personal/notes/api.md", "curated/design/api.md") == (
        "curated/design/api.md"
    )
    assert await vault.read(BOB, "curated/api.md") == "the api"
    assert await vault.read(BOB, "curated/design/api.md") == "the api"
    assert await vault.read(ALICE, "personal/notes/api.md") == "the api"
    with pytest.raises(NoteNotFound):
        await vault.promote(BOB, "personal/notes/api.md")
    with pytest.raises(InvalidPath):
        await vault.promote(ALICE, "curated/api.md")
    with pytest.raises(InvalidPath):
        await vault.promote(ALICE, "personal/notes/api.md", "personal/notes/copy.md")
    with pytest.raises(InvalidPath):
        await vault.promote(ALICE, "personal/notes/api.md", "curated/../raw/api.md")


# -- grep ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_grep_is_case_insensitive_line_by_line_with_one_based_numbers(vault: Vault) -> None:
    (vault.root / "curated" / "team.md").write_text("intro\nThe Release is Friday\r\nend\n")
    await vault.write_note(ALICE, "personal/notes/a.md", "x" * 900 + " RELEASE")
    assert await vault.grep(ALICE, "release") == [
        GrepMatch(path="curated/team.md", line=2, text="The Release is Friday"),
        GrepMatch(path="personal/notes/a.md", line=1, text="x" * 500),
    ]
    assert await vault.grep(ALICE, "^end$") == [
        GrepMatch(path="curated/team.md", line=3, text="end")
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("pattern", ["(", "[a-", "a{2,1}", r"(a)\1", "(?=x)", "a" * 513])
async def test_an_invalid_pattern_is_refused_with_a_sentence(vault: Vault, pattern: str) -> None:
    with pytest.raises(InvalidPattern, match=r"search again\.$"):
        await vault.grep(ALICE, pattern)


@pytest.mark.anyio
async def test_catastrophic_patterns_answer_in_linear_time(vault: Vault) -> None:
    lines = ["a" * 5000, "x" * 5000] * 90 + ["a" * 5000 + "b", "x" * 5000 + "y"]
    (vault.root / "curated" / "evil.md").write_text("\n".join(lines))
    for pattern, line in (("(a+)+b$", 181), ("(x+x+)+y", 182), ("(a|aa)+$", 1)):
        started = time.monotonic()
        matches = await vault.grep(ALICE, pattern, max_matches=1)
        elapsed = time.monotonic() - started
        # The backtracking `re` module would not finish these in a lifetime; the deadline is 2 s.
        assert elapsed < 1.0
        assert [match.line for match in matches] == [line]


@pytest.mark.anyio
async def test_grep_stops_at_the_match_cap_and_the_byte_budget(tmp_path: Path) -> None:
    vault = Vault(tmp_path / "vault", grep_bytes=1500)
    await vault.init()
    for name in ("a", "b", "c"):
        (vault.root / "curated" / f"{name}.md").write_text("hit\n" * 250)
    assert len(await vault.grep(ALICE, "hit", max_matches=7)) == 7
    found = await vault.grep(ALICE, "hit", max_matches=10_000)
    assert {match.path for match in found} == {"curated/a.md", "curated/b.md"}
    assert len(found) == 250 + 125


@pytest.mark.anyio
async def test_grep_answers_what_it_found_when_the_deadline_passes(tmp_path: Path) -> None:
    vault = Vault(tmp_path / "vault", grep_seconds=0.0)
    await vault.init()
    (vault.root / "curated" / "a.md").write_text("hit\n" * 100)
    assert await vault.grep(ALICE, "hit") == []


# -- the tools ----------------------------------------------------------------------------


def test_every_tool_has_a_valid_schema_and_a_one_line_description() -> None:
    assert [tool.name for tool in WIKI_TOOLS] == [
        WIKI_LIST,
        WIKI_READ,
        WIKI_GREP,
        WIKI_WRITE,
        PROMOTE_NOTE,
    ]
    for tool in WIKI_TOOLS:
        jsonschema.Draft202012Validator.check_schema(tool.parameters)
        assert tool.description and "\n" not in tool.description


@pytest.mark.anyio
async def test_the_tools_answer_the_model_in_json(vault: Vault) -> None:
    (vault.root / "curated" / "team.md").write_text("Team rules")
    written = json.loads(
        await run_wiki_write(vault, ALICE, {"path": "personal/notes/a.md", "content": "Hi"})
    )
    assert written == {"path": "personal/notes/a.md", "created": True}
    listed = json.loads(await run_wiki_list(vault, ALICE, {}))
    assert listed == {"files": ["curated/team.md", "personal/notes/a.md"]}
    read = json.loads(await run_wiki_read(vault, ALICE, {"path": "personal/notes/a.md"}))
    assert read == {"path": "personal/notes/a.md", "content": "Hi"}
    grep = json.loads(await run_wiki_grep(vault, ALICE, {"pattern": "TEAM"}))
    assert grep == {
        "matches": [{"path": "curated/team.md", "line": 1, "text": "Team rules"}],
        "truncated": False,
    }
    promoted = json.loads(await run_promote_note(vault, ALICE, {"path": "personal/notes/a.md"}))
    assert promoted == {"path": "curated/a.md"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("run", "arguments"),
    [
        (run_wiki_read, {"path": "personal/notes/missing.md"}),
        (run_wiki_read, {"path": "../users/static%3Abob/notes/b.md"}),
        (run_wiki_read, {}),
        (run_wiki_grep, {"pattern": "("}),
        (run_wiki_grep, {"pattern": 3}),
        (run_wiki_write, {"path": "curated/x.md", "content": "x"}),
        (run_wiki_write, {"path": "personal/notes/x.md", "content": "x", "mode": "shred"}),
        (run_promote_note, {"path": "personal/notes/missing.md"}),
    ],
)
async def test_a_tool_that_cannot_do_its_work_answers_an_error_sentence(
    vault: Vault, run: object, arguments: dict[str, object]
) -> None:
    answer = json.loads(await run(vault, ALICE, arguments))  # type: ignore[operator]
    assert set(answer) == {"error"}
    assert answer["error"].endswith(".")


@pytest.mark.anyio
async def test_a_write_asks_for_confirmation_only_to_overwrite_without_a_mode(
    vault: Vault,
) -> None:
    path = "personal/notes/a.md"
    assert not await wiki_write_needs_confirmation(vault, ALICE, {"path": path, "content": "x"})
    await run_wiki_write(vault, ALICE, {"path": path, "content": "one"})
    assert await wiki_write_needs_confirmation(vault, ALICE, {"path": path, "content": "x"})
    assert not await wiki_write_needs_confirmation(vault, BOB, {"path": path, "content": "x"})
    for mode in ("replace", "append"):
        arguments = {"path": path, "content": "x", "mode": mode}
        assert not await wiki_write_needs_confirmation(vault, ALICE, arguments)
    await run_wiki_write(vault, ALICE, {"path": path, "content": "two", "mode": "append"})
    assert await vault.read(ALICE, path) == "one\ntwo"


def test_the_status_detail_is_the_path_or_the_pattern() -> None:
    assert detail_for(WIKI_READ, {"path": "curated/a.md"}) == "curated/a.md"
    assert detail_for(WIKI_WRITE, {"path": "personal/notes/a.md", "content": "x"}) == (
        "personal/notes/a.md"
    )
    assert detail_for(WIKI_GREP, {"pattern": "release"}) == "release"
    assert detail_for(WIKI_LIST, {}) == ""
    assert detail_for(WIKI_READ, {"path": 3}) == ""
    assert detail_for(PROMOTE_NOTE, {"path": "p" * 500}) == "p" * 120 + "…"


# -- properties ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def property_vault(tmp_path_factory: pytest.TempPathFactory) -> Vault:
    """A populated vault with symlinks out of Alice's view; only read by the properties."""
    base = tmp_path_factory.mktemp("properties")
    vault = Vault(base / "vault")
    for folder in LAYOUT:
        (vault.root / folder).mkdir(parents=True)
    (base / "outside").mkdir()
    (base / "outside" / "o.md").write_text("outside secret")
    (vault.root / "raw" / "dump.md").write_text("raw secret")
    (vault.root / "curated" / "team.md").write_text("Team\n" + "a" * 3000 + "\n" + "x" * 3000)
    (vault.root / "curated" / "design" / "api.md").write_text("api\nrelease\n")
    (vault.root / "curated" / "escape").symlink_to(base / "outside")
    for person, text in ((ALICE, "alice"), (BOB, "bob secret")):
        notes = notes_of(vault, person)
        notes.mkdir(parents=True)
        (notes / "a.md").write_text(text)
    alice = notes_of(vault, ALICE)
    (alice / "bob.md").symlink_to(notes_of(vault, BOB) / "a.md")
    (alice / "out.md").symlink_to(base / "outside" / "o.md")
    (alice / "bobdir").symlink_to(notes_of(vault, BOB))
    return vault


NAMES = st.sampled_from(
    ["a.md", "team.md", "design", "api.md", "bob.md", "out.md", "bobdir", "escape", "o.md", ".."]
)
TRICKS = st.sampled_from(
    [
        *("curated", "personal", "notes", "inferred", "users", "raw", "static%3Abob", "dump.md"),
        *("static:bob", ".", "", "%2e%2e", "%2f", "\\", "..\\..", "\x00", "\ud800", "\uff0f"),
        *("\uff0e\uff0e", "\u2025", ".hidden.md", "a.md\x00"),
    ]
)
SEGMENTS = st.one_of(NAMES, TRICKS, st.text(max_size=6))
PREFIXES = st.sampled_from(["curated", "personal/notes", "personal/inferred", "personal", ""])
PATHS = st.one_of(
    st.tuples(PREFIXES, st.lists(SEGMENTS, max_size=4)).map(
        lambda parts: "/".join([parts[0], *parts[1]])
    ),
    st.lists(SEGMENTS, max_size=7).map("/".join),
    st.lists(SEGMENTS, max_size=7).map(lambda segments: "/" + "/".join(segments)),
    st.text(max_size=40),
)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=PATHS)
@example(path="personal/notes/bob.md")
@example(path="personal/notes/out.md")
@example(path="personal/notes/bobdir/a.md")
@example(path="curated/escape/o.md")
@example(path="personal/notes/../../static%3Abob/notes/a.md")
def test_resolve_never_leaves_the_persons_view(property_vault: Vault, path: str) -> None:
    resolved = property_vault.resolve(ALICE, path)
    if resolved is None:
        return
    real = os.path.realpath(resolved)
    root = os.path.realpath(property_vault.root)
    areas = [
        os.path.join(root, "curated"),
        os.path.join(root, "users", "static%3Aalice", "notes"),
        os.path.join(root, "users", "static%3Aalice", "inferred"),
    ]
    assert any(os.path.commonpath([real, area]) == area for area in areas)
    assert real == str(resolved)
    assert resolved.name.endswith(".md")
    assert resolved.is_file()
    assert not resolved.is_symlink()


PATTERNS = st.one_of(
    st.text(alphabet="()[]{}*+?|^$.\\-,0123456789aAxXbyd:=!<>P", max_size=30),
    st.text(max_size=20),
    st.sampled_from(["(a+)+$", "(x+x+)+y", "(a|a?)+$", "((a*)*)*b", "\ud800", "a{1000}{1000}"]),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=PATTERNS)
def test_grep_either_refuses_the_pattern_or_answers_within_its_budget(
    property_vault: Vault, pattern: str
) -> None:
    visible = set(asyncio.run(property_vault.list(ALICE)))
    started = time.monotonic()
    try:
        matches = asyncio.run(property_vault.grep(ALICE, pattern, max_matches=20))
    except InvalidPattern as error:
        assert str(error).endswith(".")
        return
    assert time.monotonic() - started < 2.0 + 3.0
    assert len(matches) <= 20
    assert all(match.path in visible and match.line >= 1 for match in matches)
