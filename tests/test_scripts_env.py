"""scripts/_env installs what each script needs: serving alone never pulls the dev toolchain.

The script runs in a copy of the project's ``scripts/_env`` and ``pyproject.toml`` whose
``.venv/bin/python`` is a stand-in writing down each install it is asked for.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.timeout(60)]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "_env", tmp_path / "scripts" / "_env")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "installs"}\n')
    python.chmod(0o755)
    return tmp_path


def installs(project: Path, *assignments: str) -> list[str]:
    """The installs sourcing scripts/_env asked for (with ``assignments`` in front)."""
    log = project / "installs"
    log.unlink(missing_ok=True)
    subprocess.run(  # noqa: S603 - bash sourcing the project's own script
        ["/bin/bash", "-c", f"{' '.join(assignments)} source scripts/_env"],
        cwd=project,
        check=True,
        capture_output=True,
        timeout=30,
    )
    lines = log.read_text().splitlines() if log.exists() else []
    return [line for line in lines if "install" in line and "--upgrade pip" not in line]


def test_serving_installs_the_package_without_the_dev_toolchain(project: Path) -> None:
    assert installs(project, "MERCURY_SERVE_ONLY=1") == ["-m pip install --quiet -e ."]
    assert installs(project, "MERCURY_SERVE_ONLY=1") == []  # its own stamp, current
    # The tests and checks add the dev extra; once they have, serving installs nothing.
    assert installs(project) == ["-m pip install --quiet -e .[dev]"]
    (project / ".venv" / ".mercury-installed-serve").unlink()
    assert installs(project, "MERCURY_SERVE_ONLY=1") == []
    assert installs(project, "MERCURY_EXTRAS=bench") == ["-m pip install --quiet -e .[dev,bench]"]


def test_scripts_serve_asks_for_serving_only() -> None:
    assert "MERCURY_SERVE_ONLY=1 source" in (ROOT / "scripts" / "serve").read_text()
