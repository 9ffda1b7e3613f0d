"""How configuration values are read: one reader ("kind") per type of value, from the
environment's text or the file's YAML, and the declared REST services they build.

:mod:`core.config.settings` holds the settings and the table that uses these; nothing else should
need this module.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Final, Literal

import msgspec

from core.people.timezones import canonical_zone


def _presence(value: object) -> str:
    return "(set)" if value else "(not set)"


HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
HTTP_METHODS: Final = ("GET", "POST", "PUT", "PATCH", "DELETE")
_SLUG: Final = re.compile(r"[a-z][a-z0-9_]{0,31}")
_SHOWN_MAX_CHARS: Final = 60


class _Group(msgspec.Struct, frozen=True, kw_only=True):
    # Fields whose values a repr must never show: a logged Settings leaks nothing.
    _secrets: ClassVar[frozenset[str]] = frozenset()

    def __repr__(self) -> str:
        parts = []
        for name in self.__struct_fields__:
            value = getattr(self, name)
            shown = _presence(value) if name in self._secrets else repr(value)
            parts.append(f"{name}={shown}")
        return f"{type(self).__name__}({', '.join(parts)})"


class RestOperation(_Group, frozen=True, kw_only=True):
    """One operation of a declared REST service, offered to the model as a tool."""

    name: str
    description: str
    method: HttpMethod
    path: str
    parameters: Mapping[str, Any]
    confirm: bool


class RestService(_Group, frozen=True, kw_only=True):
    """A REST service declared in the file; its client secret comes from the environment."""

    _secrets: ClassVar[frozenset[str]] = frozenset({"client_secret"})

    name: str
    base_url: str
    authorize_url: str | None
    token_url: str | None
    client_id: str | None
    scopes: tuple[str, ...]
    operations: tuple[RestOperation, ...]
    client_secret: str | None

    @property
    def secret_variable(self) -> str:
        """The environment variable this service's client secret is read from."""
        return service_secret_variable(self.name)


class FallbackModelSpec(_Group, frozen=True, kw_only=True):
    """A model of ``model.fallbacks``: asked when those before it can't start an answer.

    ``base_url`` is Ollama's host or the OpenAI-protocol server's ``/v1`` address (``None``:
    the same as the first model's of that provider); the API key comes from the environment
    variable ``api_key_env`` names, never from the file.
    """

    _secrets: ClassVar[frozenset[str]] = frozenset({"api_key"})

    provider: Literal["ollama", "openai"]
    model: str
    base_url: str | None
    api_key_env: str | None
    api_key: str | None


def service_secret_variable(name: str) -> str:
    """The environment variable holding the client secret of the service called ``name``."""
    return f"MERCURY_SERVICE_{name.upper()}_CLIENT_SECRET"


# --- kinds of value: how text from the environment and values from YAML are read ------------


