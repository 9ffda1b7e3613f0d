"""A token allowance on Slack: the Slack stand-in delivers signed events to a real server;
past the person's allowance the next message is answered once, in their language, with the
sentence naming when it renews, and nothing runs; further messages in the window stay
unanswered, as the rate limit's notice does."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.scenes import settle
from tests.support.server import RunningServer
from tests.support.slack_standin import SlackStandIn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def slack_server() -> Iterator[SlackStandIn]:
    with SlackStandIn() as standin:
        yield standin


@pytest.fixture
def slack(slack_server: SlackStandIn) -> Iterator[SlackStandIn]:
    slack_server.reset()
    slack_server.add_user("U4", "dee", display_name="Dee")
    yield slack_server
    slack_server.reset()


@pytest.fixture
def chat(make_server: Callable[..., RunningServer], slack: SlackStandIn) -> RunningServer:
    return make_server(BRIDGE_LIVE_ANSWERS="false", MERCURY_USAGE_PERSON_DAY="5", **slack.env())


async def say(slack: SlackStandIn, chat: RunningServer, text: str) -> None:
    event = slack.message("D9", "U4", text)
    delivered = await slack.deliver(chat.url + "/webhooks/slack", slack.envelope(event))
    assert delivered.status == 200, delivered.body
    assert json.loads(delivered.body) is not None


async def test_past_the_allowance_slack_is_told_once_in_the_persons_language(
    chat: RunningServer, slack: SlackStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Hi Dee, here is a long enough answer."))
    await say(slack, chat, "hello there")
    await slack.wait_until_async(lambda: len(slack.messages) >= 1, timeout=40, what="the answer")
    manager = chat.services.manager
    [row] = await_rows(chat)
    chat.call(chat.services.person_settings.set_language(row, "it"))

    await say(slack, chat, "another question")
    await slack.wait_until_async(lambda: len(slack.messages) >= 2, timeout=40, what="the notice")
    notice = slack.messages[1].text
    assert notice.startswith("Hai esaurito la tua quota di token per oggi; si rinnova il ")
    assert notice.endswith(" 00:00 UTC.")
    await say(slack, chat, "and again?")
    await settle()
    assert len(slack.messages) == 2  # told once in the window, not once per message
    assert len(ollama.requests) == 1  # nothing ran past the allowance
    assert manager.ledger is not None and manager.ledger.writes == 1


def await_rows(chat: RunningServer) -> list[str]:
    async def read() -> list[str]:
        await chat.services.manager.ledger.flush()  # what waits in memory, written
        rows = await chat.services.db.fetch_all("SELECT person_key FROM usage_days")
        return [row[0] for row in rows]

    return chat.call(read())
