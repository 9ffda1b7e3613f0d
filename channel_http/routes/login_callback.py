"""``GET <public URL path>/login/callback``: where a person's browser comes back from a service.

Mounted only when ``HTTP_SURFACE_PUBLIC_URL`` is set (:func:`login_router`). There is no
bearer token here, and no CORS: the ``state`` Mercury issued is the credential, and the
answer is a short plain-text page (``Cache-Control: no-store``, ``Referrer-Policy:
no-referrer``, ``X-Content-Type-Options: nosniff``) saying how the login went, in the
browser's language, else the app's default, except that a login that failed reads in the
language of the person who started it. The code and state are handed to
:meth:`core.tools.logins.Logins.complete` and neither kept nor logged.

Exceptions: none (every outcome is a page).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from litestar import Request, Response, Router, get
from litestar.di import NamedDependency, Provide
from litestar.status_codes import HTTP_200_OK

from channel_http.errors import BadRequest
from core.people.i18n import negotiate
from core.tools.logins import Logins

if TYPE_CHECKING:
    from channel_http.services import Services
    from core.people.i18n import Translator

__all__ = ["CALLBACK_PATH", "callback_path", "login_callback", "login_router", "redirect_uri"]

AnyRequest = Request[Any, Any, Any]

#: The callback's path below the public URL.
CALLBACK_PATH: Final = "/login/callback"
# Litestar adds "; charset=utf-8" to a text/* media type (the response's default charset).
MEDIA_TYPE: Final = "text/plain"
_REASON_REFUSED: Final = re.compile(r"[^A-Za-z0-9_.-]")
_REASON_MAX_CHARS: Final = 64


def redirect_uri(public_url: str) -> str:
    """The URL to register as the callback on each service's OAuth app."""
    return public_url.rstrip("/") + CALLBACK_PATH


def callback_path(public_url: str) -> str:
    """The path the callback is served at (the public URL's own path, then /login/callback)."""
    return urlsplit(public_url).path.rstrip("/") + CALLBACK_PATH


def login_router(public_url: str, logins: Logins) -> Router:
    """The callback, mounted under the public URL's path, with ``logins`` to complete them."""
    prefix = urlsplit(public_url).path.rstrip("/") or "/"
    return Router(
        path=prefix,
        route_handlers=[login_callback],
        dependencies={"logins": Provide(lambda: logins, use_cache=True, sync_to_thread=False)},
    )


@get(CALLBACK_PATH, status_code=HTTP_200_OK)
async def login_callback(request: AnyRequest, logins: NamedDependency[Logins]) -> Response[str]:
    services: Services = request.app.state.services
    catalogs = services.catalogs
    default = services.settings.defaults.language
    browser = negotiate(request.headers.get("accept-language"), catalogs.languages) or default
    tr = catalogs.translator(browser)
    query = request.query_params
    error = query.get("error")
    if error is not None:
        reason = _REASON_REFUSED.sub("", error)[:_REASON_MAX_CHARS]
        return _page(
            tr,
            BadRequest.status,
            tr.gettext(
                "The login didn't happen (%(reason)s). Ask the assistant again for a new link."
            )
            % {"reason": reason},
        )
    state, code = query.get("state"), query.get("code")
    if not state or not code:
        return _page(
            tr,
            BadRequest.status,
            tr.gettext(
                "The login link came back without a code or a state. Ask the assistant again for a new link."  # noqa: E501 - one literal, for extraction
            ),
        )
    outcome = await logins.complete(state, code)
    if outcome.status == "logged_in":
        return _page(
            tr,
            HTTP_200_OK,
            tr.gettext(
                "You're logged in to %(service)s. Go back to the conversation and ask again."
            )
            % {"service": outcome.service},
        )
    if outcome.status == "failed":
        starter = catalogs.translator(outcome.language or browser)
        return _page(
            starter,
            BadRequest.status,
            starter.gettext(
                "The %(service)s login didn't go through. Ask the assistant again for a new link."
            )
            % {"service": outcome.service},
        )
    return _page(
        tr,
        BadRequest.status,
        tr.gettext(
            "This login link has expired or was already used: ask the assistant again for a new one."  # noqa: E501 - one literal, for extraction
        ),
    )


def _page(tr: Translator, status: int, text: str) -> Response[str]:
    return Response(
        text + "\n",
        status_code=status,
        media_type=MEDIA_TYPE,
        headers={
            "cache-control": "no-store",
            "referrer-policy": "no-referrer",
            "x-content-type-options": "nosniff",
            "content-language": tr.language,
        },
    )
