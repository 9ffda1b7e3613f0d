"""Three ``mercury-http serve`` processes on one real PostgreSQL behind a real HAProxy.

The model is the Ollama stand-in; what it received shows which history reached the model.
"Through A" means straight to instance ``a``; round robin goes through the balancer.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from tests.reliability.support import Outcome, read_turn
from tests.support.cluster import Cluster
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.postgres import PostgresServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

#: Short, so the killed instance's conversation goes on within the test; long enough that
#: an instance starved of the CPU for a second or two on a loaded 2-core machine still renews
#: its claims (every LEASE_S / 3) before they lapse, which would end a running turn with an
#: error, as it should for an instance stalled longer than its lease (docs/deploy.md).
LEASE_S = 6
PEOPLE = {
    f"{name}-token": {"id": name, "displayName": name.title()}
    for name in (
        "alice",
        "bob",
        "carol",
        "dave",
        "erin",
        "frank",
        "grace",
        "heidi",
        "ivan",
        "judy",
        "kate",
        "leo",
        "mia",
        "noah",
    )
}
#: The module's tests share the cluster, and so its rate limit, which counts a person's turns
#: over a minute across every test (a linked account's in its owner's bucket): each test
#: makes its turns as people of its own, or a test could find a person's window already full
#: (a 429 before any event), as the linking test once did after the reading-back test's five
#: turns as the same person.
RATE_LIMIT = 6


def auth(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer {name}-token"}


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    ollama_session: OllamaStandIn,
    postgres_server: PostgresServer,
) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("cluster")
    # One shared folder, which each instance mounts at a path of its own (as hosts mount a
    # network volume wherever they like): a and its two other names.
    vault = workdir / "shared-vault"
    vault.mkdir()
    paths = {"a": vault, "b": workdir / "mount-b", "c": workdir / "mount-c"}
    for name in ("b", "c"):
        paths[name].symlink_to(vault, target_is_directory=True)
    shared = {
        "MERCURY_STATE_URL": postgres_server.create_database(),
        "MERCURY_CONVERSATION_LEASE_S": str(LEASE_S),
        "AUTH_STATIC_TOKENS": json.dumps(PEOPLE),
        "MERCURY_RATE_LIMIT_PER_USER": str(RATE_LIMIT),
    }
    per_instance = {name: {"WIKI_VAULT_PATH": str(path)} for name, path in paths.items()}
    with Cluster(workdir, ollama_session.url, shared=shared, per_instance=per_instance) as running:
        running.state_url = shared["MERCURY_STATE_URL"]
        yield running


def trouble(cluster: Cluster) -> str:
    """What the instances logged beside routine lines: warnings, errors, tracebacks, and each
    turn's outcome (for a failing test's message)."""
    return "\n".join(
        line for line in cluster.logs().splitlines() if " INFO " not in line or "outcome=" in line
    )


def user_texts(request: dict[str, Any]) -> list[str]:
    """The person's messages a model request carried, without the time stamp."""
    return [m["content"].split("] ", 1)[-1] for m in request["messages"] if m["role"] == "user"]


async def arrived(db: psycopg.AsyncConnection[Any], key: str, tickets: int) -> None:
    """Wait until ``tickets`` turns of ``key`` have taken their place in the queue."""
    async with asyncio.timeout(60):
        while True:
            cursor = await db.execute(
                "SELECT next_ticket FROM conversation_turns WHERE session_key = %s", (key,)
            )
            row = await cursor.fetchone()
            if row is not None and int(row[0]) >= tickets:
                return
            await asyncio.sleep(0.01)


async def turn_through(url: str, person: str, text: str, conversation: str) -> Outcome:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        return await read_turn(
            client, {"text": text, "conversationId": conversation}, auth(person), deadline_s=90
        )


def final(outcome: Outcome, *where: object) -> dict[str, Any]:
    """The turn's ``final`` event; a turn that ended otherwise fails naming what it got: its
    HTTP status and body (a 429 or 409 answers before any event), its events, a broken-off
    connection."""
    assert outcome.names()[-1:] == ["final"], (*where, outcome)
    return outcome.events[-1][1]


