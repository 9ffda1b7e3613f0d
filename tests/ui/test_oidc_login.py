"""Logging in to the UI with a real OpenID provider, in a real Chromium.

The npm ``oidc-provider`` of tests/oidc runs on 127.0.0.1 with its public client
``mercury-login`` (authorization code + PKCE, no secret) whose redirect URI is the UI's own
address; the server names it in ``/ui/config.json``. Chromium opens the UI, follows the login
button to the provider, fills its login and consent pages, comes back and has a turn with the
token the UI obtained: kept in session storage, never in a cookie or local storage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.oidc.harness import LOGIN_CLIENT_ID, OidcProviderProcess, ensure_node_modules
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.ports import free_port
from tests.support.server import RunningServer
from tests.ui.conftest import axe_violations

pytestmark = [pytest.mark.timeout(120)]


def _local_storage(page: Page, origin: str) -> list[Any]:
    """What ``origin`` keeps in local storage, read by the browser context from any page."""
    state = page.context.storage_state()
    return [item for o in state["origins"] if o["origin"] == origin for item in o["localStorage"]]


@pytest.fixture
def login_setup(
    make_server: Callable[..., RunningServer],
) -> Iterator[tuple[RunningServer, OidcProviderProcess]]:
    ensure_node_modules()
    # The server reads the provider's discovery only when a token arrives, and the provider
    # needs the UI's address as its client's redirect URI: the provider's port is chosen first,
    # the server started naming it, then the provider on that port.
    port = free_port()
    server = make_server(
        MERCURY_AUTH="oidc",
        OIDC_ISSUER=f"http://127.0.0.1:{port}",
        OIDC_ALLOW_HTTP_ISSUER="true",
        OIDC_AUDIENCE="mercury-http",
        HTTP_SURFACE_UI_OIDC_CLIENT_ID=LOGIN_CLIENT_ID,
    )
    with OidcProviderProcess(
        port=port, audience="mercury-http", login_redirect_uri=server.url + "/ui/"
    ) as provider:
        yield server, provider


def test_logging_in_with_the_provider_gives_a_working_turn_and_keeps_the_token_out_of_cookies(
    page: Page,
    login_setup: tuple[RunningServer, OidcProviderProcess],
    ollama: OllamaStandIn,
) -> None:
    server, provider = login_setup
    config = httpx.get(server.url + "/ui/config.json").json()
    assert config["oidc"] == {
        "authority": provider.issuer,
        "clientId": LOGIN_CLIENT_ID,
        "scope": "openid profile",
    }
    server.call(server.services.person_settings.set_name("oidc:carol", "Carol"))
    ollama.enqueue(ChatScript.words("Hello Carol, you are signed in."))

    page.goto(server.url + "/ui/")
    page.get_by_role("button", name="Sign in with your account").click()

    # The provider's own pages (oidc-provider's development interactions): login, then consent.
    page.wait_for_url(provider.issuer + "/interaction/**")
    # Half way, the UI's origin keeps nothing in local storage (its state and PKCE verifier
    # wait in session storage, which the browser doesn't write to disk).
    assert _local_storage(page, server.url) == []
    page.fill("input[name=login]", "carol")
    page.fill("input[name=password]", "any password")
    page.click("button[type=submit]")
    page.wait_for_url(provider.issuer + "/interaction/**")
    expect(page.locator("button[type=submit]")).to_be_visible()
    page.click("button[type=submit]")

    # Back in the UI, signed in as the account the provider vouched for.
    page.wait_for_url(server.url + "/ui/")
    page.wait_for_selector("#composer")
    assert "code=" not in page.url and "state=" not in page.url
    page.fill("#composer", "Who am I?")
    page.keyboard.press("Enter")
    answer = page.locator("article.message.assistant").last
    expect(answer.locator("[data-final]")).to_have_text("Hello Carol, you are signed in.")
    assert "oidc:carol:" in " ".join(server.services.manager.sessions)
    assert axe_violations(page) == []

    # The token: in session storage, and nowhere a cookie or local storage would keep it.
    token = page.evaluate("sessionStorage.getItem('mercury.token')")
    assert token and token.count(".") == 2  # the provider's JWT access token
    me = httpx.get(server.url + "/me", headers={"authorization": f"Bearer {token}"}).json()
    assert me["ok"] is True
    assert page.evaluate("document.cookie") == ""
    cookies = page.context.cookies()
    # (The provider's own session cookies are there, on its pages' behalf; none holds the token.)
    assert [c["name"] for c in cookies if token in c["value"]] == []
    assert _local_storage(page, server.url) == []

    # A reload keeps the person signed in for the tab's life.
    page.reload()
    page.wait_for_selector("#composer")
