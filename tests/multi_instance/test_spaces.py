"""Shared spaces across two instances on one PostgreSQL, with the Slack bridge on in both.

Slack delivers to whichever instance it is pointed at; what one instance keeps of a space
(its ambient talk, its preferences, the deliveries it took) is what the other reads, and
nothing of one space ever reaches another's run, whichever instance runs it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.cluster import Cluster
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.postgres import PostgresServer
from tests.support.slack_standin import SlackStandIn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

ALICE = {"authorization": "Bearer alice-token"}
BOB = {"authorization": "Bearer bob-token"}
CONFIG = """
spaces:
  "slack:C1":
    admins: [static:alice]
    members: [static:bob]
  "slack:C2":
    admins: [static:alice]
"""


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    ollama_session: OllamaStandIn,
    postgres_server: PostgresServer,
    slack: SlackStandIn,
) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("spaces-cluster")
    config = workdir / "mercury.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    vault = workdir / "shared-vault"
    vault.mkdir()
    shared = {
        "MERCURY_STATE_URL": postgres_server.create_database(),
        "MERCURY_CONFIG_FILE": str(config),
        "WIKI_VAULT_PATH": str(vault),
        # These scenes read the single message of before (chat.postMessage's text).
        "BRIDGE_LIVE_ANSWERS": "false",
        **slack.env(),
    }
    with Cluster(workdir, ollama_session.url, count=2, shared=shared) as running:
        yield running


@pytest.fixture(autouse=True)
def _fresh(slack: SlackStandIn, ollama: OllamaStandIn) -> None:
    slack.reset()
    for user, name in (("U1", "ann"), ("U2", "ben"), ("U3", "cat")):
        slack.add_user(user, name, real_name=name.title())


def hook(cluster: Cluster, name: str) -> str:
    return cluster[name].url + "/webhooks/slack"


async def say(
    slack: SlackStandIn, cluster: Cluster, through: str, channel: str, user: str, text: str
) -> None:
    delivered = await slack.deliver(
        hook(cluster, through), slack.envelope(slack.message(channel, user, text))
    )
    assert delivered.status == 200, delivered.body


def mention(slack: SlackStandIn, text: str) -> str:
    return f"<@{slack.bot_user_id}> {text}"


def last_user_words(request: dict[str, Any]) -> str:
    return str([m for m in request["messages"] if m["role"] == "user"][-1]["content"])


async def test_ambient_talk_kept_through_one_instance_reaches_the_spaces_run_on_the_other_only(
    cluster: Cluster, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    await say(slack, cluster, "a", "C1", "U1", "the release is friday")
    await say(slack, cluster, "b", "C2", "U2", mention(slack, "what is going on here?"))
    await slack.wait_until_async(lambda: len(slack.messages) >= 1, timeout=60, what="the C2 reply")
    await say(slack, cluster, "b", "C1", "U3", mention(slack, "when is the release?"))
    await slack.wait_until_async(lambda: len(slack.messages) >= 2, timeout=60, what="the C1 reply")

    c2, c1 = ollama.requests
    assert "release is friday" not in json.dumps(c2)
    assert "release is friday" in last_user_words(c1) and "<ambient" in last_user_words(c1)
    assert {m.channel for m in slack.messages} == {"C1", "C2"}


async def test_a_retry_delivered_to_the_other_instance_runs_once(
    cluster: Cluster, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    envelope = slack.envelope(slack.message("C1", "U1", mention(slack, "count me once")))
    first = await slack.deliver(hook(cluster, "a"), envelope)
    retried = await slack.redeliver(hook(cluster, "b"))
    assert first.status == 200 and retried.status == 200
    assert json.loads(retried.body)["taken"] == 0
    await slack.wait_until_async(lambda: len(slack.messages) >= 1, timeout=60, what="the reply")
    await ollama.wait_for_requests_async(1, timeout=30)
    assert len(ollama.requests) == 1


async def test_a_preference_set_through_one_instance_is_in_the_next_run_on_the_other(
    cluster: Cluster, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        url = "/spaces/slack:C1/prefs/tone"
        saved = await client.put(cluster["a"].url + url, json={"value": "formal"}, headers=ALICE)
        assert saved.status_code == 200, saved.text
        refused = await client.put(cluster["b"].url + url, json={"value": "casual"}, headers=BOB)
        assert refused.status_code == 403, refused.text
        read = await client.get(cluster["b"].url + "/spaces/slack:C1/prefs", headers=BOB)
        assert [p["value"] for p in read.json()["preferences"]] == ["formal"]
    ollama.enqueue(ChatScript.words("Certainly."), ChatScript.words("Sure."))
    await say(slack, cluster, "b", "C1", "U1", mention(slack, "a greeting please"))
    await slack.wait_until_async(lambda: len(slack.messages) >= 1, timeout=60, what="the C1 reply")
    await say(slack, cluster, "a", "C2", "U1", mention(slack, "a greeting please"))
    await slack.wait_until_async(lambda: len(slack.messages) >= 2, timeout=60, what="the C2 reply")
    in_c1, in_c2 = (str(r["messages"][0]["content"]) for r in ollama.requests)
    assert '<pref key="tone">formal</pref>' in in_c1
    assert "<preferences>" not in in_c2


async def test_a_setting_put_through_one_instance_rules_the_next_message_on_the_other(
    cluster: Cluster, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    """#40: a space's runtime value is in force on every instance from the next message,
    and dropping it through either falls back on both."""
    url = "/spaces/slack:C2/settings/trigger.match"
    async with httpx.AsyncClient(timeout=30) as client:
        saved = await client.put(cluster["a"].url + url, json={"value": "always"}, headers=ALICE)
        assert saved.status_code == 200, saved.text
        assert saved.json()["setting"] == {
            "key": "trigger.match",
            "value": "always",
            "source": "space",
        }
        read = await client.get(cluster["b"].url + "/spaces/slack:C2/settings", headers=ALICE)
        in_force = {s["key"]: (s["value"], s["source"]) for s in read.json()["settings"]}
        assert in_force["trigger.match"] == ("always", "space")
    await say(slack, cluster, "b", "C2", "U2", "no mention at all")
    await slack.wait_until_async(lambda: len(slack.messages) >= 1, timeout=60, what="the reply")
    async with httpx.AsyncClient(timeout=30) as client:
        dropped = await client.delete(cluster["b"].url + url, headers=ALICE)
        assert dropped.json()["setting"]["source"] == "global", dropped.text
    await say(slack, cluster, "a", "C2", "U2", "still no mention")
    await say(slack, cluster, "a", "C2", "U2", mention(slack, "and now?"))
    await slack.wait_until_async(lambda: len(slack.messages) >= 2, timeout=60, what="the reply")
    first, second = ollama.requests
    assert "no mention at all" in last_user_words(first)
    # The message without a mention was only kept as ambient talk for the next run.
    assert "still no mention" in last_user_words(second) and "<ambient" in last_user_words(second)


def test_the_instances_logged_no_error(cluster: Cluster) -> None:
    logged = cluster.logs()
    assert "Traceback" not in logged, logged[-4000:]
