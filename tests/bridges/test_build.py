"""The bridges the settings turn on, built without touching the network."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bridges.build import build_bridges
from bridges.port import GatewayBridge, WebhookBridge
from core.config.settings import ConfigurationError, load_settings

ALL_ON = {
    "MERCURY_CONFIG_FILE": "",
    "MERCURY_SLACK": "true",
    "SLACK_BOT_TOKEN": "xoxb-test",
    "SLACK_SIGNING_SECRET": "s3cret",
    "MERCURY_TELEGRAM": "true",
    "TELEGRAM_BOT_TOKEN": "123:abc",
    "TELEGRAM_WEBHOOK_SECRET": "tg-secret",
    "MERCURY_DISCORD": "true",
    "DISCORD_BOT_TOKEN": "discord-token",
    "MERCURY_WHATSAPP": "true",
    "WHATSAPP_ACCESS_TOKEN": "wa-token",
    "WHATSAPP_APP_SECRET": "wa-app-secret",
    "WHATSAPP_VERIFY_TOKEN": "wa-verify",
    "WHATSAPP_PHONE_NUMBER_ID": "1234567890",
    "MERCURY_TEAMS": "true",
    "TEAMS_APP_ID": "00000000-0000-4000-8000-00000000a11d",
    "TEAMS_APP_PASSWORD": "teams-password",
}


def test_no_bridge_is_built_unless_switched_on(tmp_path: Path) -> None:
    assert build_bridges(load_settings({"MERCURY_CONFIG_FILE": ""}, cwd=tmp_path)) == []


def test_every_bridge_switched_on_is_built_offline_and_closes(tmp_path: Path) -> None:
    bridges = build_bridges(load_settings(ALL_ON, cwd=tmp_path))
    assert [b.platform for b in bridges] == ["slack", "telegram", "discord", "whatsapp", "teams"]
    assert [isinstance(b, WebhookBridge) for b in bridges] == [True, True, False, True, True]
    assert isinstance(bridges[2], GatewayBridge)

    async def close() -> None:
        for bridge in bridges:
            await bridge.close()

    asyncio.run(close())


@pytest.mark.parametrize(
    ("missing", "named"),
    [
        ("SLACK_SIGNING_SECRET", "The Slack bridge is on but SLACK_SIGNING_SECRET is not set"),
        ("TELEGRAM_WEBHOOK_SECRET", "The Telegram bridge is on but TELEGRAM_WEBHOOK_SECRET"),
        ("DISCORD_BOT_TOKEN", "The Discord bridge is on but DISCORD_BOT_TOKEN"),
        ("WHATSAPP_APP_SECRET", "The WhatsApp bridge is on but WHATSAPP_APP_SECRET"),
        ("TEAMS_APP_PASSWORD", "The Microsoft Teams bridge is on but TEAMS_APP_PASSWORD"),
    ],
)
def test_a_bridge_on_without_its_secret_stops_the_start_in_one_sentence(
    tmp_path: Path, missing: str, named: str
) -> None:
    environ = {k: v for k, v in ALL_ON.items() if k != missing}
    with pytest.raises(ConfigurationError) as refused:
        load_settings(environ, cwd=tmp_path)
    assert str(refused.value).startswith(named)
    assert str(refused.value).count(".") == 1  # one sentence
    assert "s3cret" not in str(refused.value) and "wa-token" not in str(refused.value)
    assert "teams-password" not in str(refused.value)


def test_a_secret_in_the_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "mercury.yaml"
    config.write_text("slack:\n  enabled: true\n  bot_token: xoxb-leak\n", encoding="utf-8")
    with pytest.raises(ConfigurationError) as refused:
        load_settings({"MERCURY_CONFIG_FILE": str(config)}, cwd=tmp_path)
    assert "xoxb-leak" not in str(refused.value)


SOCKET_MODE = {
    "MERCURY_CONFIG_FILE": "",
    "MERCURY_SLACK": "true",
    "SLACK_MODE": "socket",
    "SLACK_BOT_TOKEN": "xoxb-test",
    "SLACK_APP_TOKEN": "xapp-1-A1-test",
}


def test_slack_in_socket_mode_is_a_gateway_needing_no_signing_secret(tmp_path: Path) -> None:
    [bridge] = build_bridges(load_settings(SOCKET_MODE, cwd=tmp_path))
    assert isinstance(bridge, GatewayBridge) and not isinstance(bridge, WebhookBridge)
    asyncio.run(bridge.close())


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        (
            {k: v for k, v in SOCKET_MODE.items() if k != "SLACK_APP_TOKEN"},
            "The Slack bridge is on in Socket Mode but SLACK_APP_TOKEN is not set",
        ),
        (
            {**SOCKET_MODE, "SLACK_APP_TOKEN": "xoxb-the-bot-token-again"},
            "SLACK_APP_TOKEN is not an app-level token (those begin with xapp-)",
        ),
        ({**SOCKET_MODE, "SLACK_MODE": "websocket"}, "SLACK_MODE"),
    ],
)
def test_socket_mode_without_its_app_token_stops_the_start_in_one_sentence(
    tmp_path: Path, environ: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        load_settings(environ, cwd=tmp_path)
    assert str(refused.value).startswith(named)
    assert "xoxb-the-bot-token-again" not in str(refused.value)


def test_the_teams_app_password_in_the_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "mercury.yaml"
    config.write_text("teams:\n  app_password: teams-leak\n", encoding="utf-8")
    with pytest.raises(ConfigurationError) as refused:
        load_settings({"MERCURY_CONFIG_FILE": str(config)}, cwd=tmp_path)
    assert "teams-leak" not in str(refused.value) and "TEAMS_APP_PASSWORD" in str(refused.value)
