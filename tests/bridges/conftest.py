"""Fixtures the bridges' end-to-end tests share: one Telegram stand-in per test module, reset
around each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.telegram_standin import TelegramStandIn

SECRET = "end-to-end-secret"


@pytest.fixture(scope="module")
def telegram_server() -> Iterator[TelegramStandIn]:
    with TelegramStandIn(webhook_secret=SECRET) as standin:
        yield standin


@pytest.fixture
def telegram(telegram_server: TelegramStandIn) -> Iterator[TelegramStandIn]:
    telegram_server.reset()
    yield telegram_server
    telegram_server.reset()
