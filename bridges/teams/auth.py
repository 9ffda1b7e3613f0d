"""The Bot Framework's tokens, both ways: the bearer token on each incoming activity checked,
and the bot's own token for the connector asked and kept.

Incoming (:class:`ActivityTokens`): the connector service signs a JWT for every activity it
posts. It is checked against the OpenID metadata (``teams.openid_url``: its ``issuer`` and
its ``jwks_uri``) and the keys there: RS256 only, signed by a key the metadata lists (and,
where the key names the channels it endorses, one that endorses ``msteams``), issued by the
metadata's issuer, for the bot's app id as the audience, not expired (five minutes' leeway
for clocks, as the Bot Framework allows), and its ``serviceUrl`` claim equal to the
activity's ``serviceUrl``: a token taken from one activity can't send the bot's replies
(and its token) to another host.

The Agents SDK's own ``JwtTokenValidator`` derives the keys' address from the token's issuer
(Microsoft's hosts, fixed in the SDK) and does not compare the ``serviceUrl`` claim, so the
check is made here with PyJWT, the library that validator stands on.

Outgoing (:class:`BotTokens`): the OAuth client-credentials grant at ``teams.token_url`` for
the scope ``https://api.botframework.com/.default``, kept until five minutes before it
expires; one request at a time. MSAL (the SDK's ``microsoft-agents-authentication-msal``)
needs an ``https`` Entra authority and asks it for instance discovery first, so it can't be
pointed at a local stand-in; the grant is one form post, made here.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any, Final

import aiohttp
import jwt
from jwt import PyJWK

from bridges.port import BridgeError, PlatformUnavailable

__all__ = ["ActivityTokens", "BotTokens", "Refused"]

#: The scope of the bot's own token for the connector.
BOT_SCOPE: Final = "https://api.botframework.com/.default"
#: Seconds of clock difference allowed on ``exp`` and ``nbf`` (the Bot Framework's five minutes).
_LEEWAY_S: Final = 300
#: How long the OpenID metadata and the keys are kept before they are read again.
_KEYS_KEPT_S: Final = 24 * 3600.0
#: The least time between two reads of the keys for a key id they don't hold: a flood of
#: tokens with made-up key ids must not become a flood of requests.
_REFRESH_EVERY_S: Final = 60.0
#: Seconds before its expiry that the bot's token is asked for anew.
_TOKEN_MARGIN_S: Final = 300.0
_CALL_TIMEOUT_S: Final = 15.0
_MAX_DOCUMENT_BYTES: Final = 1_000_000


class Refused(Exception):
    """An incoming token that is not the Bot Framework's for this bot; the message says why."""


class _Keys:
    """The metadata's issuer and its keys (each with the channels it endorses, if it says)."""

    def __init__(
        self, issuer: str, keys: Mapping[str, tuple[PyJWK, tuple[str, ...] | None]], at: float
    ) -> None:
        self.issuer = issuer
        self.keys = keys
        self.at = at


class ActivityTokens:
    """Checks the bearer token of each activity the connector service posts to the bot."""

    def __init__(self, *, app_id: str, openid_url: str, channel: str = "msteams") -> None:
        self._app_id = app_id
        self._openid_url = openid_url
        self._channel = channel
        self._keys: _Keys | None = None
        self._last_read = float("-inf")
        self._lock = asyncio.Lock()

    async def check(
        self, authorization: str | None, session: aiohttp.ClientSession
    ) -> dict[str, Any]:
        """The claims of the token in ``authorization`` (``Bearer <jwt>``); the caller
        compares their ``serviceurl`` with the activity's once it has read the body.

        Raises :class:`Refused` for a token that isn't the Bot Framework's for this bot;
        :class:`PlatformUnavailable` when the metadata or the keys can't be read (the
        activity is then refused for now, and sent again).
        """
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Refused("the activity carries no bearer token")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Refused(f"the bearer token is no JWT ({exc})") from None
        if header.get("alg") != "RS256":
            raise Refused(f"the token is signed with {str(header.get('alg'))[:20]}, not RS256")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise Refused("the token names no signing key")
        keys = await self._keys_with(kid, session)
        found = keys.keys.get(kid)
        if found is None:
            raise Refused("the token is signed with a key the OpenID metadata does not list")
        key, endorsements = found
        if endorsements is not None and self._channel not in endorsements:
            raise Refused(f"the signing key does not endorse the {self._channel} channel")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=["RS256"],
                audience=self._app_id,
                issuer=keys.issuer,
                leeway=_LEEWAY_S,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise Refused("the token has expired") from None
        except jwt.InvalidAudienceError:
            raise Refused("the token is for another app id") from None
        except jwt.InvalidIssuerError:
            raise Refused("the token is from another issuer") from None
        except jwt.PyJWTError as exc:
            raise Refused(f"the token does not check out ({exc})") from None
        return claims

    async def _keys_with(self, kid: str, session: aiohttp.ClientSession) -> _Keys:
        """The keys, read again when they are old, or (at most once a minute) when they
        don't hold ``kid`` (the Bot Framework rolls its keys)."""
        now = time.monotonic()
        keys = self._keys
        if keys is not None and now - keys.at < _KEYS_KEPT_S and kid in keys.keys:
            return keys
        async with self._lock:
            keys = self._keys
            if keys is not None and kid in keys.keys and now - keys.at < _KEYS_KEPT_S:
                return keys
            if keys is not None and now - self._last_read < _REFRESH_EVERY_S:
                return keys
            self._last_read = now
            self._keys = await self._read(session)
            return self._keys

    async def _read(self, session: aiohttp.ClientSession) -> _Keys:
        metadata = await _get_json(session, self._openid_url, "the Bot Framework's OpenID metadata")
        issuer, jwks_uri = metadata.get("issuer"), metadata.get("jwks_uri")
        if not isinstance(issuer, str) or not isinstance(jwks_uri, str):
            raise PlatformUnavailable(
                "The Bot Framework's OpenID metadata names no issuer or jwks_uri; check "
                "TEAMS_OPENID_URL."
            )
        document = await _get_json(session, jwks_uri, "the Bot Framework's signing keys")
        entries = document.get("keys")
        keys: dict[str, tuple[PyJWK, tuple[str, ...] | None]] = {}
        for entry in entries if isinstance(entries, list) else ():
            if not isinstance(entry, dict) or not isinstance(entry.get("kid"), str):
                continue
            try:
                key = PyJWK(entry, algorithm="RS256")
            except jwt.PyJWTError:
                continue  # a key of a kind we don't read: no token signed with it checks out
            endorsed = entry.get("endorsements")
            endorsements = tuple(str(e) for e in endorsed) if isinstance(endorsed, list) else None
            keys[entry["kid"]] = (key, endorsements)
        return _Keys(issuer, keys, time.monotonic())


