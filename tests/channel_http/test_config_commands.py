"""The command line an operator asks questions of: --version, check-config, init, --dev."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from channel_http.cli.command import main
from core.config.settings import load_settings
from core.version import core_version
from tests.conftest import TOKENS
from tests.support.ollama_standin import OllamaStandIn
from tests.support.ports import free_port

pytestmark = [pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ollama: OllamaStandIn
) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith(("MERCURY_", "OLLAMA_", "AUTH_", "HTTP_SURFACE_", "QDRANT_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MERCURY_CONFIG_FILE", "none")
    monkeypatch.setenv("OLLAMA_HOST", ollama.url)
    monkeypatch.setenv("MERCURY_MEMORY_STORE", "off")
    return monkeypatch


def test_version_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.strip() == f"mercury-http {core_version()}"


def test_check_config_prints_the_settings_with_secrets_masked_and_exits_0(
    environment: pytest.MonkeyPatch, ollama: OllamaStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    environment.setenv("MERCURY_AUTH", "static")
    environment.setenv("AUTH_STATIC_TOKENS", json.dumps(TOKENS))
    ollama.models = ["llama3.2"]
    try:
        assert main(["check-config"]) == 0
    finally:
        ollama.models = None
    out = capsys.readouterr().out
    assert "auth.static_tokens = (set)" in out
    assert "alice-token" not in out
    assert "ollama.model = llama3.2" in out
    assert out.rstrip().endswith("No problems found.")


def test_check_config_lists_every_problem_and_exits_1(
    environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    environment.setenv("MERCURY_AUTH", "oidc")  # without OIDC_ISSUER
    assert main(["check-config"]) == 1  # and the stand-in has no model
    problems = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Pro")]
    assert len(problems) == 2
    assert "OIDC" in problems[0]
    assert problems[1].endswith("run: ollama pull llama3.2")


def test_check_config_right_after_the_quickstart_says_development_mode_makes_a_token(
    environment: pytest.MonkeyPatch, ollama: OllamaStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    ollama.models = ["llama3.2"]
    try:
        assert main(["check-config"]) == 0  # no auth configured: what scripts/serve starts on
    finally:
        ollama.models = None
    out = capsys.readouterr().out
    assert "Problem" not in out
    assert "Note: No auth provider is configured. Development mode (scripts/serve" in out
    assert str(Path("data", "dev-token")) in out
    assert out.rstrip().endswith("No problems found.")


def test_check_config_prints_the_settings_with_a_missing_bridge_secret(
    environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    environment.setenv("MERCURY_AUTH", "static")
    environment.setenv("AUTH_STATIC_TOKENS", json.dumps(TOKENS))
    environment.setenv("MERCURY_SLACK", "true")
    environment.setenv("SLACK_BOT_TOKEN", "xoxb-secret")
    assert main(["check-config"]) == 1
    out = capsys.readouterr().out
    assert "http.port = 4100" in out and "slack.enabled = true" in out
    assert "slack.bot_token = (set)" in out and "xoxb-secret" not in out
    problems = [line for line in out.splitlines() if line.startswith("Problem: ")]
    assert "SLACK_SIGNING_SECRET is not set" in problems[0]
    assert out.index("http.port = ") < out.index("Problem: ")


def test_check_config_prints_the_spaces_as_the_file_writes_them(
    environment: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "spaces.yaml").write_text(
        "spaces:\n"
        '  "slack:C0123ABC":\n'
        "    admins: [people:alice]\n"
        "    rate_limit: 5\n"
        '    trigger: {match: prefix, pattern: "!m"}\n'
        '  "telegram:-100200":\n'
        "    members: [telegram:42]\n"
    )
    main(["check-config", "--config", "spaces.yaml"])
    lines = capsys.readouterr().out.splitlines()
    assert "SpaceConfig" not in "\n".join(lines)
    assert [line for line in lines if line.startswith("spaces")] == [
        "spaces.\"slack:C0123ABC\" = {admins: ['people:alice'], rate_limit: 5, trigger: "
        "{match: prefix, pattern: '!m'}}",
        "spaces.\"telegram:-100200\" = {members: ['telegram:42']}",
    ]


def test_check_config_names_a_bad_file(
    environment: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.yaml").write_text("http:\n  port: many\n")
    assert main(["check-config", "--config", "bad.yaml"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("Problem: ") and "http.port" in out


def test_init_writes_every_setting_at_its_default_and_keeps_an_existing_file(
    environment: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert main(["init"]) == 0
    written = tmp_path / "mercury.yaml"
    text = written.read_text()
    assert "# The address to listen on. (HTTP_SURFACE_HOST)" in text
    assert "#   AUTH_STATIC_TOKENS:" in text  # secrets: named, never in the file
    from_file = load_settings({"MERCURY_CONFIG_FILE": "mercury.yaml"}, cwd=tmp_path)
    defaults = load_settings({"MERCURY_CONFIG_FILE": "none"}, cwd=tmp_path)
    assert from_file.config_file == written
    for name in defaults.__struct_fields__:
        if name != "config_file":
            assert getattr(from_file, name) == getattr(defaults, name), name
    written.write_text("# mine\n")
    assert main(["init"]) == 1
    assert written.read_text() == "# mine\n"
    assert main(["init", "--force"]) == 0
    assert written.read_text() == text


def test_dev_mode_listens_on_loopback_only_and_port_overrides_the_environment(
    tmp_path: Path, ollama: OllamaStandIn
) -> None:
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "MERCURY_CONFIG_FILE": "",
        "MERCURY_DATA_DIR": str(tmp_path / "data"),
        "HTTP_SURFACE_PORT": "1",  # --port wins
        "OLLAMA_HOST": ollama.url,
        "MERCURY_MEMORY_STORE": "off",
    }
    process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "channel_http", "serve", "--dev", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while not any("Uvicorn running on" in line for line in lines):
            assert time.monotonic() < deadline and process.poll() is None, lines
            lines.append(process.stdout.readline())
        running = next(line for line in lines if "Uvicorn running on" in line)
        assert f"http://127.0.0.1:{port}" in running
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) in (0, -signal.SIGTERM)
        if process.stdout is not None:
            process.stdout.close()
