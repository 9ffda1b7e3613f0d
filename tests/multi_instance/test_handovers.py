"""What one instance begins and another finishes: a resume, and a service login's callback.

Two ``mercury-http serve`` processes on one real PostgreSQL, each with memory of its own
(Qdrant Edge under its data directory, for the ``forget`` tool that hands its result back),
a REST service behind the real OpenID provider (``tests/oidc``) for the login dialogue, and
the Ollama stand-in as the model. The test plays the person's browser.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from tests.channel_http.test_service_login import (
    CALLBACK,
    PUBLIC_URL,
    SECRET_KEY,
    TrackerApi,
    browse,
    call,
    running,
    script,
    tracker_config,
    url_of,
)
from tests.oidc.harness import OidcProviderProcess, ensure_node_modules
from tests.reliability.support import read_turn
from tests.support.cluster import Cluster
from tests.support.ollama_standin import OllamaStandIn
from tests.support.postgres import PostgresServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

PEOPLE = {f"{name}-token": {"id": name, "displayName": name.title()} for name in ("lea", "max")}


def auth(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer {name}-token"}


@pytest.fixture(scope="module")
def idp() -> Iterator[OidcProviderProcess]:
    ensure_node_modules()
    with OidcProviderProcess(login_redirect_uri=PUBLIC_URL + "/login/callback") as provider:
        yield provider


@pytest.fixture(scope="module")
def tracker(idp: OidcProviderProcess) -> Iterator[TrackerApi]:
    jwks = httpx.get(f"{idp.issuer}/jwks", timeout=10).json()
    api = TrackerApi(idp.issuer, jwks)
    with running(api) as server:
        api.url = url_of(server)
        yield api


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    ollama_session: OllamaStandIn,
    idp: OidcProviderProcess,
    tracker: TrackerApi,
    postgres_server: PostgresServer,
) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("handovers")
    config = workdir / "mercury.yaml"
    config.write_text(yaml.safe_dump(tracker_config(tracker, idp)))
    shared = {
        "MERCURY_STATE_URL": postgres_server.create_database(),
        "AUTH_STATIC_TOKENS": json.dumps(PEOPLE),
        "MERCURY_CONFIG_FILE": str(config),
        "HTTP_SURFACE_PUBLIC_URL": PUBLIC_URL,
        "MERCURY_SECRET_KEY": SECRET_KEY,
        "MERCURY_MEMORY_STORE": "edge",
    }
    with Cluster(workdir, ollama_session.url, count=2, shared=shared) as running_cluster:
        yield running_cluster


async def turn_through(url: str, person: str, body: dict[str, Any]) -> Any:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        return await read_turn(client, body, auth(person), deadline_s=90)


def final_text(outcome: Any) -> str:
    assert outcome.names()[-1] == "final", outcome.events
    text: str = outcome.events[-1][1]["text"]
    return text


async def test_a_resume_confirmed_through_a_is_heard_once_through_b(
    cluster: Cluster, ollama: OllamaStandIn
) -> None:
    script(ollama, call("forget", topic="coffee"), answer="Forgotten.")
    staged = await turn_through(
        cluster["a"].url, "lea", {"text": "forget my coffee", "conversationId": "f"}
    )
    token = next(data["token"] for name, data in staged.events if name == "pending")

    async with httpx.AsyncClient(timeout=30) as client:
        confirmed = await client.post(
            cluster["a"].url + "/confirm",
            headers=auth("lea"),
            json={"token": token, "conversationId": "f"},
        )
    assert confirmed.json() == {"ok": True, "resolved": True, "resume": True}

    heard = await turn_through(cluster["b"].url, "lea", {"resume": True, "conversationId": "f"})
    assert final_text(heard) == "Forgotten."
    messages = ollama.requests[-1]["messages"]
    assert messages[-1]["role"] == "tool"
    assert "Confirmed by the person" in messages[-1]["content"]
    # B never ran this conversation: it rebuilt it from the transcript of record.
    assert "forget my coffee" in json.dumps(messages)

    twice = await turn_through(cluster["a"].url, "lea", {"resume": True, "conversationId": "f"})
    assert final_text(twice) == "The answer to this confirmation is no longer available."
    thrice = await turn_through(cluster["b"].url, "lea", {"resume": True, "conversationId": "f"})
    assert final_text(thrice) == "The answer to this confirmation is no longer available."


async def test_a_service_login_begun_through_a_is_called_back_on_b_and_used_through_both(
    cluster: Cluster, ollama: OllamaStandIn, idp: OidcProviderProcess, tracker: TrackerApi
) -> None:
    tracker.seen.clear()
    script(ollama, call("tracker_search_issues"), answer="Log in first.")
    asked = await turn_through(
        cluster["a"].url, "max", {"text": "my issues?", "conversationId": "t"}
    )
    url = next(data["url"] for name, data in asked.events if name == "login")

    back = await browse(idp, url, "max-at-tracker")
    async with httpx.AsyncClient(timeout=30) as client:
        page = await client.get(f"{cluster['b'].url}{CALLBACK}?{urlsplit(back).query}")
        assert page.status_code == 200, page.text
        replayed = await client.get(f"{cluster['a'].url}{CALLBACK}?{urlsplit(back).query}")
        assert replayed.status_code == 400  # the state was single use on every instance

    for instance in ("a", "b"):
        script(ollama, call("tracker_search_issues"), answer="One issue.")
        got = await turn_through(
            cluster[instance].url, "max", {"text": "and now?", "conversationId": "t"}
        )
        assert "login" not in got.names(), got.events
        assert final_text(got) == "One issue."
    assert [(s.path, s.user) for s in tracker.seen] == [
        ("/issues", "max-at-tracker"),
        ("/issues", "max-at-tracker"),
    ]


@pytest.fixture(autouse=True)
def _clean_responder(ollama: OllamaStandIn) -> Iterator[None]:
    yield
    ollama.responder = None
