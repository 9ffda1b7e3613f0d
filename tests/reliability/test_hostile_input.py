"""Hostile input: property-based tests over the decoders, the id rule, the language parser,
the wiki path resolver and the grep guard, then the same inputs over HTTP.

Nothing may escape as an exception other than the refusal each rule documents, no path may
lead outside the caller's view of the vault, and no grep may outrun its time budget.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from channel_http.errors import BadRequest
from channel_http.requests import (
    CONVERSATION_ID,
    ConfirmBody,
    MeBody,
    TurnBody,
    _repeated_key,
    conversation_id,
    decode_body,
)
from core.people.i18n import SUPPORTED_LANGUAGES, Catalogs, choose_language, negotiate
from core.workspace.wiki import MAX_PATTERN_CHARS, InvalidPattern, Vault
from tests.conftest import ALICE, BOB
from tests.support.server import RunningServer

TR = Catalogs.load().translator("en")
ALICE_KEY = "static:alice"
BOB_KEY = "static:bob"
SECRET = "the-secret-outside-the-vault"

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OVER_HTTP = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
body_fields = st.sampled_from(["text", "conversationId", "opening", "resume", "token", "timeZone"])
bodies = st.one_of(
    st.binary(max_size=200),
    json_values.map(msgspec.json.encode),
    st.dictionaries(body_fields, json_values, max_size=4).map(msgspec.json.encode),
)
# Path text a traversal would try: separators, dots, look-alikes, escapes, control characters.
path_alphabet = st.sampled_from(
    [
        *"/.\\%~:",
        *("..", "personal", "curated", "users", "notes", "inferred", "raw"),
        *("static%3Abob", "static:bob", "link.md", "a.md", "\x00", "\u2215", "\uff0e"),
        *("\u2024", "\u202e", "\ufe52", "..\u2215", "%2e%2e", "\n", " ", "md"),
    ]
)
hostile_paths = st.one_of(
    st.lists(path_alphabet, max_size=12).map("".join),
    st.text(max_size=80),
    st.lists(
        st.sampled_from(["..", "personal", "notes", "curated", "link.md", "a.md", "x"]), max_size=8
    ).map("/".join),
)


@FAST
@given(raw=bodies, body_type=st.sampled_from([TurnBody, ConfirmBody, MeBody]))
def test_the_body_decoders_answer_a_struct_or_a_sentence_never_an_exception(
    raw: bytes, body_type: type[msgspec.Struct]
) -> None:
    try:
        value = decode_body(body_type, raw, TR)
    except BadRequest as refusal:
        assert refusal.message.endswith(".")
        return
    assert isinstance(value, body_type)


# Objects written pair by pair, so a key may come twice, spelled plainly or with escapes,
# and a field's name may sit inside a value.
spelled_keys = st.sampled_from(
    ['"text"', '"te\\u0078t"', '"conversationId"', '"\\u0074oken"', '"token"', '"timeZone"']
)
pair_values = st.sampled_from(['"hi"', '"text"', '"say \\"text\\""', "true", "null", '"c1"'])
pairwise_bodies = st.lists(st.tuples(spelled_keys, pair_values), max_size=5).map(
    lambda pairs: ("{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}").encode()
)


@FAST
@given(raw=pairwise_bodies, body_type=st.sampled_from([TurnBody, ConfirmBody, MeBody]))
def test_a_repeated_key_is_refused_exactly_when_the_standard_parser_sees_one(
    raw: bytes, body_type: type[msgspec.Struct]
) -> None:
    """The decoder's quick test for repeats may skip the exact parse only when it can't
    change the answer."""
    try:
        decode_body(body_type, raw, TR)
    except BadRequest as refusal:
        repeated = "appears more than once" in refusal.message
        if repeated:
            assert _repeated_key(raw) is not None
        return
    assert _repeated_key(raw) is None


@FAST
@given(raw=st.one_of(st.none(), st.text(max_size=200), st.from_regex(CONVERSATION_ID)))
def test_a_conversation_id_is_absent_valid_or_refused(raw: str | None) -> None:
    try:
        value = conversation_id(raw, TR)
    except BadRequest:
        assert raw is not None and raw.strip()
        assert CONVERSATION_ID.fullmatch(raw.strip()) is None
        return
    assert value is None or CONVERSATION_ID.fullmatch(value) is not None
    if value is not None:
        assert raw is not None and value == raw.strip()


language_tokens = st.sampled_from(
    [
        *SUPPORTED_LANGUAGES,
        "*",
        "it-CH",
        "EN-us",
        "xx",
        "q=0",
        "q=1",
        "q=0.5",
        "q=abc",
        ";",
        ",",
        " ",
        "=",
        "-",
        "zh-Hant-TW",
        "\x00",
        "é",
    ]
)


@FAST
@given(
    header=st.one_of(st.text(max_size=300), st.lists(language_tokens, max_size=30).map("".join)),
    saved=st.one_of(st.none(), st.text(max_size=10), st.sampled_from(SUPPORTED_LANGUAGES)),
)
def test_accept_language_always_settles_on_a_supported_language(
    header: str, saved: str | None
) -> None:
    chosen = negotiate(header)
    assert chosen is None or chosen in SUPPORTED_LANGUAGES
    assert choose_language(saved, header, "en") in SUPPORTED_LANGUAGES


def test_a_language_refused_with_q_zero_is_never_chosen() -> None:
    assert negotiate("it;q=0, de") == "de"
    assert negotiate("it;q=0") is None


# ---------------------------------------------------------------- the vault


@pytest.fixture(scope="module")
def vault_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A vault with Alice's and Bob's notes, a curated note, a symlink out and a secret beside."""
    base = tmp_path_factory.mktemp("hostile-vault")
    (base / "secret.md").write_text(SECRET)
    root = base / "wiki"
    import asyncio

    vault = Vault(root)
    asyncio.run(vault.init())
    asyncio.run(vault.write_note(ALICE_KEY, "personal/notes/a.md", "alice's own note\n"))
    asyncio.run(vault.write_note(BOB_KEY, "personal/notes/a.md", "bob's private note\n"))
    (root / "curated" / "design" / "api.md").write_text("the team's note\n")
    for area in root.glob("users/*/notes"):
        os.symlink(base / "secret.md", area / "link.md")
    os.symlink(base / "secret.md", root / "curated" / "design" / "link.md")
    return root


