"""MCP servers from npm the tests start: the reference server ``server-everything``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Final

HERE: Final = Path(__file__).parent
EVERYTHING: Final = (
    HERE / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
)


def ensure_node_modules() -> None:
    """Install the servers' npm packages (from the lockfile) unless they already are."""
    if EVERYTHING.is_file():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm isn't on PATH; install Node.js 20.19+ to run the MCP tests.")
    subprocess.run(  # noqa: S603 - a fixed command in our own directory
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=HERE,
        check=True,
        timeout=300,
    )
