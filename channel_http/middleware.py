"""The two layers every request crosses before a handler: CORS, then the caller.

:class:`CorsMiddleware` wraps the whole application, so every response carries the
CORS headers (errors, 404s and streams too), and it answers ``OPTIONS`` preflights
with 204 without authenticating. :class:`CallerMiddleware` runs on the authenticated
routes only: it refuses a request with more than one ``Authorization`` header (400),
asks the auth providers who the token belongs to (401), then the core
whether it talks to that person (403/503), and settles their language and time zone,
all before a handler reads the body.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware

from channel_http.access_log import mark
from channel_http.errors import BadRequest, send_envelope
from core.config.settings import AUTH_PROVIDERS
from core.people.i18n import choose_language, negotiate
from core.people.messages import TOKEN_EMPTY, TOKEN_MISSING, TOKEN_REFUSED
from core.people.people import Admitted, refusal_message
from core.people.timezones import choose_zone

if TYPE_CHECKING:
    from litestar.types import (
        ASGIApp,
        HTTPResponseBodyEvent,
        HTTPResponseStartEvent,
        Message,
        Receive,
        Scope,
        Send,
    )

    from channel_http.paths import RouteTemplates
    from core.observe.metrics import Metrics
    from core.people.i18n import Translator
    from core.people.person_settings import SavedSettings
    from core.people.principal import Person, Principal

ALLOW_METHODS: Final = "GET, POST, PUT, PATCH, DELETE, OPTIONS"
ALLOW_HEADERS: Final = "content-type, authorization, accept-language, x-time-zone"
#: The response headers a browser UI reads beyond the safelisted ones: the challenge of
#: a 401, the wait of a 429 or 503, the language of a refusal or stream, timings, and the
#: server's clock (``date``: a confirmation's expiry is measured against it).
EXPOSE_HEADERS: Final = "content-language, date, retry-after, server-timing, www-authenticate"
#: How long a browser may keep a preflight's answer (Chromium caps it at two hours), so
#: a UI's turns don't each cost a preflight.
MAX_AGE_S: Final = 7200


class CorsMiddleware:
    """CORS headers on every response; 204 for every preflight on a path a route serves
    (``/spaces/slack:C1/mutes`` as well as ``/turn``: ``routes`` matches the templates).

    ``origins`` is ``("*",)`` (any origin, answered ``*``) or exact origins: a request
    whose ``Origin`` is one of them is answered with that origin, any other gets no
    ``Access-Control-Allow-Origin``, and every answer says ``Vary: Origin``.
    """

    def __init__(
        self,
        app: ASGIApp,
        origins: Sequence[str],
        routes: RouteTemplates,
        *,
        bare: frozenset[str],
    ) -> None:
        self.app = app
        self.routes = routes
        self.bare = bare  # the plain-text login pages carry no CORS
        self.any_origin = tuple(origins) == ("*",)
        self.origins = frozenset(o.encode("latin-1") for o in origins if o != "*")
        common: list[tuple[bytes, bytes]] = [
            (b"access-control-allow-methods", ALLOW_METHODS.encode()),
            (b"access-control-allow-headers", ALLOW_HEADERS.encode()),
            (b"access-control-expose-headers", EXPOSE_HEADERS.encode()),
        ]
        if not self.any_origin:
            common.append((b"vary", b"origin"))
        self.headers = common
        self.preflight_headers = [*common, (b"access-control-max-age", str(MAX_AGE_S).encode())]

    def _allow_origin(self, scope: Scope) -> list[tuple[bytes, bytes]]:
        if self.any_origin:
            return [(b"access-control-allow-origin", b"*")]
        for key, value in scope["headers"]:
            if key == b"origin":
                return [(b"access-control-allow-origin", value)] if value in self.origins else []
        return []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if scope["method"] == "OPTIONS" and path not in self.bare and self.routes.template(path):
            start: HTTPResponseStartEvent = {
                "type": "http.response.start",
                "status": 204,
                "headers": [*self._allow_origin(scope), *self.preflight_headers],
            }
            end: HTTPResponseBodyEvent = {
                "type": "http.response.body",
                "body": b"",
                "more_body": False,
            }
            await send(start)
            await send(end)
            return
        if path in self.bare:
            await self.app(scope, receive, send)
            return
        extra = [*self._allow_origin(scope), *self.headers]

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        await self.app(scope, receive, send_with_cors)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking, as the providers and the directory say, and how to speak to them."""

    principal: Principal
    person: Person
    language: str
    time_zone: str
    translator: Translator
    saved: SavedSettings


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def count_auth(metrics: Metrics, principal: Principal | None, presented: bool) -> None:
    """One authentication's outcome; the provider label only takes the names it can have."""
    if principal is not None:
        provider = principal.provider if principal.provider in AUTH_PROVIDERS else "other"
        metrics.auth.labels(provider, "ok").inc()
    else:
        metrics.auth.labels("none", "invalid" if presented else "missing").inc()


class CallerMiddleware(ASGIMiddleware):
    """Authentication and admission, in one place, for every authenticated route."""

    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        services = scope["litestar_app"].state.services
        settings = services.settings
        headers = {
            key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]
        }
        header_language = negotiate(headers.get("accept-language"))
        language = header_language or settings.defaults.language
        translator = services.catalogs.translator(language)
        if sum(key == b"authorization" for key, _ in scope["headers"]) > 1:
            # The dict above keeps the last one; which token counts must not be a guess.
            message = translator.gettext("Send one Authorization header: this request has several.")
            await send_envelope(send, BadRequest.status, message, {"content-language": language})
            return
        started = time.perf_counter()
        principal = await services.auth.authenticate(headers)
        authenticated = time.perf_counter()
        mark(scope, "auth", authenticated - started)
        metrics = services.metrics
        if metrics is not None:
            count_auth(metrics, principal, "authorization" in headers)
        if principal is None:
            given = headers.get("authorization")
            presented = given is not None
            challenge = 'Bearer error="invalid_token"' if presented else "Bearer"
            said = TOKEN_REFUSED if presented else TOKEN_MISSING
            if given is not None and given.strip().lower() in ("", "bearer"):
                said = TOKEN_EMPTY  # a pasted command whose $TOKEN was never set
            await send_envelope(
                send,
                401,
                translator.gettext(said),
                {"www-authenticate": challenge, "content-language": language},
            )
            return
        identification = await services.people.identify(principal)
        mark(scope, "admission", time.perf_counter() - authenticated)
        if not isinstance(identification, Admitted):
            if metrics is not None:
                metrics.admission_refusals.labels(identification.reason).inc()
            status = 403 if identification.reason == "unknown" else 503
            await send_envelope(
                send,
                status,
                refusal_message(identification.reason, translator),
                {"content-language": language},
                reason=identification.reason,
            )
            return
        person = identification.person
        reading = time.perf_counter()
        saved = await services.person_settings.get(person.key)
        mark(scope, "settings", time.perf_counter() - reading)
        language = choose_language(
            saved.language, headers.get("accept-language"), settings.defaults.language
        )
        zone = choose_zone(saved.time_zone, headers.get("x-time-zone"), settings.defaults.time_zone)
        state: dict[str, Any] = scope.setdefault("state", {})
        state["caller"] = Caller(
            principal=principal,
            person=person,
            language=language,
            time_zone=zone,
            translator=services.catalogs.translator(language),
            saved=saved,
        )
        state["language"] = language
        state["translator"] = state["caller"].translator
        await next_app(scope, receive, send)
