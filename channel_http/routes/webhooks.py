"""``/webhooks/{platform}``: where Slack, Telegram and WhatsApp deliver their events.

Button presses (#37) come in the same deliveries (Telegram's ``callback_query``, WhatsApp's
interactive replies), or at ``/webhooks/{platform}/interactions`` for a platform that sends
them to a URL of their own (Slack's interactivity: the bridge is an
:class:`~bridges.port.InteractionsBridge`); either way checked as strictly, and taken once.

These routes carry no bearer token: each delivery is checked by its platform's own
signature or secret, in the bridge (:meth:`bridges.port.WebhookBridge.receive`), before
anything else is read. The answer comes as soon as the delivery is checked and taken (Slack
waits 3 seconds at most); the turn runs afterwards in the pipeline's own task. A retried
delivery already taken, on any instance, is answered 200 and runs nothing. A delivery that
gives a header or query key twice (two signatures, two ``hub.verify_token``) is refused
with 400 before the bridge sees it: a dict would keep the last one, so which one was
checked would be a guess. Only the forwarding headers a proxy adds (``Forwarded``, ``Via``,
``X-Forwarded-*``) may repeat; the bridges never read them and they are not handed on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from litestar import Request, Response, route
from litestar.params import FromPath

from bridges.port import BridgeError, InteractionsBridge
from channel_http.errors import (
    WEBHOOK_STATUSES,
    BadRequest,
    NotFound,
    Unauthorized,
    Unavailable,
)
from core.people.i18n import negotiate
from core.people.messages import DELIVERY_REPEATED, DELIVERY_UNCHECKED

if TYPE_CHECKING:
    from channel_http.services import Services
    from core.people.i18n import Translator

log = logging.getLogger("mercury.bridges")

AnyRequest = Request[Any, Any, Any]


def _translator(request: AnyRequest, services: Services) -> Translator:
    language = (
        negotiate(request.headers.get("accept-language")) or services.settings.defaults.language
    )
    return services.catalogs.translator(language)


@route("/webhooks/{platform:str}", http_method=["GET", "POST"], status_code=200)
async def webhook(request: AnyRequest, platform: FromPath[str]) -> Response[Any]:
    return await _delivered(request, platform, interactions=False)


@route("/webhooks/{platform:str}/interactions", http_method=["POST"], status_code=200)
async def webhook_interactions(request: AnyRequest, platform: FromPath[str]) -> Response[Any]:
    """Button presses a platform delivers to a URL of their own (Slack's interactivity)."""
    return await _delivered(request, platform, interactions=True)


async def _delivered(request: AnyRequest, platform: str, *, interactions: bool) -> Response[Any]:
    services: Services = request.app.state.services
    bridging = services.bridging
    bridge = bridging.webhooks.get(platform) if bridging is not None else None
    if interactions and not isinstance(bridge, InteractionsBridge):
        bridge = None
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
    try:
        headers = _once(
            (key.decode("latin-1").lower(), value.decode("latin-1"))
            for key, value in request.scope["headers"]
            if key.lower() not in _FORWARDING and not key.lower().startswith(b"x-forwarded-")
        )
        query = _once(request.query_params.multi_items())
    except _Repeated as repeated:
        log.warning("a %s delivery was refused: %r is given twice", platform, repeated.name[:60])
        tr = _translator(request, services)
        raise BadRequest(tr.gettext(DELIVERY_REPEATED) % {"name": repeated.name[:60]}) from None
    body = await request.body()
    try:
        if isinstance(bridge, InteractionsBridge) and interactions:
            outcome = await bridge.receive_interactions(request.method, query, headers, body)
        else:
            outcome = await bridge.receive(request.method, query, headers, body)
    except BridgeError as error:
        # A delivery that needs the platform to be read (the bot's own id, say) while the
        # platform can't be reached: refused before it is taken, so it comes again later.
        log.warning("a %s delivery could not be checked: %s", platform, error)
        tr = _translator(request, services)
        raise Unavailable(tr.gettext(DELIVERY_UNCHECKED), headers={"retry-after": "5"}) from None
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
        taken += await bridging.take(bridge, message)
    for press in outcome.presses:
        taken += await bridging.take_press(bridge, press)
    return Response(
        {"ok": True, "taken": taken}, status_code=WEBHOOK_STATUSES[verdict], headers=_NO_STORE
    )


_NO_STORE = {"cache-control": "no-store"}

#: Headers a proxy on the way may add once more (besides ``X-Forwarded-*``): no bridge reads
#: them, so they may repeat.
_FORWARDING: Final = frozenset({b"forwarded", b"via"})


class _Repeated(Exception):
    """A header or query key a delivery gives more than once."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _once(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``pairs`` as a dict; :class:`_Repeated` for a name given twice: a dict would keep
    only the last one, and which signature or token counts must not be a guess (the bearer
    check refuses two ``Authorization`` headers alike)."""
    found: dict[str, str] = {}
    for name, value in pairs:
        if name in found:
            raise _Repeated(name)
        found[name] = value
    return found
