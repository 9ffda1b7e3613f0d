"""``/me`` and ``/link``: the caller's own name, language and time zone, and a link code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar import Response, get, patch, post

from channel_http.errors import BadRequest
from channel_http.requests import (
    MeBody,
    decode_body,
)
from channel_http.routes.handling import AnyRequest, caller_of, ok, services_of
from core.people.i18n import SUPPORTED_LANGUAGES
from core.people.person_settings import InvalidSetting

if TYPE_CHECKING:
    pass


@get("/me")
async def me(request: AnyRequest) -> dict[str, Any]:
    caller = caller_of(request)
    saved = caller.saved
    return {
        "ok": True,
        "name": saved.name,
        "language": saved.language,
        "timeZone": saved.time_zone,
    }


@patch("/me")
async def patch_me(request: AnyRequest) -> dict[str, Any]:
    """Save the caller's time zone and/or language (the language is an extension of v6).

    Both are checked before either is saved, so a refused body changes nothing.
    """
    caller = caller_of(request)
    tr = caller.translator
    body = decode_body(MeBody, await request.body(), tr)
    if body.time_zone is None and body.language is None:
        raise BadRequest(tr.gettext('The body must contain "timeZone" or "language".'))
    language = None
    if body.language is not None:
        language = body.language.strip().lower()
        if language not in SUPPORTED_LANGUAGES:
            raise BadRequest(
                tr.gettext('The field "%(field)s" must be one of %(choices)s, not "%(value)s".')
                % {
                    "field": "language",
                    "choices": ", ".join(SUPPORTED_LANGUAGES),
                    "value": body.language[:64],
                }
            )
    settings = services_of(request).person_settings
    saved: dict[str, Any] = {"ok": True}
    if body.time_zone is not None:
        try:
            saved["timeZone"] = await settings.set_time_zone(caller.person.key, body.time_zone)
        except InvalidSetting:
            raise BadRequest(
                tr.gettext(
                    'The field "%(field)s" must be a time zone name such as Europe/Rome, '
                    'not "%(value)s".'
                )
                % {"field": "timeZone", "value": body.time_zone[:64]}
            ) from None
    if language is not None:
        saved["language"] = await settings.set_language(caller.person.key, language)
    return saved


@post("/link", status_code=200)
async def link(request: AnyRequest) -> Response[Any]:
    caller = caller_of(request)
    services = services_of(request)
    code = await services.linking.start(caller.principal, caller.person)
    return ok(
        {"code": code.code, "expiresAt": code.expires_at.isoformat(timespec="seconds")},
        headers={"cache-control": "no-store"},
    )
