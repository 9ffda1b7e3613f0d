"""A real OpenID provider (panva/oidc-provider v9, ``provider.mjs``) in a node process.

Typical use in a fixture::

    ensure_node_modules()
    with OidcProviderProcess() as idp:
        token = idp.client_credentials_token()            # "aud": "mercury-http"
        other = idp.client_credentials_token(resource="other-api")
        idp.rotate_keys()                                 # a new RS256 key signs from now on
        idp.stop(); idp.start()                           # down, then back on the same port

What the provider offers (see ``provider.mjs`` for the environment it reads):

- issuer ``http://127.0.0.1:<port>``, discovery at ``/.well-known/openid-configuration``;
- the confidential client ``mercury-tests`` / ``mercury-tests-secret`` (client credentials):
  its access tokens are RS256 JWTs (``typ: at+jwt``) with ``sub`` = the client id and
  ``name`` = ``OIDC_CLIENT_NAME`` ("Mercury Tests");
- a resource ``"x"`` is sent as the indicator ``urn:x`` (indicators must be absolute URIs) and
  yields ``"aud": "x"``;
- the signing keys live in ``jwks_file``, so ``stop()``/``start()`` keep them, and two
  instances given the same file sign with the same key (useful for "another issuer");
- the public client ``mercury-login`` (authorization code + PKCE S256, no secret) with the
  redirect URI ``login_redirect_uri``, and ``devInteractions``: any login and password are
  accepted, the login becomes the account id (``sub``, ``name``, ``preferred_username``) and
  ``<login>@example.test`` the ``email``.

Completing a service login by hand (what :meth:`OidcProviderProcess.login` does), with one
``httpx.Client`` keeping cookies and ``follow_redirects=False``:

1. ``GET {issuer}/auth?client_id=mercury-login&response_type=code&redirect_uri=<uri>&
   scope=openid profile email&state=<s>&code_challenge=<S256 of verifier>&
   code_challenge_method=S256&resource=urn:mercury-http`` → 303 to ``/interaction/<uid>``;
2. ``POST {issuer}/interaction/<uid>`` with the form ``prompt=login&login=<id>&password=x``
   → 303 to ``/auth/<uid>``; ``GET`` it → 303 to ``/interaction/<uid2>`` (consent);
3. ``POST {issuer}/interaction/<uid2>`` with ``prompt=consent`` → 303 to ``/auth/<uid2>``;
   ``GET`` it → 303 to ``<redirect_uri>?code=<code>&state=<s>&iss=<issuer>``;
4. ``POST {issuer}/token`` with ``grant_type=authorization_code&code=<code>&
   redirect_uri=<uri>&client_id=mercury-login&code_verifier=<verifier>`` → the tokens, the
   access token a JWT for ``aud: mercury-http``.

A service that receives the callback itself does steps 1-3 with the browser's part played by
the test and step 4 on its own; :meth:`OidcProviderProcess.authorize` stops after step 3 and
returns the redirect URL.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import selectors
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "provider.mjs"
CLIENT_ID = "mercury-tests"
CLIENT_SECRET = "mercury-tests-secret"
CLIENT_NAME = "Mercury Tests"
LOGIN_CLIENT_ID = "mercury-login"
DEFAULT_AUDIENCE = "mercury-http"
DEFAULT_REDIRECT_URI = "http://127.0.0.1:4100/login/callback"


def ensure_node_modules() -> None:
    """Install the provider's npm dependencies unless they already are."""
    if (HERE / "node_modules" / "oidc-provider").is_dir():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm isn't on PATH; install Node.js 20.19+ to run the OIDC tests.")
    subprocess.run(  # noqa: S603 - a fixed command in our own directory
        [npm, "install", "--no-audit", "--no-fund"], cwd=HERE, check=True, timeout=300
    )


