"""``kill -9`` in the middle of a flood of Slack DMs: every acknowledged message is answered once.

A real server process takes a stream of signed Slack deliveries (the Slack stand-in) and is
killed with SIGKILL while its turns run and more deliveries arrive. Another server process on
the same state store (the same SQLite file, started after the kill; or PostgreSQL, running all
along) picks up what the dead one had taken and not answered once its lease lapsed, and the
platform's retries of the deliveries the dead process never acknowledged run there too
(#34). Before the kill, a few messages were answered: they are not answered again.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.reliability.support import ChildServer, child_env
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.slack_standin import SlackStandIn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

#: Short, so the dead process's deliveries lapse within the test; long enough that a live
#: process starved of the CPU for a second or two on a loaded 2-core machine still renews its
#: leases (every third of it) before the other one could take its messages over.
LEASE_S = "5"
QUICK = 4
FLOOD = 24
KILL_AFTER = 10
TOKEN = re.compile(r"token-(\d+)")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def respond(request: dict[str, Any]) -> ChatScript:
    """``answer token-N``: quick for the first messages, a few seconds for the flood's."""
    words = [m["content"] for m in request["messages"] if m["role"] == "user"][-1]
    found = TOKEN.findall(words)
    number = int(found[-1]) if found else -1
    if number < QUICK:
        return ChatScript.words(f"answer token-{number}")
    return ChatScript(content=["answer ", f"token-{number}", "."], delay_s=3.0)


def answered(slack: SlackStandIn) -> Counter[int]:
    return Counter(int(n) for m in list(slack.messages) for n in TOKEN.findall(m.text))


async def deliver(slack: SlackStandIn, url: str, number: int) -> bool:
    """One person's DM; True when the server acknowledged it as taken."""
    event = slack.message(f"D{number:03d}", f"U{number:03d}", f"please answer token-{number}")
    payload = slack.envelope(event, event_id=f"Ev{number:03d}")
    try:
        answer = await slack.deliver(url, payload, timeout=10)
    except httpx.TransportError:
        return False
    return answer.status == 200 and json.loads(answer.body)["taken"] == 1


async def retry(slack: SlackStandIn, url: str, number: int) -> None:
    """Slack's retry of a delivery: the same event id and body, ``X-Slack-Retry-Num``."""
    event = slack.message(f"D{number:03d}", f"U{number:03d}", f"please answer token-{number}")
    payload = slack.envelope(event, event_id=f"Ev{number:03d}")
    body, headers = slack.signed(payload, retry_num=1)
    async with httpx.AsyncClient(timeout=10) as client:
        answer = await client.post(url, content=body, headers=headers)
    assert answer.status_code == 200, answer.text


async def wait_for(slack: SlackStandIn, numbers: set[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not numbers <= set(answered(slack)):
        missing = sorted(numbers - set(answered(slack)))
        assert time.monotonic() < deadline, f"never answered: {missing}"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_kill_9_mid_flood_every_acknowledged_dm_is_answered_exactly_once(
    backend: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    ollama: OllamaStandIn,
    slack: SlackStandIn,
) -> None:
    slack.reset()
    for number in range(FLOOD):
        slack.add_user(f"U{number:03d}", f"person{number}")
    ollama.responder = respond
    # Answers counted from chat.postMessage's text: the single message of before.
    shared = {
        **slack.env(),
        "MERCURY_CONVERSATION_LEASE_S": LEASE_S,
        "BRIDGE_LIVE_ANSWERS": "false",
    }
    if backend == "postgresql":
        shared["MERCURY_STATE_URL"] = request.getfixturevalue("postgres_server").create_database()
        dirs = {"a": tmp_path / "data-a", "b": tmp_path / "data-b"}
    else:
        dirs = {"a": tmp_path / "data", "b": tmp_path / "data"}  # the same SQLite file
    a = ChildServer(child_env(dirs["a"], ollama.url, **shared), tmp_path / "a.log")
    b = ChildServer(child_env(dirs["b"], ollama.url, **shared), tmp_path / "b.log")
    try:
        a.start(120)
        if backend == "postgresql":
            b.start(120)  # running all along: it must leave a live instance's messages be
        hook = a.url + "/webhooks/slack"
        # Answered before the crash: never again.
        assert all([await deliver(slack, hook, n) for n in range(QUICK)])
        await wait_for(slack, set(range(QUICK)), 30)
        await asyncio.sleep(1.0)

        # The flood: one DM every 50 ms; SIGKILL once KILL_AFTER of them were acknowledged.
        acked: set[int] = set()
        refused: set[int] = set()

        async def one(number: int) -> None:
            (acked if await deliver(slack, hook, number) else refused).add(number)
            if len(acked) == KILL_AFTER:
                a.signal(signal.SIGKILL)

        flood = []
        for number in range(QUICK, FLOOD):
            flood.append(asyncio.create_task(one(number)))
            await asyncio.sleep(0.05)
        await asyncio.gather(*flood)
        assert a.wait(10) == -signal.SIGKILL
        assert len(acked) >= KILL_AFTER and refused, (acked, refused)
        assert not set(answered(slack)) & acked  # the flood's turns were all cut short

        if backend == "sqlite":
            b.start(120)  # the same data directory, after the crash
        # Slack retries what it got no answer for, and (late) two it did.
        for number in sorted(refused) + sorted(acked)[:2]:
            await retry(slack, b.url + "/webhooks/slack", number)

        await wait_for(slack, acked | refused, 120)
        await asyncio.sleep(3 * float(LEASE_S))  # past more looks for stale deliveries
        counts = answered(slack)
        assert {n: c for n, c in counts.items() if c != 1} == {}, counts
        assert set(counts) == set(range(FLOOD))
    except BaseException:
        print(f"--- a\n{a.log()}\n--- b\n{b.log()}")
        raise
    finally:
        a.stop()
        b.stop()
