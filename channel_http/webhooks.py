"""``/webhooks/{platform}``: where Slack, Telegram and WhatsApp deliver their events.

These routes carry no bearer token: each delivery is checked by its platform's own
signature or secret, in the bridge (:meth:`bridges.port.WebhookBridge.receive`), before
anything else is read. The answer comes as soon as the delivery is checked and taken (Slack
waits 3 seconds at most); the turn runs afterwards in the pipeline's own task. A retried
delivery already taken, on any instance, is answered 200 and runs nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from litestar import Request, Response, route
from litestar.params import FromPath

from bridges.port import BridgeError
from channel_http.errors import (
    WEBHOOK_STATUSES,
    BadRequest,
    NotFound,
    Unauthorized,
    Unavailable,
)
from core.i18n import negotiate

if TYPE_CHECKING:
    from channel_http.services import Services
    from core.i18n import Translator

log = logging.getLogger("mercury.bridges")

AnyRequest = Request[Any, Any, Any]


def _translator(request: AnyRequest, services: Services) -> Translator:
    language = (
        negotiate(request.headers.get("accept-language")) or services.settings.defaults.language
    )
    return services.catalogs.translator(language)


@route("/webhooks/{platform:str}", http_method=["GET", "POST"], status_code=200)
async def webhook(request: AnyRequest, platform: FromPath[str]) -> Response[Any]:
    services: Services = request.app.state.services
    bridging = services.bridging
    bridge = bridging.webhooks.get(platform) if bridging is not None else None
    if bridge is None or bridging is None:
        tr = _translator(request, services)
        raise NotFound(
            tr.gettext('No "%(platform)s" bridge runs on this server.')
            % {"platform": platform[:40]}
        )
    if bridging.pipeline.full:
        log.warning("a %s delivery was turned away: the pipeline is full", platform)
        tr = _translator(request, services)
        raise Unavailable(
            tr.gettext("The server is busy; try again in a few seconds."),
            headers={"retry-after": "5"},
        )
    body = await request.body()
    headers = {name.lower(): value for name, value in request.headers.items()}
    query = {name: value for name, value in request.query_params.items()}
    try:
        outcome = await bridge.receive(request.method, query, headers, body)
    except BridgeError as error:
        # A delivery that needs the platform to be read (the bot's own id, say) while the
        # platform can't be reached: refused before it is taken, so it comes again later.
        log.warning("a %s delivery could not be checked: %s", platform, error)
        tr = _translator(request, services)
        raise Unavailable(
            tr.gettext("The server is busy; try again in a few seconds."),
            headers={"retry-after": "5"},
        ) from None
    verdict = outcome.verdict
    if verdict == "forged":
        log.warning("a %s delivery was refused: %s", platform, outcome.reason or "forged")
        tr = _translator(request, services)
        raise Unauthorized(
            tr.gettext("The delivery's signature or secret doesn't match: nothing was run.")
        )
    if verdict == "malformed":
        log.warning("a %s delivery could not be read: %s", platform, outcome.reason)
        tr = _translator(request, services)
        raise BadRequest(tr.gettext("The delivery could not be read: nothing was run."))
    if verdict == "challenge":
        return Response(
            outcome.body, status_code=WEBHOOK_STATUSES[verdict], media_type=outcome.content_type
        )
    taken = 0
    for message in outcome.messages:
        taken += await bridging.pipeline.submit(bridge, message)
    return Response(
        {"ok": True, "taken": taken}, status_code=WEBHOOK_STATUSES[verdict], headers=_NO_STORE
    )


_NO_STORE = {"cache-control": "no-store"}
