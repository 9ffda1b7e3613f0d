"""``/spaces``: a caller's shared spaces, their people, preferences, settings and mutes.

Every route names the space in its path (``/spaces/slack:C0123/prefs``; a client may
percent-encode the colon). A space the caller doesn't belong to answers 404 as an unknown one
does, so nobody learns which spaces exist; a member without the permission a route needs
(``prefs.get`` for reading preferences, ``prefs.set`` for changing them, ``mute`` for the mutes,
``config.get`` for reading the settings, ``config.set`` for changing them, ``space.delete`` for
forgetting the space) is refused with 403.
Any member may read the space itself and who is in it (``GET /spaces/{space}``), each person
by name where one is known.

A setting (``/spaces/{space}/settings/{key}``) is the value in force with where it comes from:
the space's runtime value, else the file's, else the global one
(:mod:`core.spaces.settings`); deleting the runtime value answers the value it falls back to.

The permission check is the one the agent's tools make (:func:`core.spaces.access.require`).
Muting over HTTP is two-step, as the agent's tool is: a ``POST`` without ``confirm: true``
answers a reminder written for the admin and changes nothing; the same request with it applies
the mute. The person named is resolved as the tool resolves it
(:class:`core.spaces.access.MuteTargets`): the mute is kept under their person key, and an
admin of the space is refused (403) under any of their names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

from litestar import Request, Response, delete, get, post, put
from litestar.params import FromPath

from channel_http.errors import BadRequest, Forbidden, NotFound, Unavailable
from channel_http.requests import MuteBody, PreferenceBody, SettingBody, decode_body
from core.people.messages import MUTE_CONFIRM_OVER_HTTP, MUTE_DURATION_INVALID, MUTE_NOTICE
from core.spaces import InvalidSpaceId, parse_space_id
from core.spaces.access import MuteTargets, NotPermitted, require
from core.spaces.members import PERMISSIONS, Permission
from core.spaces.mutes import (
    MAX_MUTE,
    MAX_REASON_CHARS,
    MuteError,
    checked_reason,
    parse_duration,
)
from core.spaces.preferences import MAX_PREFERENCES, MAX_VALUE_CHARS, PreferenceError
from core.spaces.settings import SettingError

if TYPE_CHECKING:
    from channel_http.middleware import Caller
    from channel_http.services import Services
    from core.people.i18n import Translator
    from core.spaces.members import Space
    from core.spaces.mutes import Mute
    from core.spaces.preferences import Preference
    from core.spaces.settings import Resolved
    from core.spaces.turn import Role

__all__ = ["space_routes"]

AnyRequest = Request[Any, Any, Any]
_NO_STORE: Final = {"cache-control": "no-store"}
_MAX_PERSON_CHARS: Final = 200


def _ok(content: dict[str, Any]) -> Response[Any]:
    return Response({"ok": True, **content}, headers=_NO_STORE)


async def _role(
    request: AnyRequest, raw_space: str, permission: Permission | None
) -> tuple[str, Role]:
    """The space named in the path and the caller's role in it, or the refusal."""
    services: Services = request.app.state.services
    caller: Caller = request.scope["state"]["caller"]
    tr = caller.translator
    try:
        space = parse_space_id(unquote(raw_space))
    except InvalidSpaceId:
        raise BadRequest(
            tr.gettext(
                "A space id is a platform and its ids, such as slack:C0123ABC, "
                "telegram:-1001234, discord:<guild>:<channel>, whatsapp:<number>, "
                "teams:<tenant>:<conversation> or matrix:<room id>."
            )
        ) from None
    stores = services.space_stores
    assert stores is not None  # noqa: S101 - open_services always builds them
    role = await stores.spaces.role(space.id, caller.person.key, (caller.principal.user_key,))
    if role is None:
        raise NotFound(_unknown(space.id, tr))
    if permission is not None:
        try:
            require(role, permission)  # the check the agent's tools make too
        except NotPermitted:
            raise Forbidden(
                tr.gettext("Only an admin of %(space)s may do this; your role there is %(role)s.")
                % {"space": space.id, "role": role}
            ) from None
    return space.id, role


#: The space named in a path and the caller's role in it, for routes kept elsewhere.
space_role: Final = _role


def _unknown(space_id: str, tr: Translator) -> str:
    return tr.gettext("You are not in the space %(space)s.") % {"space": space_id}


