"""Every shell command the docs give runs as pasted, after the quickstart (#48 item 5).

The ``sh`` blocks of ``README.md`` and ``docs/*.md`` are what a reader pastes into a terminal
at the top of a fresh clone whose server runs (``scripts/serve --dev-model``). A block that
can't run that way (it starts a server, needs a model server, a platform or values of the
reader's own) says so on the line before its fence::

    <!-- not run: a template, with your own vLLM server -->

Every other block runs here, each file's blocks in order in one shell (a reader's terminal
keeps its variables from one block to the next), against ``mercury-http serve --dev
--dev-model`` started in a folder holding the clone's ``.venv``; the one liberty taken is the
port (the docs' ``127.0.0.1:4100`` becomes the server's). ``curl`` fails on a 4xx or 5xx
answer, and the shell stops at the first command that fails, naming its block.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.test_doc_streams import DOCS, ROOT, SHOWN_SERVER, Server, start_server

pytestmark = [pytest.mark.timeout(240)]

FENCE = re.compile(r"^```(\S*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"<!-- not run: (\S[^>]*\S) -->\n$")
SHELLS = ("sh", "bash", "shell")
PREAMBLE = """\
set -euo pipefail
curl() { command curl --fail-with-body --silent --show-error --max-time 60 "$@"; echo; }
"""


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    text: str
    not_run: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def shell_blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        if match.group(1) not in SHELLS:
            continue
        before = text[: match.start()]
        reason = NOT_RUN.search(before[-300:])
        found.append(
            Block(path, before.count("\n") + 1, match.group(2), reason and reason.group(1))
        )
    return found


def test_every_shell_block_is_sh_and_a_block_not_run_says_why() -> None:
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            assert match.group(1) not in ("bash", "shell", "console"), (
                f"{path.name}: fence shell blocks as ```sh"
            )
        assert len(re.findall(r"^<!-- not run:", text, re.MULTILINE)) == sum(
            1 for b in shell_blocks(path) if b.not_run
        ), f"{path.name}: a 'not run' marker must stand right before an sh block"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    home = tmp_path_factory.mktemp("doc-commands") / "clone"
    started = start_server(home, {}, "--dev-model", shown_model="")
    (home / ".venv").symlink_to(ROOT / ".venv")
    try:
        yield started, home
    finally:
        started.process.send_signal(signal.SIGTERM)
        started.process.wait(20)


RUNNABLE = [path for path in DOCS if any(not b.not_run for b in shell_blocks(path))]


@pytest.mark.parametrize("path", RUNNABLE, ids=[p.name for p in RUNNABLE])
def test_the_docs_commands_run_as_pasted(server: tuple[Server, Path], path: Path) -> None:
    running, cwd = server
    script = [PREAMBLE]
    for block in shell_blocks(path):
        if block.not_run:
            continue
        script.append(f"echo '>>> {block.where}' >&2\n")
        script.append(block.text.replace(SHOWN_SERVER, running.url))
    result = subprocess.run(  # noqa: S603 - bash running the docs' own commands
        ["/bin/bash", "-c", "".join(script)],
        cwd=cwd,
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(cwd),
            "XDG_CONFIG_HOME": str(cwd / ".config"),
            "MERCURY_SERVER": running.url,
            "LANG": "C.UTF-8",
        },
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    ran = re.findall(r">>> (\S+)", result.stderr)
    assert result.returncode == 0, (
        f"the block at {ran[-1] if ran else '?'} failed ({result.returncode}):\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
