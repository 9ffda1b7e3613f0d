"""``mercury-http chat`` as a person and a script meet it: in a real pseudo-terminal (pexpect)
and through pipes, against a real server and the Ollama stand-in."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import pexpect
import pytest

from core.tools.registry import LoginRequired, Plugin, Tool, ToolCallContext
from tests.conftest import ALICE
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer

pytestmark = [pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\r")


class Desk:
    """A plugin of the tests' own: a slow lookup, and an action that needs a confirmation."""

    def __init__(self) -> None:
        self.booked: list[str] = []

    async def lookup(self, context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        await asyncio.sleep(1.5)  # long enough for the spinner to be seen
        return "the room is free"

    async def agenda(self, context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        raise LoginRequired("Calendar", "http://127.0.0.1:9/login/calendar?state=s1")

    async def book(self, context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        self.booked.append(str(arguments["room"]))
        return "booked"

    def plugin(self) -> Plugin:
        room = {"type": "object", "properties": {"room": {"type": "string"}}}
        return Plugin(
            name="desk",
            api_version=4,
            tools=(
                Tool(
                    name="lookup",
                    description="Look a room up.",
                    parameters=room,
                    run=self.lookup,
                    label="Looking the room up…",
                    detail=lambda arguments: str(arguments.get("room", "")),
                ),
                Tool(
                    name="agenda",
                    description="Read the agenda.",
                    parameters={"type": "object", "properties": {}},
                    run=self.agenda,
                ),
                Tool(
                    name="book",
                    description="Book a room.",
                    parameters=room,
                    run=self.book,
                    confirm=True,
                    summary=lambda context, arguments: f"Book room {arguments['room']}",
                ),
            ),
        )


@pytest.fixture
def desk() -> Desk:
    return Desk()


@pytest.fixture
def server(make_server: Callable[..., RunningServer], desk: Desk) -> RunningServer:
    return make_server({"plugins": [desk.plugin()]})


def client_env(tmp_path: Path, server: RunningServer, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "MERCURY_TOKEN": "alice-token",
        "MERCURY_SERVER": server.url,
        "TERM": "xterm-256color",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def spawn(env: dict[str, str], *args: str) -> pexpect.spawn:
    """The client in a real pseudo-terminal, 100 columns wide."""
    return pexpect.spawn(
        sys.executable,
        ["-m", "channel_http", "chat", *args],
        cwd=str(ROOT),
        env=env,
        encoding="utf-8",
        dimensions=(40, 100),
        timeout=30,
    )


def piped(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The client with pipes for stdin and stdout, as a script runs it."""
    return subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "channel_http", "chat", *args],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def finish(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    status: int = child.exitstatus
    return status


def steps(*scripts: ChatScript) -> Any:
    pending = list(scripts)
    return lambda request: pending.pop(0) if pending else ChatScript.words("All done.")


# ------------------------------------------------------------------ on a terminal


def test_a_tool_turn_is_shown_live_at_each_step(
    tmp_path: Path, server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = steps(
        ChatScript(
            thinking=["Let me ", "check the room."],
            tool_calls=[{"name": "lookup", "arguments": {"room": "B12"}}],
            delay_s=0.4,
        ),
        ChatScript(content=["Room **B12** ", "is *free*."], delay_s=0.4),
    )
    child = spawn(client_env(tmp_path, server), "--conversation", "tty-1", "is B12 free?")
    child.expect("Conversation tty-1")
    assert finish(child) == 0
    raw = child.before
    seen = ANSI.sub("", raw)
    # What the person saw, frame after frame: the reasoning streaming dimmed, folded into
    # one line once it ended, the tool's spinner, its ✓, then the answer as Markdown.
    steps_seen = [
        seen.index("Let me check the room."),
        re.search(r"▸ Thought for \d\.\d s", seen).start(),  # type: ignore[union-attr]
        re.search(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] Looking the room up… B12", seen).start(),  # type: ignore[union-attr]
        seen.index("✓ Looking the room up… B12"),
        seen.index("Room **B12** is *free*."),  # the text as it streamed
        seen.index("Room B12 is free."),  # then rendered: no asterisks left
    ]
    assert steps_seen == sorted(steps_seen), steps_seen
    assert "\x1b[2" in raw  # dimmed (reasoning)
    assert "\x1b[1mB12" in raw  # bold, from the Markdown


def test_a_login_link_is_shown_with_its_warning_and_a_failed_tool_with_a_cross(
    tmp_path: Path, server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.responder = steps(
        ChatScript(tool_calls=[{"name": "agenda", "arguments": {}}]),
        ChatScript.words("Log in first, please."),
    )
    child = spawn(client_env(tmp_path, server), "--conversation", "tty-5", "my agenda?")
    assert finish(child) == 0
    seen = ANSI.sub("", child.before)
    assert "✗ Using agenda…" in seen
    assert "🔑 Log in to Calendar: http://127.0.0.1:9/login/calendar?state=s1" in seen
    assert "Open it yourself: it signs you in to Calendar as you." in seen
    assert seen.rindex("Log in first, please.") > seen.index("✗ Using agenda…")


def test_the_confirmation_prompt_is_answered_by_typing_a_number(
    tmp_path: Path, server: RunningServer, ollama: OllamaStandIn, desk: Desk
) -> None:
    ollama.responder = steps(
        ChatScript(tool_calls=[{"name": "book", "arguments": {"room": "B12"}}]),
        ChatScript.words(""),
    )
    child = spawn(client_env(tmp_path, server), "--conversation", "tty-2", "book B12")
    child.expect("⏸ Waiting for your confirmation: Book room B12")
    child.expect(r"1\) Confirm")
    child.expect(r"0\) Not now")
    child.expect("Choose a number: ")
    assert desk.booked == []
    child.sendline("7")
    child.expect("Type a number from 0 to 1.")
    child.sendline("1")
    child.expect("Confirmed and done.")
    assert finish(child) == 0
    assert desk.booked == ["B12"]


def test_ctrl_c_cancels_the_turn_and_closes_the_model_request(
    tmp_path: Path, server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(content=["first "] + ["more "] * 100, delay_s=0.2))
    child = spawn(client_env(tmp_path, server), "--conversation", "tty-3", "talk slowly")
    child.expect("first")
    child.sendintr()
    child.expect("Cancelled.")
    assert finish(child) == 130
    ollama.wait_for_closed(1, timeout=15)
    assert ollama.completed == 0


def test_the_interactive_mode_keeps_a_conversation_until_quit(
    tmp_path: Path, server: RunningServer, ollama: OllamaStandIn
) -> None:
    child = spawn(client_env(tmp_path, server), "--conversation", "tty-4")
    child.expect("you › ")
    child.sendline("first words")
    child.expect("You said: .*first words")
    child.expect("you › ")
    child.sendline("second words")
    child.expect("second words")
    child.expect("you › ")
    child.sendline("/new")
    child.expect(r"New conversation (cli-[0-9a-f]{12})")
    fresh = child.match.group(1)
    child.expect("you › ")
    child.sendline("third words")
    child.expect("third words")
    child.expect("you › ")
    child.sendline("/quit")
    assert finish(child) == 0
    bodies = [r["messages"] for r in ollama.requests]
    # The second turn saw the first (one conversation); the third started afresh.
    assert any("first words" in m["content"] for m in bodies[1] if m["role"] == "user")
    assert not any("first words" in m["content"] for m in bodies[2])
    sessions = server.services.manager.sessions
    assert "static:alice:tty-4" in sessions and f"static:alice:{fresh}" in sessions


# ------------------------------------------------------------------------ scripts


def test_json_output_is_one_event_a_line_and_parses_back(
    tmp_path: Path, server: RunningServer, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(thinking=["Hm."], content=["Hello ", "there."]))
    result = piped(client_env(tmp_path, server), "--json", "--conversation", "js", "hello")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["event"] for line in lines] == [
        "turn",  # every event of the stream, the turn's id first
        "reasoning",
        "reasoning_end",
        "text",
        "text",
        "final",
    ]
    final = lines[-1]["data"]
    assert final.pop("usage")["output"] > 0  # the model's counts, as final carries them
    assert final == {"text": "Hello there."}
    assert lines[0]["data"]["turnId"]
    assert "Conversation js" in result.stderr


def test_text_comes_from_stdin_when_none_is_given(
    tmp_path: Path, server: RunningServer, ollama: OllamaStandIn
) -> None:
    result = piped(client_env(tmp_path, server), "--conversation", "pipe", stdin="from a pipe\n")
    assert result.returncode == 0, result.stderr
    assert "You said:" in result.stdout and "from a pipe" in result.stdout


def test_a_file_goes_up_and_the_answers_file_is_saved(
    tmp_path: Path, server: RunningServer, ollama: OllamaStandIn
) -> None:
    payload = bytes(range(256))
    sent = tmp_path / "numbers.bin"
    sent.write_bytes(payload)
    ollama.responder = steps(
        ChatScript(
            tool_calls=[
                {
                    "name": "outbox_write",
                    "arguments": {
                        "filename": "back.bin",
                        "content": base64.b64encode(payload[::-1]).decode(),
                        "encoding": "base64",
                    },
                }
            ]
        )
    )
    out = tmp_path / "out"
    result = piped(
        client_env(tmp_path, server),
        "--conversation",
        "files",
        "--file",
        str(sent),
        "--save-to",
        str(out),
        "reverse it",
    )
    assert result.returncode == 0, result.stderr
    assert "All done." in result.stdout
    assert (out / "back.bin").read_bytes() == payload[::-1]
    assert "Saved" in result.stderr
    user = [m for m in ollama.requests[0]["messages"] if m["role"] == "user"][-1]
    assert "-numbers.bin" in user["content"]


def test_the_command_speaks_the_language_the_server_speaks_to_the_person(
    tmp_path: Path, server: RunningServer, ollama: OllamaStandIn
) -> None:
    italian = client_env(tmp_path, server, LANG="it_IT.UTF-8")
    ollama.responder = steps(
        ChatScript(tool_calls=[{"name": "book", "arguments": {"room": "D4"}}]),
        ChatScript.words(""),
    )
    waiting = piped(italian, "--conversation", "lingua", "book D4")
    assert waiting.returncode == 3, waiting.stderr
    assert "Conversazione lingua (continuala con --conversation lingua)" in waiting.stderr
    assert "⏸ attende te" in waiting.stderr  # the tool line's outcome
    assert "In attesa della tua conferma: " in waiting.stdout
    ollama.responder = None
    # A language the person saved wins over the terminal's, as it does on the server.
    saved = httpx.patch(server.url + "/me", headers=ALICE, json={"language": "de"})
    assert saved.status_code == 200
    try:
        german = piped(italian, "--conversation", "sprache", stdin="")
        assert german.returncode == 2
        assert "nichts zu senden" not in german.stderr  # no server asked yet: the terminal's
        assert "niente da inviare" in german.stderr
        ollama.enqueue(ChatScript.words("Hallo."))
        answered = piped(italian, "--conversation", "sprache", "hallo")
        assert "Unterhaltung sprache (fortsetzen mit --conversation sprache)" in answered.stderr
    finally:
        httpx.patch(server.url + "/me", headers=ALICE, json={"language": None})


def test_each_exit_status(tmp_path: Path, server: RunningServer, ollama: OllamaStandIn) -> None:
    env = client_env(tmp_path, server)
    # 3: a staging, with no terminal to ask on: the choices are printed with how to confirm.
    ollama.responder = steps(
        ChatScript(tool_calls=[{"name": "book", "arguments": {"room": "C3"}}]),
        ChatScript.words(""),
    )
    waiting = piped(env, "--conversation", "st", "book C3")
    assert waiting.returncode == 3, waiting.stderr
    assert "Waiting for your confirmation: Book room C3" in waiting.stdout
    command = waiting.stdout.strip().splitlines()[-1].split(": ", 1)[1]
    token = command.rsplit(" ", 1)[1]
    assert command == f"mercury-http chat --conversation st {token}"
    # 0: the later call confirms.
    confirmed = piped(env, "--conversation", "st", token)
    assert confirmed.returncode == 0
    assert "Confirmed and done." in confirmed.stdout
    # 1: the model fails the turn.
    ollama.responder = None
    ollama.enqueue(ChatScript(status=500, error="out of memory"))
    failed = piped(env, "--conversation", "st", "hello")
    assert failed.returncode == 1
    assert "answered with an error: out of memory" in failed.stderr
    # 2: usage errors: no token, a missing file, nothing to send, an unknown option.
    assert piped({**env, "MERCURY_TOKEN": ""}, "hi").returncode == 2
    assert piped(env, "--file", str(tmp_path / "missing"), "hi").returncode == 2
    assert piped(env, stdin="").returncode == 2
    assert piped(env, "--no-such-option", "hi").returncode == 2
    # 4: refused.
    refused = piped({**env, "MERCURY_TOKEN": "wrong"}, "hi")
    assert refused.returncode == 4
    assert "The server doesn't recognize this token" in refused.stderr
    assert "The token came from MERCURY_TOKEN or the config file." in refused.stderr
    assert "Traceback" not in refused.stderr + failed.stderr + waiting.stderr


def test_the_token_and_server_come_from_the_user_config_file(
    tmp_path: Path, server: RunningServer, ollama: OllamaStandIn
) -> None:
    config = tmp_path / "config" / "mercury-http" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'token = "alice-token"\nserver = "{server.url}"\n')
    env = client_env(tmp_path, server)
    del env["MERCURY_TOKEN"], env["MERCURY_SERVER"]
    result = piped(env, "--no-stream", "--conversation", "cfg", "from config")
    assert result.returncode == 0, result.stderr
    assert "from config" in result.stdout