async def test_a_conversation_continued_on_each_instance_in_turn_reaches_the_model_whole(
    cluster: Cluster, ollama: OllamaStandIn
) -> None:
    for n, instance in enumerate(["a", "b", "c", "a", "c"]):
        outcome = await turn_through(cluster[instance].url, "alice", f"message {n}", "trip")
        final(outcome, instance)

    requests = [r for r in ollama.requests if "message 0" in json.dumps(r)]
    assert user_texts(requests[-1]) == [f"message {n}" for n in range(5)]
    answers = [m["content"] for m in requests[-1]["messages"] if m["role"] == "assistant"]
    assert [a.split("] ", 1)[-1] for a in answers] == [f"message {n}" for n in range(4)]


async def read_back(url: str, person: str, conversation: str, *, limit: int) -> list[Any]:
    """The whole of ``GET /conversation``, a page of ``limit`` at a time."""
    messages: list[Any] = []
    offset: str | None = None
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        while True:
            params = {"id": conversation, "limit": str(limit)} | (
                {"offset": offset} if offset else {}
            )
            page = (await client.get("/conversation", params=params, headers=auth(person))).json()
            messages.extend(page["messages"])
            offset = page["nextOffset"]
            if offset is None:
                return messages


async def test_a_conversation_continued_through_each_instance_reads_back_whole_through_every_one(
    cluster: Cluster,
) -> None:
    answers = []
    for n, instance in enumerate(["a", "b", "c", "b", "a"]):
        outcome = await turn_through(cluster[instance].url, "kate", f"line {n}", "story")
        answers.append(final(outcome, instance)["text"])

    expected = [
        (role, text)
        for n, answer in enumerate(answers)
        for role, text in (("user", f"line {n}"), ("assistant", answer))
    ]
    for instance in ("a", "b", "c"):  # at once: no archive queue to wait for
        read = await read_back(cluster[instance].url, "kate", "story", limit=3)
        assert [(m["role"], m["content"]) for m in read] == expected, instance
        async with httpx.AsyncClient(timeout=30) as client:
            listed = await client.get(
                cluster[instance].url + "/conversations", headers=auth("kate")
            )
        assert listed.json()["conversations"][0]["conversationId"] == "story"
        assert listed.json()["conversations"][0]["preview"] == answers[-1]
        assert listed.json()["conversations"][0]["title"] == "line 0"
    # Another person reads nothing of it, through any instance.
    assert await read_back(cluster["c"].url, "judy", "story", limit=3) == []


async def test_concurrent_turns_on_one_conversation_never_overlap_and_keep_arrival_order(
    cluster: Cluster, ollama: OllamaStandIn
) -> None:
    def slow_echo(request: dict[str, Any]) -> ChatScript:
        return ChatScript(content=["Heard ", user_texts(request)[-1]], delay_s=0.3)

    ollama.responder = slow_echo
    tasks = []
    async with await psycopg.AsyncConnection.connect(cluster.state_url, autocommit=True) as db:
        for n in range(5):  # through the balancer: each lands on the next instance
            tasks.append(asyncio.create_task(turn_through(cluster.url, "bob", f"step {n}", "plan")))
            await arrived(db, "static:bob:plan", n + 1)  # arrival order: 0, 1, 2, …
    outcomes = await asyncio.gather(*tasks)

    unfinished = [
        (n, o.events, o.broke_off) for n, o in enumerate(outcomes) if o.names()[-1:] != ["final"]
    ]
    assert not unfinished, (unfinished, trouble(cluster))
    seen = [user_texts(r) for r in ollama.requests if "step 0" in json.dumps(r)]
    # Each model request holds every earlier step and its own, in arrival order: the turns
    # ran one after another, each on a history that was never stale.
    assert seen == [[f"step {k}" for k in range(n + 1)] for n in range(5)]