def _stores(request: AnyRequest) -> Any:
    services: Services = request.app.state.services
    return services.space_stores


def _preference_refusal(error: PreferenceError, tr: Translator) -> str:
    if error.fault == "key":
        return tr.gettext(
            'A preference key is 1 to 64 lower-case letters, digits, ".", "_" or "-", '
            "starting with a letter or a digit."
        )
    if error.fault == "long":
        return tr.gettext("A preference's value holds at most %(count)d characters.") % {
            "count": MAX_VALUE_CHARS
        }
    if error.fault == "blank":
        return tr.gettext(
            "A preference's value is empty or only blanks; write what the assistant should follow."
        )
    if error.fault == "invisible":
        return tr.gettext(
            "A preference's value is plain text: control characters (such as NUL) and "
            "invisible formatting characters (such as U+202E) are refused; tabs and line "
            "breaks are fine."
        )
    return tr.gettext(
        "A space holds at most %(count)d preferences; delete one before adding another."
    ) % {"count": MAX_PREFERENCES}


def _preference(preference: Preference) -> dict[str, Any]:
    return {
        "key": preference.key,
        "value": preference.value,
        "createdBy": preference.created_by,
        "createdAt": preference.created_at.isoformat(),
        "updatedAt": preference.updated_at.isoformat(),
    }


def _mute(mute: Mute, names: dict[str, str | None]) -> dict[str, Any]:
    return {
        "person": mute.target,
        "name": names.get(mute.target),
        "until": mute.until.isoformat(),
        "reason": mute.reason,
        "by": mute.by,
    }


async def _names(request: AnyRequest, space_id: str, keys: list[str]) -> dict[str, str | None]:
    """Each person's name: the one they were last seen under in the space (the directory's
    or the platform's), else the one they asked the assistant to call them; else ``None``."""
    services: Services = request.app.state.services
    seen = await _stores(request).spaces.names_of(space_id, keys)
    asked = await services.person_settings.names(key for key in keys if key not in seen)
    return {key: seen.get(key) or asked.get(key) for key in keys}


def _space(space: Space, role: Role) -> dict[str, Any]:
    return {
        "spaceId": space.id,
        "platform": space.platform,
        "isDm": space.is_dm,
        "title": space.title,
        "role": role,
        "permissions": sorted(p for p, roles in PERMISSIONS.items() if role in roles),
    }


def _setting(setting: Resolved) -> dict[str, Any]:
    shown: dict[str, Any] = {"key": setting.key, "value": setting.value, "source": setting.source}
    if setting.bounds is not None:
        shown["bounds"] = {"min": setting.bounds[0], "max": setting.bounds[1]}
    return shown


def _setting_refusal(error: SettingError, tr: Translator) -> Exception:
    """A refused setting's answer: 404 for a key that is none, 400 for a value, translated."""
    said = tr.gettext(error.template) % dict(error.params)
    return NotFound(said) if error.fault == "key" else BadRequest(said)


@get("/spaces")
async def spaces_list(request: AnyRequest) -> Response[Any]:
    """The spaces the caller takes part in, with their role in each."""
    caller: Caller = request.scope["state"]["caller"]
    stores = _stores(request)
    found = []
    identities = (caller.principal.user_key,)
    for space in await stores.spaces.spaces_of(caller.person.key, identities):
        role = await stores.spaces.role(space.id, caller.person.key, identities)
        if role is None:
            continue
        found.append(_space(space, role))
    return _ok({"spaces": found})


@get("/spaces/{space:str}")
async def space_get(request: AnyRequest, space: FromPath[str]) -> Response[Any]:
    """The space, the caller's role in it, and its people with their roles and names."""
    space_id, role = await _role(request, space, None)
    services: Services = request.app.state.services
    spaces = _stores(request).spaces
    known = await spaces.get(space_id) or await spaces.open(parse_space_id(space_id))
    roster = await spaces.roster(space_id)  # one read, however many members
    # Those never seen under a name: the one they asked to be called, read at once.
    asked = await services.person_settings.names(key for key, seen, _ in roster if seen is None)
    people = [
        {"id": key, "name": seen or asked.get(key), "role": held} for key, seen, held in roster
    ]
    return _ok({"space": _space(known, role), "members": people})


