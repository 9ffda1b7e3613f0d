"""The static token provider: AUTH_STATIC_TOKENS parsing and matching by digest."""

from __future__ import annotations

import json
import logging

import anyio
import pytest

import auth_providers
from auth_providers import (
    AUTH_API_VERSION,
    AuthConfigurationError,
    AuthProvider,
    StaticTokenProvider,
    bearer_token,
)
from core.people.principal import Principal

pytestmark = pytest.mark.timeout(10)

ALICE = "tok-alice-7f3e9c21d4"
BOB = "tok-bob-a81c55e0b2"
TOKENS = json.dumps({ALICE: {"id": "alice", "displayName": "Alice"}, BOB: {"id": "bob"}})


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def bearer(value: str) -> dict[str, str]:
    return {"authorization": value}


async def authenticate(provider: StaticTokenProvider, headers: dict[str, str]) -> Principal | None:
    with anyio.fail_after(2):
        return await provider.authenticate(headers)


def test_the_package_exports_a_sorted_table_of_contents() -> None:
    assert auth_providers.__all__ == sorted(
        auth_providers.__all__, key=lambda name: (not name.isupper(), not name[0].isupper(), name)
    )
    for name in auth_providers.__all__:
        assert getattr(auth_providers, name) is not None


def test_the_contract_is_version_one_and_the_provider_implements_it() -> None:
    provider = StaticTokenProvider.from_env(TOKENS)
    assert AUTH_API_VERSION == 1
    assert isinstance(provider, AuthProvider)
    assert provider.name == "static"


@pytest.mark.parametrize(
    ("value", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("BEARER abc", "abc"),
        ("BeArEr    abc", "abc"),
        ("Bearer abc   ", "abc"),
        ("Bearer abc\t", "abc"),
        ("Bearer", None),
        ("Bearer ", None),
        ("Bearer a b", None),
        ("Basic YWxpY2U6cHc=", None),
        ("Bearerabc", None),
        (" Bearer abc", None),
        ("", None),
        ("abc", None),
    ],
)
def test_a_bearer_token_is_one_token_after_a_case_insensitive_scheme(
    value: str, token: str | None
) -> None:
    assert bearer_token({"authorization": value}) == token


def test_no_authorization_header_means_no_token() -> None:
    assert bearer_token({"cookie": "Bearer abc"}) is None


@pytest.mark.anyio
async def test_a_declared_token_maps_to_its_user() -> None:
    provider = StaticTokenProvider.from_env(TOKENS)
    alice = await authenticate(provider, bearer(f"Bearer {ALICE}"))
    bob = await authenticate(provider, bearer(f"bearer {BOB}"))
    assert alice == Principal(id="alice", provider="static", display_name="Alice")
    assert bob == Principal(id="bob", provider="static", display_name=None)
    assert alice is not None and alice.user_key == "static:alice"


@pytest.mark.anyio
async def test_the_scheme_is_case_insensitive() -> None:
    provider = StaticTokenProvider.from_env(TOKENS)
    for scheme in ("Bearer", "bearer", "BEARER", "bEaReR"):
        principal = await authenticate(provider, bearer(f"{scheme}  {ALICE} "))
        assert principal is not None and principal.id == "alice"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "value",
    [
        "Bearer tok-unknown",
        f"Bearer {ALICE[:-1]}",
        f"Bearer {ALICE}x",
        f"Bearer x{ALICE}",
        f"Basic {ALICE}",
        "Bearer ",
        "Bearer",
        ALICE,
        f"Bearer {ALICE} {BOB}",
    ],
)
async def test_unknown_prefix_basic_empty_and_bare_tokens_are_refused(value: str) -> None:
    provider = StaticTokenProvider.from_env(TOKENS)
    assert await authenticate(provider, bearer(value)) is None


@pytest.mark.anyio
async def test_a_request_without_authorization_is_refused() -> None:
    provider = StaticTokenProvider.from_env(TOKENS)
    assert await authenticate(provider, {}) is None


@pytest.mark.anyio
@pytest.mark.parametrize(
    "token", ["constructor", "__proto__", "toString", "hasOwnProperty", "__class__", "keys"]
)
async def test_inherited_object_keys_never_match(token: str) -> None:
    provider = StaticTokenProvider.from_env(TOKENS)
    assert await authenticate(provider, bearer(f"Bearer {token}")) is None


