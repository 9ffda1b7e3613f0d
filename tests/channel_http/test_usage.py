"""The usage ledger and token allowances, on a real server: what the model reported reaches
``final``, ``/chat``, the ledger, ``/me/usage``, the admin routes and the metric; a used-up
allowance refuses the next turn with one sentence in the person's language."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.channel_http.test_metrics import parse, value
from tests.conftest import ALICE, BOB
from tests.support.contract import check_response
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.openai_standin import OpenAIStandIn
from tests.support.postgres import PostgresServer
from tests.support.server import RunningServer
from tests.support.sse import turn

pytestmark = [pytest.mark.timeout(90)]

MODEL = "qwen3-8b"
PEOPLE = [
    {"id": "alice", "roles": ["admin", "mercury.bridge"], "identities": ["static:alice"]},
    {"id": "bob", "displayName": "Bob B.", "identities": ["static:bob"]},
    {"id": "dan", "displayName": "Dan", "identities": ["slack:UDAN"]},
    {"id": "erin", "displayName": "Erin", "identities": ["slack:UERIN"]},
]
SPACE_CONFIG = """
spaces:
  "slack:C1":
    admins: [static:alice]
    members: [static:bob]
"""


@pytest.fixture(scope="module")
def openai_session() -> Iterator[OpenAIStandIn]:
    with OpenAIStandIn(models=[MODEL]) as standin:
        yield standin


@pytest.fixture
def openai(openai_session: OpenAIStandIn) -> Iterator[OpenAIStandIn]:
    openai_session.reset()
    openai_session.__dict__.pop("_prefixes", None)
    yield openai_session
    openai_session.reset()


def openai_env(standin: OpenAIStandIn) -> dict[str, str]:
    return {
        "MERCURY_MODEL_PROVIDER": "openai",
        "OPENAI_BASE_URL": standin.base_url,
        "OPENAI_MODEL": MODEL,
    }


def start(make_server: Callable[..., RunningServer], tmp_path: Path, **env: str) -> RunningServer:
    config = tmp_path / "mercury.yaml"
    config.write_text(SPACE_CONFIG, encoding="utf-8")
    return make_server(
        DIRECTORY_STATIC_PEOPLE=json.dumps(PEOPLE), MERCURY_CONFIG_FILE=str(config), **env
    )


def post_turn(server: RunningServer, body: dict[str, Any], headers: dict[str, str] = ALICE) -> Any:
    async def run() -> Any:
        async with httpx.AsyncClient(base_url=server.url) as client:
            with anyio.fail_after(30):
                return await turn(client, body, headers)

    return anyio.run(run)


def chat(server: RunningServer, body: dict[str, Any], headers: dict[str, str] = ALICE) -> Any:
    response = httpx.post(server.url + "/chat", json=body, headers=headers, timeout=30)
    check_response(response)
    return response


def get(server: RunningServer, path: str, headers: dict[str, str] = ALICE) -> Any:
    response = httpx.get(server.url + path, headers=headers, timeout=10)
    check_response(response)
    return response


def said_in(space: str, text: str, caller: str = "slack:UDAN") -> dict[str, Any]:
    return {"text": text, "callerId": caller, "authorName": "Dan D.", "spaceId": space}


def ledger_rows(server: RunningServer) -> list[dict[str, Any]]:
    """The ledger's rows in the store, once what waits in memory is written."""

    async def read() -> list[Any]:
        await server.services.manager.ledger.flush()
        rows = await server.services.db.fetch_all(
            "SELECT person_key, space_id, model, calls, input_tokens, output_tokens, "
            "cached_tokens FROM usage_days ORDER BY person_key, space_id"
        )
        return [{key: row[key] for key in row.keys()} for row in rows]

    return server.call(read())


# ------------------------------------------------------------------------------ the ledger


def test_final_carries_the_turns_usage_and_the_ledger_keeps_each_call_once(
    make_server: Callable[..., RunningServer], openai: OpenAIStandIn, tmp_path: Path
) -> None:
    server = start(make_server, tmp_path, **openai_env(openai))
    first = post_turn(server, {"text": "one two three", "conversationId": "c1"})
    [final] = first.of("final")
    assert final["usage"]["input"] > 0 and final["usage"]["output"] > 0
    assert final["usage"]["cached"] == 0  # the server's cache had nothing yet
    # The same conversation again: the system prompt and the first exchange are the
    # cached head of the prompt, as a server with a prompt cache reports it.
    second = post_turn(server, {"text": "four five", "conversationId": "c1"})
    [final2] = second.of("final")
    assert 0 < final2["usage"]["cached"] < final2["usage"]["input"]

    [row] = ledger_rows(server)
    assert row["person_key"] == "people:alice" and row["space_id"] == "" and row["model"] == MODEL
    # One write per model call: as many as the server was asked, no more.
    assert row["calls"] == len(openai.requests) == 2
    assert server.services.manager.ledger.writes == 2
    assert row["input_tokens"] == final["usage"]["input"] + final2["usage"]["input"]
    assert row["output_tokens"] == final["usage"]["output"] + final2["usage"]["output"]
    assert row["cached_tokens"] == final2["usage"]["cached"]

    mine = get(server, "/me/usage?period=today").json()
    [line] = mine["rows"]
    assert line["model"] == MODEL and line["calls"] == 2
    assert line["cached"] == final2["usage"]["cached"]
    assert mine["total"]["input"] == row["input_tokens"]
    assert get(server, "/me/usage", BOB).json()["rows"] == []  # Bob used nothing
    assert get(server, "/me/usage?period=year").status_code == 400

    metrics = parse(get(server, "/metrics").text)
    kinds = {
        k: value(metrics, "mercury_model_tokens_total", model=MODEL, kind=k)
        for k in ("input", "output", "cached")
    }
    assert kinds == {
        "input": row["input_tokens"],
        "output": row["output_tokens"],
        "cached": row["cached_tokens"],
    }


