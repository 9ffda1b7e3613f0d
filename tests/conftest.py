"""Fixtures shared by the suite: the Ollama stand-in, settings and a real server."""

from __future__ import annotations

import itertools
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


# The folders whose test files run longest (clusters of real processes, a real browser):
# their files are handed out first, taken from each folder in turn, so that they don't all
# run at once and none of them is left to run alone at the end (scripts/test runs pytest-xdist
# with --no-loadscope-reorder, which keeps this order).
LONGEST_FIRST = ("tests/multi_instance/", "tests/ui/", "tests/reliability/", "tests/bench/")


def _longest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` a whole test file at a time, each file's tests kept in order."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.partition("::")[0], []).append(item)
    long: list[list[str]] = [[] for _ in LONGEST_FIRST]
    rest: list[str] = []
    for path in files:
        rank = next((r for r, folder in enumerate(LONGEST_FIRST) if path.startswith(folder)), None)
        (rest if rank is None else long[rank]).append(path)
    order = [path for turn in itertools.zip_longest(*long) for path in turn if path]
    items[:] = [item for path in [*order, *rest] for item in files[path]]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give each of schemathesis's per-operation tests its own id (``test[GET /me]``), and
    hand out the longest test files first (:data:`LONGEST_FIRST`).

    Under pytest 9 schemathesis's tests all carry their function's node id; pytest-xdist
    schedules and reports by node id, so the 45 operations ran as one, and that one fuzzed
    nothing. The id's parameter is the operation's label, the same in every worker.
    """
    for item in items:
        label = getattr(item, "operation_label", None)
        if label and item._id.params is None:
            item._id = item._id.with_params(label)
    _longest_first(items)


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


@pytest.fixture
def base_env(tmp_path: Path, ollama: OllamaStandIn) -> dict[str, str]:
    return {
        "MERCURY_CONFIG_FILE": "",
        "MERCURY_AUTH": "static",
        "AUTH_STATIC_TOKENS": json.dumps(TOKENS),
        "MERCURY_DATA_DIR": str(tmp_path / "data"),
        "OLLAMA_HOST": ollama.url,
        "OLLAMA_MODEL": "llama3.2",
        "MERCURY_MEMORY_STORE": "off",
    }


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
