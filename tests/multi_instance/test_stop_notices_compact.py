"""``stop``, the rate limit's notice and ``compact`` hold across instances (#39).

Two real servers on one PostgreSQL, the Slack bridge on in both; Slack delivers each message
(or button press) to the instance the test points it at, so a conversation's turn runs on
one instance while what concerns it arrives through the other:

- ``stop`` (the command, or the stop button) taken by A cancels the turn running on B: its
  model request is closed and no answer is posted;
- a person over a space's limit is told once a window, however many instances refuse them;
- after ``compact`` through A, the next turn on B starts afresh, without what was compacted;
- a stop B answers too late (B frozen) is not told as "nothing is running", and a turn
  ``POST /chat`` started on B in a space is stopped by a Slack ``stop`` taken by A.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.cluster import Cluster
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.postgres import PostgresServer
from tests.support.slack_standin import SlackStandIn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

CONFIG = """
spaces:
  "slack:C1":
    admins: [slack:UADMIN]
    live_answers: false
  "slack:C2":
    admins: [slack:UADMIN]
    live_answers: true
  "slack:C3":
    admins: [slack:UADMIN]
    rate_limit: 1
    live_answers: false
  "slack:C4":
    admins: [slack:UADMIN]
    live_answers: false
  "slack:C5":
    live_answers: false
  "slack:C6":
    live_answers: false