def _inside(path: Path, root: Path, person_key: str) -> bool:
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    from core.workspace.wiki import person_folder

    areas = [os.path.join(real_root, "curated")]
    folder = person_folder(person_key)
    assert folder is not None
    areas.append(os.path.join(real_root, "users", folder))
    return any(os.path.commonpath([real, area]) == area for area in areas)


@FAST
@given(view_path=hostile_paths)
def test_no_view_path_resolves_outside_the_callers_view(vault_root: Path, view_path: str) -> None:
    vault = Vault(vault_root)
    resolved = vault.resolve(ALICE_KEY, view_path)
    if resolved is not None:
        assert _inside(resolved, vault_root, ALICE_KEY), (view_path, resolved)
        assert SECRET not in resolved.read_text(errors="replace")
        assert "bob's private" not in resolved.read_text(errors="replace")


@settings(max_examples=150, deadline=None)
@given(view_path=hostile_paths)
@pytest.mark.anyio
async def test_no_read_returns_bobs_note_or_the_secret_to_alice(
    vault_root: Path, view_path: str
) -> None:
    content = await Vault(vault_root).read(ALICE_KEY, view_path)
    assert content is None or (SECRET not in content and "bob's private" not in content)


@pytest.fixture(scope="module")
def big_vault(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Enough text that a grep must scan for a while: 40 notes of 64 KiB each."""
    root = tmp_path_factory.mktemp("grep-vault") / "wiki"
    import asyncio

    vault = Vault(root)
    asyncio.run(vault.init())
    line = ("a" * 60 + "b\n") * 1024
    for i in range(40):
        asyncio.run(vault.write_note(ALICE_KEY, f"personal/notes/n{i}.md", line))
    return root


pattern_tokens = st.sampled_from(
    [
        "a",
        "a*",
        "(a*)*",
        "(a|aa)+",
        "(?:a+)+$",
        ".*",
        ".*.*.*",
        "[",
        "(",
        ")",
        "\\",
        "b$",
        "{1000}",
        "(a{1,100}){1,100}",
        "\\1",
        "(?=a)",
        "(?P<x>a)",
        "\\p{L}",
        "[^\\n]*",
        "|",
        "^",
        "$",
        "?",
    ]
)
patterns = st.one_of(
    st.lists(pattern_tokens, max_size=12).map("".join),
    st.text(max_size=60),
    st.just("a" * (MAX_PATTERN_CHARS + 1)),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=patterns)
@pytest.mark.anyio
async def test_a_grep_keeps_to_its_time_budget_and_refuses_only_with_invalid_pattern(
    big_vault: Path, pattern: str
) -> None:
    budget = 0.25
    vault = Vault(big_vault, grep_seconds=budget)
    started = time.monotonic()
    try:
        matches = await vault.grep(ALICE_KEY, pattern)
    except InvalidPattern as refusal:
        assert str(refusal).strip()
        return
    elapsed = time.monotonic() - started
    # The deadline is checked per line; one line of 62 bytes is far below a second even on a
    # loaded runner, so a generous margin over the budget still catches a runaway.
    assert elapsed < budget + 2.0, (pattern, elapsed)
    assert len(matches) <= 200


# ---------------------------------------------------------------- over HTTP


@pytest.fixture
def hostile_server(make_server: Callable[..., RunningServer]) -> Iterator[RunningServer]:
    server = make_server(None, MERCURY_RATE_LIMIT_PER_USER="1000")
    from core.workspace.wiki import Vault as _Vault

    assert isinstance(server.services.vault, _Vault)
    yield server


def _no_500(response: httpx.Response) -> None:
    assert response.status_code < 500, (
        response.request.method,
        response.request.url,
        response.text,
    )
    if response.headers.get("content-type", "").startswith("application/json"):
        body: Any = response.json()
        assert isinstance(body, dict) and "ok" in body


@OVER_HTTP
@given(
    raw=bodies,
    route=st.sampled_from([("POST", "/turn"), ("POST", "/confirm"), ("PATCH", "/me")]),
    language=st.one_of(
        st.none(), st.text(st.characters(blacklist_categories=["Cc", "Cs"]), max_size=40)
    ),
)
def test_hostile_bodies_and_headers_never_make_a_500(
    hostile_server: RunningServer, raw: bytes, route: tuple[str, str], language: str | None
) -> None:
    headers = [
        (b"authorization", ALICE["authorization"].encode()),
        (b"content-type", b"application/json"),
    ]
    if language is not None:
        # Raw bytes, as a client could send them: UTF-8 where the header should be ASCII.
        headers.append((b"accept-language", language.encode("utf-8").strip() or b"*"))
    method, path = route
    with httpx.Client(base_url=hostile_server.url, timeout=20) as client:
        response = client.request(method, path, content=raw, headers=headers)
    _no_500(response)


@OVER_HTTP
@given(view_path=hostile_paths, pattern=patterns)
def test_hostile_wiki_queries_never_make_a_500_nor_leak(
    hostile_server: RunningServer, view_path: str, pattern: str
) -> None:
    with httpx.Client(base_url=hostile_server.url, timeout=20) as client:
        read = client.get("/wiki/read", params={"path": view_path}, headers=BOB)
        grep = client.get("/wiki/grep", params={"pattern": pattern}, headers=BOB)
    _no_500(read)
    _no_500(grep)
    assert read.status_code in (200, 400, 404)
    assert grep.status_code in (200, 400)