def test_chat_answers_with_usage_and_the_admin_reads_everyone_by_name(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, tmp_path: Path
) -> None:
    server = start(make_server, tmp_path)
    answered = chat(server, {"text": "hello"}, BOB)
    assert answered.status_code == 200, answered.text
    usage = answered.json()["usage"]
    assert usage["input"] > 0 and usage["output"] > 0 and "cached" not in usage  # Ollama
    assert chat(server, said_in("slack:C1", "hi there")).status_code == 200

    refused = get(server, "/usage", BOB)
    assert refused.status_code == 403 and "administrator" in refused.json()["error"]
    everyone = get(server, "/usage?period=7d").json()
    people = {(r["person"]["name"], r["spaceId"]): r for r in everyone["rows"]}
    assert set(people) == {("Bob B.", None), ("Dan", "slack:C1")}
    assert people[("Bob B.", None)]["input"] == usage["input"]
    assert everyone["total"]["calls"] == 2
    only = get(server, "/usage?space=slack:C1&by=person").json()
    assert [r["person"]["id"] for r in only["rows"]] == ["people:dan"]
    # The space's admin reads the space; a member of it is refused.
    assert get(server, "/spaces/slack:C1/usage").json()["total"]["calls"] == 1
    member = get(server, "/spaces/slack:C1/usage", BOB)
    assert member.status_code == 403 and "your role there is member" in member.json()["error"]


# ------------------------------------------------------------------------------ budgets


def test_a_persons_daily_allowance_refuses_the_next_turn_in_their_language(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, tmp_path: Path
) -> None:
    server = start(make_server, tmp_path, MERCURY_USAGE_PERSON_DAY="5")
    assert chat(server, {"text": "hello"}, BOB).status_code == 200  # under: it runs
    asked = len(ollama.requests)
    german = {**BOB, "accept-language": "de"}
    refused = chat(server, {"text": "noch eine Frage"}, german)
    assert refused.status_code == 429
    assert "Token-Kontingent" in refused.json()["error"] and "UTC" in refused.json()["error"]
    assert int(refused.headers["retry-after"]) >= 1
    streamed = post_turn(server, {"text": "une question"}, {**BOB, "accept-language": "fr"})
    assert streamed.names() == ["error"]
    assert "quota de jetons" in streamed.of("error")[0]["message"]
    assert len(ollama.requests) == asked  # the model was not asked
    # Another person's allowance is their own.
    assert chat(server, {"text": "hi"}).status_code == 200


def test_a_space_allowance_is_shared_and_only_its_admin_changes_it_at_runtime(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, tmp_path: Path
) -> None:
    server = start(make_server, tmp_path)
    url = server.url + "/spaces/slack:C1/settings/budget.space_day"
    assert chat(server, said_in("slack:C1", "first", caller="slack:UERIN")).status_code == 200
    member = httpx.put(url, json={"value": 5}, headers=BOB, timeout=10)
    assert member.status_code == 403  # Bob is a member, no admin
    assert "Only an admin of slack:C1" in member.json()["error"]
    assert httpx.get(url.rsplit("/", 1)[0], headers=BOB, timeout=10).status_code == 200
    saved = httpx.put(url, json={"value": 5}, headers=ALICE, timeout=10)
    assert saved.status_code == 200, saved.text
    assert saved.json()["setting"] == {
        "key": "budget.space_day",
        "value": 5,
        "source": "space",
        "bounds": {"min": 0, "max": 1_000_000_000_000},
    }
    # Erin used the space's tokens: Dan, another member, is refused there too.
    refused = chat(server, said_in("slack:C1", "second"))
    assert refused.status_code == 429
    assert "This space has used its token allowance for today" in refused.json()["error"]
    # Elsewhere Dan is free; and an admin lifting the allowance lets the space talk again.
    assert chat(server, said_in("slack:C2", "elsewhere")).status_code == 200
    assert httpx.delete(url, headers=ALICE, timeout=10).status_code == 200
    assert chat(server, said_in("slack:C1", "third")).status_code == 200


