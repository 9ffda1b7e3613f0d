"""``/me`` and ``/link``: the caller's own name, language and time zone, and a link code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
from litestar import Response, get, patch, post

from channel_http.errors import BadRequest
from channel_http.requests import (
    MeBody,
    decode_body,
)
from channel_http.routes.handling import AnyRequest, caller_of, ok, services_of
from core.people.i18n import SUPPORTED_LANGUAGES
from core.people.pairing import may_approve
from core.people.person_settings import InvalidSetting

if TYPE_CHECKING:
    pass


@get("/me")
async def me(request: AnyRequest) -> Response[Any]:
    """The caller's saved settings; ``Content-Language`` is the language the server speaks to
    them (saved, else ``Accept-Language``, else the default), for a UI to write its own in."""
    caller = caller_of(request)
    saved = caller.saved
    return Response(
        {
            "ok": True,
            "name": saved.name,
            "language": saved.language,
            "timeZone": saved.time_zone,
            # The name the directory or the token gives (``name`` is the one the person
            # asked the assistant for), for a UI to greet them by before they say one.
            "displayName": caller.person.display_name or caller.principal.display_name,
            # Whether the caller may answer requests for access (GET /pairing), so a UI
            # asks only then.
            "approver": may_approve(caller.person),
        },
        headers={"content-language": caller.language},
    )


@patch("/me")
async def patch_me(request: AnyRequest) -> dict[str, Any]:
    """Save the caller's time zone and/or language (the language is an extension of v6).

    Both are checked before either is saved, so a refused body changes nothing.
    """
    caller = caller_of(request)
    tr = caller.translator
    body = decode_body(MeBody, await request.body(), tr)
    if body.time_zone is msgspec.UNSET and body.language is msgspec.UNSET:
        raise BadRequest(tr.gettext('The body must contain "timeZone" or "language".'))
    language = None
    if isinstance(body.language, str):
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
    if isinstance(body.time_zone, str):
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
    elif body.time_zone is None:
        await settings.clear(caller.person.key, "time_zone")
        saved["timeZone"] = None
    if language is not None:
        saved["language"] = await settings.set_language(caller.person.key, language)
    elif body.language is None:
        await settings.clear(caller.person.key, "language")
        saved["language"] = None
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
