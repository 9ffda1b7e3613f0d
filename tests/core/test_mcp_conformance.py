"""Mercury's MCP client against the MCP conformance suite's client auth scenarios.

The suite (``@modelcontextprotocol/conformance``, npm) starts, for each scenario, an MCP
server and an authorization server of its own and runs ``tests/mcp_conformance/client.py``
against them: Mercury's client for an ``auth: oauth`` server, signing a person in when
asked. Each scenario runs offline in a network namespace that has only its loopback
interface, two at once.

Scenarios not run here: ``auth/basic-cimd`` (it expects a client_id URL of its own choosing;
Mercury's document is at its https public URL's ``/oauth/client-metadata.json``, which
``tests/channel_http/test_mcp_sign_in_routes.py`` covers with a real provider);
``auth/2025-03-26-*`` (the revision before protected resource metadata, which Mercury
doesn't speak); the ``client-credentials`` and ``cross-app-access`` extensions.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.mcp_conformance import ensure_node_modules, isolated, run_scenario

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

#: One of each kind the suite has: where the metadata is, the scope asked for and stepped up,
#: how the client authenticates, a client registered beforehand, a resource that isn't the
#: server's (refused), offline access, a server that never grants the scope it demands (at
#: most three sign-ins; its server ends the scenario after three refused requests, one of
#: them the 2026-07-28 probe, so Mercury's own bound is tested in test_mcp_step_up.py).
SCENARIOS = (
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-post",
    "auth/pre-registration",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
)
#: Scenarios run at once (each is a Node process and a Python one, on a shared machine).
AT_ONCE = 2


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_mercurys_client_passes_the_conformance_suites_auth_scenarios(
    tmp_path: Path,
) -> None:
    if not isolated():
        pytest.skip("the conformance scenarios need a network namespace (root, unshare, ip)")
    ensure_node_modules()
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(scenario: str) -> tuple[str, int, str]:
        folder = tmp_path / scenario.replace("/", "_")
        folder.mkdir()
        async with gate:
            code, output = await run_scenario(scenario, folder)
        return scenario, code, output

    results = await asyncio.gather(*(one(scenario) for scenario in SCENARIOS))
    failed = {
        scenario: output[-3000:]
        for scenario, code, output in results
        if code != 0 or "OVERALL: PASSED" not in output
    }
    assert not failed, "\n\n".join(f"== {name}\n{tail}" for name, tail in failed.items())
    for scenario, _, output in results:
        summary = next(line for line in output.splitlines() if line.startswith("Passed:"))
        assert " 0 failed" in summary, f"{scenario}: {summary}"
