"""``/pairing``: the requests of strangers to be let in, for approvers to approve or deny.

An approver is a person whose roles include ``admin`` (:func:`core.people.pairing.may_approve`,
the one check); anyone else is refused with 403 on every route. ``GET /pairing`` lists the
pending requests of every platform; ``POST /pairing/{code}/approve`` lets the account in, on
every instance, and tells it so through its bridge (a direct message where it asked, in the
language its code was sent in); ``POST /pairing/{code}/deny`` turns the request down and tells
the sender nothing. A code that is unknown, expired, or already approved or denied answers 404.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Final

import msgspec
from litestar import Request, Response, get, post
from litestar.params import FromPath

from bridges.port import Received
from channel_http.errors import Forbidden, NotFound
from core.people.pairing import admitted_text, may_approve, normalized_code

if TYPE_CHECKING:
    from channel_http.middleware import Caller
    from channel_http.services import Services
    from core.people.i18n import Translator
    from core.people.pairing import Pairing, PairingRequest

__all__ = ["pairing_routes"]

AnyRequest = Request[Any, Any, Any]
_NO_STORE: Final = {"cache-control": "no-store"}
#: Seconds the approved account's bridge may take to tell it so.
_TELL_TIMEOUT_S: Final = 15.0

log = logging.getLogger("mercury.pairing")


def _ok(content: dict[str, Any]) -> Response[Any]:
    return Response({"ok": True, **content}, headers=_NO_STORE)


def _approver(request: AnyRequest) -> tuple[Services, Caller, Pairing]:
    """The services, the caller, and the pairing store, once the caller may approve."""
    services: Services = request.app.state.services
    caller: Caller = request.scope["state"]["caller"]
    if not may_approve(caller.person):
        raise Forbidden(
            caller.translator.gettext(
                "Only an administrator (a person with the admin role) may see or answer "
                "requests for access."
            )
        )
    stores = services.space_stores
    assert stores is not None  # noqa: S101 - open_services always builds them
    return services, caller, stores.pairing


def _pairing(request: PairingRequest) -> dict[str, Any]:
    return {
        "code": request.code,
        "platform": request.platform,
        "account": request.account,
        "name": request.name,
        "requestedAt": request.requested_at.isoformat(),
        "expiresAt": request.expires_at.isoformat(),
    }


def _no_such(code: str, tr: Translator) -> NotFound:
    return NotFound(
        tr.gettext(
            "No request for access is waiting under the code %(code)s: it may have expired "
            "or been answered already."
        )
        % {"code": code[:40]}
    )


@get("/pairing")
async def pairing_list(request: AnyRequest) -> Response[Any]:
    _, _, pairing = _approver(request)
    return _ok({"pairings": [_pairing(found) for found in await pairing.pending()]})


@post("/pairing/{code:str}/approve", status_code=200)
async def pairing_approve(request: AnyRequest, code: FromPath[str]) -> Response[Any]:
    services, caller, pairing = _approver(request)
    wanted = normalized_code(code)
    approved = None if wanted is None else await pairing.approve(wanted, by=caller.person.key)
    if approved is None:
        raise _no_such(code, caller.translator)
    log.info("%s let %s in (code %s)", caller.person.key, approved.user_key, approved.code)
    await _tell(services, approved)
    return _ok({"pairing": _pairing(approved), "approved": True})


@post("/pairing/{code:str}/deny", status_code=200)
async def pairing_deny(request: AnyRequest, code: FromPath[str]) -> Response[Any]:
    _, caller, pairing = _approver(request)
    wanted = normalized_code(code)
    if wanted is None or not await pairing.deny(wanted):
        raise _no_such(code, caller.translator)
    log.info("%s turned down the request under code %s", caller.person.key, wanted)
    return _ok({"code": wanted, "denied": True})


async def _tell(services: Services, approved: PairingRequest) -> None:
    """Tell the account it is in, through its bridge here; a failure is logged, never raised
    (it is in all the same, and its next message is answered)."""
    bridging = services.bridging
    bridge = None
    if bridging is not None:
        bridge = next((b for b in bridging.bridges if b.platform == approved.platform), None)
    if bridge is None:
        log.warning("%s was let in but no %s bridge runs here to tell it so", *_who(approved))
        return
    text = admitted_text(services.catalogs.translator(approved.language))
    try:
        to = msgspec.json.decode(approved.reach, type=Received)
        async with asyncio.timeout(_TELL_TIMEOUT_S):
            await bridge.send_reply(to, text)
    except Exception as error:
        log.warning("%s was let in but telling it so on %s failed: %s", *_who(approved), error)


def _who(approved: PairingRequest) -> tuple[str, str]:
    return approved.user_key, approved.platform


pairing_routes: Final = (pairing_list, pairing_approve, pairing_deny)
