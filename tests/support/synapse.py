"""A real Matrix homeserver for the Matrix bridge's tests: Synapse on 127.0.0.1, on SQLite.

Synapse lives in a venv of its own outside the checkout (``scripts/_synapse`` installs it;
``scripts/test`` runs that). The configuration is written here (no ``--generate-config``: a
signing key is 32 random bytes), rate limits off; people are registered through the
shared-secret admin API. Tests drive people with mautrix's client API on a loop of this
module's own (:meth:`Synapse.call`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml
from mautrix.client import ClientAPI
from mautrix.types import UserID

from tests.support.ports import free_port
from tests.support.system import missing

__all__ = ["MatrixUser", "Synapse", "synapse_dir"]

ROOT = Path(__file__).resolve().parents[2]
SERVER_NAME = "localhost"
_T = TypeVar("_T")
_UNLIMITED = {"per_second": 10_000, "burst_count": 10_000}


def synapse_dir() -> Path:
    """The venv ``scripts/_synapse`` installs Synapse into."""
    out = subprocess.run(  # noqa: S603 - our own script
        [str(ROOT / "scripts" / "_synapse"), "--path"], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip())


@dataclass(frozen=True, slots=True)
class MatrixUser:
    """A registered account and its client (on :class:`Synapse`'s loop)."""

    user_id: str
    password: str
    token: str
    client: ClientAPI


class Synapse:
    """Synapse running in ``workdir`` until :meth:`stop`."""

    def __init__(self, workdir: Path) -> None:
        venv = synapse_dir()
        if not (venv / ".installed").exists():
            missing(
                f"Synapse is not installed at {venv}; scripts/test installs it "
                "(scripts/_synapse), and so does running that script."
            )
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._secret = secrets.token_hex(16)
        self._write_config()
        self._log = (workdir / "synapse.log").open("wb")
        started = time.monotonic()
        self._process = subprocess.Popen(  # noqa: S603 - our own arguments
            [str(venv / "bin" / "python"), "-m", "synapse.app.homeserver", "-c", "hs.yaml"],
            cwd=workdir,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "SYNAPSE_ASYNC_IO_REACTOR": "0"},
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._users: list[MatrixUser] = []
        try:
            self._wait_until_up(60.0)
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - started

    def _write_config(self) -> None:
        seed = base64.b64encode(secrets.token_bytes(32)).decode().rstrip("=")
        (self.workdir / "signing.key").write_text(f"ed25519 a_test {seed}\n")
        (self.workdir / "log.yaml").write_text(
            yaml.safe_dump(
                {
                    "version": 1,
                    "formatters": {
                        "f": {"format": "%(asctime)s %(name)s %(levelname)s %(message)s"}
                    },
                    "handlers": {
                        "h": {"class": "logging.StreamHandler", "formatter": "f"},
                    },
                    "root": {"level": "WARNING", "handlers": ["h"]},
                    "disable_existing_loggers": False,
                }
            )
        )
        config = {
            "server_name": SERVER_NAME,
            "public_baseurl": self.url + "/",
            "pid_file": str(self.workdir / "homeserver.pid"),
            "listeners": [
                {
                    "port": self.port,
                    "bind_addresses": ["127.0.0.1"],
                    "type": "http",
                    "tls": False,
                    "x_forwarded": False,
                    "resources": [{"names": ["client"], "compress": False}],
                }
            ],
            "database": {"name": "sqlite3", "args": {"database": str(self.workdir / "hs.db")}},
            "log_config": str(self.workdir / "log.yaml"),
            "media_store_path": str(self.workdir / "media"),
            "signing_key_path": str(self.workdir / "signing.key"),
            "registration_shared_secret": self._secret,
            "macaroon_secret_key": secrets.token_hex(16),
            "form_secret": secrets.token_hex(16),
            "report_stats": False,
            # Passwords hashed at the cheapest cost: registering a person takes milliseconds.
            "bcrypt_rounds": 4,
            "trusted_key_servers": [],
            "suppress_key_server_warning": True,
            "enable_metrics": False,
            "presence": {"enabled": False},
            "url_preview_enabled": False,
            "rc_message": _UNLIMITED,
            "rc_registration": _UNLIMITED,
            "rc_login": {
                "address": _UNLIMITED,
                "account": _UNLIMITED,
                "failed_attempts": _UNLIMITED,
            },
            "rc_joins": {"local": _UNLIMITED, "remote": _UNLIMITED},
            "rc_joins_per_room": _UNLIMITED,
            "rc_invites": {
                "per_room": _UNLIMITED,
                "per_user": _UNLIMITED,
                "per_issuer": _UNLIMITED,
            },
            "rc_room_creation": _UNLIMITED,
            "rc_admin_redaction": _UNLIMITED,
            "rc_3pid_validation": _UNLIMITED,
            "rc_media_create": _UNLIMITED,
            "rc_delayed_event_mgmt": _UNLIMITED,
            "rc_reports": _UNLIMITED,
            "rc_presence": {"per_user": _UNLIMITED},
        }
        (self.workdir / "hs.yaml").write_text(yaml.safe_dump(config))

    def _wait_until_up(self, timeout: float) -> None:
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            if self._process.poll() is not None:
                raise RuntimeError(
                    "Synapse exited at start: "
                    + (self.workdir / "synapse.log").read_text(errors="replace")[-3000:]
                )
            try:
                if httpx.get(self.url + "/_matrix/client/versions", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError("Synapse did not answer within a minute.")

    def call(self, coroutine: Coroutine[Any, Any, _T], timeout: float = 30.0) -> _T:
        """Run ``coroutine`` (a client's call) on this module's loop."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def register(self, localpart: str, *, admin: bool = False) -> MatrixUser:
        """A new account, through the shared-secret admin API."""
        url = self.url + "/_synapse/admin/v1/register"
        nonce = httpx.get(url, timeout=10).json()["nonce"]
        password = secrets.token_hex(8)
        # The MAC covers the parts with a NUL between them, not after the last.
        mac = hmac.new(
            self._secret.encode(),
            b"\x00".join(
                p.encode() for p in (nonce, localpart, password, "admin" if admin else "notadmin")
            ),
            hashlib.sha1,
        )
        digest = mac.hexdigest()
        answer = httpx.post(
            url,
            json={
                "nonce": nonce,
                "username": localpart,
                "password": password,
                "admin": admin,
                "mac": digest,
            },
            timeout=30,
        )
        answer.raise_for_status()
        body = answer.json()
        user_id, token = body["user_id"], body["access_token"]

        async def client() -> ClientAPI:
            return ClientAPI(UserID(user_id), base_url=self.url, token=token)

        user = MatrixUser(
            user_id=user_id, password=password, token=token, client=self.call(client())
        )
        self._users.append(user)
        return user

    def stop(self) -> None:
        async def close_all() -> None:
            for user in self._users:
                await user.client.api.session.close()

        if self._thread.is_alive():
            self.call(close_all())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()
