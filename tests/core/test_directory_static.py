from __future__ import annotations

import json
from typing import Any

import pytest

from core.people.directory import Directory, DirectoryConfigurationError, DirectoryPerson
from core.people.directory_static import StaticDirectory


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


PEOPLE: list[dict[str, Any]] = [
    {
        "id": "alice",
        "displayName": "Alice Liddell",
        "email": "alice@example.com",
        "roles": ["mercury.act-as-self", "finance"],
        "identities": ["static:alice", "oidc:314159"],
    },
    {"id": "bob", "identities": ["static:bob"]},
]


def directory(people: object = PEOPLE) -> StaticDirectory:
    return StaticDirectory.from_env(json.dumps(people))


def refusal(people: object) -> str:
    raw = people if isinstance(people, str) else json.dumps(people)
    with pytest.raises(DirectoryConfigurationError) as caught:
        StaticDirectory.from_env(raw)
    return str(caught.value)


def test_the_static_directory_is_a_directory_named_people() -> None:
    static: Directory = directory()
    assert static.name == "people"


@pytest.mark.anyio
async def test_every_identity_of_a_person_resolves_to_them_with_their_fields() -> None:
    static = directory()
    alice = await static.resolve("static:alice")
    assert alice == DirectoryPerson(
        id="alice",
        display_name="Alice Liddell",
        email="alice@example.com",
        roles=frozenset({"mercury.act-as-self", "finance"}),
        identities=("static:alice", "oidc:314159"),
    )
    assert await static.resolve("oidc:314159") == alice


@pytest.mark.anyio
async def test_optional_fields_default_to_nothing() -> None:
    bob = await directory().resolve("static:bob")
    assert bob == DirectoryPerson(id="bob", identities=("static:bob",))
    assert bob.display_name is None
    assert bob.roles == frozenset()


@pytest.mark.anyio
async def test_an_identity_nobody_has_resolves_to_nobody() -> None:
    static = directory()
    assert await static.resolve("static:carol") is None
    # Same id under another provider is another identity.
    assert await static.resolve("oidc:alice") is None


@pytest.mark.anyio
async def test_resolve_hands_out_copies() -> None:
    static = directory()
    first = await static.resolve("static:alice")
    second = await static.resolve("static:alice")
    assert first == second
    assert first is not second
    assert first is not None
    with pytest.raises(AttributeError):
        first.roles = frozenset({"admin"})  # type: ignore[misc]
    assert (await static.resolve("static:alice")) == second


def test_a_value_that_is_not_json_is_refused() -> None:
    message = refusal("[{id: alice}]")
    assert message.startswith("DIRECTORY_STATIC_PEOPLE is not valid JSON")


@pytest.mark.parametrize(
    ("value", "kind"), [({"id": "a"}, "an object"), ('"a"', "a string"), ("3", "a number")]
)
def test_a_value_that_is_not_a_list_is_refused(value: object, kind: str) -> None:
    message = refusal(value)
    assert message.startswith("DIRECTORY_STATIC_PEOPLE must be a JSON list of people")
    assert kind in message


def test_an_empty_list_lists_nobody() -> None:
    assert refusal([]).startswith("DIRECTORY_STATIC_PEOPLE lists nobody")


def test_an_entry_that_is_not_an_object_is_refused() -> None:
    message = refusal([PEOPLE[0], "bob"])
    assert message.startswith("DIRECTORY_STATIC_PEOPLE[1] must be an object")


def test_an_entry_without_an_id_is_refused() -> None:
    message = refusal([{"identities": ["static:x"]}])
    assert message.startswith("DIRECTORY_STATIC_PEOPLE[0] has no id")


@pytest.mark.parametrize(
    "bad_id", ["Alice", "", "-alice", ".a", "a b", "a" * 49, "alice:1", "élise"]
)
def test_an_id_outside_the_pattern_is_refused(bad_id: str) -> None:
    message = refusal([{"id": bad_id, "identities": ["static:x"]}])
    assert message.startswith(f'DIRECTORY_STATIC_PEOPLE[0].id "{bad_id}" is not a valid id')


