"""``compact`` through one instance while another holds the conversation in memory (#44).

Two real servers on one PostgreSQL, memory on (the edge store, captured only at rest), the
Slack bridge on in both: B answers a turn and holds the session; ``compact`` arrives through
A, which holds nothing of it. What B said since its last capture is captured all the same
(B finds its session moved on at its next touch and captures it before letting it go),
never dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.cluster import Cluster
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.postgres import PostgresServer
from tests.support.slack_standin import SlackStandIn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

CONFIG = """
spaces:
  "slack:C1":
    live_answers: false
"""


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    ollama_session: OllamaStandIn,
    postgres_server: PostgresServer,
    slack: SlackStandIn,
) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("compact-cluster")
    config = workdir / "mercury.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    shared = {
        "MERCURY_STATE_URL": postgres_server.create_database(),
        "MERCURY_CONFIG_FILE": str(config),
        "MERCURY_MEMORY_STORE": "edge",
        # Captured at rest only: no capture after a turn hides the one at stake.
        "SESSION_CAPTURE_MESSAGE_THRESHOLD": "100",
        **slack.env(),
    }
    with Cluster(workdir, ollama_session.url, count=2, shared=shared) as running:
        yield running


async def say(slack: SlackStandIn, cluster: Cluster, through: str, text: str, *, ts: str) -> None:
    event = slack.message("C1", "U1", f"<@{slack.bot_user_id}> {text}", ts=ts)
    delivered = await slack.deliver(cluster[through].url + "/webhooks/slack", slack.envelope(event))
    assert delivered.status == 200, delivered.body


def texts(slack: SlackStandIn) -> list[str]:
    return [m.text for m in slack.messages if m.channel == "C1"]


def captures(ollama: OllamaStandIn) -> list[str]:
    """What each memory capture was asked to summarize."""
    return [json.dumps(r["messages"]) for r in ollama.requests if r.get("stream") is False]


async def test_a_compact_through_a_keeps_what_b_said_since_its_last_capture(
    cluster: Cluster, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    slack.reset()
    slack.add_user("U1", "ann", real_name="Ann")

    def respond(request: dict[str, Any]) -> ChatScript:
        if request.get("stream") is False:  # a memory capture
            return ChatScript(content=[json.dumps({"summary": "A word was chosen.", "facts": []})])
        if "what was the word?" in json.dumps(request["messages"]):
            return ChatScript.words("Which word?")
        return ChatScript.words("Noted.")

    ollama.responder = respond
    await say(slack, cluster, "b", "the word is tangerine", ts="1.1")
    await slack.wait_until_async(lambda: texts(slack), timeout=60, what="the first answer")
    assert captures(ollama) == []
    await say(slack, cluster, "a", "compact", ts="1.2")
    await slack.wait_until_async(
        lambda: len(texts(slack)) >= 2, timeout=60, what="compact's answer"
    )
    await say(slack, cluster, "b", "what was the word?", ts="1.3")
    await slack.wait_until_async(lambda: len(texts(slack)) >= 3, timeout=60, what="the next answer")
    assert texts(slack)[2] == "Which word?"
    [captured] = captures(ollama)
    assert "tangerine" in captured  # what B held was captured, not lost
    turns = [r for r in ollama.requests if r.get("stream") is not False]
    assert "tangerine" not in json.dumps(turns[-1]["messages"])  # and the turn starts afresh


def test_the_instances_logged_no_error(cluster: Cluster) -> None:
    logged = cluster.logs()
    assert "Traceback" not in logged, logged[-4000:]