@pytest.mark.anyio
async def test_each_of_many_tokens_finds_its_own_user_and_only_its_own() -> None:
    # Found by the token's digest: the order of the entries and their number don't matter.
    def token(i: int) -> str:
        return f"tok-{i:05d}-{i * 7919 % 10007:05d}"

    provider = StaticTokenProvider.from_env(
        json.dumps({token(i): {"id": f"user{i}"} for i in range(5000)})
    )
    for i in (0, 1, 2499, 4999):
        principal = await authenticate(provider, bearer(f"Bearer {token(i)}"))
        assert principal is not None and principal.id == f"user{i}"
    # A declared token's prefix, a longer token and a changed last character are strangers.
    for stranger in ("tok-00001", "tok-00001-07919x", "tok-00001-07918"):
        assert await authenticate(provider, bearer(f"Bearer {stranger}")) is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (None, "AUTH_STATIC_TOKENS is missing"),
        ("", "AUTH_STATIC_TOKENS is missing"),
        ("   ", "AUTH_STATIC_TOKENS is missing"),
        ('{"tok-secret-1": ', "isn't valid JSON"),
        ("[1, 2]", "must be an object from token to user"),
        ('["tok-secret-1"]', "must be an object from token to user"),
        ('"tok-secret-1"', "must be an object from token to user"),
        ("42", "must be an object from token to user"),
        ("null", "must be an object from token to user"),
        ('{"tok-secret-1": "alice"}', "must be an object from token to user"),
        ('{"tok-secret-1": ["alice"]}', "must be an object from token to user"),
        ("{}", "declares no token"),
        ('{"": {"id": "alice"}}', "declares an empty token"),
        ('{"tok-secret-1": {}}', 'the user of a token has no "id"'),
        ('{"tok-secret-1": {"displayName": "A"}}', 'the user of a token has no "id"'),
        ('{"tok-secret-1": {"id": 7}}', "isn't a non-empty string"),
        ('{"tok-secret-1": {"id": ""}}', "isn't a non-empty string"),
        ('{"tok-secret-1": {"id": "a", "displayName": 3}}', '"displayName" that isn\'t a string'),
        ('{"tok-secret-1": {"id": "a", "role": "admin"}}', "unknown fields (role)"),
        ('{"tok secret 1": {"id": "a"}}', "whitespace"),
    ],
)
def test_an_invalid_environment_is_refused_with_a_sentence(raw: str | None, message: str) -> None:
    with pytest.raises(AuthConfigurationError) as raised:
        StaticTokenProvider.from_env(raw)
    text = str(raised.value)
    assert message in text
    assert text.endswith(".")
    assert "tok-secret-1" not in text
    assert "tok secret 1" not in text


def test_roles_are_refused_and_point_at_the_directory() -> None:
    raw = json.dumps({ALICE: {"id": "alice", "roles": ["admin"]}})
    with pytest.raises(AuthConfigurationError, match="DIRECTORY_STATIC_PEOPLE") as raised:
        StaticTokenProvider.from_env(raw)
    assert '"roles"' in str(raised.value)
    assert ALICE not in str(raised.value)


def test_no_error_message_contains_a_token() -> None:
    distinctive = "tok-DISTINCTIVE-9d8c7b6a5e"
    bad = [
        '{"' + distinctive + '": ',
        json.dumps({distinctive: "x"}),
        json.dumps({distinctive: {}}),
        json.dumps({distinctive: {"id": 1}}),
        json.dumps({distinctive: {"id": "a", "displayName": []}}),
        json.dumps({distinctive: {"id": "a", "roles": []}}),
        json.dumps({distinctive: {"id": "a", "extra": 1}}),
        json.dumps({distinctive: {"id": "a"}, "": {"id": "b"}}),
    ]
    for raw in bad:
        with pytest.raises(AuthConfigurationError) as raised:
            StaticTokenProvider.from_env(raw)
        assert distinctive not in str(raised.value)
        assert "DISTINCTIVE" not in repr(raised.value)
        assert raised.value.__cause__ is None


@pytest.mark.anyio
async def test_tokens_never_reach_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    provider = StaticTokenProvider.from_env(TOKENS)
    await authenticate(provider, bearer(f"Bearer {ALICE}"))
    await authenticate(provider, bearer("Bearer tok-unknown-55"))
    assert ALICE not in caplog.text
    assert "tok-unknown-55" not in caplog.text
