"""The streams and answers the docs show are captured from a real server (#36 item 8).

Each captured block in ``docs/*.md`` and ``README.md`` follows a marker line naming a
scenario, ``<!-- wire: plain-turn -->``, right before its fenced block. The test starts
``mercury-http serve --dev --dev-model`` (the quickstart's ``scripts/serve --dev-model``) as a
process, sends each scenario's request as the curl line the block shows, replaces what
changes from run to run (turn ids, reasoning ids, tool call ids, tokens, ports, login states)
with placeholders, and compares the result with the doc's block. A block that differs fails
with a diff; ``MERCURY_UPDATE_DOC_STREAMS=1`` rewrites the blocks from the server instead:

    MERCURY_UPDATE_DOC_STREAMS=1 .venv/bin/python -m pytest -q tests/docs/test_doc_streams.py

A capture shows every frame, except where a scenario keeps only the events its section is
about, or a run of deltas is long: the frames left out are one SSE comment line
(``: 12 text events left out``), which SSE clients ignore, and the ``id:`` numbers show the gap.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

pytestmark = [pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
UPDATE = os.environ.get("MERCURY_UPDATE_DOC_STREAMS") == "1"
SHOWN_SERVER = "http://127.0.0.1:4100"
"""The address the docs show for the server (the default port)."""
SHOWN_MODEL_HOST = "http://127.0.0.1:11434"
"""The docs' address for a model server that isn't there (``OLLAMA_HOST``'s default)."""
MARKER = re.compile(r"^<!-- wire: ([a-z0-9-]+) -->$")
DELTAS = ("reasoning", "text")
LONG_RUN = 5
"""A run of more deltas of one kind than this shows its first two and its last one."""


@dataclass(frozen=True)
class Scenario:
    """One request the docs show, and which of its answer's frames they show."""

    text: str
    conversation: str
    route: str = "/turn"
    files: list[dict[str, str]] = field(default_factory=list)
    keep: frozenset[str] | None = None
    """Only these events (and ``turn``); None: every event, long delta runs shortened."""
    shorten: bool = True
    server: str = "dev-model"
    """``dev-model``: ``serve --dev-model``; ``no-model``: a server whose model isn't there."""
    answers: str | None = None
    """An earlier scenario whose first token this one sends as its text."""


SCENARIOS: dict[str, Scenario] = {
    "plain-turn": Scenario("Hello!", "first", shorten=False),
    "no-model": Scenario("Hello!", "first", shorten=False, server="no-model"),
    "error-midway": Scenario("/demo error", "demo-error"),
    "tool-turn": Scenario("/demo tool", "demo-tool"),
    "pending": Scenario(
        "/demo confirm",
        "demo-confirm",
        keep=frozenset({"tool", "tool_finish", "pending", "final"}),
    ),
    "pending-choices": Scenario(
        "/demo choices",
        "demo-choices",
        keep=frozenset({"tool", "tool_finish", "pending", "final"}),
    ),
    "confirm-token": Scenario("<token1>", "demo-confirm", answers="pending"),
    "login": Scenario(
        "/demo login", "demo-login", keep=frozenset({"tool", "tool_finish", "login", "final"})
    ),
    "chat-file": Scenario(
        "Summarize this",
        "reports",
        route="/chat",
        files=[{"name": "q3.csv", "data": "cmVnaW9uLHNhbGVzCm5vcnRoLDEyMAo="}],
    ),
    "chat-pending": Scenario("/demo choices", "demo-chat", route="/chat"),
}


# --- the servers ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    url: str
    token: str
    model_url: str
    shown_model: str
    """How the docs show ``model_url``."""
    process: subprocess.Popen[str]


def start_server(home: Path, env: dict[str, str], *arguments: str, shown_model: str) -> Server:
    """``mercury-http serve --dev`` in ``home`` (no mercury.yaml there), once it listens."""
    port = free_port()
    home.mkdir()
    log = home / "server.log"  # a file, not a pipe: a pipe nobody reads fills and blocks
    with log.open("w") as out:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [
                sys.executable,
                "-m",
                "channel_http",
                "serve",
                "--dev",
                "--port",
                str(port),
                *arguments,
            ],
            cwd=home,
            env={
                "PATH": os.environ["PATH"],
                "PYTHONPATH": str(ROOT),
                "MERCURY_DATA_DIR": str(home / "data"),
                "MERCURY_MEMORY_STORE": "off",
                **env,
            },
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    deadline = time.monotonic() + 90
    while "mercury-http: listening on" not in (output := log.read_text()):
        assert time.monotonic() < deadline and process.poll() is None, output
        time.sleep(0.1)
    token = re.search(r"Bearer (dev-[\w-]+)'", output)
    assert token is not None, output
    model = re.search(
        r"Scripted model \(mercury-http dev-model\) on (http://127\.0\.0\.1:\d+)", output
    )
    model_url = model.group(1) if model else env.get("OLLAMA_HOST", "")
    return Server(f"http://127.0.0.1:{port}", token.group(1), model_url, shown_model, process)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    home = tmp_path_factory.mktemp("doc-streams")
    started: dict[str, Server] = {}
    try:
        started["dev-model"] = start_server(
            home / "dev-model", {}, "--dev-model", shown_model="http://127.0.0.1:<port>"
        )
        # Nothing listens at the model's address (a port taken and freed again): the docs
        # show it as Ollama's default address.
        started["no-model"] = start_server(
            home / "no-model",
            {"OLLAMA_HOST": f"http://127.0.0.1:{free_port()}"},
            shown_model=SHOWN_MODEL_HOST,
        )
        yield started
    finally:
        for server in started.values():
            server.process.send_signal(signal.SIGTERM)
            server.process.wait(20)


# --- capturing and normalizing ----------------------------------------------------------


def body_of(scenario: Scenario) -> dict[str, Any]:
    body: dict[str, Any] = {"text": scenario.text, "conversationId": scenario.conversation}
    if scenario.files:
        body["files"] = scenario.files
    return body


def command(scenario: Scenario) -> str:
    """The curl line a reader runs for ``scenario``, as the block shows it."""
    body = json.dumps(body_of(scenario), ensure_ascii=False, separators=(",", ":"))
    streaming = "-N " if scenario.route == "/turn" else "-s "
    return (
        f"$ curl {streaming}-X POST {SHOWN_SERVER}{scenario.route} "
        "-H 'content-type: application/json' \\\n"
        f"    -H \"authorization: Bearer $TOKEN\" -d '{body}'"
    )


class Placeholders:
    """Values that change from run to run, each replaced by a stable name in order met."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def add(self, value: str, kind: str, *, numbered: bool = True) -> None:
        if not value or value in self.names:
            return
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.names[value] = f"<{kind}{self.counts[kind]}>" if numbered else f"<{kind}>"

    def found_in(self, data: Any) -> None:
        """Collect the volatile values of one event's data or of a JSON answer."""
        if isinstance(data, list):
            for item in data:
                self.found_in(item)
            return
        if not isinstance(data, dict):
            return
        self.add(str(data.get("turnId") or ""), "turn", numbered=False)
        if isinstance(data.get("id"), str):  # a reasoning block's
            self.add(data["id"], "r")
        self.add(str(data.get("toolCallId") or ""), "call")
        self.add(str(data.get("token") or ""), "token")
        self.add(str(data.get("confirmationId") or ""), "confirmation")
        if isinstance(data.get("expiresAt"), str):  # a staging's expiry: the time it ran
            self.add(data["expiresAt"], "expires")
        if isinstance(data.get("url"), str):  # a login link: its state and PKCE challenge
            query = dict(parse_qsl(urlsplit(data["url"]).query))
            self.add(query.get("state", ""), "state", numbered=False)
            self.add(query.get("code_challenge", ""), "challenge", numbered=False)
        for value in data.values():
            if isinstance(value, dict | list):
                self.found_in(value)

    def apply(self, text: str) -> str:
        for value in sorted(self.names, key=len, reverse=True):
            text = text.replace(value, self.names[value])
        return text


def encoded(url: str) -> str:
    return url.replace(":", "%3A").replace("/", "%2F")


def addresses(text: str, server: Server) -> str:
    """The server's address as the docs show it; the scripted model's port as ``<port>``."""
    for real, shown in ((server.url, SHOWN_SERVER), (server.model_url, server.shown_model)):
        text = text.replace(real, shown)
        text = text.replace(encoded(real), encoded(shown))  # in a redirect_uri
    # An inbox file's name starts with the time it arrived, in epoch milliseconds.
    return re.sub(r"inbox/\d{13}-", "inbox/<ms>-", text)


@dataclass
class Frame:
    name: str
    lines: list[str]


def frames_of(raw: str) -> list[Frame]:
    frames = []
    for chunk in raw.split("\n\n"):
        lines = [line for line in chunk.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue  # a heartbeat
        name = next(line[7:] for line in lines if line.startswith("event: "))
        frames.append(Frame(name, lines))
    return frames


def shown_frames(frames: list[Frame], scenario: Scenario) -> list[Frame | str]:
    """The frames a block shows, with one comment line for each run of frames left out."""
    show = [True] * len(frames)
    for i, frame in enumerate(frames):
        if scenario.keep is not None and frame.name != "turn" and frame.name not in scenario.keep:
            show[i] = False
    if scenario.shorten:
        i = 0
        while i < len(frames):
            j = i
            while j < len(frames) and frames[j].name == frames[i].name:
                j += 1
            if frames[i].name in DELTAS and j - i > LONG_RUN:
                for k in range(i + 2, j - 1):
                    show[k] = False
            i = j
    shown: list[Frame | str] = []
    left_out: list[str] = []
    for frame, visible in zip(frames, show, strict=True):
        if not visible:
            left_out.append(frame.name)
            continue
        if left_out:
            shown.append(left_out_line(left_out))
            left_out = []
        shown.append(frame)
    if left_out:
        shown.append(left_out_line(left_out))
    return shown


def left_out_line(names: list[str]) -> str:
    counted: dict[str, int] = {}
    for name in names:
        counted[name] = counted.get(name, 0) + 1
    parts = [f"{n} {name} event{'s' if n > 1 else ''}" for name, n in counted.items()]
    return ": " + ", ".join(parts) + " left out"


def capture(
    scenario: Scenario, server: Server, earlier: Placeholders | None = None
) -> tuple[str, Placeholders]:
    """The block's text (the curl line, then the answer as the docs show it), and the
    volatile values met in it."""
    names = Placeholders()
    if earlier is not None:  # the token the earlier turn staged, under the same name
        token = next(value for value, name in earlier.names.items() if name == "<token1>")
        names.add(token, "token")
        scenario = replace(scenario, text=token)
    headers = {"authorization": f"Bearer {server.token}"}
    url = server.url + scenario.route
    with httpx.stream("POST", url, json=body_of(scenario), headers=headers, timeout=60) as answer:
        raw = answer.read().decode("utf-8")
    assert answer.status_code == 200, raw
    if scenario.route == "/chat":
        names.found_in(json.loads(raw))
        shown = raw
    else:
        frames = frames_of(raw)
        for frame in frames:
            for line in frame.lines:
                if line.startswith("data: "):
                    names.found_in(json.loads(line[6:]))
        parts = [
            part if isinstance(part, str) else "\n".join(part.lines)
            for part in shown_frames(frames, scenario)
        ]
        shown = "\n\n".join(parts)
    return names.apply(command(scenario)) + "\n" + addresses(names.apply(shown), server), names


# --- the docs' blocks -------------------------------------------------------------------


@dataclass
class Block:
    path: Path
    name: str
    start: int
    """The index of the block's first line (after its opening fence)."""
    end: int
    """The index of its closing fence."""


def blocks_in(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").split("\n")
    found = []
    for i, line in enumerate(lines):
        marked = MARKER.match(line)
        if marked is None:
            continue
        assert i + 1 < len(lines) and lines[i + 1].startswith("```"), (
            f"{path.name}:{i + 1}: a wire marker must stand right before a fenced block"
        )
        end = next(j for j in range(i + 2, len(lines)) if lines[j] == "```")
        found.append(Block(path, marked.group(1), i + 2, end))
    return found


def all_blocks() -> list[Block]:
    return [block for path in DOCS for block in blocks_in(path)]


def rewrite(path: Path, captured: Callable[[str], str]) -> None:
    lines = path.read_text(encoding="utf-8").split("\n")
    for block in reversed(blocks_in(path)):
        lines[block.start : block.end] = captured(block.name).split("\n")
    path.write_text("\n".join(lines), encoding="utf-8")


def test_every_marked_block_names_a_scenario_and_every_scenario_is_shown() -> None:
    named = {block.name for block in all_blocks()}
    assert named - set(SCENARIOS) == set(), "blocks naming no scenario in this test"
    assert set(SCENARIOS) - named == set(), "scenarios no doc shows"


def test_the_docs_show_the_streams_a_real_server_sends(servers: dict[str, Server]) -> None:
    # In SCENARIOS' order, whatever the docs' order: a turn may change what a later one sees
    # (the choices demo writes a note, which the tool demo would then list), or answer it.
    captured: dict[str, str] = {}
    met: dict[str, Placeholders] = {}
    for name, scenario in SCENARIOS.items():
        earlier = met[scenario.answers] if scenario.answers else None
        captured[name], met[name] = capture(scenario, servers[scenario.server], earlier)
    if UPDATE:
        for path in DOCS:
            if blocks_in(path):
                rewrite(path, captured.__getitem__)
    differences = []
    for block in all_blocks():
        lines = block.path.read_text(encoding="utf-8").split("\n")
        shown = lines[block.start : block.end]
        wire = captured[block.name].split("\n")
        if shown != wire:
            where = f"{block.path.relative_to(ROOT)} (wire: {block.name})"
            differences.append(
                "\n".join(
                    difflib.unified_diff(
                        shown,
                        wire,
                        f"{where}, as documented",
                        "as the server sends it",
                        lineterm="",
                    )
                )
            )
    if differences:
        pytest.fail(
            "The docs' captured streams differ from the wire. Update them with\n"
            "  MERCURY_UPDATE_DOC_STREAMS=1 .venv/bin/python -m pytest -q "
            "tests/docs/test_doc_streams.py\n"
            "and read the diff before committing it.\n\n" + "\n\n".join(differences),
            pytrace=False,
        )
