"""Every status code of the surface lives here: error kinds, their statuses, one envelope.

Exception tree::

    ApiError                     a request the surface refuses, with a sentence for the person
    ├── BadRequest        400    the body or the query is not what the route takes
    ├── Unauthorized      401    no token, or a token no provider recognizes
    ├── Forbidden         403    the directory doesn't know the caller
    ├── NotFound          404
    ├── MethodNotAllowed  405
    ├── PayloadTooLarge   413
    ├── TooManyRequests   429    over the rate limit; carries Retry-After
    ├── InternalError     500    a turn answered at once failed on our side (logged)
    ├── BadGateway        502    the model failed a turn answered at once (``POST /chat``)
    ├── Unavailable       503    the directory can't be asked; the server is stopping
    └── GatewayTimeout    504    a turn answered at once ran past its time limit

    core.state.DatabaseUnavailable
                          503    the state store is locked or out of reach; Retry-After
    client gone                  a client that left before its body arrived: logged, not an error

Refused by the connection layer (channel_http/serving/connections.py), before any request exists:
``HEAD_TIMEOUT`` 408 (a head slower than its timeout), ``HEAD_TOO_LARGE`` 431 (a head past
its size limit), ``OVER_CAPACITY`` 503 (too many connections at once; Retry-After).

Once the first byte of an event stream is out, a failure is an ``error`` event instead.

A platform's webhook delivery (``/webhooks/{platform}``) is answered by its bridge's verdict
(:data:`WEBHOOK_STATUSES`): 200 for one taken, ignored or a verification challenge, 401 for a
forged or stale signature, 400 for one that can't be read; nothing runs for either refusal.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, ClassVar, Final

import msgspec
from litestar import Request, Response
from litestar.exceptions import (
    HTTPException,
    MethodNotAllowedException,
    NotFoundException,
    ValidationException,
)
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from core.people.i18n import N_, negotiate
from core.state import DatabaseUnavailable

if TYPE_CHECKING:
    from litestar.types import (
        ExceptionHandlersMap,
        HTTPResponseBodyEvent,
        HTTPResponseStartEvent,
        Send,
    )

    from core.people.i18n import Translator

log = logging.getLogger("mercury.http")


class ApiError(Exception):
    status: ClassVar[int] = 400

    def __init__(
        self,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or {}
        self.extra = extra or {}


class BadRequest(ApiError):
    status = 400


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class MethodNotAllowed(ApiError):
    status = 405


class PayloadTooLarge(ApiError):
    status = 413


class TooManyRequests(ApiError):
    status = 429


class InternalError(ApiError):
    status = 500


class BadGateway(ApiError):
    status = 502


class Unavailable(ApiError):
    status = 503


class GatewayTimeout(ApiError):
    status = 504


#: A webhook delivery's status, by its bridge's verdict (bridges.port.Verdict).
WEBHOOK_STATUSES: Final = {
    "accepted": 200,
    "ignored": 200,
    "challenge": 200,
    "forged": 401,
    "malformed": 400,
}

HEAD_TIMEOUT: Final = 408
HEAD_TOO_LARGE: Final = 431
OVER_CAPACITY: Final = 503

_encode = msgspec.json.Encoder().encode


def raw_envelope(status: int, message: str, headers: dict[str, str]) -> bytes:
    """The envelope as a whole HTTP/1.1 response that closes its connection.

    For refusals made before a request exists (its head is unfinished), so before ASGI.
    """
    body = _encode({"ok": False, "error": message})
    lines = [
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def envelope(
    status: int, message: str, *, headers: dict[str, str] | None = None, **extra: Any
) -> Response[bytes]:
    """The ``{ok: false, error}`` response every refusal shares."""
    body = _encode({"ok": False, "error": message, **extra})
    return Response(body, status_code=status, media_type="application/json", headers=headers)


async def send_envelope(
    send: Send, status: int, message: str, headers: dict[str, str], **extra: Any
) -> None:
    """The envelope written straight to ASGI, for refusals made before any handler."""
    body = _encode({"ok": False, "error": message, **extra})
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *((name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()),
    ]
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": status,
        "headers": raw_headers,
    }
    end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": body, "more_body": False}
    await send(start)
    await send(end)


def _speech(request: Request[Any, Any, Any]) -> tuple[Translator | None, str | None]:
    """The translator and language of a refusal: the caller's, else Accept-Language's.

    A refusal made before the caller is known (an unknown path, a public route) still
    speaks the language the request asks for, falling back to the instance's default.
    """
    state = request.scope.get("state", {})
    translator = state.get("translator")
    if translator is not None:
        chosen: Translator = translator
        return chosen, state.get("language")
    services = getattr(request.app.state, "services", None)
    if services is None:  # before start-up finished: nothing to translate with
        return None, None
    language = (
        negotiate(request.headers.get("accept-language")) or services.settings.defaults.language
    )
    found: Translator = services.catalogs.translator(language)
    return found, language


def _refusal(
    request: Request[Any, Any, Any],
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    **values: Any,
) -> Response[bytes]:
    """The envelope with ``message`` translated for the request, and its Content-Language."""
    translator, language = _speech(request)
    text = translator.gettext(message) if translator is not None else message
    if values:
        text = text % values
    headers = dict(headers or {})
    if language:
        headers.setdefault("content-language", language)
    return envelope(status, text, headers=headers)


def handle_api_error(request: Request[Any, Any, Any], error: ApiError) -> Response[bytes]:
    headers = dict(error.headers)
    language = request.scope.get("state", {}).get("language")
    if language:
        headers.setdefault("content-language", language)
    return envelope(error.status, error.message, headers=headers, **error.extra)


def handle_http_exception(request: Request[Any, Any, Any], error: HTTPException) -> Response[bytes]:
    """Litestar's own refusals (unknown route, method, body too large) in our envelope."""
    if isinstance(error, NotFoundException):
        return _refusal(request, 404, "Not found.")
    if isinstance(error, MethodNotAllowedException):
        return _refusal(
            request,
            405,
            "This route does not accept the %(method)s method.",
            dict(error.headers or {}),
            method=request.method,
        )
    if error.status_code == 413:
        return _refusal(request, 413, "The request body is larger than 1 MiB.")
    if isinstance(error, ValidationException):
        return envelope(400, str(error.detail))
    if error.status_code >= 500 and "disconnected" in str(error.detail):
        # The client left before its body arrived; nobody reads this answer.
        log.info("client gone before its body arrived on %s", request.url.path)
        return _refusal(request, 400, "The request body must be JSON.")
    if error.status_code >= 500:
        log.error("HTTP %s on %s: %s", error.status_code, request.url.path, error.detail)
        return _refusal(
            request, error.status_code, "Something went wrong on our side. Try again in a moment."
        )
    return envelope(error.status_code, str(error.detail), headers=error.headers)


def handle_database_unavailable(
    request: Request[Any, Any, Any], error: DatabaseUnavailable
) -> Response[bytes]:
    log.warning("%s %s: %s", request.method, request.url.path, error)
    return _refusal(
        request,
        503,
        N_("The server is busy; try again in a few seconds."),
        {"retry-after": "5"},
    )


def handle_unexpected(request: Request[Any, Any, Any], error: Exception) -> Response[bytes]:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=error)
    return _refusal(
        request,
        HTTP_500_INTERNAL_SERVER_ERROR,
        "Something went wrong on our side. Try again in a moment.",
    )


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    ApiError: handle_api_error,
    DatabaseUnavailable: handle_database_unavailable,
    HTTPException: handle_http_exception,
    Exception: handle_unexpected,
}
