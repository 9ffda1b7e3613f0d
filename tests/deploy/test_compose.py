"""The compose files and the balancer's configuration, held to the settings table.

No container engine runs here, so nothing is brought up: both compose files are parsed and
checked against the compose specification's shape and against what Mercury reads (every
variable a Mercury service sets is a setting, a secret is only ever taken from the
environment, every service, volume and address they name exists), and ``deploy/haproxy.cfg``
is checked by HAProxy itself (``haproxy -c``).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from core.config.settings import SETTINGS
from tests.support.balancer import haproxy_binary

ROOT = Path(__file__).resolve().parents[2]
SINGLE = ROOT / "compose.yaml"
MULTI = ROOT / "deploy" / "compose.multi.yaml"
BALANCER = ROOT / "deploy" / "haproxy.cfg"

#: The compose specification's top-level keys and the service keys these files may use.
TOP_LEVEL = {"version", "name", "services", "networks", "volumes", "configs", "secrets", "include"}
SERVICE_KEYS = {
    "build", "image", "ports", "environment", "env_file", "volumes", "depends_on", "restart",
    "stop_grace_period", "healthcheck", "profiles", "deploy", "command", "entrypoint",
    "networks", "labels", "user", "configs", "secrets", "expose",
}  # fmt: skip
RESTART = {"no", "always", "on-failure", "unless-stopped"}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
DURATION = re.compile(r"^(\d+(us|ms|s|m|h))+$")
#: A whole value taken from the environment: ``${NAME}``, ``${NAME:-default}``, ``${NAME:?why}``.
FROM_ENV = re.compile(r"^\$\{[A-Z_][A-Z0-9_]*(:?[-?][^}]*)?\}$")
INTERPOLATION = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::?[-?][^}]*)?\}")
OFFICIAL = {"postgres", "qdrant/qdrant", "ollama/ollama", "haproxy"}

SETTINGS_BY_ENV = {s.env: s for s in SETTINGS if s.env}


def load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def mercury_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose["services"].items()
        if service.get("image", "").startswith("mercury-http")
    }


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    given = service.get("depends_on", {})
    if isinstance(given, list):
        return dict.fromkeys(given, "service_started")
    return {name: spec["condition"] for name, spec in given.items()}


@pytest.mark.parametrize("path", [SINGLE, MULTI], ids=["compose.yaml", "compose.multi.yaml"])
def test_a_compose_file_has_the_specifications_shape_and_names_only_what_exists(
    path: Path,
) -> None:
    compose = load(path)
    assert set(compose) <= TOP_LEVEL
    services = compose["services"]
    declared_volumes = set(compose.get("volumes") or {})
    for name, service in services.items():
        assert set(service) <= SERVICE_KEYS, (name, set(service) - SERVICE_KEYS)
        assert "image" in service, name
        assert service.get("restart", "no") in RESTART
        for other, condition in depends_on(service).items():
            assert other in services and other != name and condition in CONDITIONS
            if condition == "service_healthy":
                assert "healthcheck" in services[other] or other in mercury_services(compose)
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in declared_volumes, (name, source)
            else:
                assert (path.parent / source).exists(), (name, source)
        for value in service.get("environment", {}).values():
            assert isinstance(value, str), (name, value)  # compose wants strings, not numbers
        health = service.get("healthcheck")
        if health is not None:
            assert health["test"][0] in ("CMD", "CMD-SHELL", "NONE")
            for key in ("interval", "timeout", "start_period"):
                assert key not in health or DURATION.match(health[key]), (name, key)
        grace = service.get("stop_grace_period")
        assert grace is None or DURATION.match(grace)
        image = service["image"]
        if not image.startswith("mercury-http"):
            assert image.split(":")[0] in OFFICIAL, image
    # Every named volume is used by some service.
    used = {m.split(":")[0] for s in services.values() for m in s.get("volumes", [])}
    assert declared_volumes <= used


@pytest.mark.parametrize("path", [SINGLE, MULTI], ids=["compose.yaml", "compose.multi.yaml"])
def test_what_a_compose_file_sets_for_mercury_is_in_the_settings_table_and_secrets_come_from_the_environment(  # noqa: E501
    path: Path,
) -> None:
    compose = load(path)
    (mercury,) = mercury_services(compose).values()
    for name, value in mercury["environment"].items():
        assert name in SETTINGS_BY_ENV, f"{path.name} sets {name}, which Mercury doesn't read"
        if SETTINGS_BY_ENV[name].secret:
            secret_parts = INTERPOLATION.findall(value)
            # Only ever interpolated: ${NAME…} alone, or inside a URL (the state store's).
            assert secret_parts, f"{name} holds a literal secret in {path.name}"
            assert FROM_ENV.match(value) or name == "MERCURY_STATE_URL", name
    # Whatever a service takes from the environment without a default is said in the header.
    header = path.read_text().split("\nservices:", 1)[0]
    for service in compose["services"].values():
        for value in service.get("environment", {}).values():
            for variable in re.findall(r"\$\{([A-Z_][A-Z0-9_]*):\?", value):
                assert variable in header, f"the header of {path.name} doesn't name {variable}"


def test_the_multi_instance_file_wires_instances_to_one_postgresql_qdrant_ollama_and_wiki() -> None:
    compose = load(MULTI)
    services = compose["services"]
    mercury = services["mercury"]
    env = mercury["environment"]
    replicas = str(mercury["deploy"]["replicas"])
    assert re.fullmatch(r"\$\{MERCURY_REPLICAS:-(\d+)\}", replicas)
    assert int(replicas.split(":-")[1].rstrip("}")) >= 2

    # ${NAME…} stands for the variable's value: read the URL with the names in their place.
    state = urlsplit(INTERPOLATION.sub(lambda m: m.group(1), env["MERCURY_STATE_URL"]))
    postgres = services["postgres"]["environment"]
    assert state.scheme == "postgresql" and state.hostname == "postgres" and state.port == 5432
    assert state.username == postgres["POSTGRES_USER"]
    assert state.path.lstrip("/") == postgres["POSTGRES_DB"]
    assert state.password == "POSTGRES_PASSWORD"  # interpolated, never written here
    assert postgres["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD")

    assert env["MERCURY_MEMORY_STORE"] == "qdrant"
    assert urlsplit(env["QDRANT_URL"]).hostname == "qdrant"
    qdrant_key = services["qdrant"]["environment"]["QDRANT__SERVICE__API_KEY"]
    assert INTERPOLATION.findall(qdrant_key) == INTERPOLATION.findall(env["QDRANT_API_KEY"])
    assert urlsplit(env["OLLAMA_HOST"]).hostname == "ollama"
    assert 2 <= float(env["MERCURY_CONVERSATION_LEASE_S"]) <= 30

    wiki = env["WIKI_VAULT_PATH"]
    assert any(m.split(":")[1] == wiki for m in mercury["volumes"])  # one shared volume
    assert "MERCURY_DATA_DIR" not in env  # each instance's own
    assert "ports" not in mercury  # reached only through the balancer
    assert "/livez" in " ".join(mercury["healthcheck"]["test"])
    grace = float(env["HTTP_SURFACE_GRACEFUL_TIMEOUT_S"])
    assert float(mercury["stop_grace_period"].rstrip("s")) > grace
    assert depends_on(services["balancer"]) == {"mercury": "service_healthy"}
    assert depends_on(mercury)["postgres"] == "service_healthy"


def test_both_compose_files_run_the_same_image_with_the_same_model_host() -> None:
    single = load(SINGLE)["services"]["mercury"]
    multi = load(MULTI)["services"]["mercury"]
    assert single["image"] == multi["image"]
    assert single["environment"]["OLLAMA_HOST"] == multi["environment"]["OLLAMA_HOST"]
    assert single["environment"]["AUTH_STATIC_TOKENS"] == multi["environment"]["AUTH_STATIC_TOKENS"]
    assert load(SINGLE)["services"]["ollama"]["image"] == load(MULTI)["services"]["ollama"]["image"]


def test_the_balancer_configuration_is_valid_haproxy_and_matches_the_compose_file() -> None:
    checked = subprocess.run(  # noqa: S603 - HAProxy checks our own file
        [haproxy_binary(), "-c", "-f", str(BALANCER)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    text = BALANCER.read_text()
    compose = load(MULTI)
    assert "balance roundrobin" in text
    assert "option httpchk GET /livez" in text
    published = compose["services"]["balancer"]["ports"][0].split(":")[-1]
    assert f"bind :{published}" in text
    template = re.search(r"server-template \w+ (\d+) (\w+):(\d+) ", text)
    assert template is not None
    assert template.group(2) in compose["services"]
    assert template.group(3) == "4100"  # the image's HTTP_SURFACE_PORT
    replicas = str(compose["services"]["mercury"]["deploy"]["replicas"])
    assert int(template.group(1)) >= int(replicas.split(":-")[1].rstrip("}"))
    mount = compose["services"]["balancer"]["volumes"][0]
    assert mount.startswith("./haproxy.cfg:")
