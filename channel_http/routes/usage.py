"""``/me/usage``, ``/usage`` and ``/spaces/{space}/usage``: the usage ledger, read.

``GET /me/usage`` is the caller's own tokens by day and model. ``GET /usage`` is everyone's,
for an administrator (a person whose roles include ``admin``, as for ``/pairing``), grouped
by person, space and model, narrowed by ``person``, ``space`` and ``model``; ``GET
/spaces/{space}/usage`` is one space's by person and model, for the space's admins (the
``usage.get`` permission of the spaces' table). Every report covers a ``period`` ending today
(UTC): ``today``, ``7d``, ``30d`` (the default) or ``month``. People are shown by name where
one is known. With the ledger off (``usage.ledger: false``) each answers 404.

``GET /usage/allowances`` lists the named people's own token allowances (the file's
``usage.people`` and those set at runtime, :mod:`core.usage.allowances`); ``PUT`` and
``DELETE /usage/allowances/{person}/{window}`` (``day`` or ``month``) set and drop one at
runtime. All three are an administrator's, as ``/usage`` is: the rule of a space's settings
(its admins) with everyone's allowance in place of a space's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

from litestar import Request, Response, delete, get, put
from litestar.params import FromPath

from channel_http.errors import BadRequest, Forbidden, NotFound
from channel_http.requests import SettingBody, decode_body
from channel_http.routes.spaces import space_role
from core.people.pairing import may_approve
from core.usage import (
    GROUPS,
    PERIODS,
    Allowance,
    AllowanceError,
    Group,
    LedgerRow,
    Period,
    PersonAllowances,
    period_start,
)

if TYPE_CHECKING:
    from channel_http.middleware import Caller
    from channel_http.services import Services
    from core.people.i18n import Translator
    from core.usage import UsageLedger

__all__ = ["usage_routes"]

AnyRequest = Request[Any, Any, Any]
_NO_STORE: Final = {"cache-control": "no-store"}
_MAX_FILTER_CHARS: Final = 300


def _ledger(request: AnyRequest) -> tuple[Services, Caller, UsageLedger]:
    services: Services = request.app.state.services
    caller: Caller = request.scope["state"]["caller"]
    ledger = services.manager.ledger
    if ledger is None:
        raise NotFound(
            caller.translator.gettext(
                "The usage ledger is off on this server (usage.ledger: false)."
            )
        )
    return services, caller, ledger


def _period(request: AnyRequest, tr: Translator) -> Period:
    raw = request.query_params.get("period") or "30d"
    if raw not in PERIODS:
        raise BadRequest(
            tr.gettext('The field "%(field)s" must be one of %(choices)s, not "%(value)s".')
            % {"field": "period", "choices": ", ".join(PERIODS), "value": raw[:64]}
        )
    return raw  # type: ignore[return-value]  # checked just above


def _filter(request: AnyRequest, name: str) -> str | None:
    value = request.query_params.get(name)
    return None if value is None else value[:_MAX_FILTER_CHARS]


def _by(request: AnyRequest, tr: Translator, default: tuple[Group, ...]) -> tuple[Group, ...]:
    raw = request.query_params.get("by")
    if not raw:
        return default
    wanted = tuple(part.strip() for part in raw.split(",") if part.strip())
    for part in wanted:
        if part not in GROUPS:
            raise BadRequest(
                tr.gettext('The field "%(field)s" must be one of %(choices)s, not "%(value)s".')
                % {"field": "by", "choices": ", ".join(GROUPS), "value": part[:64]}
            )
    return wanted  # type: ignore[return-value]  # checked just above


def _sums(row: LedgerRow) -> dict[str, int]:
    return {"calls": row.calls, "input": row.input, "output": row.output, "cached": row.cached}


async def _name(services: Services, row: LedgerRow) -> str | None:
    """The person's name: the one they asked to be called, else their account's."""
    assert row.person_key is not None  # noqa: S101 - grouped by person
    saved = (await services.person_settings.get(row.person_key)).name
    return saved or row.person_name


async def _rows(services: Services, rows: list[LedgerRow]) -> list[dict[str, Any]]:
    names: dict[str, str | None] = {}
    shown = []
    for row in rows:
        line: dict[str, Any] = {}
        if row.day is not None:
            line["day"] = row.day
        if row.person_key is not None:
            if row.person_key not in names:
                names[row.person_key] = await _name(services, row)
            line["person"] = {"id": row.person_key, "name": names[row.person_key]}
        if row.space_id is not None:
            line["spaceId"] = row.space_id or None
        if row.model is not None:
            line["model"] = row.model
        shown.append({**line, **_sums(row)})
    return shown


async def _report(
    request: AnyRequest,
    ledger: UsageLedger,
    services: Services,
    period: Period,
    by: tuple[Group, ...],
    **narrow: str | None,
) -> Response[Any]:
    today = ledger.today()
    since = period_start(period, today)
    rows = await ledger.rows(since=since, by=by, **narrow)
    total = await ledger.rows(since=since, by=(), **narrow)
    empty = {"calls": 0, "input": 0, "output": 0, "cached": 0}
    return Response(
        {
            "ok": True,
            "period": period,
            "from": since.isoformat(),
            "to": today.isoformat(),
            "rows": await _rows(services, rows),
            "total": _sums(total[0]) if total else empty,
        },
        headers=_NO_STORE,
    )


@get("/me/usage")
async def my_usage(request: AnyRequest) -> Response[Any]:
    """The caller's own tokens in the period, by day and model."""
    services, caller, ledger = _ledger(request)
    period = _period(request, caller.translator)
    by = _by(request, caller.translator, ("day", "model"))
    if "person" in by:
        by = tuple(group for group in by if group != "person")
    return await _report(request, ledger, services, period, by, person_key=caller.person.key)


