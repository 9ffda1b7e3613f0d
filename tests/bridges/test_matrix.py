"""The Matrix bridge's own rules, without a homeserver: its settings, its thread and space ids,
and the checkpoint it resumes from (the end-to-end tests run it against Synapse)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bridges.matrix import MatrixBridge
from bridges.port import HeldBridge, InvitedBridge, LiveBridge
from core.config.settings import ConfigurationError, MatrixSettings, load_settings
from core.spaces.ids import InvalidSpaceId, parse_space_id

ROOM = "!abcDEF123:example.org"


def settings(**overrides: object) -> MatrixSettings:
    given: dict[str, object] = {
        "enabled": True,
        "homeserver": "http://127.0.0.1:9",
        "user_id": "@mercury:example.org",
        "access_token": "syt_token",
        "password": None,
    }
    return MatrixSettings(**{**given, **overrides})  # type: ignore[arg-type]


def test_on_without_its_credentials_the_server_does_not_start(tmp_path: Path) -> None:
    env = {
        "MERCURY_CONFIG_FILE": "",
        "MERCURY_DATA_DIR": str(tmp_path),
        "MERCURY_MATRIX": "true",
        "MATRIX_HOMESERVER": "https://matrix.example.org",
        "MATRIX_USER_ID": "@mercury:example.org",
    }
    with pytest.raises(ConfigurationError, match="MATRIX_ACCESS_TOKEN nor MATRIX_PASSWORD"):
        load_settings(env, cwd=tmp_path)
    del env["MATRIX_USER_ID"]
    with pytest.raises(ConfigurationError, match="MATRIX_USER_ID is not set"):
        load_settings({**env, "MATRIX_ACCESS_TOKEN": "t"}, cwd=tmp_path)
    loaded = load_settings(
        {**env, "MATRIX_USER_ID": "@mercury:example.org", "MATRIX_PASSWORD": "p"}, cwd=tmp_path
    )
    assert loaded.matrix.enabled and loaded.matrix.password == "p"
    with pytest.raises(ConfigurationError, match="MATRIX_ACCESS_TOKEN or MATRIX_PASSWORD"):
        MatrixBridge(settings(access_token=None), bot_name="Mercury")


def test_rooms_direct_rooms_and_threads_name_spaces_and_conversations() -> None:
    bridge = MatrixBridge(settings(), bot_name="Mercury")
    room = bridge.parse_thread(f"matrix:{ROOM}")
    assert (room.space_id, room.is_dm) == (f"matrix:{ROOM}", False)
    thread = bridge.parse_thread(f"matrix:{ROOM}$root-event_1")
    assert thread.space_id == f"matrix:{ROOM}" and not thread.is_dm
    assert thread.conversation_external_id == f"matrix:{ROOM}$root-event_1"
    dm = bridge.parse_thread(f"matrix:dm:{ROOM}")
    assert (dm.space_id, dm.is_dm) == (f"matrix:dm:{ROOM}", True)
    # Room version 12: no server part; a server with a port, an IPv6 literal.
    for room_id in ("!AbC-_0123456789", "!abc:localhost:8448", "!abc:[::1]:8008"):
        assert parse_space_id(f"matrix:{room_id}").platform == "matrix"
    for bad in ("matrix:abc", "matrix:!a/b:x", "matrix:!a b", "slack:C1", f"matrix:{ROOM}$"):
        with pytest.raises((InvalidSpaceId, ValueError)):
            bridge.parse_thread(bad)


def test_the_checkpoint_is_the_sync_token_it_resumes_from() -> None:
    bridge = MatrixBridge(settings(), bot_name="Mercury")
    assert isinstance(bridge, HeldBridge)
    assert isinstance(bridge, InvitedBridge) and isinstance(bridge, LiveBridge)
    assert bridge.connection_name == "matrix:@mercury:example.org"
    assert bridge.checkpoint() is None  # nothing synced yet: a first start begins from now
    bridge.restore(b"s72594_4483_1934")
    assert bridge.checkpoint() == b"s72594_4483_1934"


def test_the_homeserver_for_the_tests_installs_in_a_cache_of_its_own(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    found = subprocess.run(  # noqa: S603 - our own script
        [str(root / "scripts" / "_synapse"), "--path"],
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path), "MERCURY_SYNAPSE_VERSION": "9.9"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.strip() == str(tmp_path / "mercury-http" / "synapse-9.9")
    assert not (tmp_path / "mercury-http").exists()  # --path only says where
    assert "scripts/_synapse" in (root / "scripts" / "test").read_text()