@get("/spaces/{space:str}/settings")
async def settings_list(request: AnyRequest, space: FromPath[str]) -> Response[Any]:
    """Every setting of the space in force, with where each comes from."""
    space_id, _ = await _role(request, space, "config.get")
    found = await _stores(request).settings.listing(space_id)
    return _ok({"spaceId": space_id, "settings": [_setting(s) for s in found.values()]})


@put("/spaces/{space:str}/settings/{key:str}", status_code=200)
async def settings_put(
    request: AnyRequest, space: FromPath[str], key: FromPath[str]
) -> Response[Any]:
    """Set the space's own value of ``key``: in force from the next message, everywhere."""
    space_id, _ = await _role(request, space, "config.set")
    caller: Caller = request.scope["state"]["caller"]
    body = decode_body(SettingBody, await request.body(), caller.translator)
    try:
        saved = await _stores(request).settings.set(
            space_id, unquote(key), body.value, by=caller.person.key
        )
    except SettingError as error:
        raise _setting_refusal(error, caller.translator) from None
    return _ok({"spaceId": space_id, "setting": _setting(saved)})


@delete("/spaces/{space:str}/settings/{key:str}", status_code=200)
async def settings_delete(
    request: AnyRequest, space: FromPath[str], key: FromPath[str]
) -> Response[Any]:
    """Drop the space's own value of ``key``; answers the value it falls back to."""
    space_id, _ = await _role(request, space, "config.set")
    caller: Caller = request.scope["state"]["caller"]
    try:
        fallen = await _stores(request).settings.delete(space_id, unquote(key))
    except SettingError as error:
        raise _setting_refusal(error, caller.translator) from None
    return _ok({"spaceId": space_id, "setting": _setting(fallen)})


@delete("/spaces/{space:str}", status_code=200)
async def space_delete(request: AnyRequest, space: FromPath[str]) -> Response[Any]:
    """Forget a space: its members, preferences, mutes and ambient talk (an admin's call)."""
    space_id, _ = await _role(request, space, "space.delete")
    await _stores(request).delete_space(space_id)
    return _ok({"spaceId": space_id, "deleted": True})


@get("/spaces/{space:str}/prefs")
async def prefs_list(request: AnyRequest, space: FromPath[str]) -> Response[Any]:
    space_id, _ = await _role(request, space, "prefs.get")
    preferences = await _stores(request).preferences.list(space_id)
    return _ok({"spaceId": space_id, "preferences": [_preference(p) for p in preferences]})


@get("/spaces/{space:str}/prefs/{key:str}")
async def prefs_get(request: AnyRequest, space: FromPath[str], key: FromPath[str]) -> Response[Any]:
    space_id, _ = await _role(request, space, "prefs.get")
    caller: Caller = request.scope["state"]["caller"]
    try:
        found = await _stores(request).preferences.get(space_id, key)
    except PreferenceError as error:
        raise BadRequest(_preference_refusal(error, caller.translator)) from None
    if found is None:
        raise NotFound(
            caller.translator.gettext('%(space)s has no preference "%(key)s".')
            % {"space": space_id, "key": key[:64]}
        )
    return _ok({"spaceId": space_id, "preference": _preference(found)})


@put("/spaces/{space:str}/prefs/{key:str}", status_code=200)
async def prefs_put(request: AnyRequest, space: FromPath[str], key: FromPath[str]) -> Response[Any]:
    space_id, _ = await _role(request, space, "prefs.set")
    caller: Caller = request.scope["state"]["caller"]
    body = decode_body(PreferenceBody, await request.body(), caller.translator)
    try:
        saved, created = await _stores(request).preferences.set(
            space_id, key, body.value, by=caller.person.key
        )
    except PreferenceError as error:
        raise BadRequest(_preference_refusal(error, caller.translator)) from None
    return _ok({"spaceId": space_id, "preference": _preference(saved), "created": created})


@delete("/spaces/{space:str}/prefs/{key:str}", status_code=200)
async def prefs_delete(
    request: AnyRequest, space: FromPath[str], key: FromPath[str]
) -> Response[Any]:
    space_id, _ = await _role(request, space, "prefs.set")
    caller: Caller = request.scope["state"]["caller"]
    try:
        deleted = await _stores(request).preferences.delete(space_id, key)
    except PreferenceError as error:
        raise BadRequest(_preference_refusal(error, caller.translator)) from None
    if not deleted:
        raise NotFound(
            caller.translator.gettext('%(space)s has no preference "%(key)s".')
            % {"space": space_id, "key": key[:64]}
        )
    return _ok({"spaceId": space_id, "deleted": key})


