"""Load and disconnect storms against a real uvicorn.

Load: many callers, many conversations, all turns at once; every turn ends with exactly one
``final`` or ``error``, each conversation's history reaches the model in order and unmixed,
and every message lands in the archive. Storm: clients drop at random points of their streams;
afterwards no turn, task, model request or file descriptor is left over and memory is back
near its baseline.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest

from tests.reliability.support import Outcome, eventually, read_turn, rss_bytes
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer

pytestmark = [pytest.mark.anyio]

TAG = re.compile(r"\bu(\d+)-c(\d+)-t(\d+)\b")


def tokens(callers: int) -> dict[str, dict[str, str]]:
    return {f"token-{i}": {"id": f"user{i}", "displayName": f"User {i}"} for i in range(callers)}


def auth(caller: int) -> dict[str, str]:
    return {"authorization": f"Bearer token-{caller}"}


@dataclass(frozen=True)
class Plan:
    turns: int
    callers: int
    conversations: int

    def of(self, turn: int) -> tuple[int, int]:
        return turn % self.callers, turn % self.conversations


def loaded_server(make_server: Callable[..., RunningServer], callers: int) -> RunningServer:
    return make_server(
        None,
        AUTH_STATIC_TOKENS=json.dumps(tokens(callers)),
        MERCURY_RATE_LIMIT_PER_USER="1000",
        MERCURY_MEMORY_STORE="edge",
        SESSION_CAPTURE_MESSAGE_THRESHOLD="1000",
    )


async def run_load(server: RunningServer, ollama: OllamaStandIn, plan: Plan) -> dict[str, Any]:
    # A little pacing, so turns of one conversation really overlap and queue on its lock.
    ollama.responder = lambda request: ChatScript.words(
        "You said: " + str(request["messages"][-1]["content"]), delay_s=0.005
    )
    outcomes: dict[int, Outcome] = {}
    limits = httpx.Limits(max_connections=plan.turns + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=120) as client:

        async def one(turn: int) -> None:
            caller, conversation = plan.of(turn)
            text = f"u{caller}-c{conversation}-t{turn}"
            body = {"text": text, "conversationId": f"c{conversation}"}
            outcomes[turn] = await read_turn(client, body, auth(caller), deadline_s=150)

        async with anyio.create_task_group() as group:
            for turn in range(plan.turns):
                group.start_soon(one, turn)

    # Exactly one terminal event per turn, and it is a final (the stand-in never fails here).
    for turn, outcome in outcomes.items():
        assert outcome.status == 200, (turn, outcome.body)
        assert outcome.broke_off is None, (turn, outcome.broke_off)
        assert [name for name, _ in outcome.terminals()] == ["final"], (turn, outcome.events)
        assert outcome.events[-1][0] == "final", (turn, outcome.events[-3:])
    # No history interleaves: every model request carries one session's turns only, user and
    # assistant alternating, each answer right after the message it answers.
    per_session: dict[tuple[int, int], list[int]] = defaultdict(list)
    for request in ollama.requests:
        said = [m for m in request["messages"] if m["role"] in ("user", "assistant")]
        tags = [TAG.search(str(m["content"])) for m in said]
        assert all(tags), said
        owners = {(int(t[1]), int(t[2])) for t in tags if t}
        assert len(owners) == 1, owners
        roles = [m["role"] for m in said]
        assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"], roles
        for question, answer in zip(tags[0::2], tags[1::2], strict=False):
            assert question and answer and question[0] == answer[0]
        per_session[owners.pop()].append(len(said))
    for session, sizes in per_session.items():
        assert sorted(sizes) == list(range(1, 2 * len(sizes), 2)), (session, sizes)
    assert sum(len(s) for s in per_session.values()) == plan.turns
    return {"turns": len(outcomes), "sessions": len(per_session)}


async def all_archived(server: RunningServer, plan: Plan) -> int:
    probe = httpx.get(server.url + "/conversation", headers=auth(0), params={"id": "c0"})
    assert probe.status_code == 200, (probe.status_code, probe.text)
    expected: dict[tuple[int, int], set[str]] = defaultdict(set)
    for turn in range(plan.turns):
        caller, conversation = plan.of(turn)
        expected[(caller, conversation)].add(f"u{caller}-c{conversation}-t{turn}")

    async def landed(caller: int, conversation: int) -> None:
        def check() -> bool:
            page = httpx.get(
                server.url + "/conversation",
                headers=auth(caller),
                params={"id": f"c{conversation}", "limit": "500"},
                timeout=20,
            ).json()
            users = {m["content"] for m in page["messages"] if m["role"] == "user"}
            answers = [m for m in page["messages"] if m["role"] == "assistant"]
            want = expected[(caller, conversation)]
            return users == want and len(answers) == len(want)

        await eventually(check, timeout_s=60, what=f"u{caller}-c{conversation} archived")

    for caller, conversation in expected:
        await landed(caller, conversation)
    return 2 * plan.turns


@pytest.mark.timeout(90)
async def test_forty_turns_from_ten_callers_each_end_once_in_order_and_are_archived(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    plan = Plan(turns=40, callers=10, conversations=4)
    server = loaded_server(make_server, plan.callers)
    summary = await run_load(server, ollama, plan)
    assert summary["turns"] == 40
    assert await all_archived(server, plan) == 80


@pytest.mark.slow
@pytest.mark.timeout(400)
async def test_two_hundred_turns_from_fifty_callers_over_twenty_conversations_hold(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    plan = Plan(turns=200, callers=50, conversations=20)
    server = loaded_server(make_server, plan.callers)
    summary = await run_load(server, ollama, plan)
    assert summary["turns"] == 200
    assert await all_archived(server, plan) == 400


# ------------------------------------------------------------------ the disconnect storm


def own_descriptors(standin_port: int) -> list[str]:
    """This process's descriptors but the sockets to or from the stand-in, described."""
    sockets: dict[str, tuple[int, int, str]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                cols = line.split()
                local = int(cols[1].rsplit(":", 1)[1], 16)
                remote = int(cols[2].rsplit(":", 1)[1], 16)
                sockets[cols[9]] = (local, remote, cols[3])
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        ends = sockets.get(target.removeprefix("socket:[").rstrip("]"))
        if ends is not None and standin_port in ends[:2]:
            continue
        found.append(f"{target} {ends}" if ends else target)
    return found


async def server_tasks(server: RunningServer) -> int:
    async def count() -> int:
        return len(asyncio.all_tasks())

    return int(server.call(count()))


async def storm(server: RunningServer, ollama: OllamaStandIn, clients: int, seed: int) -> None:
    rng = random.Random(seed)
    script = ChatScript.paced(150, rate_per_s=60.0)
    ollama.responder = lambda request: script
    limits = httpx.Limits(max_connections=clients + 10, max_keepalive_connections=0)
    dropped = 0
    async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as client:

        async def one(i: int) -> None:
            nonlocal dropped
            # Drop before the response head, mid-reasoning, mid-text, or not at all.
            after = rng.choice([0.0, 0.01, rng.uniform(0.05, 2.0), rng.uniform(0.05, 2.0), 9.0])
            with anyio.move_on_after(after) as scope:
                await read_turn(
                    client,
                    {"text": f"storm {i}", "conversationId": f"s{i % 37}"},
                    {"authorization": f"Bearer token-{i % 20}"},
                    deadline_s=30,
                )
            dropped += scope.cancelled_caught

        async with anyio.create_task_group() as group:
            for i in range(clients):
                group.start_soon(one, i)
    assert dropped > clients // 2


async def settled(server: RunningServer, ollama: OllamaStandIn, baseline_tasks: int) -> None:
    manager = server.services.manager
    await eventually(lambda: manager.open_turns == 0, timeout_s=30, what="no open turn")
    await eventually(lambda: ollama.open_streams == 0, timeout_s=30, what="no open model stream")
    await eventually(
        lambda: server.call(_tasks_at_most(baseline_tasks + 2)),
        timeout_s=30,
        what="the server's tasks back to their baseline",
    )


async def _tasks_at_most(limit: int) -> bool:
    return len(asyncio.all_tasks()) <= limit


async def run_storm(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, clients: int, rounds: int
) -> None:
    server = make_server(
        None,
        AUTH_STATIC_TOKENS=json.dumps(tokens(20)),
        MERCURY_RATE_LIMIT_PER_USER="1000",
        HTTP_SURFACE_HEARTBEAT_S="0.2",
    )
    # A warm-up storm first, so pools, caches and lazily built things are in the baseline.
    await storm(server, ollama, 20, seed=0)
    baseline_tasks = await server_tasks(server)
    await settled(server, ollama, baseline_tasks)
    gc.collect()
    standin_port = int(ollama.url.rsplit(":", 1)[1])
    fds, rss = len(own_descriptors(standin_port)), rss_bytes()
    for round_ in range(rounds):
        await storm(server, ollama, clients, seed=round_ + 1)
        await settled(server, ollama, baseline_tasks)
    gc.collect()
    # Idle keep-alive connections to the stand-in are the model client's bounded pool, not
    # a leak (no model stream is open: checked above); every other descriptor must be freed.
    await eventually(
        lambda: len(own_descriptors(standin_port)) <= fds + 4,
        timeout_s=20,
        what=f"descriptors freed (left: {own_descriptors(standin_port)[:20]})",
    )
    assert rss_bytes() - rss < 64 * 1024 * 1024, (rss, rss_bytes())
    # And the server still serves a whole turn.
    ollama.responder = None
    async with httpx.AsyncClient(base_url=server.url) as client:
        after = await read_turn(
            client, {"text": "still there?"}, {"authorization": "Bearer token-1"}
        )
    assert [name for name, _ in after.terminals()] == ["final"]


@pytest.mark.timeout(90)
async def test_forty_clients_dropping_at_random_leave_nothing_running(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    await run_storm(make_server, ollama, clients=40, rounds=1)


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_two_hundred_clients_dropping_at_random_leave_nothing_running(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    await run_storm(make_server, ollama, clients=200, rounds=3)
