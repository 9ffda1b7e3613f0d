"""The Connections panel: the MCP servers a person signed in to, and signing out of one.

The sign-in is real (the tests' OpenID provider in its MCP mode, the protected endpoint of
``tests/support/mcp_resource.py``, the callback delivered to the server); the browser is
Chromium through Playwright, as in the other UI tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page, expect

from core.config.settings import Settings
from core.tools.mcp import McpSignIn, OAuthTarget
from core.tools.registry import LoginRequired
from tests.conftest import ALICE
from tests.oidc.harness import OidcProviderProcess, ensure_node_modules
from tests.support.mcp_resource import ProtectedMcp, serving
from tests.support.server import RunningServer, serve
from tests.ui.conftest import axe_violations, sign_in

pytestmark = [pytest.mark.timeout(120)]

PUBLIC_URL = "https://mercury.example.test"
REDIRECT = PUBLIC_URL + "/login/callback"


@pytest.fixture(scope="module")
def idp() -> Iterator[OidcProviderProcess]:
    ensure_node_modules()
    with OidcProviderProcess(mcp=True, login_redirect_uri=REDIRECT) as provider:
        yield provider


@pytest.fixture
def mercury(
    make_settings: Callable[..., Settings], idp: OidcProviderProcess
) -> Iterator[RunningServer]:
    settings = make_settings(
        HTTP_SURFACE_PUBLIC_URL=PUBLIC_URL + "/",
        MERCURY_SECRET_KEY="ui-connections-tests-secret-key-0123456789",
    )
    with serve(settings) as server:
        idp.fetch_from(PUBLIC_URL, server.url)
        yield server


def signed_in_to_tracker(
    mercury: RunningServer, idp: OidcProviderProcess, mcp: ProtectedMcp
) -> None:
    target = OAuthTarget(
        server="tracker",
        title="Tracker",
        url=mcp.url,
        allowed_hosts=(urlsplit(idp.issuer).netloc,),
    )
    sign_in_service: McpSignIn = mercury.services.mcp_sign_in
    with pytest.raises(LoginRequired) as raised:
        mercury.call(sign_in_service.authorization("static:alice", target))
    with httpx.Client(follow_redirects=False, timeout=10) as browser:
        back = idp.approve(browser, raised.value.url, login="alice", redirect_uri=REDIRECT)
        page = browser.get(mercury.url + "/login/callback?" + urlsplit(back).query)
    assert page.status_code == 200, page.text


def test_the_connections_panel_lists_a_sign_in_and_signs_out_of_it(
    page: Page, mercury: RunningServer, idp: OidcProviderProcess
) -> None:
    mcp = ProtectedMcp(idp.issuer)
    with serving(mcp) as origin:
        mcp.origin = origin
        signed_in_to_tracker(mercury, idp, mcp)
    sign_in(page, mercury, "alice-token")
    page.get_by_role("button", name="Panels").click()
    page.get_by_role("tab", name="Connections").click()
    expect(page.locator(".connections li")).to_have_count(1)
    expect(page.locator(".connections li")).to_contain_text("Tracker")
    expect(page.locator(".connections li")).to_contain_text(idp.issuer)
    assert axe_violations(page) == []
    page.get_by_role("button", name="Sign out of Tracker").click()
    expect(page.locator("#panel-body [role=status]")).to_have_text("Signed out of Tracker.")
    expect(page.locator("#panel-body")).to_contain_text("You aren't signed in to any tool server.")
    answer = httpx.get(mercury.url + "/me/connections", headers=ALICE, timeout=10)
    assert answer.json()["connections"] == []
