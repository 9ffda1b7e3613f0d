"""GET /metrics scraped from a real server after real turns, read with the client's parser."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ALICE, BOB
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.support.sse import turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def scrape(client: httpx.AsyncClient, headers: dict[str, str] = ALICE) -> Samples:
    response = await client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(response.text)


async def scrape_until(
    client: httpx.AsyncClient, done: Callable[[Samples], bool], *, seconds: float = 10
) -> Samples:
    with anyio.fail_after(seconds):
        while not done(samples := await scrape(client)):
            await anyio.sleep(0.05)
    return samples


async def test_metrics_need_the_bearer_token_on_the_surface(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert (await client.get("/metrics")).status_code == 401
        samples = await scrape(client)
    assert value(samples, "mercury_open_streams") == 0
    for outcome in ("final", "error", "cancelled", "refused"):
        assert (("mercury_turns_total", (("outcome", outcome),))) in samples


async def test_turns_are_counted_by_outcome_with_their_durations_and_tokens(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server(MERCURY_RATE_LIMIT_PER_USER="4", HTTP_SURFACE_HEARTBEAT_S="0.05")
    ollama.enqueue(
        ChatScript.words("one two three", thinking="hmm"),  # final: 1 + 3 chunks
        ChatScript(status=500),  # error
        ChatScript(tool_calls=[{"name": "no_such_tool", "arguments": {}}]),
        ChatScript.words("done", first_delay_s=0.3),  # after the tool; quiet: heartbeats
        ChatScript.paced(400, rate_per_s=40),  # cancelled by the client
    )
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        with anyio.fail_after(30):
            assert (await turn(client, {"text": "a", "conversationId": "c1"}, ALICE)).final
            assert (await turn(client, {"text": "b", "conversationId": "c1"}, ALICE)).names() == [
                "error"
            ]
            tooled = await turn(client, {"text": "c", "conversationId": "c1"}, ALICE)
            assert tooled.final["text"] == "done"
            async with client.stream(
                "POST", "/turn", json={"text": "d"}, headers=ALICE
            ) as response:
                async for line in response.aiter_lines():
                    if line.startswith("event: text"):
                        break  # the client leaves mid-stream
            refused = await client.post("/turn", json={"text": "e"}, headers=ALICE)
            assert refused.status_code == 429
        samples = await scrape_until(
            client, lambda s: value(s, "mercury_turns_total", outcome="cancelled") == 1
        )
    assert value(samples, "mercury_turns_started_total") == 4
    assert value(samples, "mercury_turns_total", outcome="final") == 2
    assert value(samples, "mercury_turns_total", outcome="error") == 1
    assert value(samples, "mercury_turns_total", outcome="refused") == 1
    assert value(samples, "mercury_rate_limit_refusals_total") == 1
    assert value(samples, "mercury_turn_duration_seconds_count") == 4
    assert value(samples, "mercury_turn_first_event_seconds_count") == 4
    # Four model calls answered (the 500 never streamed): one first-token time each.
    assert value(samples, "mercury_model_first_token_seconds_count") == 4
    tokens = value(samples, "mercury_model_chunks_total")
    assert 4 + 1 + 1 + 1 <= tokens < 4 + 1 + 1 + 400
    assert value(samples, "mercury_tool_calls_total", tool="unknown", outcome="failed") == 1
    assert value(samples, "mercury_heartbeats_total") >= 1
    assert value(samples, "mercury_open_streams") == 0
    assert value(samples, "mercury_auth_total", provider="static", outcome="ok") >= 6
    assert value(samples, "mercury_store_call_seconds_count", store="state", operation="execute")
    assert value(samples, "mercury_queued_turns") == 0
    assert value(samples, "mercury_http_requests_total", method="POST", route="/turn", status="429")


async def test_auth_and_admission_outcomes_are_counted_without_the_token(
    make_server: Callable[..., RunningServer],
) -> None:
    server = make_server(
        DIRECTORY_STATIC_PEOPLE='[{"id": "alice", "identities": ["static:alice"]}]'
    )
    async with httpx.AsyncClient(base_url=server.url) as client:
        await client.get("/me")
        await client.get("/me", headers={"authorization": "Bearer wrong-secret"})
        await client.get("/me", headers=BOB)  # known to auth, not to the directory
        samples = await scrape(client)
    assert value(samples, "mercury_auth_total", provider="none", outcome="missing") == 1
    assert value(samples, "mercury_auth_total", provider="none", outcome="invalid") == 1
    assert value(samples, "mercury_admission_refusals_total", reason="unknown") == 1


async def test_labels_stay_bounded_whoever_calls_and_whatever_they_send(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    server = make_server(MERCURY_RATE_LIMIT_PER_USER="1000")

    async def some_turns(client: httpx.AsyncClient, start: int, n: int) -> None:
        for i in range(start, start + n):
            who = ALICE if i % 2 else BOB
            text = f"secret-text-{i}"
            got = await turn(client, {"text": text, "conversationId": f"conv-{i}"}, who)
            assert got.final
            await client.get(f"/no-such-route-{i}", headers=who)
            await client.get(f"/conversation?id=conv-{i}", headers=who)
        await client.get("/me", headers={"authorization": f"Bearer token-{start}"})

    async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        with anyio.fail_after(60):
            await some_turns(client, 0, 3)
            # A report writes the ledger's waiting calls first: its writes' series exist
            # before the first scrape, not whenever the write-behind flush comes.
            await client.get("/me/usage", headers=ALICE)
            await scrape(client)  # so the scrape's own request is counted in both
            first = set(await scrape(client))
            await some_turns(client, 3, 20)
            later = await scrape(client)
    assert set(later) == first, "new series appeared: " + repr(set(later) - first)
    labels = {value for _, pairs in later for _, value in pairs}
    for label in labels:
        assert "conv-" not in label
        assert "secret" not in label
        assert "token" not in label
        assert "alice" not in label and "bob" not in label
        assert "no-such-route" not in label


async def test_a_parameterized_route_is_labelled_with_its_template(
    server: RunningServer,
) -> None:
    # Issue 36: /webhooks/slack and every /spaces/{space}/... request were counted (and
    # logged) as "unmatched".
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        assert (await client.post("/webhooks/slack", content=b"{}")).status_code == 404
        await client.get("/spaces/slack:C1/mutes", headers=ALICE)
        await client.get("/spaces/slack:C2/mutes", headers=ALICE)
        await client.get("/no-such-route", headers=ALICE)
        samples = await scrape(client)
    routes = {
        dict(pairs)["route"]: count
        for (name, pairs), count in samples.items()
        if name == "mercury_http_requests_total"
    }
    assert "/webhooks/{platform}" in routes
    assert "/spaces/{space}/mutes" in routes
    assert not any("slack:" in route or "/webhooks/slack" == route for route in routes)
    assert (
        value(
            samples,
            "mercury_http_requests_total",
            method="POST",
            route="/webhooks/{platform}",
            status="404",
        )
        == 1
    )


async def test_a_metrics_port_serves_them_without_auth_and_the_surface_none(
    make_server: Callable[..., RunningServer],
) -> None:
    server = make_server(MERCURY_METRICS_PORT="0")
    port = server.services.metrics_server.port
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert (await client.get("/metrics", headers=ALICE)).status_code == 404
        await turn(client, {"text": "hi"}, ALICE)
        response = await client.get(f"http://127.0.0.1:{port}/metrics")
    assert response.status_code == 200
    assert value(parse(response.text), "mercury_turns_total", outcome="final") == 1


async def test_metrics_can_be_turned_off(make_server: Callable[..., RunningServer]) -> None:
    server = make_server(MERCURY_METRICS="off")
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert (await turn(client, {"text": "hi"}, ALICE)).final
        assert (await client.get("/metrics", headers=ALICE)).status_code == 404