async def test_a_setting_saved_through_one_instance_is_read_through_another(
    cluster: Cluster,
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        saved = await client.patch(
            cluster["a"].url + "/me", json={"timeZone": "Europe/Rome"}, headers=auth("carol")
        )
        assert saved.status_code == 200
        for instance in ("b", "c"):
            read = await client.get(cluster[instance].url + "/me", headers=auth("carol"))
            assert read.json()["timeZone"] == "Europe/Rome"


async def test_the_rate_limit_counts_a_persons_turns_on_every_instance(
    cluster: Cluster,
) -> None:
    statuses = []
    for n in range(RATE_LIMIT + 1):
        outcome = await turn_through(cluster.url, "dave", f"hello {n}", f"r{n}")
        statuses.append(outcome.status)

    assert statuses == [200] * RATE_LIMIT + [429]


def write_note(path: str, content: str) -> Any:
    """A responder: one wiki_write call, then a plain answer."""
    pending = [
        ChatScript(
            tool_calls=[{"name": "wiki_write", "arguments": {"path": path, "content": content}}]
        )
    ]

    def respond(request: dict[str, Any]) -> ChatScript:
        return pending.pop() if pending else ChatScript.words("Written.")

    return respond


async def test_a_note_written_through_one_instance_is_listed_and_read_through_the_others(
    cluster: Cluster, ollama: OllamaStandIn
) -> None:
    ollama.responder = write_note("personal/notes/shared.md", "from a")
    outcome = await turn_through(cluster["a"].url, "grace", "note this", "w")
    final(outcome)

    async with httpx.AsyncClient(timeout=30) as client:
        for instance in ("b", "c"):
            listed = await client.get(cluster[instance].url + "/wiki/list", headers=auth("grace"))
            assert "personal/notes/shared.md" in json.dumps(listed.json())
            read = await client.get(
                cluster[instance].url + "/wiki/read",
                headers=auth("grace"),
                params={"path": "personal/notes/shared.md"},
            )
            assert read.json()["content"] == "from a"


async def test_a_confirmation_staged_through_a_is_confirmed_through_b_and_c_exactly_once(
    cluster: Cluster, ollama: OllamaStandIn
) -> None:
    ollama.responder = write_note("personal/notes/plan.md", "first")
    await turn_through(cluster["a"].url, "heidi", "write", "p")
    ollama.responder = write_note("personal/notes/plan.md", "second")
    staged = await turn_through(cluster["a"].url, "heidi", "overwrite", "p")
    token = next(data["token"] for name, data in staged.events if name == "pending")

    async def confirm(instance: str) -> Any:
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.post(
                cluster[instance].url + "/confirm",
                headers=auth("heidi"),
                json={"token": token, "conversationId": "p"},
            )
            return response.json()

    answers = await asyncio.gather(confirm("b"), confirm("c"))

    assert sorted(a["resolved"] for a in answers) == [False, True], answers
    async with httpx.AsyncClient(timeout=30) as client:
        note = await client.get(
            cluster["a"].url + "/wiki/read",
            headers=auth("heidi"),
            params={"path": "personal/notes/plan.md"},
        )
    assert note.json()["content"] == "second"


async def test_a_pending_staged_through_the_balancer_is_confirmed_where_it_lands_next(
    cluster: Cluster, ollama: OllamaStandIn
) -> None:
    ollama.responder = write_note("personal/notes/list.md", "first")
    await turn_through(cluster["a"].url, "leo", "write", "q")
    ollama.responder = write_note("personal/notes/list.md", "second")
    async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:  # HAProxy
        staged: dict[str, Any] = {}
        body = {"text": "overwrite", "conversationId": "q"}
        async with client.stream("POST", "/turn", json=body, headers=auth("leo")) as response:
            staged_by = response.headers["x-served-by"]
            event = ""
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    event = line.removeprefix("event: ")
                elif line.startswith("data: ") and event == "pending":
                    staged = json.loads(line.removeprefix("data: "))
        # Round robin: the next request through the balancer lands on another instance.
        confirmed = await client.post(
            "/confirm", headers=auth("leo"), json={"token": staged["token"], "conversationId": "q"}
        )
        note = await client.get(
            "/wiki/read", headers=auth("leo"), params={"path": "personal/notes/list.md"}
        )

    assert confirmed.headers["x-served-by"] != staged_by
    assert confirmed.status_code == 200, confirmed.text
    assert confirmed.json()["ok"] is True and confirmed.json()["resolved"] is True
    assert note.json()["content"] == "second"


async def test_a_link_code_made_through_a_is_redeemed_through_b_and_c(cluster: Cluster) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        made = await client.post(cluster["a"].url + "/link", headers=auth("ivan"))
    code = made.json()["code"]

    preview = await turn_through(cluster["b"].url, "judy", code, "l")
    linked = await turn_through(cluster["c"].url, "judy", code, "l")

    assert "Ivan" in final(preview)["text"]
    assert final(linked)["text"] == "Linked: this account is now Ivan."


async def test_an_account_linked_through_b_is_the_owner_on_every_instance_at_once(
    cluster: Cluster, ollama: OllamaStandIn
) -> None:
    """Every instance resolves a linked account to its owner the moment the link answers,
    even one that identified the account as its own person a moment before (issue 30)."""
    async with httpx.AsyncClient(timeout=30) as client:
        saved = await client.patch(
            cluster["b"].url + "/me",
            json={"timeZone": "Asia/Tokyo", "language": "de"},
            headers=auth("mia"),
        )
        assert saved.status_code == 200, saved.text
        # Noah's own person, seen (and so cached) by every instance before the link.
        for instance in ("a", "b", "c"):
            own = await client.get(cluster[instance].url + "/me", headers=auth("noah"))
            assert own.json()["timeZone"] != "Asia/Tokyo"
        final(await turn_through(cluster["a"].url, "mia", "a note of mia's", "mia-own"))
        made = await client.post(cluster["a"].url + "/link", headers=auth("mia"))
        code = made.json()["code"]
        await turn_through(cluster["b"].url, "noah", code, "l")
        linked = await turn_through(cluster["b"].url, "noah", code, "l")
        assert final(linked)["text"] == "Linked: this account is now Mia."

        for n, instance in enumerate(("a", "c")):
            me = await client.get(cluster[instance].url + "/me", headers=auth("noah"))
            assert me.json()["timeZone"] == "Asia/Tokyo", (instance, me.json())
            assert me.json()["language"] == "de", (instance, me.json())
            listed = await client.get(
                cluster[instance].url + "/conversations", headers=auth("noah")
            )
            assert listed.status_code == 200, listed.text
            ids = [c["conversationId"] for c in listed.json()["conversations"]]
            assert "mia-own" in ids, (instance, ids)
            # A turn as the linked account is Mia's: it goes on in her conversation, and the
            # model is asked to answer in her language.
            said = f"noah through {instance}"
            final(await turn_through(cluster[instance].url, "noah", said, "mia-own"), instance)
            request = [r for r in ollama.requests if said in json.dumps(r)][-1]
            earlier = ["a note of mia's", *(f"noah through {i}" for i in ("a", "c")[:n])]
            assert user_texts(request) == [*earlier, said], instance
            system = request["messages"][0]["content"]
            assert "language with code 'de'" in system, (instance, system)

        # A setting the linked account changes through one instance is its owner's on the others.
        changed = await client.patch(
            cluster["c"].url + "/me", json={"timeZone": "America/Lima"}, headers=auth("noah")
        )
        assert changed.status_code == 200, changed.text
        for instance in ("a", "b"):
            owner = await client.get(cluster[instance].url + "/me", headers=auth("mia"))
            assert owner.json()["timeZone"] == "America/Lima", (instance, owner.json())


async def test_an_instance_killed_mid_turn_lets_its_conversation_go_on_elsewhere(
    cluster: Cluster, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(content=["Never ", "finished"], delay_s=30.0))
    doomed = asyncio.create_task(turn_through(cluster["c"].url, "erin", "first words", "k"))
    await ollama.wait_until_async(lambda: ollama.open_streams >= 1, timeout=30)
    cluster["c"].process.kill()  # type: ignore[union-attr]
    killed_at = time.monotonic()
    lost = await doomed
    assert "final" not in lost.names()

    # Meanwhile the others serve: another conversation goes through at once.
    other = await turn_through(cluster["a"].url, "frank", "still there?", "x")
    final(other)
    # The killed turn's conversation continues once its lease has lapsed, and nothing the
    # person had said is lost: the model gets the words the dead instance had accepted.
    ollama.responder = None
    after = await turn_through(cluster["b"].url, "erin", "second words", "k")
    final(after)
    assert time.monotonic() - killed_at >= LEASE_S * 0.8
    last = [r for r in ollama.requests if "second words" in json.dumps(r)][-1]
    assert user_texts(last) == ["first words", "second words"]
    read = await read_back(cluster["a"].url, "erin", "k", limit=50)
    assert [(m["role"], m["content"]) for m in read][:2] == [
        ("user", "first words"),
        ("user", "second words"),
    ]


@pytest.fixture(autouse=True)
def _clean_responder(ollama: OllamaStandIn) -> Iterator[None]:
    yield
    ollama.responder = None