class BotTokens:
    """The bot's own token for the connector (client credentials), kept until near expiry."""

    def __init__(self, *, app_id: str, app_password: str, token_url: str) -> None:
        self._app_id = app_id
        self._password = app_password
        self._token_url = token_url
        self._token: str | None = None
        self._until = 0.0
        self._lock = asyncio.Lock()

    async def token(self, session: aiohttp.ClientSession, *, fresh: bool = False) -> str:
        """The bot's token; ``fresh`` asks for a new one (the connector refused the last)."""
        if not fresh and self._token is not None and time.monotonic() < self._until:
            return self._token
        async with self._lock:
            if not fresh and self._token is not None and time.monotonic() < self._until:
                return self._token
            form = {
                "grant_type": "client_credentials",
                "client_id": self._app_id,
                "client_secret": self._password,
                "scope": BOT_SCOPE,
            }
            try:
                async with session.post(
                    self._token_url,
                    data=form,
                    timeout=aiohttp.ClientTimeout(total=_CALL_TIMEOUT_S),
                    allow_redirects=False,
                ) as answer:
                    if answer.status == 429 or answer.status >= 500:
                        raise PlatformUnavailable(
                            f"The token endpoint answered {answer.status}; try again later."
                        )
                    body = await answer.content.read(_MAX_DOCUMENT_BYTES)
                    status = answer.status
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise PlatformUnavailable(
                    f"The token endpoint could not be reached ({type(exc).__name__}); "
                    "try again later."
                ) from exc
            granted = _json_object(body)
            token, lifetime = granted.get("access_token"), granted.get("expires_in")
            if status != 200 or not isinstance(token, str) or not token:
                # Never the body as it is: it may repeat what was sent.
                code = granted.get("error")
                raise BridgeError(
                    f"The token endpoint refused the bot's credentials ({status}"
                    + (f", {str(code)[:60]}" if isinstance(code, str) else "")
                    + "); check TEAMS_APP_ID, TEAMS_APP_PASSWORD and TEAMS_TENANT_ID."
                )
            seconds = float(lifetime) if isinstance(lifetime, int | float | str) else 3600.0
            self._token = token
            self._until = time.monotonic() + max(60.0, seconds - _TOKEN_MARGIN_S)
            return token


async def _get_json(session: aiohttp.ClientSession, url: str, what: str) -> dict[str, Any]:
    try:
        async with session.get(
            url, timeout=aiohttp.ClientTimeout(total=_CALL_TIMEOUT_S), allow_redirects=False
        ) as answer:
            if answer.status != 200:
                raise PlatformUnavailable(f"{what} answered {answer.status}; try again later.")
            body = await answer.content.read(_MAX_DOCUMENT_BYTES)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise PlatformUnavailable(
            f"{what} could not be read ({type(exc).__name__}); try again later."
        ) from exc
    document = _json_object(body)
    if not document:
        raise PlatformUnavailable(f"{what} is no JSON object; try again later.")
    return document


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}
