"""Pairing across two instances on one PostgreSQL, with the Slack bridge on in both (#40).

A stranger asks through one instance, an approver answers through the other, and the
stranger is answered by the first at once: the approval is read on every identification,
never cached, whatever the first instance's directory cache says.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import httpx
import pytest

from tests.support.cluster import Cluster
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.postgres import PostgresServer
from tests.support.slack_standin import SlackStandIn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

ALICE = {"authorization": "Bearer alice-token"}
BOB = {"authorization": "Bearer bob-token"}
PEOPLE = [
    {"id": "alice", "roles": ["admin"], "identities": ["static:alice"]},
    {"id": "bob", "identities": ["static:bob"]},
]
CODE = re.compile(r"\b([A-HJKMNP-Z2-9]{8})\b")
DM = "D9"


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    ollama_session: OllamaStandIn,
    postgres_server: PostgresServer,
    slack: SlackStandIn,
) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("pairing-cluster")
    shared = {
        "MERCURY_STATE_URL": postgres_server.create_database(),
        "DIRECTORY_STATIC_PEOPLE": json.dumps(PEOPLE),
        "BRIDGE_LIVE_ANSWERS": "false",
        **slack.env(),
    }
    with Cluster(workdir, ollama_session.url, count=2, shared=shared) as running:
        yield running


async def say(slack: SlackStandIn, cluster: Cluster, through: str, text: str) -> None:
    delivered = await slack.deliver(
        cluster[through].url + "/webhooks/slack",
        slack.envelope(slack.message(DM, "U9", text)),
    )
    assert delivered.status == 200, delivered.body


async def test_a_code_given_by_one_instance_and_approved_on_the_other_lets_the_sender_in(
    cluster: Cluster, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    slack.reset()
    slack.add_user("U9", "zed", real_name="Zed")
    await say(slack, cluster, "a", "the secret is 1234")
    await slack.wait_until_async(lambda: len(slack.messages) >= 1, timeout=60, what="the code")
    found = CODE.search(slack.messages[0].text)
    assert found is not None and slack.messages[0].channel == DM, slack.messages[0].text
    code = found[1]

    async with httpx.AsyncClient(timeout=30) as client:
        refused = await client.get(cluster["b"].url + "/pairing", headers=BOB)
        assert refused.status_code == 403, refused.text
        listed = await client.get(cluster["b"].url + "/pairing", headers=ALICE)
        assert [p["code"] for p in listed.json()["pairings"]] == [code]
        approved = await client.post(cluster["b"].url + f"/pairing/{code}/approve", headers=ALICE)
        assert approved.status_code == 200, approved.text
    await slack.wait_until_async(lambda: len(slack.messages) >= 2, timeout=60, what="the news")
    assert slack.messages[1].channel == DM and "gave you access" in slack.messages[1].text

    ollama.enqueue(ChatScript.words("Welcome, Zed."))
    await say(slack, cluster, "a", "hello there")
    await slack.wait_until_async(lambda: len(slack.messages) >= 3, timeout=60, what="the answer")
    assert slack.messages[2].text == "Welcome, Zed."
    [request] = ollama.requests
    assert "hello there" in json.dumps(request) and "1234" not in json.dumps(request)


def test_the_instances_logged_no_error(cluster: Cluster) -> None:
    logged = cluster.logs()
    assert "Traceback" not in logged, logged[-4000:]
