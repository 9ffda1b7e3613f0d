"""The webhook-ingestion benchmark (bench/ingest.py): its deliveries are Slack's, and a small
run through a real server shows the essence of its target (#34)."""

from __future__ import annotations

import json

import pytest

from bench.ingest import MENTION_EVERY, Deliveries, Plan, run, table
from bench.server import SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET
from bridges.slack import SlackBridge
from tests.support.slack_standin import SlackStandIn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]


async def test_the_benchmarks_deliveries_are_signed_messages_slack_would_send() -> None:
    with SlackStandIn(bot_token=SLACK_BOT_TOKEN, signing_secret=SLACK_SIGNING_SECRET) as slack:
        bridge = SlackBridge(slack.settings(), bot_name="Mercury")
        try:
            deliveries = Deliveries(slack)
            outcomes = [
                await bridge.receive("POST", {}, headers, body)
                for body, headers in (deliveries.next() for _ in range(MENTION_EVERY))
            ]
        finally:
            await bridge.close()
    assert {o.verdict for o in outcomes} == {"accepted"}
    messages = [o.messages[0] for o in outcomes]
    assert len({m.delivery_id for m in messages}) == MENTION_EVERY  # never a retry
    assert sum("@Mercury" in m.text for m in messages) == 1


async def test_a_small_run_acknowledges_everything_long_before_a_slow_slack_answers() -> None:
    # Issue #34's essence, not its absolute figure: 64 deliveries at once against a server
    # whose Slack answers every call in 20 s are all answered 200 within a quarter of that.
    plan = Plan(deliveries=64, slow_s=20.0, platforms=("slow",), modes=("bursts",))
    result = await run(plan)
    [figures] = result["phases"].values()
    assert figures["statuses"] == {"200": 64}
    assert figures["ack_max_ms"] < plan.slow_s * 1000 / 4, figures
    assert "slow bursts (20 s a call)" in table(result)
    json.dumps(result)  # what main() writes
