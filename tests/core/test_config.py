"""The settings: the file found, the environment over it, and every value checked."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import msgspec
import pytest

from core.config.settings import (
    SETTINGS,
    ConfigurationError,
    MemoryCollections,
    Settings,
    help_text,
    load_settings,
    settings_reference,
)
from core.people.i18n import Translation

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
START = "<!-- settings-reference:start -->"
END = "<!-- settings-reference:end -->"
SECRET = "hunter2-do-not-show"
LOOPBACK = "127.0.0.1"  # the default host


def write(directory: Path, text: str, name: str = "mercury.yaml") -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load(directory: Path, yaml_text: str | None = None, **environ: str) -> Settings:
    if yaml_text is not None:
        write(directory, yaml_text)
    return load_settings(environ, directory)


def refusal(directory: Path, yaml_text: str | None = None, **environ: str) -> str:
    with pytest.raises(ConfigurationError) as caught:
        load(directory, yaml_text, **environ)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- defaults and precedence --------------------------------------------------------------


def test_with_no_file_and_no_variables_every_default_applies(tmp_path: Path) -> None:
    settings = load(tmp_path)

    assert settings.config_file is None
    assert settings.http.host == LOOPBACK
    assert settings.http.port == 4100
    assert settings.http.cors_origin == ("*",)
    assert settings.http.public_url is None
    assert settings.http.heartbeat_s == 15
    assert settings.http.resume_max_chars is None
    assert settings.data_dir == tmp_path.resolve() / "data"
    assert settings.wiki.vault_path == tmp_path.resolve() / "data" / "wiki"
    assert settings.auth.providers == ()
    assert settings.auth.static_tokens is None
    assert settings.ollama.host == "http://127.0.0.1:11434"
    assert settings.ollama.model == "llama3.2"
    assert settings.ollama.think is True
    assert settings.ollama.timeout_s == 300
    assert settings.ollama.connect_timeout_s == 5
    assert settings.defaults.language == "en"
    assert settings.defaults.time_zone == "UTC"
    assert settings.engine.max_steps == 8
    assert settings.rate_limit.per_user == 10
    assert settings.rate_limit.window_ms == 60_000
    assert settings.memory.store == "edge"
    assert settings.memory.collections == MemoryCollections(
        verbatim="verbatim_archive", episodic="episodic_memory", semantic="semantic_facts"
    )
    assert settings.memory.archive_queue_size == 10_000
    assert settings.memory.edge_merge_above == 0
    assert settings.memory.edge_search_ef == 32
    assert settings.session.idle_timeout_ms == 1_800_000
    assert settings.session.resume_max_chars == 8000
    assert settings.access.unknown == "refuse"
    assert settings.access.plugins == {}
    assert settings.oidc.leeway_s == 30
    assert settings.services == ()


def test_the_settings_cannot_be_changed_once_built(tmp_path: Path) -> None:
    settings = load(tmp_path)

    with pytest.raises(AttributeError):
        settings.http = settings.http  # type: ignore[misc]
    with pytest.raises(AttributeError):
        settings.http.port = 1  # type: ignore[misc]


def test_a_value_in_the_file_applies_when_the_variable_is_absent(tmp_path: Path) -> None:
    settings = load(tmp_path, "http:\n  port: 8080\nollama:\n  model: qwen3\n")

    assert settings.http.port == 8080
    assert settings.ollama.model == "qwen3"
    assert settings.config_file == tmp_path / "mercury.yaml"


def test_the_environment_wins_over_the_file(tmp_path: Path) -> None:
    settings = load(tmp_path, "http:\n  port: 8080\n", HTTP_SURFACE_PORT="9090")

    assert settings.http.port == 9090


def test_an_empty_variable_wins_over_the_file_and_means_the_default(tmp_path: Path) -> None:
    yaml_text = "http:\n  port: 8080\n  public_url: https://m.example.com\n"

    settings = load(tmp_path, yaml_text, HTTP_SURFACE_PORT="", HTTP_SURFACE_PUBLIC_URL="")

    assert settings.http.port == 4100
    assert settings.http.public_url is None


def test_a_blank_variable_counts_as_empty_and_spaces_around_values_are_ignored(
    tmp_path: Path,
) -> None:
    settings = load(tmp_path, HTTP_SURFACE_PORT="   ", OLLAMA_MODEL="  qwen3 ")

    assert settings.http.port == 4100
    assert settings.ollama.model == "qwen3"


def test_an_empty_or_null_value_in_the_file_means_the_default(tmp_path: Path) -> None:
    settings = load(tmp_path, 'http:\n  port:\n  host: ""\nwiki:\n')

    assert settings.http.port == 4100
    assert settings.http.host == LOOPBACK


def test_raw_settings_are_kept_exactly(tmp_path: Path) -> None:
    settings = load(tmp_path, OIDC_ISSUER=" https://id.example.com ", AUTH_STATIC_TOKENS=" {} ")

    assert settings.oidc.issuer == " https://id.example.com "
    assert settings.auth.static_tokens == " {} "


# --- which file -----------------------------------------------------------------------------


def test_mercury_yaml_is_preferred_over_mercury_yml(tmp_path: Path) -> None:
    write(tmp_path, "http:\n  port: 1111\n", "mercury.yaml")
    write(tmp_path, "http:\n  port: 2222\n", "mercury.yml")

    settings = load_settings({}, tmp_path)

    assert settings.http.port == 1111
    assert settings.config_file == tmp_path / "mercury.yaml"


def test_mercury_yml_is_read_when_there_is_no_mercury_yaml(tmp_path: Path) -> None:
    write(tmp_path, "http:\n  port: 2222\n", "mercury.yml")

    settings = load_settings({}, tmp_path)

    assert settings.http.port == 2222
    assert settings.config_file == tmp_path / "mercury.yml"


def test_a_named_file_is_found_relative_to_the_working_directory(tmp_path: Path) -> None:
    write(tmp_path, "http:\n  port: 3333\n", "conf/prod.yaml")
    write(tmp_path, "http:\n  port: 1111\n", "mercury.yaml")

    settings = load_settings({"MERCURY_CONFIG_FILE": "conf/prod.yaml"}, tmp_path)

    assert settings.http.port == 3333
    assert settings.config_file == tmp_path / "conf" / "prod.yaml"


def test_an_absolute_named_file_is_read_wherever_it_is(tmp_path: Path) -> None:
    path = write(tmp_path, "http:\n  port: 3333\n", "elsewhere/m.yaml")

    settings = load_settings({"MERCURY_CONFIG_FILE": str(path)}, tmp_path / "elsewhere" / "..")

    assert settings.http.port == 3333


@pytest.mark.parametrize("value", ["", "none", "NONE", "None", "  none  "])
def test_an_empty_or_none_config_file_variable_reads_no_file(tmp_path: Path, value: str) -> None:
    write(tmp_path, "this is: [not valid yaml\n")

    settings = load_settings({"MERCURY_CONFIG_FILE": value}, tmp_path)

    assert settings.config_file is None
    assert settings.http.port == 4100


def test_a_named_file_that_does_not_exist_is_an_error_naming_it(tmp_path: Path) -> None:
    message = refusal(tmp_path, MERCURY_CONFIG_FILE="missing.yaml")

    assert str(tmp_path / "missing.yaml") in message
    assert "doesn't exist" in message
    assert "MERCURY_CONFIG_FILE=none" in message


def test_errors_in_a_named_file_name_that_file(tmp_path: Path) -> None:
    write(tmp_path, "ollama:\n  modle: qwen3\n", "conf/prod.yml")

    message = refusal(tmp_path, MERCURY_CONFIG_FILE="conf/prod.yml")

    assert message.startswith(f'{tmp_path / "conf" / "prod.yml"}: unknown key "ollama.modle"')
    assert 'did you mean "ollama.model"?' in message


def test_a_named_directory_is_not_a_config_file(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()

    message = refusal(tmp_path, MERCURY_CONFIG_FILE="conf")

    assert "isn't a file" in message


def test_an_empty_file_sets_nothing(tmp_path: Path) -> None:
    settings = load(tmp_path, "# nothing here yet\n")

    assert settings.config_file == tmp_path / "mercury.yaml"
    assert settings.http.port == 4100


# --- the file's shape -----------------------------------------------------------------------


def test_yaml_that_does_not_parse_is_an_error_naming_the_file(tmp_path: Path) -> None:
    message = refusal(tmp_path, "http:\n  port: [4100\n")

    assert message.startswith(f"{tmp_path / 'mercury.yaml'} isn't valid YAML")
    assert "line" in message


def test_a_file_that_is_not_a_mapping_at_the_top_is_an_error_naming_it(tmp_path: Path) -> None:
    message = refusal(tmp_path, "- http\n- port\n")

    assert message.startswith(str(tmp_path / "mercury.yaml"))
    assert "mapping of sections" in message
    assert "not a list" in message


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    message = refusal(tmp_path, "http:\n  port: 1\n  port: 2\n")

    assert 'the key "port" is given twice' in message
    assert "line 3" in message


def test_text_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mercury.yaml").write_bytes(b"http:\n  host: \xff\xfe\n")

    message = refusal(tmp_path)

    assert "isn't UTF-8" in message


@pytest.mark.parametrize(
    ("yaml_text", "key", "suggestion"),
    [
        ("htp:\n  port: 1\n", "htp", "http"),
        ("http:\n  prot: 1\n", "http.prot", "http.port"),
        ("memory:\n  collections:\n    verbatm: x\n", "memory.collections.verbatm", None),
        ("colour: blue\n", "colour", None),
        ("access:\n  plugins:\n    jira: {role: [a]}\n", "access.plugins.jira.role", None),
        (
            "services:\n  - {name: jira, bas_url: x, operations: []}\n",
            "services[0].bas_url",
            "services[0].base_url",
        ),
    ],
)
def test_an_unknown_key_at_any_level_is_refused_with_the_file_and_the_dotted_key(
    tmp_path: Path, yaml_text: str, key: str, suggestion: str | None
) -> None:
    message = refusal(tmp_path, yaml_text)

    assert message.startswith(f'{tmp_path / "mercury.yaml"}: unknown key "{key}"')
    if suggestion is not None:
        assert f'did you mean "{suggestion}"?' in message


def test_the_unknown_key_message_reads_as_the_file_name_then_the_key(tmp_path: Path) -> None:
    message = refusal(tmp_path, "http:\n  prot: 1\n")

    assert 'mercury.yaml: unknown key "http.prot"' in message


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        (
            "http:\n  port: '4100'\n",
            'http.port must be a whole number from 0 to 65535, not "4100".',
        ),
        ("http:\n  port: 41.5\n", "http.port must be a whole number from 0 to 65535, not 41.5."),
        ("http:\n  port: true\n", "http.port must be a whole number from 0 to 65535, not true."),
        ("http: 4100\n", "http must be a section of keys, not 4100."),
        ("ollama:\n  model: [a, b]\n", "ollama.model must be text, not a list."),
        (
            "http:\n  heartbeat_s: soon\n",
            'http.heartbeat_s must be a number greater than 0, not "soon".',
        ),
        (
            "auth:\n  providers: static\n",
            'auth.providers must be a list of provider names, not "static".',
        ),
        ("data_dir: {a: 1}\n", "data_dir must be a path, not a mapping."),
        (
            "defaults:\n  language: 7\n",
            "defaults.language must be one of en, it, de, fr, es, not 7.",
        ),
    ],
)
def test_a_value_of_the_wrong_type_names_the_file_the_key_and_what_is_expected(
    tmp_path: Path, yaml_text: str, expected: str
) -> None:
    message = refusal(tmp_path, yaml_text)

    assert message == f"{tmp_path / 'mercury.yaml'}: {expected}"


# --- secrets -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("yaml_text", "key", "variable"),
    [
        (f"auth:\n  static_tokens: '{SECRET}'\n", "auth.static_tokens", "AUTH_STATIC_TOKENS"),
        (f"memory:\n  qdrant_api_key: {SECRET}\n", "memory.qdrant_api_key", "QDRANT_API_KEY"),
        (f"qdrant:\n  api_key: {SECRET}\n", "qdrant.api_key", "QDRANT_API_KEY"),
        (f"secret_key: {SECRET}\n", "secret_key", "MERCURY_SECRET_KEY"),
        (f"state:\n  url: {SECRET}\n", "state.url", "MERCURY_STATE_URL"),
        (
            f"services:\n  - name: jira\n    client_secret: {SECRET}\n",
            "services[0].client_secret",
            "MERCURY_SERVICE_JIRA_CLIENT_SECRET",
        ),
    ],
)
def test_a_secret_in_the_file_is_refused_naming_its_environment_variable(
    tmp_path: Path, yaml_text: str, key: str, variable: str
) -> None:
    message = refusal(tmp_path, yaml_text)

    assert message.startswith(f"{tmp_path / 'mercury.yaml'}: {key} is a secret")
    assert f"set the {variable} environment variable instead" in message
    assert SECRET not in message


def test_the_state_store_is_sqlite_unless_a_postgresql_url_is_given(tmp_path: Path) -> None:
    assert load(tmp_path).state.url is None
    url = "postgresql://mercury:s3cret@db.internal:5432/mercury"
    settings = load(tmp_path, MERCURY_STATE_URL=url, MERCURY_STATE_POOL_SIZE="4")
    assert settings.state.url == url
    assert settings.state.pool_size == 4
    assert "s3cret" not in settings.redacted()


def test_a_state_url_that_is_not_postgresql_is_refused_without_quoting_it(tmp_path: Path) -> None:
    message = refusal(tmp_path, MERCURY_STATE_URL="mysql://root:s3cret@db/mercury")
    assert "MERCURY_STATE_URL must be a PostgreSQL URL" in message
    assert "s3cret" not in message


def test_a_secret_looking_key_anywhere_is_refused_without_its_value(tmp_path: Path) -> None:
    message = refusal(tmp_path, f"oidc:\n  client_secret: {SECRET}\n")

    assert "oidc.client_secret looks like a secret" in message
    assert SECRET not in message


def test_a_password_property_of_an_operation_schema_is_not_a_secret(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        """
        services:
          - name: vault
            base_url: https://vault.example.com
            operations:
              - name: rotate
                description: Rotate a password.
                method: POST
                path: /rotate
                parameters:
                  type: object
                  properties:
                    password: {type: string}
        """,
    )

    assert settings.services[0].operations[0].parameters["properties"] == {
        "password": {"type": "string"}
    }


def test_secrets_never_show_in_the_repr_or_the_redacted_description(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        "services:\n  - name: jira\n    base_url: https://j.example.com\n"
        "    operations: [{name: s, description: Search., method: GET, path: /s}]\n",
        AUTH_STATIC_TOKENS=SECRET,
        QDRANT_API_KEY=SECRET,
        MERCURY_SECRET_KEY=SECRET,
        MERCURY_SERVICE_JIRA_CLIENT_SECRET=SECRET,
    )

    assert settings.auth.static_tokens == SECRET
    assert settings.memory.qdrant_api_key == SECRET
    assert settings.secret_key == SECRET
    assert settings.services[0].client_secret == SECRET
    for text in (repr(settings), str(settings), settings.redacted()):
        assert SECRET not in text
    assert "auth.static_tokens = (set)" in settings.redacted()
    assert "jira (1 operation, client secret set)" in settings.redacted()


def test_the_redacted_description_has_a_line_for_every_setting(tmp_path: Path) -> None:
    lines = load(tmp_path).redacted().splitlines()

    assert lines[0] == "config_file = none"
    assert [line.split(" = ")[0] for line in lines[1:]] == [s.path for s in SETTINGS]


def test_errors_about_other_settings_never_carry_a_secret(tmp_path: Path) -> None:
    message = refusal(
        tmp_path,
        f"http:\n  prot: {SECRET}\n",
        AUTH_STATIC_TOKENS=SECRET,
        MERCURY_SECRET_KEY=SECRET,
    )

    assert SECRET not in message


# --- every value checked --------------------------------------------------------------------


def test_a_bad_number_in_the_environment_reads_as_one_sentence(tmp_path: Path) -> None:
    message = refusal(tmp_path, HTTP_SURFACE_PORT="abc")

    assert message == 'HTTP_SURFACE_PORT must be a whole number from 0 to 65535, not "abc".'


INT_RANGES = [
    ("HTTP_SURFACE_PORT", "http.port", 0, 65535),
    ("HTTP_SURFACE_RESUME_MAX_CHARS", "http.resume_max_chars", 0, None),
    ("MERCURY_MAX_STEPS", "engine.max_steps", 1, 100),
    ("MERCURY_RATE_LIMIT_PER_USER", "rate_limit.per_user", 1, 1000),
    ("MERCURY_RATE_LIMIT_WINDOW_MS", "rate_limit.window_ms", 1000, 3_600_000),
    ("MERCURY_ARCHIVE_QUEUE_SIZE", "memory.archive_queue_size", 1, None),
    ("MERCURY_EDGE_MERGE_ABOVE", "memory.edge_merge_above", 0, 1000),
    ("MERCURY_EDGE_SEARCH_EF", "memory.edge_search_ef", 4, 1024),
    ("MERCURY_ARCHIVE_LINGER_MS", "memory.archive_linger_ms", 0, 10_000),
    ("SESSION_IDLE_TIMEOUT_MS", "session.idle_timeout_ms", 1000, None),
    ("SESSION_IDLE_CHECK_INTERVAL_MS", "session.idle_check_interval_ms", 100, None),
    ("SESSION_CAPTURE_MESSAGE_THRESHOLD", "session.capture_message_threshold", 1, None),
    ("SESSION_RESUME_MAX_CHARS", "session.resume_max_chars", 0, None),
    ("OIDC_LEEWAY_S", "oidc.leeway_s", 0, 60),
]


def attribute(settings: Settings, path: str) -> object:
    value: object = settings
    for part in path.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize(("variable", "path", "low", "high"), INT_RANGES)
def test_whole_numbers_are_accepted_at_their_bounds_and_refused_beyond(
    tmp_path: Path, variable: str, path: str, low: int, high: int | None
) -> None:
    assert attribute(load(tmp_path, **{variable: str(low)}), path) == low
    if high is not None:
        assert attribute(load(tmp_path, **{variable: str(high)}), path) == high
        above = refusal(tmp_path, **{variable: str(high + 1)})
        assert above == f'{variable} must be a whole number from {low} to {high}, not "{high + 1}".'
    below = refusal(tmp_path, **{variable: str(low - 1)})
    assert below.startswith(f"{variable} must be a whole number")
    assert refusal(tmp_path, **{variable: "1.5"}).endswith('not "1.5".')
    assert refusal(tmp_path, **{variable: "ten"}).endswith('not "ten".')


@pytest.mark.parametrize(("variable", "path", "low", "high"), INT_RANGES)
def test_whole_numbers_in_the_file_get_the_same_checks(
    tmp_path: Path, variable: str, path: str, low: int, high: int | None
) -> None:
    section, _, key = path.rpartition(".")
    assert section  # every ranged number sits in a section
    message = refusal(tmp_path, f"{section}:\n  {key}: {low - 1}\n")

    assert message.startswith(f"{tmp_path / 'mercury.yaml'}: {path} must be a whole number")
    assert attribute(load(tmp_path, f"{section}:\n  {key}: {low}\n"), path) == low


@pytest.mark.parametrize(
    ("variable", "path", "inclusive"),
    [
        ("HTTP_SURFACE_HEARTBEAT_S", "http.heartbeat_s", False),
        ("HTTP_SURFACE_GRACEFUL_TIMEOUT_S", "http.graceful_timeout_s", True),
        ("OLLAMA_TIMEOUT_S", "ollama.timeout_s", False),
        ("OLLAMA_CONNECT_TIMEOUT_S", "ollama.connect_timeout_s", False),
    ],
)
def test_durations_in_seconds_must_be_finite_and_in_range(
    tmp_path: Path, variable: str, path: str, inclusive: bool
) -> None:
    assert attribute(load(tmp_path, **{variable: "0.25"}), path) == 0.25
    assert attribute(load(tmp_path, **{variable: "2"}), path) == 2.0
    if inclusive:
        assert attribute(load(tmp_path, **{variable: "0"}), path) == 0
    else:
        assert refusal(tmp_path, **{variable: "0"}) == (
            f'{variable} must be a number greater than 0, not "0".'
        )
    for bad in ("-1", "inf", "nan", "soon"):
        assert refusal(tmp_path, **{variable: bad}).startswith(f"{variable} must be a number")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        *[(word, True) for word in ("true", "TRUE", "1", "yes", "Yes", "on", "ON")],
        *[(word, False) for word in ("false", "False", "0", "no", "NO", "off", "Off")],
    ],
)
def test_booleans_accept_the_usual_words_in_any_case(
    tmp_path: Path, text: str, value: bool
) -> None:
    assert load(tmp_path, OLLAMA_THINK=text).ollama.think is value


def test_a_boolean_that_is_no_word_for_true_or_false_is_refused(tmp_path: Path) -> None:
    message = refusal(tmp_path, OLLAMA_THINK="maybe")

    assert message == (
        'OLLAMA_THINK must be true or false (yes/no, on/off and 1/0 also do), not "maybe".'
    )


@pytest.mark.parametrize(("yaml_value", "value"), [("false", False), ("no", False), ("'on'", True)])
def test_booleans_in_the_file_may_be_yaml_booleans_or_words(
    tmp_path: Path, yaml_value: str, value: bool
) -> None:
    assert load(tmp_path, f"ollama:\n  think: {yaml_value}\n").ollama.think is value


def test_a_time_zone_is_spelled_as_the_tz_database_does(tmp_path: Path) -> None:
    assert load(tmp_path, MERCURY_DEFAULT_TIME_ZONE="europe/rome").defaults.time_zone == (
        "Europe/Rome"
    )
    from_file = load(tmp_path, "defaults:\n  time_zone: AMERICA/NEW_YORK\n")
    assert from_file.defaults.time_zone == "America/New_York"


@pytest.mark.parametrize("zone", ["Mars/Olympus", "+02:00", "localtime"])
def test_a_time_zone_the_tz_database_does_not_know_is_refused(tmp_path: Path, zone: str) -> None:
    message = refusal(tmp_path, MERCURY_DEFAULT_TIME_ZONE=zone)

    assert message.startswith("MERCURY_DEFAULT_TIME_ZONE must be an IANA time zone name")


def test_the_default_language_must_be_one_the_service_speaks(tmp_path: Path) -> None:
    assert load(tmp_path, MERCURY_DEFAULT_LANGUAGE="IT").defaults.language == "it"
    assert refusal(tmp_path, MERCURY_DEFAULT_LANGUAGE="pt") == (
        'MERCURY_DEFAULT_LANGUAGE must be one of en, it, de, fr, es, not "pt".'
    )


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("https://mercury.example.com", "https://mercury.example.com"),
        ("  https://mercury.example.com///  ", "https://mercury.example.com"),
        ("http://127.0.0.1:4100/base/", "http://127.0.0.1:4100/base"),
        ("HTTPS://Mercury.Example.com/", "HTTPS://Mercury.Example.com"),
    ],
)
def test_the_public_url_is_trimmed_of_spaces_and_trailing_slashes(
    tmp_path: Path, given: str, kept: str
) -> None:
    assert load(tmp_path, HTTP_SURFACE_PUBLIC_URL=given).http.public_url == kept


@pytest.mark.parametrize(
    "given",
    [
        "mercury.example.com",
        "ftp://mercury.example.com",
        "https://",
        "https://mercury.example.com/?next=1",
        "https://mercury.example.com/#top",
        "https://mercury example.com",
        "https://[::1",
    ],
)
def test_a_public_url_that_is_no_http_base_url_is_refused(tmp_path: Path, given: str) -> None:
    message = refusal(tmp_path, HTTP_SURFACE_PUBLIC_URL=given)

    assert message.startswith("HTTP_SURFACE_PUBLIC_URL must be an http:// or https:// URL")


def test_auth_providers_are_kept_in_order_from_a_comma_list(tmp_path: Path) -> None:
    assert load(tmp_path, MERCURY_AUTH="oidc, STATIC").auth.providers == ("oidc", "static")
    assert load(tmp_path, MERCURY_AUTH="static,").auth.providers == ("static",)
    from_file = load(tmp_path, "auth:\n  providers: [static, oidc]\n")
    assert from_file.auth.providers == ("static", "oidc")


def test_an_unknown_auth_provider_is_refused_listing_the_valid_ones(tmp_path: Path) -> None:
    assert refusal(tmp_path, MERCURY_AUTH="static,ldap") == (
        'MERCURY_AUTH names an unknown provider "ldap"; the valid ones are static, oidc.'
    )


def test_an_auth_provider_named_twice_is_refused(tmp_path: Path) -> None:
    assert refusal(tmp_path, MERCURY_AUTH="oidc,static,OIDC") == (
        'MERCURY_AUTH names "oidc" twice; list each provider once.'
    )
    message = refusal(tmp_path, "auth:\n  providers: [static, static]\n")
    assert message.endswith('auth.providers names "static" twice; list each provider once.')


def test_oidc_algorithms_are_asymmetric_ones_in_their_usual_spelling(tmp_path: Path) -> None:
    assert load(tmp_path, OIDC_ALGORITHMS="rs256, ES256,eddsa").oidc.algorithms == (
        "RS256",
        "ES256",
        "EdDSA",
    )
    for refused in ("none", "HS256"):
        message = refusal(tmp_path, OIDC_ALGORITHMS=f"RS256,{refused}")
        assert message.startswith(f'OIDC_ALGORITHMS names an unknown algorithm "{refused}"')


def test_the_qdrant_store_needs_its_url(tmp_path: Path) -> None:
    message = refusal(tmp_path, MERCURY_MEMORY_STORE="qdrant")

    assert "QDRANT_URL" in message
    assert "MERCURY_MEMORY_STORE" in message
    settings = load(tmp_path, MERCURY_MEMORY_STORE="Qdrant", QDRANT_URL="http://127.0.0.1:6333")
    assert settings.memory.store == "qdrant"
    assert settings.memory.qdrant_url == "http://127.0.0.1:6333"


def test_a_memory_store_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    assert refusal(tmp_path, MERCURY_MEMORY_STORE="redis") == (
        'MERCURY_MEMORY_STORE must be one of edge, qdrant, off, not "redis".'
    )
    assert refusal(tmp_path, QDRANT_URL="qdrant:6333").startswith("QDRANT_URL must be an http")


def test_unknown_people_are_refused_or_allowed(tmp_path: Path) -> None:
    assert load(tmp_path, MERCURY_ACCESS_UNKNOWN="ALLOW").access.unknown == "allow"
    assert refusal(tmp_path, MERCURY_ACCESS_UNKNOWN="maybe").startswith(
        "MERCURY_ACCESS_UNKNOWN must be one of refuse, allow"
    )


# --- paths ---------------------------------------------------------------------------------


def test_the_data_directory_is_absolute_and_the_vault_follows_it(tmp_path: Path) -> None:
    settings = load(tmp_path, MERCURY_DATA_DIR="state/../var")

    assert settings.data_dir == tmp_path.resolve() / "var"
    assert settings.wiki.vault_path == tmp_path.resolve() / "var" / "wiki"


def test_the_vault_path_is_its_own_setting_relative_to_the_working_directory(
    tmp_path: Path,
) -> None:
    settings = load(tmp_path, "wiki:\n  vault_path: vault\n", MERCURY_DATA_DIR="/srv/data")

    assert settings.data_dir == Path("/srv/data").resolve()
    assert settings.wiki.vault_path == tmp_path.resolve() / "vault"


# --- values only the file can hold -----------------------------------------------------------


def test_the_static_people_may_be_a_list_in_the_file_kept_as_json(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        """
        directory:
          static_people:
            - id: alice
              identities: ["static:alice"]
        """,
    )

    assert settings.directory.static_people is not None
    assert msgspec.json.decode(settings.directory.static_people) == [
        {"id": "alice", "identities": ["static:alice"]}
    ]


def test_the_static_people_from_the_environment_are_kept_as_given(tmp_path: Path) -> None:
    text = '[{"id": "bob", "identities": ["oidc:1"]}]'

    assert load(tmp_path, DIRECTORY_STATIC_PEOPLE=text).directory.static_people == text


def test_plugin_role_gates_come_from_the_file(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        "access:\n  unknown: allow\n  plugins:\n    jira: {roles: [dev, ops]}\n"
        "    zitadel:\n      roles: []\n",
    )

    assert settings.access.unknown == "allow"
    assert settings.access.plugins == {"jira": ("dev", "ops"), "zitadel": ()}


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("access:\n  plugins: [jira]\n", "access.plugins must be a mapping from plugin name"),
        ("access:\n  plugins:\n    jira: {}\n", "access.plugins.jira needs roles: [...]."),
        (
            "access:\n  plugins:\n    jira: {roles: dev}\n",
            "access.plugins.jira.roles must be a list",
        ),
        (
            "access:\n  plugins:\n    jira: {roles: ['']}\n",
            "access.plugins.jira.roles must be a list",
        ),
    ],
)
def test_a_malformed_role_gate_is_refused_naming_where(
    tmp_path: Path, yaml_text: str, expected: str
) -> None:
    assert expected in refusal(tmp_path, yaml_text)


SERVICES = """
services:
  - name: jira
    base_url: https://jira.example.com/
    authorize_url: https://auth.example.com/authorize
    token_url: https://auth.example.com/token
    client_id: mercury-app
    scopes: [read:jira-work, write:jira-work]
    operations:
      - name: search
        description: Search issues with JQL.
        method: get
        path: /rest/api/3/search
        parameters:
          type: object
          properties:
            jql: {type: string}
          required: [jql]
      - name: add_comment
        description: Comment on an issue.
        method: POST
        path: /rest/api/3/issue/{key}/comment
        confirm: true
  - name: status_page
    base_url: http://127.0.0.1:9000
    operations:
      - {name: health, description: Read the status., method: GET, path: /health}
