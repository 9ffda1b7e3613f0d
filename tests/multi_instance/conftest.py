"""What the multi-instance scenes share: one Slack stand-in per test module, which every
instance of its cluster talks to."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.slack_standin import SlackStandIn


@pytest.fixture(scope="module")
def slack() -> Iterator[SlackStandIn]:
    with SlackStandIn() as standin:
        yield standin