@pytest.mark.parametrize("good_id", ["a", "0", "a" * 48, "alice.liddell", "al_ice-2"])
def test_ids_inside_the_pattern_are_accepted(good_id: str) -> None:
    directory([{"id": good_id, "identities": ["static:x"]}])


def test_a_non_string_id_is_refused() -> None:
    assert refusal([{"id": 7, "identities": ["static:x"]}]) == (
        "DIRECTORY_STATIC_PEOPLE[0].id must be a string, not a number."
    )


def test_a_duplicate_id_is_refused() -> None:
    message = refusal(
        [{"id": "a", "identities": ["static:a"]}, {"id": "a", "identities": ["static:b"]}]
    )
    assert message.startswith('DIRECTORY_STATIC_PEOPLE lists the id "a" more than once')


def test_a_person_without_identities_is_refused() -> None:
    assert refusal([{"id": "a"}]).startswith('DIRECTORY_STATIC_PEOPLE[0] ("a") has no identities')
    assert refusal([{"id": "a", "identities": []}]).startswith(
        'DIRECTORY_STATIC_PEOPLE[0] ("a").identities is empty'
    )


@pytest.mark.parametrize(
    "identity", ["alice", ":alice", "static:", "static: alice", " static:alice", "a b:c"]
)
def test_an_identity_not_shaped_provider_colon_id_is_refused(identity: str) -> None:
    message = refusal([{"id": "a", "identities": [identity]}])
    assert message.startswith(f'DIRECTORY_STATIC_PEOPLE[0] ("a").identities has "{identity}"')
    assert '"<provider>:<id>"' in message


def test_an_identity_belonging_to_two_people_is_refused_naming_both() -> None:
    message = refusal(
        [{"id": "a", "identities": ["static:x"]}, {"id": "b", "identities": ["static:x"]}]
    )
    assert message.startswith('DIRECTORY_STATIC_PEOPLE: "static:x" belongs to both "a" and "b"')


@pytest.mark.anyio
async def test_an_identity_repeated_within_one_person_is_kept_once() -> None:
    static = directory([{"id": "a", "identities": ["static:x", "static:x"]}])
    person = await static.resolve("static:x")
    assert person is not None
    assert person.identities == ("static:x",)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("displayName", 3, '[0] ("a").displayName must be a string, not a number.'),
        ("email", ["a@b"], '[0] ("a").email must be a string, not a list.'),
        ("roles", "admin", '[0] ("a").roles must be a list of strings, not a string.'),
        ("roles", [True], '[0] ("a").roles must hold only strings, not a boolean.'),
        ("roles", [""], '[0] ("a").roles holds an empty string; remove it.'),
        ("identities", "static:x", '[0] ("a").identities must be a list of strings, not a string.'),
        ("identities", [None], '[0] ("a").identities must hold only strings, not null.'),
    ],
)
def test_a_field_of_the_wrong_type_is_refused_by_name(
    field: str, value: object, expected: str
) -> None:
    entry: dict[str, object] = {"id": "a", "identities": ["static:x"], field: value}
    assert refusal([entry]) == "DIRECTORY_STATIC_PEOPLE" + expected


def test_an_unknown_field_is_refused_by_name() -> None:
    message = refusal([{"id": "a", "identities": ["static:x"], "display_name": "A"}])
    assert message.startswith('DIRECTORY_STATIC_PEOPLE[0] has the unknown field "display_name"')
    assert "id, displayName, email, roles and identities" in message


def test_every_refusal_is_a_sentence_naming_the_setting() -> None:
    for people in ([], [1], [{"id": "a"}], [{"id": "a", "identities": ["x"]}]):
        message = refusal(people)
        assert message.startswith("DIRECTORY_STATIC_PEOPLE")
        assert message.endswith(".")
