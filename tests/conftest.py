"""Fixtures shared by the suite: the Ollama stand-in, settings and a real server."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any

import pytest

from core.config.settings import Settings, load_settings
from tests.support.ollama_standin import OllamaStandIn
from tests.support.server import RunningServer, serve
from tests.support.state import postgres_server, shared_state, state

# Fixtures for every test module. Don't import them into a test module as well: pytest then
# takes them for that module's own, and a session fixture starts a second PostgreSQL.
__all__ = ["postgres_server", "shared_state", "state"]

TOKENS: dict[str, dict[str, str]] = {
    "alice-token": {"id": "alice", "displayName": "Alice"},
    "bob-token": {"id": "bob", "displayName": "Bob"},
}
ALICE = {"authorization": "Bearer alice-token"}
BOB = {"authorization": "Bearer bob-token"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give each of schemathesis's per-operation tests its own id (``test[GET /me]``).

    Under pytest 9 they all carry their function's node id; pytest-xdist schedules and reports
    by node id, so the 45 operations ran as one, and that one fuzzed nothing. The id's
    parameter is the operation's label, the same in every worker.
    """
    for item in items:
        label = getattr(item, "operation_label", None)
        if label and item._id.params is None:
            item._id = item._id.with_params(label)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def ollama_session() -> Iterator[OllamaStandIn]:
    with OllamaStandIn() as standin:
        yield standin


@pytest.fixture
def ollama(ollama_session: OllamaStandIn) -> Iterator[OllamaStandIn]:
    ollama_session.reset()
    yield ollama_session
    ollama_session.reset()


def server_env(folder: Path, ollama_url: str) -> dict[str, str]:
    """A test server's environment: its data under ``folder``, the static tokens of
    :data:`TOKENS`, the Ollama stand-in at ``ollama_url``, memory off."""
    return {
        "MERCURY_CONFIG_FILE": "",
        "MERCURY_AUTH": "static",
        "AUTH_STATIC_TOKENS": json.dumps(TOKENS),
        "MERCURY_DATA_DIR": str(folder / "data"),
        "OLLAMA_HOST": ollama_url,
        "OLLAMA_MODEL": "llama3.2",
        "MERCURY_MEMORY_STORE": "off",
    }


@pytest.fixture
def base_env(tmp_path: Path, ollama: OllamaStandIn) -> dict[str, str]:
    return server_env(tmp_path, ollama.url)


@pytest.fixture
def make_settings(base_env: dict[str, str]) -> Callable[..., Settings]:
    def make(**overrides: str) -> Settings:
        return load_settings(
            {**base_env, **overrides}, cwd=Path(base_env["MERCURY_DATA_DIR"]).parent
        )

    return make


@pytest.fixture
def make_server(
    make_settings: Callable[..., Settings],
) -> Iterator[Callable[..., RunningServer]]:
    with ExitStack() as stack:

        def start(build: dict[str, Any] | None = None, **overrides: str) -> RunningServer:
            context: AbstractContextManager[RunningServer] = serve(
                make_settings(**overrides), **(build or {})
            )
            return stack.enter_context(context)

        yield start


@pytest.fixture
def server(make_server: Callable[..., RunningServer]) -> RunningServer:
    return make_server()
