"""The MCP benchmark (bench/mcp.py) in small: warm turns list nothing, concurrent calls share
the one connection, and Mercury's side answers what the SDK's does."""

from __future__ import annotations

import pytest

from bench.mcp import measure

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_warm_turns_list_nothing_and_concurrent_calls_share_one_connection(
    transport: str,
) -> None:
    figures = await measure(transport, calls=20)
    assert figures["protocol"] == "2026-07-28"
    assert figures["list_calls_per_warm_turn"] == 0
    assert figures["connections_opened_for_concurrent"] == 0
    # 50 calls of 0.2 s at once end long before 50 in a row would (10 s).
    assert figures["concurrent_wall_s"] < 5
