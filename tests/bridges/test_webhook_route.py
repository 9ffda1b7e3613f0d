"""``/webhooks/{platform}`` refusing what an adversarial review (#34, #36) got through: stale
and far-future messages, repeated signature headers and query keys, and the truth told when
the platform can't be reached. The platform is the tests' own RecordingBridge, whose
deliveries carry the whole :class:`~bridges.port.Received` (``sent_at`` included)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import msgspec
import pytest

from bridges.port import PlatformUnavailable, Received, WebhookOutcome
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.recording_bridge import SECRET, RecordingBridge
from tests.support.server import RunningServer

pytestmark = [pytest.mark.timeout(90)]


@pytest.fixture
def bridge() -> RecordingBridge:
    return RecordingBridge()


@pytest.fixture
def chat(make_server: Callable[..., RunningServer], bridge: RecordingBridge) -> RunningServer:
    return make_server({"bridges": [bridge]}, BRIDGE_MAX_MESSAGE_AGE_S="3600")


def dated(message: Received, sent_at: datetime) -> Received:
    return msgspec.structs.replace(message, sent_at=sent_at)


def signed(message: Received) -> tuple[bytes, str]:
    body = msgspec.json.encode(message)
    return body, hmac.new(SECRET, body, hashlib.sha256).hexdigest()


def settle(seconds: float = 1.0) -> None:
    """Give the pipeline time to do something it must not do (the only sleep-based check)."""
    time.sleep(seconds)


def test_a_message_older_than_the_window_is_acknowledged_and_runs_nothing(
    chat: RunningServer,
    bridge: RecordingBridge,
    ollama: OllamaStandIn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Adversarial review (#34): a message stamped 2010 ran, and a captured signed delivery
    # replayed once de-duplication had forgotten its id ran again.
    now = datetime.now(UTC)
    caplog.set_level(logging.WARNING, "mercury.bridges")
    for sent_at in (datetime(2010, 1, 1, tzinfo=UTC), now - timedelta(hours=1, minutes=1)):
        answer = bridge.post(chat, dated(bridge.message("D9", "U4", "run me"), sent_at))
        assert answer.status_code == 200, answer.text  # the platform must not send it again
        assert answer.json() == {"ok": True, "taken": 0}
    assert sum("dropped as stale" in r.getMessage() for r in caplog.records) == 2
    ollama.enqueue(ChatScript.words("Still here."))
    fresh = bridge.post(chat, dated(bridge.message("D9", "U4", "hi"), now - timedelta(minutes=59)))
    assert fresh.json()["taken"] == 1
    bridge.wait_for_replies(1)
    settle()
    assert len(ollama.requests) == 1 and len(bridge.replies) == 1


def test_a_message_stamped_ahead_runs_within_the_clock_skew_and_not_beyond(
    chat: RunningServer, bridge: RecordingBridge, ollama: OllamaStandIn
) -> None:
    now = datetime.now(UTC)
    far = bridge.post(chat, dated(bridge.message("D9", "U4", "later"), now + timedelta(days=30)))
    assert far.status_code == 200 and far.json()["taken"] == 0
    ollama.enqueue(ChatScript.words("Hello."))
    near = bridge.post(chat, dated(bridge.message("D9", "U4", "hi"), now + timedelta(minutes=2)))
    assert near.json()["taken"] == 1
    bridge.wait_for_replies(1)
    settle()
    assert len(ollama.requests) == 1


@pytest.mark.parametrize("forged_first", [True, False])
def test_a_signature_header_given_twice_is_refused_whichever_comes_last(
    chat: RunningServer, bridge: RecordingBridge, ollama: OllamaStandIn, forged_first: bool
) -> None:
    # Adversarial review (#34): the route kept the last of two signature headers.
    body, good = signed(bridge.message("D9", "U4", "run me"))
    pair = [("x-test-signature", "0" * 64), ("x-test-signature", good)]
    answer = httpx.post(
        chat.url + "/webhooks/slack",
        content=body,
        headers=pair if forged_first else pair[::-1],
        timeout=10,
    )
    assert answer.status_code == 400
    assert answer.json()["ok"] is False
    assert "x-test-signature" in answer.json()["error"]
    settle()
    assert ollama.requests == [] and bridge.replies == []


def test_a_query_key_given_twice_is_refused_and_forwarding_headers_may_repeat(
    chat: RunningServer, bridge: RecordingBridge, ollama: OllamaStandIn
) -> None:
    body, good = signed(bridge.message("D9", "U4", "run me"))
    twice = httpx.post(
        chat.url + "/webhooks/slack?hub.verify_token=a&hub.verify_token=b",
        content=body,
        headers={"x-test-signature": good},
        timeout=10,
    )
    assert twice.status_code == 400
    assert "hub.verify_token" in twice.json()["error"]
    ollama.enqueue(ChatScript.words("Hi."))
    proxied = httpx.post(
        chat.url + "/webhooks/slack",
        content=body,
        headers=[
            ("x-test-signature", good),
            ("x-forwarded-for", "203.0.113.7"),
            ("x-forwarded-for", "10.0.0.1"),
            ("via", "1.1 proxy-a"),
            ("via", "1.1 proxy-b"),
        ],
        timeout=10,
    )
    assert proxied.status_code == 200 and proxied.json()["taken"] == 1
    bridge.wait_for_replies(1)


@dataclass
class UnreachableBridge(RecordingBridge):
    """A platform that must be asked before a delivery can be checked, and can't be."""

    async def receive(
        self, method: str, query: Mapping[str, str], headers: Mapping[str, str], body: bytes
    ) -> WebhookOutcome:
        raise PlatformUnavailable("Slack could not be reached for auth.test; try again later.")


def test_a_platform_that_cant_be_reached_is_named_not_a_busy_server(
    make_server: Callable[..., RunningServer],
) -> None:
    # Issue 36: Slack was told "The server is busy" when Slack itself could not be reached.
    bridge = UnreachableBridge()
    chat = make_server({"bridges": [bridge]})
    answer = bridge.post(chat, bridge.message("D9", "U4", "hi"))
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "5"
    error = answer.json()["error"]
    assert "busy" not in error
    assert "platform could not be reached" in error