def _ready_line(output: bytes) -> dict[str, Any] | None:
    """provider.mjs's ready line among the complete lines of ``output``, if it came yet.

    oidc-provider writes its own notices to stdout too (``console.info``, e.g. when a
    default function is first called); they are skipped, not taken for the ready line.
    """
    for line in output.split(b"\n")[:-1]:
        if line.startswith(b"{"):
            ready: dict[str, Any] = json.loads(line)
            return ready
    return None


def resource_indicator(resource: str) -> str:
    """The absolute URI the provider expects for the audience ``resource``."""
    return resource if ":" in resource else f"urn:{resource}"


class OidcProviderProcess:
    """``provider.mjs`` running in a child process, bound to 127.0.0.1."""

    def __init__(
        self,
        *,
        port: int = 0,
        audience: str = DEFAULT_AUDIENCE,
        jwks_file: Path | None = None,
        login_redirect_uri: str = DEFAULT_REDIRECT_URI,
        access_token_ttl_s: int = 3600,
        startup_timeout_s: float = 90.0,
        mcp: bool = False,
    ) -> None:
        """``mcp``: also an MCP server's authorization server (``OIDC_MCP`` in provider.mjs)."""
        self.mcp = mcp
        self.port = port
        self.audience = audience
        self.login_redirect_uri = login_redirect_uri
        self.access_token_ttl_s = access_token_ttl_s
        self.startup_timeout_s = startup_timeout_s
        self._workdir = tempfile.TemporaryDirectory(prefix="mercury-oidc-")
        self.jwks_file = jwks_file or Path(self._workdir.name) / "jwks.json"
        self.log_file = Path(self._workdir.name) / "provider.log"
        self.kids: list[str] = []
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._issuer: str | None = None

    @property
    def issuer(self) -> str:
        if self._issuer is None:
            raise RuntimeError("The OIDC provider has never started; call start() first.")
        return self._issuer

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> OidcProviderProcess:
        """Start node (again on the same port after a stop) and wait for its ready line."""
        if self.running:
            return self
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node isn't on PATH; install Node.js 20.19+ to run the OIDC tests.")
        env = {
            **os.environ,
            "OIDC_JWKS_FILE": str(self.jwks_file),
            "OIDC_AUDIENCE": self.audience,
            "OIDC_LOGIN_REDIRECT_URI": self.login_redirect_uri,
            "OIDC_ACCESS_TOKEN_TTL": str(self.access_token_ttl_s),
            "OIDC_MCP": "1" if self.mcp else "0",
        }
        # A node that hasn't said it listens within a third of the budget is started again:
        # once in a while (seen under CI, not reproduced alone) it never prints its line.
        attempts = 3
        for attempt in range(1, attempts + 1):
            self._log = self.log_file.open("ab")
            self._process = subprocess.Popen(  # noqa: S603 - fixed script of our own
                [node, str(SCRIPT), str(self.port)],
                cwd=HERE,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=self._log,
            )
            try:
                ready = self._read_ready_line(self.startup_timeout_s / attempts)
                break
            except RuntimeError:
                if attempt == attempts:
                    raise
        self._issuer = ready["issuer"]
        self.port = int(ready["port"])
        self.kids = list(ready["kids"])
        return self

    def _read_ready_line(self, timeout_s: float) -> dict[str, Any]:
        process = self._process
        assert process is not None and process.stdout is not None
        deadline = time.monotonic() + timeout_s
        buffer = b""
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while (ready := _ready_line(buffer)) is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or process.poll() is not None:
                    self.stop()
                    raise RuntimeError(
                        "The OIDC provider didn't start; see "
                        f"{self.log_file}: {self.log_file.read_text(errors='replace')[-2000:]}"
                    )
                if selector.select(timeout=min(remaining, 0.2)):
                    chunk = os.read(process.stdout.fileno(), 4096)
                    if not chunk:  # stdout closed: wait for the exit rather than spin
                        time.sleep(0.05)
                        continue
                    buffer += chunk
        return ready

    def stop(self) -> None:
        """Stop node; the port, issuer and keys stay for a later start()."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=5)
            if process.stdout is not None:
                process.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        """Stop node and remove the working directory."""
        self.stop()
        self._workdir.cleanup()

    def __enter__(self) -> OidcProviderProcess:
        try:
            return self.start()
        except BaseException:
            self.close()  # __exit__ won't run: the working directory goes now
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- what tests ask of it ---------------------------------------------------------

    def client_credentials_token(self, resource: str | None = None) -> str:
        """An access token (JWT) of the client-credentials client for ``resource``."""
        response = httpx.post(
            f"{self.issuer}/token",
            data={
                "grant_type": "client_credentials",
                "resource": resource_indicator(resource or self.audience),
            },
            auth=(CLIENT_ID, CLIENT_SECRET),
            timeout=10,
        )
        response.raise_for_status()
        token: str = response.json()["access_token"]
        return token

    def rotate_keys(self, *, keep_old: bool = False) -> list[str]:
        """Sign with a new RS256 key from now on; the key ids published afterwards."""
        response = httpx.post(
            f"{self.issuer}/__admin/rotate", json={"keep_old": keep_old}, timeout=20
        )
        response.raise_for_status()
        self.kids = list(response.json()["kids"])
        return self.kids

    def fetch_from(self, origin: str, local: str) -> None:
        """Have the provider fetch documents of ``origin`` (https) from ``local`` (loopback)."""
        response = httpx.post(f"{self.issuer}/__admin/fetch-map", json={origin: local}, timeout=10)
        response.raise_for_status()

    def approve(self, client: httpx.Client, url: str, *, login: str, redirect_uri: str) -> str:
        """Play the browser from an authorization ``url`` someone else built: the person logs
        in as ``login`` and consents; the URL the provider sends the browser back to (which
        starts with ``redirect_uri``, or is the provider's error page's)."""
        return self._follow(client, client.get(url), login=login, redirect_uri=redirect_uri)

    def authorize(
        self, client: httpx.Client, *, login: str, verifier: str, state: str = "state"
    ) -> str:
        """Play the browser through steps 1-3 of a service login; the final redirect URL."""
        challenge = (
            base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
            .rstrip(b"=")
            .decode()
        )
        response = client.get(
            f"{self.issuer}/auth",
            params={
                "client_id": LOGIN_CLIENT_ID,
                "response_type": "code",
                "redirect_uri": self.login_redirect_uri,
                "scope": "openid profile email",
                "state": state,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
                "resource": resource_indicator(self.audience),
            },
        )
        return self._follow(client, response, login=login, redirect_uri=self.login_redirect_uri)

    def _follow(
        self, client: httpx.Client, response: httpx.Response, *, login: str, redirect_uri: str
    ) -> str:
        for _ in range(10):
            location: str | None = response.headers.get("location")
            if location is None:
                raise RuntimeError(
                    f"The login stopped at HTTP {response.status_code}: {response.text[:500]}"
                )
            url = urljoin(str(response.url), location)
            if url.startswith(redirect_uri):
                return url
            path = urlsplit(url).path
            if path.startswith("/interaction/"):
                page = client.get(url)
                prompt = "login" if 'name="login"' in page.text else "consent"
                form = {"prompt": prompt}
                if prompt == "login":
                    form |= {"login": login, "password": "any"}
                response = client.post(url, data=form)
            else:
                response = client.get(url)
        raise RuntimeError("The login went through too many redirects.")

    def login(self, login: str = "alice") -> dict[str, Any]:
        """A whole service login as ``login``: the token response of the code exchange."""
        verifier = secrets.token_urlsafe(48)
        with httpx.Client(follow_redirects=False, timeout=10) as client:
            redirect = self.authorize(client, login=login, verifier=verifier)
            code = parse_qs(urlsplit(redirect).query)["code"][0]
            response = client.post(
                f"{self.issuer}/token",
                data={
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": self.login_redirect_uri,
                    "client_id": LOGIN_CLIENT_ID,
                    "code_verifier": verifier,
                },
            )
            response.raise_for_status()
            tokens: dict[str, Any] = response.json()
            return tokens
