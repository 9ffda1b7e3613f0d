"""Clients generated from the served ``openapi.yaml`` work without a hand edit.

The document is fetched from a running server (what a UI developer downloads), then:
openapi-python-client generates a Python package that must import and, against the same
server, read ``/me`` and ``/conversations`` and answer ``/confirm``; openapi-typescript
generates types that ``tsc --strict`` must compile together with a small program using them.
The npm tools come from ``tests/clients`` (``npm ci``, run by ``scripts/test``).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import pkgutil
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import httpx
import pytest

from core.memory.edge import EdgeStore
from core.people.messages import TOKEN_MISSING
from core.tools.registry import Plugin, Tool, ToolCallContext
from tests.conftest import ALICE
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.support.sse import turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

CLIENTS = Path(__file__).resolve().parents[1] / "clients"
BIN = CLIENTS / "node_modules" / ".bin"
PACKAGE = "mercury_generated_client"


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own tools on our own files
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
        env={
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        },
    )


async def _tidy(context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
    return "tidied"


def _plugin() -> Plugin:
    """A confirm-required action, so /confirm has something real to resolve."""
    return Plugin(
        name="chores",
        api_version=4,
        tools=(
            Tool(
                name="tidy",
                description="Tidy up (the person confirms first).",
                parameters={"type": "object", "properties": {}, "additionalProperties": False},
                run=_tidy,
                confirm=True,
            ),
        ),
    )


@pytest.fixture
def server(make_server: Callable[..., RunningServer], tmp_path: Path) -> Iterator[RunningServer]:
    yield make_server({"plugins": [_plugin()], "memory": EdgeStore(tmp_path / "edge")})


@pytest.fixture
def served_document(server: RunningServer, tmp_path: Path) -> Path:
    response = httpx.get(server.url + "/openapi.yaml")
    assert response.status_code == 200
    path = tmp_path / "openapi.yaml"
    path.write_bytes(response.content)
    return path


@pytest.fixture
def python_client(served_document: Path, tmp_path: Path) -> Iterator[ModuleType]:
    """The generated package, imported module by module, then forgotten again."""
    lib = tmp_path / "lib"
    lib.mkdir()
    generated = _run(
        [
            sys.executable,
            "-m",
            "openapi_python_client",
            "generate",
            "--path",
            str(served_document),
            "--meta",
            "none",
            "--output-path",
            str(lib / PACKAGE),
        ],
        cwd=tmp_path,
    )
    output = generated.stdout + generated.stderr
    assert generated.returncode == 0, output
    # Nothing left out: every response of the document made it into the client.
    assert "WARNING" not in output and "Cannot parse" not in output, output
    assert "Unable to" not in output, output
    sys.path.insert(0, str(lib))
    try:
        package = importlib.import_module(PACKAGE)
        for module in pkgutil.walk_packages(package.__path__, PACKAGE + "."):
            importlib.import_module(module.name)  # every module imports
        yield package
    finally:
        sys.path.remove(str(lib))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]


async def test_the_generated_python_client_reads_me_conversations_and_confirms(
    server: RunningServer, python_client: ModuleType, ollama: OllamaStandIn
) -> None:
    api = importlib.import_module(PACKAGE + ".api")
    models = importlib.import_module(PACKAGE + ".models")
    client_module = importlib.import_module(PACKAGE + ".client")
    get_me = importlib.import_module(api.__name__ + ".person.get_me")
    conversations = importlib.import_module(api.__name__ + ".reads.conversations")
    confirm = importlib.import_module(api.__name__ + ".turns.confirm")

    # A staged action and an archived conversation, made the ordinary way.
    pending = list[ChatScript]([ChatScript(tool_calls=[{"name": "tidy", "arguments": {}}])])
    ollama.responder = lambda request: pending.pop(0) if pending else ChatScript.words("Sure.")
    async with httpx.AsyncClient(base_url=server.url) as http:
        with anyio.fail_after(30):
            got = await turn(http, {"text": "tidy up", "conversationId": "gen1"}, ALICE)
    token = got.of("pending")[0]["token"]

    client = client_module.AuthenticatedClient(base_url=server.url, token="alice-token")
    with client as session:
        me = get_me.sync_detailed(client=session)
        assert me.status_code == 200
        assert isinstance(me.parsed, models.GetMeResponse200)
        assert me.parsed.ok is True and me.parsed.name is None

        deadline = time.monotonic() + 20
        while True:
            listed = conversations.sync_detailed(client=session)
            assert listed.status_code == 200
            assert isinstance(listed.parsed, models.ConversationsResponse200)
            if listed.parsed.conversations:
                break
            assert time.monotonic() < deadline, "the conversation never reached the archive"
            await asyncio.sleep(0.1)
        assert [c.conversation_id for c in listed.parsed.conversations] == ["gen1"]

        answer = confirm.sync_detailed(
            client=session, body=models.ConfirmBody(token=token, conversation_id="gen1")
        )
        assert answer.status_code == 200
        assert isinstance(answer.parsed, models.ConfirmResponse200)
        assert answer.parsed.resolved is True
        assert answer.parsed.text == "Confirmed and done."
        again = confirm.sync_detailed(
            client=session, body=models.ConfirmBody(token=token, conversation_id="gen1")
        )
        assert isinstance(again.parsed, models.ConfirmResponse200)
        assert again.parsed.resolved is False

    # A refusal is parsed too: the 401 is in the client, not dropped.
    anonymous = client_module.Client(base_url=server.url)
    with anonymous as session:
        refused = get_me.sync_detailed(client=session)
    assert refused.status_code == 401
    assert isinstance(refused.parsed, models.Failure)
    assert refused.parsed.error == TOKEN_MISSING


TS_PROGRAM = """\
import type { components, paths } from "./api";

type Me = paths["/me"]["get"]["responses"]["200"]["content"]["application/json"];
type Confirmed = paths["/confirm"]["post"]["responses"]["200"]["content"]["application/json"];
type Unauthorized = paths["/me"]["get"]["responses"]["401"]["content"]["application/json"];
type Final = components["schemas"]["FinalEvent"];

const me: Me = { ok: true, name: null, language: "it", timeZone: "Europe/Rome" };
const confirmed: Confirmed = { ok: true, resolved: true, resume: true };
const refused: Unauthorized = { ok: false, error: "unauthorized" };
const final: Final = { text: "Done.", pendingNote: "Action pending." };

export function describe(): string {
  return [me.timeZone ?? "", String(confirmed.resume), refused.error, final.text].join(" ");
}
"""


def test_the_generated_typescript_types_compile_with_a_program_using_them(
    served_document: Path, tmp_path: Path
) -> None:
    for tool in ("openapi-typescript", "tsc"):
        assert (BIN / tool).exists(), (
            f"{tool} is missing: run `cd tests/clients && npm ci` (scripts/test does)"
        )
    assert shutil.which("node"), "node is needed for the TypeScript client test"
    work = tmp_path / "ts"
    work.mkdir()
    generated = _run(
        [str(BIN / "openapi-typescript"), str(served_document), "-o", str(work / "api.d.ts")],
        cwd=work,
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr
    assert "paths" in (work / "api.d.ts").read_text()
    (work / "program.ts").write_text(TS_PROGRAM)
    compiled = _run(
        [
            str(BIN / "tsc"),
            "--strict",
            "--noEmit",
            "--target",
            "es2022",
            "--module",
            "nodenext",
            "--moduleResolution",
            "nodenext",
            "program.ts",
            "api.d.ts",
        ],
        cwd=work,
    )
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
