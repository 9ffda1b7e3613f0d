"""A stand-in for Microsoft Teams behind the Bot Framework: the token issuer (OpenID metadata,
its keys, the token endpoint) and the connector service, on 127.0.0.1, and a sender of
activities signed as the Bot Framework signs them.

The Teams bridge's settings point at it (``TEAMS_OPENID_URL``, ``TEAMS_TOKEN_URL``) and the
activities it sends carry its ``serviceUrl``, so the Agents SDK's ``ConnectorClient`` sends
its real requests here::

    with TeamsStandIn() as teams:
        activity = teams.activity(teams.personal("u1"), "u1", "hello")
        await teams.deliver(server.url + "/webhooks/teams", activity)
        await teams.wait_until_async(lambda: teams.messages, what="the answer")

What it serves, as the Bot Framework does:

* ``GET /openid``: the OpenID metadata (``issuer``, ``jwks_uri``); ``GET /keys``: its RSA key
  as a JWK endorsing ``msteams``.
* ``POST /token``: the client-credentials grant; the app id and password must be right
  (else 401 ``invalid_client``), the scope the Bot Framework's; answers an access token.
* ``/service/v3/conversations…``: ``POST …/{conversation}/activities[/{replyToId}]`` (a
  message, a typing activity, a stream's activities), ``PUT …/activities/{id}`` (an update)
  and ``POST /service/v3/conversations`` (a personal chat opened with a person); every call
  needs the token ``/token`` handed out (else 401). Streaming is Teams': allowed in a personal
  chat only (400 ``BadArgument`` elsewhere), the first streaming activity's answer is the
  stream's id, every later one must carry it and a growing ``streamSequence``.
* ``GET /files/<name>``: a shared file's pre-authorized download URL; ``PUT
  /onedrive/<name>``: the upload URL a file consent's acceptance hands out (kept in
  :attr:`TeamsStandIn.uploads`); ``DELETE …/activities/{id}`` takes a message away.

Every activity posted or updated is recorded (:attr:`TeamsStandIn.posted`), every message as
a person sees it now (:attr:`TeamsStandIn.messages`, in order, a stream's final message
included), the token requests (:attr:`TeamsStandIn.token_requests`) and the downloads.
Tokens for the webhook are made by :meth:`TeamsStandIn.token` (right, or forged with another
key, expired, for another audience or another ``serviceUrl``).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.standin import ThreadedStandIn

__all__ = ["APP_ID", "APP_PASSWORD", "ISSUER", "TENANT", "Posted", "TeamsMessage", "TeamsStandIn"]

APP_ID: Final = "00000000-0000-4000-8000-00000000a11d"
APP_PASSWORD: Final = "standin-app-password~3f"
TENANT: Final = "72f988bf-86f1-41af-91ab-2d7cd011db47"
ISSUER: Final = "https://api.botframework.com"
BOT_ID: Final = f"28:{APP_ID}"
BOT_NAME: Final = "Mercury"
_KID: Final = "standin-key-1"
_OUTGOING: Final = "standin-outgoing-token"


@dataclass(frozen=True, kw_only=True)
class Posted:
    """One activity the bot sent: how (``post``, ``reply``, ``update``), where, and its JSON."""

    verb: str
    conversation: str
    reply_to: str | None
    activity: dict[str, Any]
    id: str


@dataclass(kw_only=True)
class TeamsMessage:
    """A message of the bot as it stands in a conversation (updates applied)."""

    id: str
    conversation: str
    reply_to: str | None
    text: str
    attachments: list[dict[str, Any]] = field(default_factory=list)
    streamed: bool = False

    @property
    def buttons(self) -> list[tuple[str, str]]:
        """(title, action) of each ``Action.Submit`` of its cards."""
        return [
            (action["title"], action["data"]["mercuryAction"])
            for attachment in self.attachments
            if attachment.get("contentType") == "application/vnd.microsoft.card.adaptive"
            for action in attachment["content"].get("actions", [])
        ]

    @property
    def notes(self) -> list[str]:
        return [
            block["text"]
            for attachment in self.attachments
            if attachment.get("contentType") == "application/vnd.microsoft.card.adaptive"
            for block in attachment["content"].get("body", [])
        ]


@dataclass(frozen=True)
class Delivery:
    status: int
    body: bytes


class TeamsStandIn(ThreadedStandIn):
    """The Bot Framework's token issuer and connector service, for one bot."""

    name = "Teams stand-in"

    def __init__(self) -> None:
        super().__init__()
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._rogue = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._lock = threading.Lock()
        self._ids = itertools.count(1000)
        self.files: dict[str, bytes] = {}
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.posted: list[Posted] = []
            self.messages: list[TeamsMessage] = []
            self.token_requests: list[dict[str, str]] = []
            self.downloads: list[str] = []
            self.opened: list[dict[str, Any]] = []
            self.uploads: list[tuple[str, bytes, str]] = []
            self.deleted: list[str] = []
            self._streams: dict[str, int] = {}
            #: After this many of a stream's updates, Teams answers 403
            #: ``ContentStreamNotAllowed`` (the person pressed Teams' own stop).
            self.stop_streams_after: int | None = None

    # -- addresses and settings ----------------------------------------------------------

    @property
    def service_url(self) -> str:
        return self.url + "/service/"

    def env(self) -> dict[str, str]:
        """The environment that turns a server's Teams bridge on against this stand-in."""
        return {
            "MERCURY_TEAMS": "true",
            "TEAMS_APP_ID": APP_ID,
            "TEAMS_APP_PASSWORD": APP_PASSWORD,
            "TEAMS_OPENID_URL": self.url + "/openid",
            "TEAMS_TOKEN_URL": self.url + "/token",
            "TEAMS_SERVICE_URLS": self.url,
        }

    # -- what the Bot Framework sends ----------------------------------------------------

    def token(
        self,
        *,
        audience: str = APP_ID,
        issuer: str = ISSUER,
        service_url: str | None = None,
        expires_in: int = 3600,
        forged: bool = False,
    ) -> str:
        """A Bot Framework token for the webhook (``forged``: signed with another key)."""
        now = int(time.time())
        claims = {
            "iss": issuer,
            "aud": audience,
            "exp": now + expires_in,
            "nbf": now - 60,
            "serviceurl": service_url if service_url is not None else self.service_url,
        }
        key = self._rogue if forged else self._key
        return jwt.encode(claims, key, algorithm="RS256", headers={"kid": _KID})

    @staticmethod
    def personal(user: str) -> dict[str, Any]:
        return {"id": f"a:personal-{user}", "conversationType": "personal", "tenantId": TENANT}

    @staticmethod
    def channel(thread: str = "100") -> dict[str, Any]:
        return {
            "id": f"19:general@thread.tacv2;messageid={thread}",
            "conversationType": "channel",
            "isGroup": True,
            "tenantId": TENANT,
        }

    @staticmethod
    def group_chat() -> dict[str, Any]:
        return {"id": "19:team-chat@thread.v2", "conversationType": "groupChat", "isGroup": True}

    def activity(
        self,
        conversation: Mapping[str, Any],
        user: str,
        text: str = "",
        *,
        name: str | None = None,
        mention_bot: bool = False,
        mentions: Sequence[tuple[str, str]] = (),
        attachments: Sequence[Mapping[str, Any]] = (),
        value: Mapping[str, Any] | None = None,
        reply_to: str | None = None,
        id: str | None = None,
    ) -> dict[str, Any]:
        """A ``message`` activity from ``user`` (aadObjectId ``aad-<user>``) as Teams sends it:
        ``mention_bot`` puts ``<at>Mercury</at>`` first with its entity; ``mentions`` are
        other people (id, name) written ``<at>name</at>``."""
        entities: list[dict[str, Any]] = [{"type": "clientInfo", "locale": "en-US"}]
        if mention_bot:
            text = f"<at>{BOT_NAME}</at> {text}"
            entities.append(
                {
                    "type": "mention",
                    "text": f"<at>{BOT_NAME}</at>",
                    "mentioned": {"id": BOT_ID, "name": BOT_NAME},
                }
            )
        for person, person_name in mentions:
            entities.append(
                {
                    "type": "mention",
                    "text": f"<at>{person_name}</at>",
                    "mentioned": {"id": f"29:{person}", "name": person_name},
                }
            )
        activity: dict[str, Any] = {
            "type": "message",
            "id": id or str(next(self._ids)),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            "serviceUrl": self.service_url,
            "channelId": "msteams",
            "from": {
                "id": f"29:{user}",
                "name": name or user.title(),
                "aadObjectId": f"aad-{user}",
            },
            "conversation": dict(conversation),
            "recipient": {"id": BOT_ID, "name": BOT_NAME},
            "textFormat": "plain",
            "text": text,
            "entities": entities,
            "channelData": {"tenant": {"id": TENANT}},
        }
        if attachments:
            activity["attachments"] = list(attachments)
        if value is not None:
            activity["value"] = dict(value)
        if reply_to is not None:
            activity["replyToId"] = reply_to
        return activity

    def press(
        self, conversation: Mapping[str, Any], user: str, message_id: str, action: str
    ) -> dict[str, Any]:
        """A card's ``Action.Submit`` pressed: a message whose ``value`` is the action's data."""
        return self.activity(
            conversation, user, value={"mercuryAction": action}, reply_to=message_id
        )

    def consent_answer(
        self, user: str, card: TeamsMessage, *, accept: bool = True
    ) -> dict[str, Any]:
        """The ``fileConsent/invoke`` Teams sends when ``user`` answers a file consent card."""
        [offer] = [
            a
            for a in card.attachments
            if a.get("contentType") == "application/vnd.microsoft.teams.card.file.consent"
        ]
        name = offer["name"]
        activity = self.activity(self.personal(user), user, reply_to=card.id)
        activity |= {
            "type": "invoke",
            "name": "fileConsent/invoke",
            "value": {
                "type": "fileUpload",
                "action": "accept" if accept else "decline",
                "context": offer["content"]["acceptContext" if accept else "declineContext"],
                "uploadInfo": {
                    "contentUrl": f"https://contoso-my.sharepoint.example/{name}",
                    "name": name,
                    "uploadUrl": f"{self.url}/onedrive/{name}",
                    "uniqueId": "0b1f",
                    "fileType": name.rpartition(".")[2],
                },
            },
        }
        return activity

    def add_file(self, name: str, data: bytes) -> dict[str, Any]:
        """A file shared in a chat, as the attachment Teams sends for it."""
        self.files[name] = data
        return {
            "contentType": "application/vnd.microsoft.teams.file.download.info",
            "contentUrl": f"https://contoso.sharepoint.example/{name}",
            "name": name,
            "content": {
                "downloadUrl": f"{self.url}/files/{name}",
                "uniqueId": "1f0ee3e1",
                "fileType": name.rpartition(".")[2],
            },
        }

    async def deliver(
        self,
        url: str,
        activity: Mapping[str, Any],
        *,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Delivery:
        """POST ``activity`` to the webhook at ``url`` with a bearer token (``headers``
        replace the authorization)."""
        sent = (
            dict(headers)
            if headers is not None
            else {"authorization": f"Bearer {token or self.token()}"}
        )
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await client.post(url, json=dict(activity), headers=sent)
        return Delivery(status=answer.status_code, body=answer.content)

    # -- the server ----------------------------------------------------------------------

    def application(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/openid", self._openid)
        app.router.add_get("/keys", self._keys)
        app.router.add_post("/token", self._token)
        app.router.add_post("/service/v3/conversations", self._open)
        app.router.add_post("/service/v3/conversations/{conversation}/activities", self._post)
        app.router.add_post(
            "/service/v3/conversations/{conversation}/activities/{reply_to}", self._post
        )
        app.router.add_put("/service/v3/conversations/{conversation}/activities/{id}", self._put)
        app.router.add_delete(
            "/service/v3/conversations/{conversation}/activities/{id}", self._delete
        )
        app.router.add_get("/files/{name}", self._file)
        app.router.add_put("/onedrive/{name}", self._upload)
        return app

    async def _openid(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "issuer": ISSUER,
                "authorization_endpoint": "https://invalid.botframework.com",
                "jwks_uri": self.url + "/keys",
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            }
        )

    async def _keys(self, request: web.Request) -> web.Response:
        jwk = jwt.algorithms.RSAAlgorithm.to_jwk(self._key.public_key(), as_dict=True)
        return web.json_response(
            {"keys": [{**jwk, "kid": _KID, "use": "sig", "endorsements": ["msteams"]}]}
        )

    async def _token(self, request: web.Request) -> web.Response:
        form = {key: str(value) for key, value in (await request.post()).items()}
        with self._lock:
            self.token_requests.append(form)
        if (form.get("client_id"), form.get("client_secret")) != (APP_ID, APP_PASSWORD):
            return web.json_response({"error": "invalid_client"}, status=401)
        if form.get("grant_type") != "client_credentials" or form.get("scope") != (
            "https://api.botframework.com/.default"
        ):
            return web.json_response({"error": "invalid_request"}, status=400)
        return web.json_response(
            {"token_type": "Bearer", "expires_in": 3599, "access_token": _OUTGOING}
        )

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {_OUTGOING}"

    async def _open(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": {"code": "Unauthorized"}}, status=401)
        body = await request.json()
        members = body.get("members") or []
        if body.get("isGroup") or len(members) != 1 or not body.get("tenantId"):
            return web.json_response({"error": {"code": "BadArgument"}}, status=400)
        user = str(members[0]["id"]).removeprefix("29:")
        with self._lock:
            self.opened.append(body)
        return web.json_response({"id": f"a:personal-{user}"}, status=201)

    async def _post(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": {"code": "Unauthorized"}}, status=401)
        conversation = request.match_info["conversation"]
        reply_to = request.match_info.get("reply_to")
        activity = await request.json()
        stream = next(
            (e for e in activity.get("entities") or [] if e.get("type") == "streaminfo"), None
        )
        with self._lock:
            if stream is not None:
                answer = self._stream(conversation, activity, stream)
                if isinstance(answer, web.Response):
                    return answer
                activity_id = answer
            else:
                activity_id = str(next(self._ids))
            self.posted.append(
                Posted(
                    verb="reply" if reply_to else "post",
                    conversation=conversation,
                    reply_to=reply_to,
                    activity=activity,
                    id=activity_id,
                )
            )
            if activity.get("type") == "message":
                self.messages.append(
                    TeamsMessage(
                        id=activity_id,
                        conversation=conversation,
                        reply_to=reply_to,
                        text=activity.get("text") or "",
                        attachments=activity.get("attachments") or [],
                        streamed=stream is not None,
                    )
                )
        return web.json_response({"id": activity_id}, status=201)

    def _stream(
        self, conversation: str, activity: dict[str, Any], stream: dict[str, Any]
    ) -> str | web.Response:
        """Teams' streaming rules: personal chats only, one id, growing sequence numbers."""
        if not conversation.startswith("a:"):
            return web.json_response(
                {"error": {"code": "BadArgument", "message": "Streaming is not supported here"}},
                status=400,
            )
        stream_id = stream.get("streamId")
        kind = stream.get("streamType")
        if not stream_id:
            if kind == "final":
                return web.json_response({"error": {"code": "BadArgument"}}, status=400)
            stream_id = f"stream-{next(self._ids)}"
            self._streams[stream_id] = 0
        elif stream_id not in self._streams:
            return web.json_response({"error": {"code": "BadArgument"}}, status=400)
        if kind == "streaming" and self.stop_streams_after is not None:
            if self._streams[stream_id] > self.stop_streams_after:
                return web.json_response(
                    {"error": {"code": "ContentStreamNotAllowed", "message": "Stopped"}},
                    status=403,
                )
        if kind != "final":
            sequence = int(stream.get("streamSequence") or 0)
            if sequence <= self._streams[stream_id]:
                return web.json_response({"error": {"code": "BadArgument"}}, status=400)
            self._streams[stream_id] = sequence
        return str(stream_id)

    async def _put(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": {"code": "Unauthorized"}}, status=401)
        activity_id = request.match_info["id"]
        activity = await request.json()
        with self._lock:
            found = next((m for m in self.messages if m.id == activity_id), None)
            if found is None:
                return web.json_response({"error": {"code": "NotFound"}}, status=404)
            found.text = activity.get("text") or ""
            found.attachments = activity.get("attachments") or []
            self.posted.append(
                Posted(
                    verb="update",
                    conversation=request.match_info["conversation"],
                    reply_to=None,
                    activity=activity,
                    id=activity_id,
                )
            )
        return web.json_response({"id": activity_id})

    async def _delete(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": {"code": "Unauthorized"}}, status=401)
        activity_id = request.match_info["id"]
        with self._lock:
            before = len(self.messages)
            self.messages = [m for m in self.messages if m.id != activity_id]
            if len(self.messages) == before:
                return web.json_response({"error": {"code": "NotFound"}}, status=404)
            self.deleted.append(activity_id)
        return web.Response(status=200)

    async def _upload(self, request: web.Request) -> web.Response:
        """A OneDrive upload session's URL (pre-authorized: no token)."""
        data = await request.read()
        with self._lock:
            self.uploads.append(
                (request.match_info["name"], data, request.headers.get("Content-Range", ""))
            )
        return web.json_response(
            {"id": "drive-item-1", "name": request.match_info["name"]}, status=201
        )

    async def _file(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        with self._lock:
            self.downloads.append(name)
        if name not in self.files:
            return web.Response(status=404)
        return web.Response(body=self.files[name], content_type="application/octet-stream")

    # -- reading what was sent -----------------------------------------------------------

    def in_conversation(self, conversation: str) -> list[TeamsMessage]:
        with self._lock:
            return [m for m in self.messages if m.conversation == conversation]

    def of_type(self, kind: str) -> list[Posted]:
        with self._lock:
            return [p for p in self.posted if p.activity.get("type") == kind]