# ------------------------------------------------------------------------ two instances


@pytest.mark.anyio
async def test_two_instances_on_postgresql_sum_into_the_same_rows(
    make_server: Callable[..., RunningServer],
    postgres_server: PostgresServer,
    ollama: OllamaStandIn,
    tmp_path: Path,
) -> None:
    url = postgres_server.create_database()
    env = {"MERCURY_STATE_URL": url, "MERCURY_RATE_LIMIT_PER_USER": "1000"}
    a = start(make_server, tmp_path, **env)
    b = start(make_server, tmp_path, **env)

    async def one(server: RunningServer, n: int) -> dict[str, int]:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            with anyio.fail_after(60):
                received = await turn(client, {"text": f"question number {n}"}, ALICE)
        [final] = received.of("final")
        return dict(final["usage"])

    # Turns at once on both instances: the upserts add, none is lost to another's write.
    usages = await asyncio.gather(*(one(a if n % 2 else b, n) for n in range(12)))
    expected_input = sum(u["input"] for u in usages)
    expected_output = sum(u["output"] for u in usages)
    for server in (a, b):
        # A report writes this instance's waiting calls first; the other instance's are
        # written by its own flush, within usage.flush_ms (write-behind).
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            with anyio.fail_after(10):
                while True:
                    mine = (await client.get("/me/usage?period=today", headers=ALICE)).json()
                    if mine["total"]["calls"] >= 12:
                        break
                    await asyncio.sleep(0.05)
        assert mine["total"] == {
            "calls": 12,
            "input": expected_input,
            "output": expected_output,
            "cached": 0,
        }
        assert mine["total"]["calls"] == len(ollama.requests)
    assert a.services.manager.ledger.writes + b.services.manager.ledger.writes == 12


# ------------------------------------------------------------------------ the command line

ROOT = Path(__file__).resolve().parents[2]


def test_the_usage_command_prints_ones_own_and_an_admins_everyone_with_json(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, tmp_path: Path
) -> None:
    server = start(make_server, tmp_path)
    assert chat(server, {"text": "hello"}, BOB).status_code == 200

    def cli(*args: str, token: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "channel_http", "usage", *args],
            cwd=ROOT,
            env={
                "PATH": os.environ["PATH"],
                "HOME": str(tmp_path / "home"),
                "XDG_CONFIG_HOME": str(tmp_path / "config"),
                "MERCURY_TOKEN": token,
                "MERCURY_SERVER": server.url,
                "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT)),
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    own = cli("--json", "--period", "today", token="bob-token")
    assert own.returncode == 0, own.stderr
    answer = json.loads(own.stdout)
    assert answer["total"]["calls"] == 1 and answer["rows"][0]["model"] == "llama3.2"
    human = cli(token="bob-token")
    assert "llama3.2" in human.stdout and "1 call" in human.stdout
    everyone = cli("--everyone", token="alice-token")
    assert everyone.returncode == 0, everyone.stderr
    assert "Bob B. (people:bob)" in everyone.stdout
    refused = cli("--everyone", token="bob-token")
    assert refused.returncode == 4 and "administrator" in refused.stderr


# ------------------------------------------------------------------------ model fallback


def test_a_call_a_fallback_answered_is_kept_under_the_model_that_answered(
    make_server: Callable[..., RunningServer],
    ollama: OllamaStandIn,
    openai: OpenAIStandIn,
    tmp_path: Path,
) -> None:
    config = tmp_path / "mercury.yaml"
    config.write_text(
        "model:\n  fallbacks:\n"
        f"    - {{provider: openai, model: {MODEL}, base_url: '{openai.base_url}'}}\n",
        encoding="utf-8",
    )
    server = make_server(MERCURY_CONFIG_FILE=str(config))
    ollama.enqueue(ChatScript(status=503, error="overloaded"))
    answered = chat(server, {"text": "hello there"})
    assert answered.status_code == 200, answered.text
    assert answered.json()["usage"]["cached"] == 0  # the OpenAI protocol's counts
    [row] = ledger_rows(server)
    assert row["model"] == MODEL and row["calls"] == 1  # not llama3.2, which failed


def test_a_turn_of_two_model_calls_writes_twice_and_final_sums_both(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, tmp_path: Path
) -> None:
    server = start(make_server, tmp_path)
    ollama.enqueue(ChatScript(tool_calls=[{"name": "wiki_list", "arguments": {}}]))
    ollama.enqueue(ChatScript.words("There are no notes."))
    received = post_turn(server, {"text": "what notes do I have?"})
    assert received.names()[-1] == "final"
    [final] = received.of("final")
    [row] = ledger_rows(server)
    assert row["calls"] == len(ollama.requests) == 2
    assert server.services.manager.ledger.writes == 2
    assert final["usage"] == {"input": row["input_tokens"], "output": row["output_tokens"]}