@get("/usage")
async def everyone_usage(request: AnyRequest) -> Response[Any]:
    """Everyone's tokens in the period, for an administrator."""
    services, caller, ledger = _ledger(request)
    tr = caller.translator
    if not may_approve(caller.person):
        raise Forbidden(
            tr.gettext(
                "Only an administrator (a person with the admin role) may read everyone's usage."
            )
        )
    period = _period(request, tr)
    by = _by(request, tr, ("person", "space", "model"))
    return await _report(
        request,
        ledger,
        services,
        period,
        by,
        person_key=_filter(request, "person"),
        space_id=_filter(request, "space"),
        model=_filter(request, "model"),
    )


@get("/spaces/{space:str}/usage")
async def space_usage(request: AnyRequest, space: FromPath[str]) -> Response[Any]:
    """One space's tokens in the period, by person and model, for its admins."""
    services, caller, ledger = _ledger(request)
    space_id, _ = await space_role(request, space, "usage.get")
    period = _period(request, caller.translator)
    by = _by(request, caller.translator, ("person", "model"))
    return await _report(request, ledger, services, period, by, space_id=space_id)


def _allowances(request: AnyRequest) -> tuple[Services, Caller, PersonAllowances]:
    """The allowances' store, for an administrator; 404 with the ledger off, 403 to others."""
    services, caller, _ = _ledger(request)
    budgets = services.manager.budgets
    if budgets is None or budgets.allowances is None:  # pragma: no cover - built with the ledger
        raise NotFound(
            caller.translator.gettext(
                "The usage ledger is off on this server (usage.ledger: false)."
            )
        )
    if not may_approve(caller.person):
        raise Forbidden(
            caller.translator.gettext(
                "Only an administrator (a person with the admin role) may read or set "
                "people's token allowances."
            )
        )
    return services, caller, budgets.allowances


async def _shown(services: Services, allowances: list[Allowance]) -> list[dict[str, Any]]:
    """The allowances with their people by name: the one they asked for, else their account's."""
    keys = sorted({allowance.person_key for allowance in allowances})
    asked = await services.person_settings.names(keys)
    seen = {} if services.manager.ledger is None else await services.manager.ledger.names(keys)
    return [
        {
            "person": {
                "id": allowance.person_key,
                "name": asked.get(allowance.person_key) or seen.get(allowance.person_key),
            },
            "window": allowance.window,
            "tokens": allowance.tokens,
            "source": allowance.source,
        }
        for allowance in allowances
    ]


def _refusal(error: AllowanceError, tr: Translator) -> BadRequest:
    return BadRequest(tr.gettext(error.template) % dict(error.params))


@get("/usage/allowances")
async def allowances_list(request: AnyRequest) -> Response[Any]:
    """Every named person's own allowances in force, with where each comes from."""
    services, _, allowances = _allowances(request)
    found = await _shown(services, await allowances.listing())
    return Response({"ok": True, "allowances": found}, headers=_NO_STORE)


@put("/usage/allowances/{person:str}/{window:str}", status_code=200)
async def allowance_put(
    request: AnyRequest, person: FromPath[str], window: FromPath[str]
) -> Response[Any]:
    """Give one person their own allowance for the window, in force from their next turn."""
    services, caller, allowances = _allowances(request)
    body = decode_body(SettingBody, await request.body(), caller.translator)
    try:
        saved = await allowances.set(
            unquote(person), unquote(window), body.value, by=caller.person.key
        )
    except AllowanceError as error:
        raise _refusal(error, caller.translator) from None
    [shown] = await _shown(services, [saved])
    return Response({"ok": True, "allowance": shown})


@delete("/usage/allowances/{person:str}/{window:str}", status_code=200)
async def allowance_delete(
    request: AnyRequest, person: FromPath[str], window: FromPath[str]
) -> Response[Any]:
    """Drop the runtime value: the file's for the person applies again, else everyone's."""
    services, caller, allowances = _allowances(request)
    try:
        left = await allowances.delete(unquote(person), unquote(window))
    except AllowanceError as error:
        raise _refusal(error, caller.translator) from None
    shown = await _shown(services, [] if left is None else [left])
    return Response({"ok": True, "allowance": shown[0] if shown else None})


usage_routes: Final = (
    my_usage,
    everyone_usage,
    space_usage,
    allowances_list,
    allowance_put,
    allowance_delete,
)