class _InvalidValueError(Exception):
    """A value that doesn't fit; ``reason`` completes "<the setting> …", ``at`` goes deeper."""

    def __init__(self, reason: str, at: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.at = at


class _UnknownKeyError(Exception):
    def __init__(self, at: str, known: tuple[str, ...] = ()) -> None:
        super().__init__(at)
        self.at = at
        self.known = known


def _shown(value: object) -> str:
    """A non-secret value as an error message shows it: short, quoted if text."""
    if isinstance(value, str):
        if len(value) > _SHOWN_MAX_CHARS:
            value = value[: _SHOWN_MAX_CHARS - 1] + "…"
        return msgspec.json.encode(value).decode()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if value is None:
        return "nothing"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"


def _must(expected: str, value: object) -> _InvalidValueError:
    return _InvalidValueError(f"must be {expected}, not {_shown(value)}")


class _Kind:
    """How one kind of value is read; subclasses fill in the two readers."""

    #: What the reference's "type" column says.
    summary: str = "text"
    #: Kept exactly as given: surrounding spaces count, only ``""`` means "not set".
    raw: bool = False

    def from_text(self, text: str) -> object:
        """The value of non-empty text from an environment variable."""
        return self.from_yaml(text)

    def from_yaml(self, value: object) -> object:
        """The value of something the YAML file holds (never ``None``)."""
        raise NotImplementedError


class _Text(_Kind):
    def __init__(self, *, raw: bool = False) -> None:
        self.raw = raw
        self.summary = "text, kept exactly" if raw else "text"

    def from_yaml(self, value: object) -> object:
        if not isinstance(value, str):
            raise _must("text", value)
        return value if self.raw else value.strip()


class _PathKind(_Kind):
    summary = "path"

    def from_yaml(self, value: object) -> object:
        if not isinstance(value, str):
            raise _must("a path", value)
        return Path(value.strip())


class _Int(_Kind):
    def __init__(self, minimum: int, maximum: int | None = None) -> None:
        self.minimum = minimum
        self.maximum = maximum
        if maximum is None:
            self.expected = f"a whole number of at least {minimum}"
            self.summary = f"whole number ≥ {minimum}"
        else:
            self.expected = f"a whole number from {minimum} to {maximum}"
            self.summary = f"whole number {minimum}–{maximum}"

    def from_text(self, text: str) -> object:
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise _must(self.expected, text)
        return self._in_range(int(text), text)

    def from_yaml(self, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _must(self.expected, value)
        return self._in_range(value, value)

    def _in_range(self, number: int, shown: object) -> int:
        if number < self.minimum or (self.maximum is not None and number > self.maximum):
            raise _must(self.expected, shown)
        return number


class _Float(_Kind):
    def __init__(self, minimum: float, *, inclusive: bool) -> None:
        self.minimum = minimum
        self.inclusive = inclusive
        bound = f"{minimum:g}"
        if inclusive:
            self.expected = f"a number of at least {bound}"
            self.summary = f"number ≥ {bound}"
        else:
            self.expected = f"a number greater than {bound}"
            self.summary = f"number > {bound}"

    def from_text(self, text: str) -> object:
        try:
            number = float(text)
        except ValueError:
            raise _must(self.expected, text) from None
        return self._in_range(number, text)

    def from_yaml(self, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _must(self.expected, value)
        return self._in_range(float(value), value)

    def _in_range(self, number: float, shown: object) -> float:
        fits = number >= self.minimum if self.inclusive else number > self.minimum
        if not math.isfinite(number) or not fits:
            raise _must(self.expected, shown)
        return number


class _Bool(_Kind):
    summary = "true/false"
    expected = "true or false (yes/no, on/off and 1/0 also do)"
    _WORDS: Final = {
        **dict.fromkeys(("true", "1", "yes", "on"), True),
        **dict.fromkeys(("false", "0", "no", "off"), False),
    }

    def from_text(self, text: str) -> object:
        try:
            return self._WORDS[text.lower()]
        except KeyError:
            raise _must(self.expected, text) from None

    def from_yaml(self, value: object) -> object:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str):
            return self.from_text(value.strip())
        raise _must(self.expected, value)


class _Choice(_Kind):
    def __init__(self, choices: tuple[str, ...]) -> None:
        self.choices = choices
        self.expected = "one of " + ", ".join(choices)
        self.summary = "one of " + ", ".join(f"`{choice}`" for choice in choices)

    def from_yaml(self, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in self.choices:
            return value.strip().lower()
        raise _must(self.expected, value)


class _Names(_Kind):
    """A list of names from a closed set, in order: comma-separated in the environment."""

    def __init__(self, choices: tuple[str, ...], noun: str) -> None:
        self.by_lowercase = {choice.lower(): choice for choice in choices}
        self.choices = choices
        self.noun = noun
        self.summary = "list of " + ", ".join(f"`{choice}`" for choice in choices)

    def from_text(self, text: str) -> object:
        return self._names([part.strip() for part in text.split(",") if part.strip()])

    def from_yaml(self, value: object) -> object:
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise _must(f"a list of {self.noun} names", value)
        return self._names([item.strip() for item in value])

    def _names(self, names: list[str]) -> tuple[str, ...]:
        chosen: list[str] = []
        valid = ", ".join(self.choices)
        for name in names:
            choice = self.by_lowercase.get(name.lower())
            if choice is None:
                raise _InvalidValueError(
                    f"names an unknown {self.noun} {_shown(name)}; the valid ones are {valid}"
                )
            if choice in chosen:
                raise _InvalidValueError(
                    f"names {_shown(choice)} twice; list each {self.noun} once"
                )
            chosen.append(choice)
        return tuple(chosen)


class _Globs(_Kind):
    """Patterns (``*`` and ``?`` as wildcards, matched whole and case-sensitive): comma-
    separated in the environment, a list in the file."""

    def __init__(self, noun: str) -> None:
        self.noun = noun
        self.summary = f"list of {noun} patterns"

    def from_text(self, text: str) -> object:
        return self._globs([part.strip() for part in text.split(",")])

    def from_yaml(self, value: object) -> object:
        if isinstance(value, str):
            return self.from_text(value)
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise _must(f"a list of {self.noun} patterns", value)
        return self._globs([item.strip() for item in value])

    def _globs(self, items: list[str]) -> tuple[str, ...]:
        if any(not item or re.search(r"\s|,", item) for item in items):
            raise _InvalidValueError(
                f"holds an empty {self.noun} pattern or one with a space; separate "
                f"patterns with commas, each a {self.noun} with * or ? as wildcards"
            )
        return tuple(dict.fromkeys(items))


class _Url(_Kind):
    def __init__(self, *, base: bool = False) -> None:
        # A base URL gets paths appended (``/login/callback``): no query, fragment or
        # trailing slash.
        self.base = base
        if base:
            self.expected = "an http:// or https:// URL without a query or fragment"
        else:
            self.expected = "an http:// or https:// URL"
        self.summary = "http(s) URL"

    def from_yaml(self, value: object) -> object:
        if not isinstance(value, str):
            raise _must(self.expected, value)
        text = value.strip()
        try:
            parts = urllib.parse.urlsplit(text)
            hostname = parts.hostname
        except ValueError:
            raise _must(self.expected, text) from None
        if parts.scheme.lower() not in ("http", "https") or not hostname or re.search(r"\s", text):
            raise _must(self.expected, text)
        if self.base:
            if parts.query or parts.fragment or text.endswith(("?", "#")):
                raise _must(self.expected, text)
            text = text.rstrip("/")
        return text


class _Origins(_Kind):
    """``*``, or browser origins (``scheme://host[:port]``): comma-separated in the environment.

    Each origin is checked at start-up and kept in the lowercase form browsers send, so
    the CORS layer compares the request's ``Origin`` header with them exactly.
    """

    def __init__(self, *, wildcard: bool = True) -> None:
        # Without the wildcard (origins a server may be sent to, not browsers let in), an
        # empty list is the default: none.
        self.wildcard = wildcard
        if wildcard:
            self.summary = "`*` or a list of origins"
            self.expected = "* or a comma-separated list of origins such as https://ui.example"
        else:
            self.summary = "list of origins"
            self.expected = "a comma-separated list of origins such as https://host.example"

    def from_text(self, text: str) -> object:
        return self._origins([part.strip() for part in text.split(",")])

    def from_yaml(self, value: object) -> object:
        if isinstance(value, str):
            return self.from_text(value)
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise _must(self.expected, value)
        return self._origins([item.strip() for item in value])

    def _origins(self, items: list[str]) -> tuple[str, ...]:
        if not self.wildcard and not items:
            return ()
        if items == ["*"] and self.wildcard:
            return ("*",)
        if not items or "*" in items:
            raise _must(self.expected, ", ".join(items))
        origins: list[str] = []
        for item in items:
            origin = self._origin(item)
            if origin in origins:
                raise _InvalidValueError(f"names the origin {_shown(origin)} twice")
            origins.append(origin)
        return tuple(origins)

    def _origin(self, item: str) -> str:
        problem = _InvalidValueError(
            f"holds {_shown(item)}, which is not an origin: write scheme://host[:port] "
            "such as https://ui.example, without a path or a trailing slash"
        )
        try:
            parts = urllib.parse.urlsplit(item)
            port = parts.port
            hostname = parts.hostname
        except ValueError:
            raise problem from None
        if (
            parts.scheme.lower() not in ("http", "https")
            or not hostname
            or parts.username is not None
            or parts.password is not None
            or parts.path
            or parts.query
            or parts.fragment
            or item.endswith(("?", "#"))
            or re.search(r"\s", item)
        ):
            raise problem
        host = f"[{hostname}]" if ":" in hostname else hostname
        return f"{parts.scheme.lower()}://{host}" + (f":{port}" if port is not None else "")


class _Zone(_Kind):
    summary = "IANA time zone"
    expected = "an IANA time zone name such as Europe/Rome or UTC"

    def from_yaml(self, value: object) -> object:
        zone = canonical_zone(value) if isinstance(value, str) else None
        if zone is None:
            raise _must(self.expected, value)
        return zone


class _PeopleJson(_Kind):
    summary = "JSON list (in the file: a list)"
    raw = True

    def from_text(self, text: str) -> object:
        return text

    def from_yaml(self, value: object) -> object:
        if isinstance(value, str):
            return value
        if not isinstance(value, list):
            raise _must("a list of people", value)
        try:
            return msgspec.json.encode(value).decode()
        except (TypeError, msgspec.EncodeError):
            raise _InvalidValueError("must be a list of people that JSON can hold") from None


def _mapping(value: object, at: str, expected: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise _InvalidValueError(f"must be {expected}, not {_shown(value)}", at)
    for key in value:
        if not isinstance(key, str):
            raise _InvalidValueError(f"has a key that isn't a name: {_shown(key)}", at)
    return value


def _only_keys(value: Mapping[str, object], at: str, known: tuple[str, ...]) -> None:
    for key in value:
        if key not in known:
            raise _UnknownKeyError(f"{at}.{key}", tuple(f"{at}.{name}" for name in known))


def _text_list(value: object, at: str, expected: str) -> tuple[str, ...]:
    items = value if isinstance(value, list) else None
    if items is None or not all(isinstance(item, str) and item.strip() for item in items):
        raise _InvalidValueError(f"must be {expected}, not {_shown(value)}", at)
    return tuple(item.strip() for item in items)


class _PluginRoles(_Kind):
    summary = "mapping: plugin → `{roles: [...]}`"

    def from_yaml(self, value: object) -> object:
        plugins = _mapping(value, "", "a mapping from plugin name to {roles: [...]}")
        roles: dict[str, tuple[str, ...]] = {}
        for name, entry in plugins.items():
            at = f".{name}"
            gate = _mapping(entry, at, "a mapping with roles: [...]")
            _only_keys(gate, at, ("roles",))
            if "roles" not in gate:
                raise _InvalidValueError("needs roles: [...]", at)
            roles[name] = _text_list(gate["roles"], f"{at}.roles", "a list of role names")
        return MappingProxyType(roles)


_ALLOWANCE_KEYS: Final = ("day", "month")
#: A person's key as the stores keep it: ``<namespace>:<id>`` (``people:alice``,
#: ``slack:U123``), without spaces or control characters.
PERSON_KEY: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}:[^\s\x00-\x1f\x7f]{1,300}")
#: The most tokens an allowance may be (the space settings' bound too).
MAX_ALLOWANCE: Final = 1_000_000_000_000


class PersonAllowance(_Group, frozen=True, kw_only=True):
    """A named person's own token allowance in the file (``None``: not given; 0: none)."""

    day: int | None
    month: int | None


class _PersonAllowances(_Kind):
    summary = "mapping: person key → `{day?, month?}` (tokens)"

    def from_yaml(self, value: object) -> object:
        people = _mapping(value, "", "a mapping from a person's key to their allowance")
        read: dict[str, PersonAllowance] = {}
        for person, entry in people.items():
            at = f'."{person}"'
            if not PERSON_KEY.fullmatch(person):
                raise _InvalidValueError(
                    "must be a person's key as GET /usage shows it (people:alice)", at
                )
            given = _mapping(entry if entry is not None else {}, at, "a mapping of day, month")
            _only_keys(given, at, _ALLOWANCE_KEYS)
            windows = {
                window: _at(_Int(0, MAX_ALLOWANCE).from_yaml, given[window], f"{at}.{window}")
                for window in _ALLOWANCE_KEYS
                if given.get(window) is not None
            }
            read[person] = PersonAllowance(
                day=windows.get("day"),  # type: ignore[arg-type]  # read as an int just above
                month=windows.get("month"),  # type: ignore[arg-type]
            )
        return MappingProxyType(read)


_FALLBACK_KEYS: Final = ("provider", "model", "base_url", "api_key_env")
_ENV_NAME: Final = re.compile(r"[A-Z_][A-Z0-9_]*")


class _Fallbacks(_Kind):
    summary = "list of models: `{provider, model, base_url?, api_key_env?}`"

    def from_yaml(self, value: object) -> object:
        if not isinstance(value, list):
            raise _must("a list of models, each {provider, model}", value)
        models: list[FallbackModelSpec] = []
        for index, item in enumerate(value):
            at = f"[{index}]"
            entry = _mapping(item, at, "a mapping with provider and model")
            _only_keys(entry, at, _FALLBACK_KEYS)
            for key in ("provider", "model"):
                if key not in entry:
                    raise _InvalidValueError(f'needs a "{key}"', at)
            provider = entry["provider"]
            if provider not in ("ollama", "openai"):
                raise _InvalidValueError(
                    f'must be "ollama" or "openai", not {_shown(provider)}', f"{at}.provider"
                )
            model = _at(_Text().from_yaml, entry["model"], f"{at}.model")
            if not model:
                raise _InvalidValueError("must name a model", f"{at}.model")
            base_url = entry.get("base_url")
            if base_url is not None:
                base_url = _at(_Url(base=True).from_yaml, base_url, f"{at}.base_url")
            key_env = entry.get("api_key_env")
            if key_env is not None and (
                not isinstance(key_env, str) or not _ENV_NAME.fullmatch(key_env)
            ):
                raise _InvalidValueError(
                    f"must name an environment variable (A_NAME_LIKE_THIS), not {_shown(key_env)}",
                    f"{at}.api_key_env",
                )
            spec = FallbackModelSpec(
                provider=provider,
                model=str(model),
                base_url=None if base_url is None else str(base_url),
                api_key_env=key_env,
                api_key=None,
            )
            if spec in models:
                raise _InvalidValueError(f"names {_shown(spec.model)} twice", at)
            models.append(spec)
        return tuple(models)


_SERVICE_KEYS: Final = (
    *("name", "base_url", "authorize_url", "token_url", "client_id", "scopes"),
    "operations",
)
_OPERATION_KEYS: Final = ("name", "description", "method", "path", "parameters", "confirm")
_LOGIN_KEYS: Final = ("authorize_url", "token_url", "client_id")


class _Services(_Kind):
    summary = "list of services (see Services above)"

    def from_yaml(self, value: object) -> object:
        if not isinstance(value, list):
            raise _must("a list of services", value)
        services: list[RestService] = []
        for index, entry in enumerate(value):
            service = self._service(entry, f"[{index}]")
            if any(other.name == service.name for other in services):
                raise _InvalidValueError(
                    f"declares {_shown(service.name)} twice", f"[{index}].name"
                )
            services.append(service)
        return tuple(services)

    def _service(self, value: object, at: str) -> RestService:
        entry = _mapping(value, at, "a mapping describing a service")
        _only_keys(entry, at, _SERVICE_KEYS)
        for key in ("name", "base_url", "operations"):
            if key not in entry:
                raise _InvalidValueError(f'needs a "{key}"', at)
        name = _slug(entry["name"], f"{at}.name")
        base_url = _at(_Url(base=True).from_yaml, entry["base_url"], f"{at}.base_url")
        login: dict[str, str | None] = {}
        for key in _LOGIN_KEYS:
            given = entry.get(key)
            if key == "client_id":
                login[key] = str(_at(_Text().from_yaml, given, f"{at}.{key}")) if given else None
            else:
                login[key] = str(_at(_Url().from_yaml, given, f"{at}.{key}")) if given else None
        missing = [key for key in _LOGIN_KEYS if login[key] is None]
        if 0 < len(missing) < len(_LOGIN_KEYS):
            raise _InvalidValueError(
                f"gives only part of a login; add {' and '.join(missing)}, or remove the others",
                at,
            )
        scopes = _text_list(entry.get("scopes", []), f"{at}.scopes", "a list of scopes")
        raw_operations = entry["operations"]
        if not isinstance(raw_operations, list) or not raw_operations:
            raise _InvalidValueError(
                f"must be a list of at least one operation, not {_shown(raw_operations)}",
                f"{at}.operations",
            )
        operations: list[RestOperation] = []
        for index, item in enumerate(raw_operations):
            operation = self._operation(item, f"{at}.operations[{index}]")
            if any(other.name == operation.name for other in operations):
                raise _InvalidValueError(
                    f"declares {_shown(operation.name)} twice",
                    f"{at}.operations[{index}].name",
                )
            operations.append(operation)
        return RestService(
            name=name,
            base_url=str(base_url),
            authorize_url=login["authorize_url"],
            token_url=login["token_url"],
            client_id=login["client_id"],
            scopes=scopes,
            operations=tuple(operations),
            client_secret=None,
        )

    def _operation(self, value: object, at: str) -> RestOperation:
        entry = _mapping(value, at, "a mapping describing an operation")
        _only_keys(entry, at, _OPERATION_KEYS)
        for key in ("name", "description", "method", "path"):
            if key not in entry:
                raise _InvalidValueError(f'needs a "{key}"', at)
        description = entry["description"]
        if not isinstance(description, str) or not description.strip():
            raise _InvalidValueError(
                f"must be a sentence, not {_shown(description)}", f"{at}.description"
            )
        method = entry["method"]
        if not isinstance(method, str) or method.strip().upper() not in HTTP_METHODS:
            raise _InvalidValueError(
                f"must be one of {', '.join(HTTP_METHODS)}, not {_shown(method)}", f"{at}.method"
            )
        path = entry["path"]
        if not isinstance(path, str) or not path.startswith("/") or re.search(r"\s", path):
            raise _InvalidValueError(
                f"must be a path starting with /, not {_shown(path)}", f"{at}.path"
            )
        parameters = entry.get("parameters", {"type": "object", "properties": {}})
        schema = _mapping(parameters, f"{at}.parameters", "a JSON schema of type object")
        if schema.get("type") != "object":
            raise _InvalidValueError("must be a JSON schema with type: object", f"{at}.parameters")
        try:
            plain = msgspec.json.decode(msgspec.json.encode(schema))
        except (TypeError, msgspec.EncodeError):
            raise _InvalidValueError(
                "must be a JSON schema that JSON can hold", f"{at}.parameters"
            ) from None
        confirm = entry.get("confirm", False)
        if not isinstance(confirm, bool):
            raise _InvalidValueError(
                f"must be true or false, not {_shown(confirm)}", f"{at}.confirm"
            )
        return RestOperation(
            name=_slug(entry["name"], f"{at}.name"),
            description=description.strip(),
            method=method.strip().upper(),  # type: ignore[arg-type]  # checked just above
            path=path,
            parameters=plain,
            confirm=confirm,
        )


def _slug(value: object, at: str) -> str:
    if not isinstance(value, str) or not _SLUG.fullmatch(value):
        raise _InvalidValueError(
            "must be a name of lowercase letters, digits and _, starting with a letter, "
            f"up to 32 characters, not {_shown(value)}",
            at,
        )
    return value


def _at(reader: Callable[[object], object], value: object, at: str) -> object:
    try:
        return reader(value)
    except _InvalidValueError as invalid:
        raise _InvalidValueError(invalid.reason, at + invalid.at) from None