"""


def test_services_are_read_from_the_file_with_their_operations(tmp_path: Path) -> None:
    settings = load(tmp_path, SERVICES, MERCURY_SERVICE_JIRA_CLIENT_SECRET="s3cr3t")

    jira, status = settings.services
    assert jira.name == "jira"
    assert jira.base_url == "https://jira.example.com"
    assert jira.authorize_url == "https://auth.example.com/authorize"
    assert jira.token_url == "https://auth.example.com/token"
    assert jira.client_id == "mercury-app"
    assert jira.scopes == ("read:jira-work", "write:jira-work")
    assert jira.client_secret == "s3cr3t"
    assert jira.secret_variable == "MERCURY_SERVICE_JIRA_CLIENT_SECRET"
    search, comment = jira.operations
    assert (search.name, search.method, search.confirm) == ("search", "GET", False)
    assert search.parameters["required"] == ["jql"]
    assert (comment.method, comment.confirm) == ("POST", True)
    assert comment.parameters == {"type": "object", "properties": {}}
    assert status.authorize_url is None
    assert status.client_secret is None


def test_a_service_secret_is_read_by_the_service_name_in_capitals(tmp_path: Path) -> None:
    settings = load(tmp_path, SERVICES, MERCURY_SERVICE_STATUS_PAGE_CLIENT_SECRET="x")

    assert [s.client_secret for s in settings.services] == [None, "x"]
    empty = load(tmp_path, SERVICES, MERCURY_SERVICE_JIRA_CLIENT_SECRET="")
    assert empty.services[0].client_secret is None


def one_service(**fields: object) -> str:
    service: dict[str, object] = {
        "name": "jira",
        "base_url": "https://jira.example.com",
        "operations": [{"name": "s", "description": "Search.", "method": "GET", "path": "/s"}],
    }
    service.update(fields)
    return msgspec.json.encode({"services": [service]}).decode()  # JSON is YAML too


def operation(**fields: object) -> list[dict[str, object]]:
    entry: dict[str, object] = {"name": "s", "description": "Search.", "method": "GET"}
    entry["path"] = "/s"
    entry.update(fields)
    return [entry]


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        (one_service(name="Jira"), "services[0].name must be a name of lowercase letters"),
        (one_service(name="j" * 33), "services[0].name must be a name"),
        (one_service(name="9lives"), "services[0].name must be a name"),
        (one_service(base_url="jira.example.com"), "services[0].base_url must be an http"),
        (one_service(operations=[]), "services[0].operations must be a list of at least one"),
        (one_service(scopes="read"), "services[0].scopes must be a list of scopes"),
        (one_service(client_id="app"), "services[0] gives only part of a login"),
        (one_service(operations=operation(method="HEAD")), "operations[0].method must be one of"),
        (one_service(operations=operation(path="s")), "operations[0].path must be a path"),
        (one_service(operations=operation(confirm="yes")), "operations[0].confirm must be true"),
        (one_service(operations=operation(description="")), "operations[0].description must"),
        (
            one_service(operations=operation(parameters={"type": "string"})),
            "operations[0].parameters must be a JSON schema with type: object",
        ),
        (
            one_service(operations=operation() + operation()),
            'services[0].operations[1].name declares "s" twice',
        ),
        ("services:\n  - {base_url: x, operations: []}\n", 'services[0] needs a "name"'),
        ("services: {jira: {}}\n", "services must be a list of services, not a mapping"),
    ],
)
def test_a_malformed_service_is_refused_naming_the_key(
    tmp_path: Path, yaml_text: str, expected: str
) -> None:
    message = refusal(tmp_path, yaml_text)

    assert message.startswith(f"{tmp_path / 'mercury.yaml'}: ")
    assert expected in message


def test_two_services_of_one_name_are_refused(tmp_path: Path) -> None:
    body = msgspec.json.decode(one_service())
    body["services"].append(body["services"][0])

    message = refusal(tmp_path, msgspec.json.encode(body).decode())

    assert 'services[1].name declares "jira" twice' in message


def test_fallback_models_are_read_from_the_file_with_their_keys_from_the_environment(
    tmp_path: Path,
) -> None:
    settings = load(
        tmp_path,
        "model:\n  fallbacks:\n"
        "    - {provider: openai, model: gpt-backup, base_url: 'https://api.example.com/v1/',"
        " api_key_env: BACKUP_KEY}\n"
        "    - {provider: ollama, model: llama3.2}\n",
        BACKUP_KEY="sk-secret",
    )
    first, second = settings.model.fallbacks
    assert (first.provider, first.model, first.base_url) == (
        "openai",
        "gpt-backup",
        "https://api.example.com/v1",
    )
    assert first.api_key == "sk-secret"
    assert (second.provider, second.model, second.base_url, second.api_key) == (
        "ollama",
        "llama3.2",
        None,
        None,
    )
    assert "sk-secret" not in settings.redacted()


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("model: {fallbacks: {provider: ollama}}\n", "model.fallbacks must be a list of models"),
        ("model: {fallbacks: [{provider: ollama}]}\n", 'model.fallbacks[0] needs a "model"'),
        (
            "model: {fallbacks: [{provider: vllm, model: m}]}\n",
            'model.fallbacks[0].provider must be "ollama" or "openai"',
        ),
        (
            "model: {fallbacks: [{provider: openai, model: m, api_key: sk-1}]}\n",
            "model.fallbacks[0].api_key",
        ),
        (
            "model: {fallbacks: [{provider: openai, model: m, api_key_env: 'sk-1'}]}\n",
            "model.fallbacks[0].api_key_env must name an environment variable",
        ),
        (
            "model: {fallbacks: [{provider: ollama, model: m}, {provider: ollama, model: m}]}\n",
            'model.fallbacks[1] names "m" twice',
        ),
    ],
)
def test_a_malformed_fallback_is_refused_naming_the_key(
    tmp_path: Path, yaml_text: str, expected: str
) -> None:
    assert expected in refusal(tmp_path, yaml_text)


# --- the table, the docs and --help ----------------------------------------------------------


def test_every_setting_has_one_row_and_every_row_one_attribute() -> None:
    def leaves(cls: type[msgspec.Struct], prefix: str) -> list[str]:
        paths = []
        hints = {f.name: f.type for f in msgspec.structs.fields(cls)}
        for name, hint in hints.items():
            if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
                paths += leaves(hint, f"{prefix}{name}.")
            else:
                paths.append(f"{prefix}{name}")
        return paths

    table = [setting.path for setting in SETTINGS]
    assert sorted(table) == sorted(p for p in leaves(Settings, "") if p != "config_file")
    variables = [setting.env for setting in SETTINGS if setting.env]
    assert len(variables) == len(set(variables))


def test_the_configuration_doc_carries_the_generated_reference() -> None:
    text = DOC.read_text(encoding="utf-8")
    block = text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"

    assert block == settings_reference(), (
        "docs/configuration.md is out of date: paste the output of "
        "`python -c 'from core.config.settings import settings_reference as r; print(r(), "
        'end="")\'` '
        "between its settings-reference markers."
    )


def test_the_example_file_in_the_doc_loads(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    example = re.search(r"```yaml\n(.*?)```", text, re.DOTALL)
    assert example is not None

    settings = load(tmp_path, example.group(1))

    assert settings.config_file is not None


def test_help_lists_every_variable_with_its_default() -> None:
    text = help_text(Translation(language="en"))

    for setting in SETTINGS:
        if setting.env is not None:
            assert re.search(rf"^  {setting.env}( |$)", text, re.MULTILINE), setting.env
    assert "MERCURY_CONFIG_FILE" in text
    assert "MERCURY_SERVICE_<NAME>_CLIENT_SECRET" in text
    assert "(default: 4100)" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_live_answers_are_on_by_default_and_a_space_may_turn_them_off_for_itself(
    tmp_path: Path,
) -> None:
    settings = load(tmp_path, 'spaces:\n  "slack:C1":\n    live_answers: false\n  "slack:C2": {}\n')
    assert settings.bridges.live_answers is True
    assert settings.spaces["slack:C1"].live_answers is False
    assert settings.spaces["slack:C2"].live_answers is None  # follows the global switch
    assert load(tmp_path, "", BRIDGE_LIVE_ANSWERS="false").bridges.live_answers is False
    said = refusal(tmp_path, 'spaces:\n  "slack:C1":\n    live_answers: sometimes\n')
    assert "live_answers" in said and "true or false" in said


@pytest.mark.parametrize("word", ["@", "@@@@", " @ "])
def test_a_trigger_word_empty_once_its_at_signs_are_taken_out_is_refused(
    tmp_path: Path, word: str
) -> None:
    """``@`` would match every message: a trigger word needs a character besides "@"."""
    for environ in ({"MERCURY_TRIGGER_PATTERN": word}, {"MERCURY_TRIGGER_NAME": word}):
        message = refusal(tmp_path, **environ)
        assert next(iter(environ)) in message and 'besides "@"' in message
    message = refusal(tmp_path, f'spaces:\n  "slack:C1":\n    trigger: {{pattern: "{word}"}}\n')
    assert "spaces.slack:C1.trigger.pattern" in message or "trigger.pattern" in message


def test_matrix_bot_users_are_patterns_from_a_list_or_commas_and_a_blank_one_is_refused(
    tmp_path: Path,
) -> None:
    listed = load(tmp_path, MATRIX_BOT_USERS="@*bot:example.org, @relay:example.org")
    assert listed.matrix.bot_users == ("@*bot:example.org", "@relay:example.org")
    filed = load(tmp_path, "matrix:\n  bot_users: ['@ci:example.org']\n")
    assert filed.matrix.bot_users == ("@ci:example.org",)
    assert load(tmp_path / "none").matrix.bot_users == ()
    assert "MATRIX_BOT_USERS" in refusal(tmp_path / "bad", MATRIX_BOT_USERS="@a:x,,@b:x")
    assert load(tmp_path / "none").bridges.bot_turns == 3
    assert "BRIDGE_BOT_TURNS" in refusal(tmp_path / "zero", BRIDGE_BOT_TURNS="0")
