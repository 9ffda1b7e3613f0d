"""What the space stores' tests share: a store on each backend and a clock they move."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.clock import ManualClock
from core.state import Database
from tests.support.state import StateBackend


@pytest.fixture
async def db(state: StateBackend) -> Database:
    return await state.open()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 12, 6, 10, 0, tzinfo=UTC))