@get("/spaces/{space:str}/mutes")
async def mutes_list(request: AnyRequest, space: FromPath[str]) -> Response[Any]:
    space_id, _ = await _role(request, space, "mute")
    mutes = await _stores(request).mutes.list(space_id)
    names = await _names(request, space_id, [m.target for m in mutes])
    return _ok({"spaceId": space_id, "mutes": [_mute(m, names) for m in mutes]})


def _targets(request: AnyRequest) -> MuteTargets:
    return MuteTargets(_stores(request).spaces)


def _mute_refusal(error: MuteError, person: str, space_id: str, tr: Translator) -> Exception:
    """The route's answer to a refused mute, in the caller's language."""
    if error.fault == "admin":
        return Forbidden(
            tr.gettext("%(person)s is an admin of %(space)s; an admin can't be muted.")
            % {"person": person, "space": space_id}
        )
    if error.fault == "unchecked":
        return Unavailable(
            tr.gettext("Who %(person)s is can't be checked right now; try again in a few minutes.")
            % {"person": person}
        )
    if error.fault == "duration":
        return BadRequest(tr.gettext(MUTE_DURATION_INVALID) % {"days": MAX_MUTE.days})
    if error.fault == "reason":
        return BadRequest(
            tr.gettext(
                '"reason" is plain text of at most %(count)d characters, without control or '
                "invisible characters."
            )
            % {"count": MAX_REASON_CHARS}
        )
    return BadRequest(
        tr.gettext(
            '"person" names who to mute as the space knows them (slack:U0123), without '
            "spaces or invisible characters."
        )
    )


@post("/spaces/{space:str}/mutes", status_code=200)
async def mutes_post(request: AnyRequest, space: FromPath[str]) -> Response[Any]:
    space_id, _ = await _role(request, space, "mute")
    caller: Caller = request.scope["state"]["caller"]
    tr = caller.translator
    body = decode_body(MuteBody, await request.body(), tr)
    person = body.person.strip()
    shown = person[:_MAX_PERSON_CHARS]
    try:
        duration = parse_duration(body.duration)
        reason = checked_reason(body.reason)
        # The tool's rule: the person behind the name, never an admin under any name (#34).
        target = await _targets(request).mutable(space_id, person)
    except MuteError as error:
        raise _mute_refusal(error, shown, space_id, tr) from None
    if not body.confirm:
        # ``notice`` for a person (the UI and the command line add their own Confirm),
        # ``reminder`` for an API client: the notice and how to confirm over HTTP.
        notice = tr.gettext(MUTE_NOTICE) % {"person": shown, "space": space_id}
        reminder = f"{notice} {tr.gettext(MUTE_CONFIRM_OVER_HTTP)}"
        answer = {"confirmed": False, "notice": notice, "reminder": reminder}
        return _ok({"spaceId": space_id, **answer})
    mute = await _stores(request).mutes.mute(
        space_id, target.key, duration, reason=reason, by=caller.person.key
    )
    names = await _names(request, space_id, [mute.target])
    return _ok({"spaceId": space_id, "confirmed": True, "mute": _mute(mute, names)})


@delete("/spaces/{space:str}/mutes/{person:str}", status_code=200)
async def mutes_delete(
    request: AnyRequest, space: FromPath[str], person: FromPath[str]
) -> Response[Any]:
    space_id, _ = await _role(request, space, "mute")
    caller: Caller = request.scope["state"]["caller"]
    given = unquote(person)
    try:
        target = await _targets(request).resolve(given)
    except MuteError as error:
        raise _mute_refusal(error, given[:_MAX_PERSON_CHARS], space_id, caller.translator) from None
    mutes = _stores(request).mutes
    if not any([await mutes.unmute(space_id, name) for name in target.names]):
        raise NotFound(
            caller.translator.gettext("%(person)s is not muted in %(space)s.")
            % {"person": given[:_MAX_PERSON_CHARS], "space": space_id}
        )
    return _ok({"spaceId": space_id, "unmuted": given})


space_routes: Final = (
    spaces_list,
    space_get,
    space_delete,
    settings_list,
    settings_put,
    settings_delete,
    prefs_list,
    prefs_get,
    prefs_put,
    prefs_delete,
    mutes_list,
    mutes_post,
    mutes_delete,
)
