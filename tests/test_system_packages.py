"""``scripts/test``'s Debian packages (#36), its shell logic alone, and the tests' side of it.

``scripts/_system_packages`` runs in bash with a PATH of stand-ins: ``id`` says who runs it,
``apt-get`` (when present) records what it was asked. Nothing is installed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.system import missing

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "_system_packages"
NEEDS = """
source "$SCRIPT"
need_debian chromium "the browser UI tests"
need_debian haproxy "the multi-instance suite" --no-install-recommends
missing_sentence
"""


def run(tmp_path: Path, *, uid: int, apt: bool, ci: bool) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    stubs = [bin_dir / "id"]
    if apt:
        (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "apt.log"}\n')
        stubs.append(bin_dir / "apt-get")
    for stub in stubs:
        stub.chmod(0o755)
    env = {"PATH": str(bin_dir), "SCRIPT": str(SCRIPT)}
    if ci:
        env["CI"] = "true"
    return subprocess.run(  # noqa: S603 - bash and a script of ours
        ["/bin/bash", "-euo", "pipefail", "-c", NEEDS],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def apt_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "apt.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("ci", [False, True], ids=["local", "ci"])
def test_as_root_with_apt_the_packages_are_installed_as_before(tmp_path: Path, ci: bool) -> None:
    result = run(tmp_path, uid=0, apt=True, ci=ci)
    assert result.returncode == 0, result.stderr
    assert apt_calls(tmp_path) == [
        "update -qq",
        "install -y -qq chromium",
        "update -qq",
        "install -y -qq --no-install-recommends haproxy",
    ]
    assert result.stdout == ""  # nothing missing, nothing said
    assert "Installing Debian's chromium for the browser UI tests" in result.stderr


@pytest.mark.parametrize(("uid", "apt"), [(1000, True), (0, False)], ids=["not-root", "no-apt"])
def test_outside_ci_what_is_missing_is_said_in_one_sentence_and_the_rest_runs(
    tmp_path: Path, uid: int, apt: bool
) -> None:
    result = run(tmp_path, uid=uid, apt=apt, ci=False)
    assert result.returncode == 0, result.stderr
    assert apt_calls(tmp_path) == []
    [sentence] = result.stdout.splitlines()
    assert sentence.startswith("Not installed, so the tests that need them are skipped")
    assert "chromium (the browser UI tests), haproxy (the multi-instance suite)" in sentence


@pytest.mark.parametrize(("uid", "apt"), [(1000, True), (0, False)], ids=["not-root", "no-apt"])
def test_in_ci_a_package_it_cannot_install_fails_the_run(
    tmp_path: Path, uid: int, apt: bool
) -> None:
    result = run(tmp_path, uid=uid, apt=apt, ci=True)
    assert result.returncode == 1
    assert apt_calls(tmp_path) == []
    [line] = result.stderr.splitlines()
    assert line.startswith("CI needs Debian's chromium for the browser UI tests")


def test_the_test_script_uses_the_shared_logic_for_each_package() -> None:
    text = (ROOT / "scripts" / "test").read_text()
    assert "source scripts/_system_packages" in text
    for package in ("chromium", "postgresql", "haproxy"):
        assert f"need_debian {package} " in text
    assert "apt-get" not in text  # every install goes through need_debian
    assert "missing_sentence" in text and "-rs" in text


def test_a_test_needing_a_missing_package_skips_outside_ci_and_fails_in_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="HAProxy isn't installed"):
        missing("HAProxy isn't installed.")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="HAProxy isn't installed"):
        missing("HAProxy isn't installed.")