"""
#: Alice's token acts for the bridges over ``POST /chat``; everyone else is let in unknown.
PEOPLE = [{"id": "alice", "roles": ["mercury.bridge"], "identities": ["static:alice"]}]
UNANSWERED = (
    "The stop was passed on, but no answer came in time; "
    "if the answer is still being written, try again."
)
LIMITED = "Rate limit exceeded. Try again shortly."
#: Generous for a loaded machine: the turns stopped here would otherwise never end.
STOPPED_WITHIN_S = 10.0


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    ollama_session: OllamaStandIn,
    postgres_server: PostgresServer,
    slack: SlackStandIn,
) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("stop-cluster")
    config = workdir / "mercury.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    shared = {
        "MERCURY_STATE_URL": postgres_server.create_database(),
        "MERCURY_CONFIG_FILE": str(config),
        "DIRECTORY_STATIC_PEOPLE": json.dumps(PEOPLE),
        "MERCURY_ACCESS_UNKNOWN": "allow",
        **slack.env(),
    }
    with Cluster(workdir, ollama_session.url, count=2, shared=shared) as running:
        yield running


@pytest.fixture(autouse=True)
def _fresh(slack: SlackStandIn, ollama: OllamaStandIn) -> None:
    slack.reset()
    for user, name in (("U1", "ann"), ("U2", "ben"), ("U3", "cat")):
        slack.add_user(user, name, real_name=name.title())


async def say(
    slack: SlackStandIn,
    cluster: Cluster,
    through: str,
    channel: str,
    user: str,
    text: str,
    *,
    ts: str,
    thread_ts: str | None = None,
) -> None:
    event = slack.message(
        channel, user, f"<@{slack.bot_user_id}> {text}", ts=ts, thread_ts=thread_ts
    )
    delivered = await slack.deliver(cluster[through].url + "/webhooks/slack", slack.envelope(event))
    assert delivered.status == 200, delivered.body


def texts(slack: SlackStandIn, channel: str) -> list[str]:
    return [m.text for m in slack.messages if m.channel == channel]


async def test_stop_taken_by_a_cancels_the_turn_running_on_b_and_nothing_is_answered(
    cluster: Cluster, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(content=["Working "], hang=True))  # runs until it is stopped
    await say(slack, cluster, "b", "C1", "U1", "write a long essay", ts="1.1")
    await ollama.wait_for_requests_async(1, timeout=60)

    asked_at = time.monotonic()
    await say(slack, cluster, "a", "C1", "U1", "stop", ts="1.2")
    await slack.wait_until_async(
        lambda: texts(slack, "C1"), timeout=30, what="the answer to the stop"
    )
    assert texts(slack, "C1") == ["Stopped."]
    [closed_at] = await ollama.wait_for_closed_async(1, timeout=30)
    assert closed_at - asked_at < STOPPED_WITHIN_S
    # Another message in the space, through B: answered after the stopped turn ended there.
    ollama.enqueue(ChatScript.words("Hello."))
    await say(slack, cluster, "b", "C1", "U2", "hello", ts="1.3")
    await slack.wait_until_async(lambda: len(texts(slack, "C1")) >= 2, timeout=60, what="hello")
    assert texts(slack, "C1") == ["Stopped.", "Hello."]  # nothing of the essay, ever


async def test_the_stop_button_pressed_through_a_stops_the_answer_b_is_writing(
    cluster: Cluster, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(content=["Very "], hang=True))
    await say(slack, cluster, "b", "C2", "U1", "an essay", ts="2.1")
    await slack.wait_until_async(
        lambda: any(m.visible == "Very " for m in slack.thread_messages("C2", "2.1")),
        timeout=60,
        what="the first words, written by B",
    )
    [message] = slack.thread_messages("C2", "2.1")
    [(_, stop)] = message.buttons

    refused = slack.block_actions(message.ts, "U2", stop)  # not theirs, not an admin
    await slack.press(cluster["a"].url + "/webhooks/slack/interactions", refused)
    await slack.wait_until_async(lambda: slack.responses, timeout=30, what="the refusal")
    assert slack.responses[-1].body["text"] == (
        "Only the person who asked, or an admin of this space, can stop this turn."
    )
    assert ollama.open_streams == 1

    pressed_at = time.monotonic()
    pressed = slack.block_actions(message.ts, "U1", stop)
    await slack.press(cluster["a"].url + "/webhooks/slack/interactions", pressed)
    [closed_at] = await ollama.wait_for_closed_async(1, timeout=30)
    assert closed_at - pressed_at < STOPPED_WITHIN_S

    def settled() -> bool:
        messages = slack.thread_messages("C2", "2.1")
        return (
            len(slack.responses) == 2
            and [m.visible for m in messages] == ["Stopped."]
            and all(m.state != "streaming" and not m.buttons for m in messages)
        )

    await slack.wait_until_async(settled, timeout=30, what="the message B wrote, settled")
    assert slack.responses[-1].body["text"] == "Stopped."


async def test_the_rate_limit_notice_is_told_once_a_window_across_both_instances(
    cluster: Cluster, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(*(ChatScript.words(w) for w in ("First.", "Hello.", "Hello.")))
    await say(slack, cluster, "a", "C3", "U1", "one", ts="3.1")
    await slack.wait_until_async(lambda: texts(slack, "C3"), timeout=60, what="the first answer")
    for n, through in enumerate(("a", "b", "a", "b"), start=2):
        await say(slack, cluster, through, "C3", "U1", f"more {n}", ts=f"3.{n}")
    # Each instance routes a space's messages in the order it took them: Ben's answer (from
    # A) and Cat's (from B) come after Ann's refusals there were handled.
    for n, (through, user) in enumerate((("a", "U2"), ("b", "U3")), start=6):
        await say(slack, cluster, through, "C3", user, "hello", ts=f"3.{n}")
    await slack.wait_until_async(
        lambda: len([t for t in texts(slack, "C3") if t != LIMITED]) >= 3,
        timeout=60,
        what="Ben's and Cat's answers",
    )
    assert texts(slack, "C3").count(LIMITED) == 1
    assert len(ollama.requests) == 3


async def test_after_compact_through_a_the_next_turn_on_b_starts_afresh(
    cluster: Cluster, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Noted."), ChatScript.words("Which word?"))
    await say(slack, cluster, "b", "C4", "U1", "the word is tangerine", ts="4.1")
    await slack.wait_until_async(lambda: texts(slack, "C4"), timeout=60, what="the first answer")
    await say(slack, cluster, "a", "C4", "U1", "compact", ts="4.2")
    await slack.wait_until_async(
        lambda: len(texts(slack, "C4")) >= 2, timeout=60, what="compact's answer"
    )
    assert texts(slack, "C4")[1] == "Done: this conversation starts afresh from a summary."
    await say(slack, cluster, "b", "C4", "U1", "what was the word?", ts="4.3")
    await slack.wait_until_async(
        lambda: len(texts(slack, "C4")) >= 3, timeout=60, what="the next answer"
    )
    first, after = ollama.requests
    assert "tangerine" in json.dumps(first["messages"])
    assert "tangerine" not in json.dumps(after["messages"])
    assert "what was the word?" in json.dumps(after["messages"])


async def test_a_stop_answered_late_is_not_told_as_nothing_running(
    cluster: Cluster, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(content=["Working "], hang=True))
    await say(slack, cluster, "b", "C5", "U1", "write a long essay", ts="5.1")
    await ollama.wait_for_requests_async(1, timeout=60)
    cluster["b"].signal(signal.SIGSTOP)  # B holds the turn but answers nobody for a while
    try:
        await say(slack, cluster, "a", "C5", "U1", "stop", ts="5.2")
        await slack.wait_until_async(
            lambda: texts(slack, "C5"), timeout=30, what="the answer to the stop"
        )
    finally:
        cluster["b"].signal(signal.SIGCONT)
    assert texts(slack, "C5") == [UNANSWERED]
    # Awake, B answers the next stop (its reply is the window's second: not posted).
    await say(slack, cluster, "a", "C5", "U1", "stop", ts="5.3")
    await ollama.wait_for_closed_async(1, timeout=30)


async def test_a_turn_chat_started_on_b_in_a_space_is_stopped_by_a_stop_taken_by_a(
    cluster: Cluster, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(content=["Working "], hang=True))
    body = {"text": "write a long essay", "callerId": "slack:U2", "spaceId": "slack:C6"}
    async with httpx.AsyncClient(timeout=60) as client:
        running = asyncio.ensure_future(
            client.post(
                cluster["b"].url + "/chat",
                json=body,
                headers={"authorization": "Bearer alice-token"},
            )
        )
        await ollama.wait_for_requests_async(1, timeout=60)
        await say(slack, cluster, "a", "C6", "U2", "stop", ts="6.1")
        answered = await running
    assert answered.status_code == 200, answered.text
    assert answered.json() == {"ok": True, "reply": "Stopped.", "files": []}
    await slack.wait_until_async(
        lambda: texts(slack, "C6"), timeout=30, what="the answer to the stop"
    )
    assert texts(slack, "C6") == ["Stopped."]


def test_the_instances_logged_no_error(cluster: Cluster) -> None:
    logged = cluster.logs()
    assert "Traceback" not in logged, logged[-4000:]
