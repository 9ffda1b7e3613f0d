"""What ships: the Dockerfile (linted with hadolint), compose.yaml, the LICENSE, the wheel."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import tomllib
import venv
from pathlib import Path

import httpx
import pytest
import yaml

pytestmark = [pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_the_dockerfile_passes_hadolint() -> None:
    # No container engine runs here, so the image is linted rather than built.
    linted = subprocess.run(  # noqa: S603 - the linter from our own dev extra
        [str(BIN / "hadolint"), "--no-color", "Dockerfile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_the_image_is_multi_stage_slim_non_root_with_a_volume_and_a_livez_healthcheck() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    stages = [line for line in lines if line.startswith("FROM ")]
    assert len(stages) == 2 and all("-slim" in stage for stage in stages)
    assert any(line.startswith("COPY --from=build") for line in lines)
    user = next(line for line in lines if line.startswith("USER "))
    assert user.split()[1].split(":")[0] not in ("0", "root")
    assert 'VOLUME ["/srv/mercury/data"]' in lines
    health = " ".join(lines[lines.index(next(x for x in lines if x.startswith("HEALTHCHECK"))) :])
    assert "/livez" in health


def test_compose_runs_mercury_beside_ollama_and_qdrant_on_request() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    assert services["mercury"]["environment"]["OLLAMA_HOST"] == "http://ollama:11434"
    assert "mercury-data:/srv/mercury/data" in services["mercury"]["volumes"]
    assert "ollama" in services["mercury"]["depends_on"]
    assert services["qdrant"]["profiles"] == ["qdrant"]


def test_the_license_file_is_the_one_pyproject_declares() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
    assert declared == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")


@pytest.mark.slow
def test_the_wheel_builds_and_installs_into_a_clean_venv(tmp_path: Path) -> None:
    # Minutes on a loaded machine even from pip's cache: it runs with scripts/soak.
    subprocess.run(  # noqa: S603 - python -m build on our own tree
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = (tmp_path / "dist").glob("mercury_http-*.whl")
    venv.create(tmp_path / "venv", with_pip=True)
    target = tmp_path / "venv" / "bin"
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(tmp_path))}
    subprocess.run(  # noqa: S603 - pip of the venv we just made
        [str(target / "pip"), "install", "--quiet", str(wheel)],
        check=True,
        capture_output=True,
        timeout=900,
        env=env,
    )
    helped = subprocess.run(  # noqa: S603 - the installed entry point
        [str(target / "mercury-http"), "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert helped.returncode == 0, helped.stderr
    assert "HTTP_SURFACE_PORT" in helped.stdout and "--host" in helped.stdout
    version = subprocess.run(  # noqa: S603 - the installed entry point
        [str(target / "mercury-http"), "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    assert version.stdout.strip() == "mercury-http 0.1.0"
    scripted = subprocess.run(  # noqa: S603 - the venv's python: the scripted model shipped
        [str(target / "python"), "-c", "import dev_model.command; print(dev_model.DEMOS)"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert scripted.returncode == 0 and "confirm" in scripted.stdout, scripted.stderr
    _serves_the_contract_and_the_ui_from_the_wheel(target, tmp_path, env)


def _serves_the_contract_and_the_ui_from_the_wheel(
    target: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    """The installed server, run outside the checkout, finds what the wheel ships with it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("wb")
    served = subprocess.Popen(  # noqa: S603 - the installed entry point
        [str(target / "mercury-http"), "serve", "--dev", "--port", str(port)],
        cwd=tmp_path,
        env={
            **env,
            "MERCURY_DATA_DIR": str(tmp_path / "data"),
            "OLLAMA_HOST": "http://127.0.0.1:9",
        },
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert served.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(url + "/livez", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.3)
        contract = httpx.get(url + "/openapi.yaml", timeout=10)
        assert contract.status_code == 200
        assert contract.content == (ROOT / "openapi.yaml").read_bytes()
        page = httpx.get(url + "/ui/", timeout=10)
        assert page.status_code == 200 and "<script" in page.text
        shipped = sorted(p.name for p in (ROOT / "channel_http" / "ui" / "assets").iterdir())
        for name in shipped:
            asset = httpx.get(f"{url}/ui/assets/{name}", timeout=10)
            assert asset.status_code == 200, name
    finally:
        served.terminate()
        served.wait(30)
        log.close()
