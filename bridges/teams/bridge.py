"""The Teams bridge: checked activities read into :class:`Received` and :class:`Pressed`,
replies, typing, private answers and files through the connector service. The package's
docstring (:mod:`bridges.teams`) tells the whole of it."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

import aiohttp
import msgspec
from microsoft_agents.activity import Activity, ConversationAccount, ConversationParameters
from microsoft_agents.activity.channel_id import ChannelId
from microsoft_agents.hosting.core.connector.client import ConnectorClient

from bridges.downloads import read_capped, refuse_past
from bridges.hosts import on_platform
from bridges.pacing import split
from bridges.port import (
    Attachment,
    BridgeError,
    EgressFile,
    LiveLimits,
    LiveReply,
    PlatformUnavailable,
    Pressed,
    Received,
    ReplyButton,
    ThreadInfo,
    WebhookOutcome,
)
from bridges.teams.auth import ActivityTokens, BotTokens, Refused
from bridges.teams.cards import (
    ADAPTIVE_CARD,
    FILE_KEY,
    MAX_MESSAGE_CHARS,
    consent,
    file_info,
    is_inline,
    message,
    typing,
    with_file_names,
)
from bridges.teams.live import TeamsReply
from bridges.teams.state import Kind, TeamsState
from bridges.teams.wire import Route, read_activity, split_thread, tenant_of
from core.clock import Clock
from core.config.settings import ConfigurationError, TeamsSettings
from core.spaces.ids import parse_space_id
from core.state import Database, StateError

log = logging.getLogger("mercury.bridges.teams")

#: The Bot Framework's service hosts an activity's ``serviceUrl`` may name (HTTPS, the domain
#: or a subdomain): the public cloud's connectors, the Bot Framework's own, and the US
#: government clouds'. ``TEAMS_SERVICE_URLS`` adds origins (a stand-in, an emulator).
SERVICE_DOMAINS: Final = (
    "smba.trafficmanager.net",
    "botframework.com",
    "teams.microsoft.com",
    "botframework.azure.us",
    "teams.microsoft.us",
)

_T = TypeVar("_T")
_K = TypeVar("_K")
_V = TypeVar("_V")

#: Seconds a connector call may take in all.
_CALL_TIMEOUT_S: Final = 15.0
#: Conversations (and tenants, and people) whose routes are kept, least recently used
#: forgotten first.
_KEPT: Final = 4_096
#: The bot's messages whose text is kept, to settle a pressed card keeping it.
_TEXTS_KEPT: Final = 1_024
#: Teams allows a bot about one message a second per conversation, and a stream's updates
#: no faster: 1.5 s keeps a live answer within it.
_EDIT_INTERVAL_S: Final = 1.5
#: Buttons a card carries (Teams shows up to six actions in a row).
_MAX_BUTTONS: Final = 5
_READ_CHUNK: Final = 64 * 1024
#: Where Teams keeps shared files (OneDrive and SharePoint, in each cloud): a file's
#: ``downloadUrl`` elsewhere is not fetched.
_FILE_DOMAINS: Final = ("sharepoint.com", "sharepoint.us", "sharepoint.de", "sharepoint.cn")
#: Files offered in personal chats and not answered yet, kept (the oldest forgotten first).
_OFFERS_KEPT: Final = 32
#: Seconds after which a route learnt again, unchanged, is written to the state store again
#: (so it does not expire while the conversation goes on).
_REWRITE_AFTER_S: Final = 86_400.0


class _NoValidationTracebacks(logging.Filter):
    """Drops the Agents SDK's own log of an activity it could not validate: it logs each one
    at ERROR with a traceback, and the bridge reports such a body itself (``malformed``, 400)
    in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Validation error for Activity")


_SDK_ACTIVITY_LOG: Final = logging.getLogger("microsoft_agents.activity.activity")


def _quiet_sdk_validation_log() -> None:
    if not any(isinstance(f, _NoValidationTracebacks) for f in _SDK_ACTIVITY_LOG.filters):
        _SDK_ACTIVITY_LOG.addFilter(_NoValidationTracebacks())


class TeamsBridge:
    """One Teams bot (an Azure Bot's app id): reads its activities, answers through the
    connector service at each activity's ``serviceUrl``."""

    def __init__(self, settings: TeamsSettings, *, bot_name: str) -> None:
        if not settings.app_id or not settings.app_password:
            raise ConfigurationError(
                "The Teams bridge needs TEAMS_APP_ID and TEAMS_APP_PASSWORD; set both from the "
                "Azure Bot's app registration, or turn MERCURY_TEAMS off."
            )
        tenant = settings.tenant_id
        token_url = settings.token_url or (
            f"https://login.microsoftonline.com/{tenant or 'botframework.com'}/oauth2/v2.0/token"
        )
        _quiet_sdk_validation_log()
        self._bot_name = bot_name
        self._tenant = tenant
        self._incoming = ActivityTokens(app_id=settings.app_id, openid_url=settings.openid_url)
        self._tokens = BotTokens(
            app_id=settings.app_id, app_password=settings.app_password, token_url=token_url
        )
        if "*" in settings.service_urls:
            raise ConfigurationError(
                "TEAMS_SERVICE_URLS can't be *: name the origins (a stand-in's, an emulator's) "
                "an activity's serviceUrl may have besides the Bot Framework's own hosts."
            )
        self._service_urls = settings.service_urls
        self._http: aiohttp.ClientSession | None = None
        self._closed = False
        #: One connector client per serviceUrl (each an HTTP session with that base).
        self._connectors: dict[str, ConnectorClient] = {}
        #: Where replies go: per conversation, and per tenant for a conversation not seen
        #: since this process started (a delivery taken over from another instance).
        self._routes: OrderedDict[str, Route] = OrderedDict()
        self._tenant_routes: OrderedDict[str, Route] = OrderedDict()
        #: Each author's Teams account id (``29:…``), by the id the pipeline knows them by.
        self._accounts: OrderedDict[str, str] = OrderedDict()
        #: Each person's personal chat with the bot (for what only they may read).
        self._personal: OrderedDict[str, str] = OrderedDict()
        #: The text of the bot's messages by id: a pressed card is settled keeping it.
        self._texts: OrderedDict[str, str] = OrderedDict()
        #: Files offered by a consent card, until the person answers.
        self._offers: OrderedDict[str, EgressFile] = OrderedDict()
        #: Uploads and withdrawals under way (an answered offer).
        self._tasks: set[asyncio.Task[None]] = set()
        #: Where all of the above is shared with the other instances (:meth:`share_state`),
        #: and when each route was last written there.
        self._state: TeamsState | None = None
        self._written: OrderedDict[tuple[Kind, str], float] = OrderedDict()

    @property
    def platform(self) -> str:
        return "teams"

    async def share_state(self, db: Database, *, clock: Clock) -> None:
        """Keep the routes, offered files and message texts in ``db`` (:mod:`bridges.teams.state`)
        too, and look there for what this instance did not learn itself."""
        state = TeamsState(db, clock=clock)
        await state.ensure_schema()
        self._state = state

    def parse_thread(self, thread_id: str) -> ThreadInfo:
        """The channel's (or chat's) space, and the thread as the conversation."""
        _, _, space_id = split_thread(thread_id)
        return ThreadInfo(
            space_id=space_id,
            conversation_external_id=thread_id,
            is_dm=parse_space_id(space_id).is_dm,
        )

    # -- deliveries --------------------------------------------------------------------------

    async def receive(
        self,
        method: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
    ) -> WebhookOutcome:
        """Check the activity's bearer token, then read it.

        The token is checked before the body is read; its ``serviceUrl`` claim is compared
        with the activity's once the body is. The keys may have to be read first (cached a
        day): :class:`PlatformUnavailable` when they can't, so the activity comes again.
        """
        try:
            claims = await self._incoming.check(headers.get("authorization"), self._session())
        except Refused as refused:
            return WebhookOutcome(verdict="forged", reason=str(refused))
        if method.upper() != "POST":
            return WebhookOutcome(verdict="malformed", reason=f"Teams posts, never {method}s")
        try:
            activity = Activity.model_validate_json(body)
        # pydantic's ValidationError is a ValueError; the SDK's own validators raise
        # TypeError (a channel id) and a bare Exception (a channel id against its
        # productInfo entity): any of them is a body that can't be read, never a 500.
        except Exception as exc:
            return WebhookOutcome(
                verdict="malformed", reason=f"the body is no activity ({type(exc).__name__})"
            )
        claimed = claims.get("serviceurl", claims.get("serviceUrl"))
        if not activity.service_url or claimed != activity.service_url:
            return WebhookOutcome(
                verdict="forged",
                reason="the token's serviceUrl claim is not the activity's serviceUrl",
            )
        if not self._on_service(activity.service_url):
            return WebhookOutcome(
                verdict="forged",
                reason="the activity's serviceUrl is no Bot Framework service host (nor one of "
                "TEAMS_SERVICE_URLS): replies and the bot's token would go there",
            )
        if str(activity.channel_id or "").partition(":")[0] != "msteams":
            return WebhookOutcome(verdict="ignored", reason="an activity of another channel")
        if self._tenant is not None and tenant_of(activity) != self._tenant:
            return WebhookOutcome(verdict="ignored", reason="an activity of another tenant")
        try:
            read = read_activity(activity, bot_name=self._bot_name)
        except (ValueError, TypeError) as exc:
            return WebhookOutcome(verdict="malformed", reason=str(exc))
        if isinstance(read, str):
            if activity.type == "invoke" and activity.name == "fileConsent/invoke":
                return await self._answered_offer(activity)
            return WebhookOutcome(verdict="ignored", reason=read)
        await self._learn(activity, read)
        if isinstance(read, Pressed):
            return WebhookOutcome(verdict="accepted", presses=(read,))
        return WebhookOutcome(verdict="accepted", messages=(read,))

    async def _answered_offer(self, activity: Activity) -> WebhookOutcome:
        """A file consent card answered (on whichever instance offered it): accepted, the
        file is uploaded to the URL Teams gave (in the background: Teams waits for no
        upload) and the card becomes the file; declined, the card goes."""
        value: Any = activity.value
        context = value.get("context") if isinstance(value, dict) else None
        token = context.get(FILE_KEY) if isinstance(context, dict) else None
        file = await self._offered(token) if isinstance(token, str) else None
        conversation = activity.conversation.id if activity.conversation is not None else None
        card = activity.reply_to_id
        bot = activity.recipient
        if file is None or bot is None or not conversation or not card:
            return WebhookOutcome(verdict="ignored", reason="a file consent no instance kept")
        # The invoke's serviceUrl was checked against its token like any activity's.
        assert activity.service_url is not None  # noqa: S101
        route = Route(service_url=activity.service_url, bot_id=bot.id, bot_name=bot.name or None)
        if value.get("action") == "accept":
            work = self._upload(route, conversation, card, file, value.get("uploadInfo"))
        else:
            work = self._withdraw(route, conversation, card)
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return WebhookOutcome(verdict="ignored", reason="a file consent answered")

    async def _upload(
        self, route: Route, conversation: str, card: str, file: EgressFile, info: object
    ) -> None:
        """PUT ``file`` at the upload URL Teams gave, then show it in place of the card."""
        try:
            if not isinstance(info, dict) or not isinstance(info.get("uploadUrl"), str):
                raise BridgeError(f"Teams gave no upload URL for {file.filename!r}.")
            url = str(info["uploadUrl"])
            connectors = [route.service_url, *(r.service_url for r in self._tenant_routes.values())]
            if not any(on_platform(url, api_url=c, domains=_FILE_DOMAINS) for c in connectors):
                raise BridgeError(
                    f"The Teams bridge uploads only to OneDrive, not {urlsplit(url).netloc[:80]}."
                )
            size = len(file.data)
            headers = {"Content-Range": f"bytes 0-{max(size - 1, 0)}/{size}"}
            try:
                async with self._session().put(url, data=file.data, headers=headers) as answer:
                    if answer.status not in (200, 201, 202):
                        raise BridgeError(
                            f"OneDrive answered {answer.status} to the upload of {file.filename!r}."
                        )
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise PlatformUnavailable(
                    f"OneDrive could not be reached to upload {file.filename!r}."
                ) from exc
            shown = file_info(
                name=str(info.get("name") or file.filename),
                content_url=str(info.get("contentUrl") or ""),
                unique_id=str(info.get("uniqueId") or ""),
                file_type=str(info.get("fileType") or ""),
                bot=_bot(route),
            )
            shown.id = card
            await self._call(
                route,
                "show the uploaded file",
                lambda client: client.conversations.update_activity(
                    conversation, card, _addressed(shown, conversation)
                ),
            )
        except BridgeError as failed:
            log.warning("a file offered in Teams was not uploaded: %s", failed)

    async def _withdraw(self, route: Route, conversation: str, card: str) -> None:
        """Take a declined file's card away."""
        try:
            await self._call(
                route,
                "take a declined file's card away",
                lambda client: client.conversations.delete_activity(conversation, card),
            )
        except BridgeError as failed:
            log.warning("a declined file's card stayed in Teams: %s", failed)

    async def _learn(self, activity: Activity, read: Received | Pressed) -> None:
        """Remember where this conversation's replies go, and the author's account."""
        assert activity.recipient is not None and activity.from_property is not None  # noqa: S101
        assert activity.service_url is not None  # noqa: S101 - read_activity checked them
        route = Route(
            service_url=activity.service_url,
            bot_id=activity.recipient.id,
            bot_name=activity.recipient.name or None,
        )
        tenant, conversation, _ = split_thread(read.thread_id)
        await self._keep("route", self._routes, f"{tenant}:{conversation}", route)
        await self._keep("tenant", self._tenant_routes, tenant, route)
        await self._keep("account", self._accounts, read.author_id, activity.from_property.id)
        if read.is_dm:
            await self._keep("personal", self._personal, read.author_id, conversation)

    # -- what every instance shares (bridges.teams.state) -------------------------------------

    async def _keep(
        self, kind: Kind, kept: OrderedDict[str, _V], key: str, value: _V, most: int = _KEPT
    ) -> None:
        """``kept[key] = value``, and in the state store when it changed there (or was
        written there over :data:`_REWRITE_AFTER_S` ago). A store that can't be written is
        logged: this instance still knows it."""
        now = time.monotonic()
        unchanged = kept.get(key) == value
        _remember(kept, key, value, most)
        if self._state is None:
            return
        if unchanged and now - self._written.get((kind, key), float("-inf")) < _REWRITE_AFTER_S:
            return
        try:
            await self._state.put(kind, key, msgspec.msgpack.encode(value))
        except StateError as failed:
            log.warning("a Teams %s was not shared with the other instances: %s", kind, failed)
            return
        _remember(self._written, (kind, key), now, _KEPT * 4)

    async def _recall(
        self, kind: Kind, kept: OrderedDict[str, _V], key: str, kind_of: type[_V]
    ) -> _V | None:
        """``kept[key]``, else what another instance kept in the state store (then kept here)."""
        value = kept.get(key)
        if value is not None or self._state is None:
            return value
        stored = await self._shared(self._state.get(kind, key))
        if stored is None:
            return None
        value = msgspec.msgpack.decode(stored, type=kind_of)
        _remember(kept, key, value)
        _remember(self._written, (kind, key), time.monotonic(), _KEPT * 4)
        return value

    async def _keep_offer(self, token: str, file: EgressFile) -> None:
        """Keep the file offered under ``token`` in the state store, where any instance
        takes it once; in this instance's memory only when the store can't be written."""
        if self._state is not None:
            try:
                await self._state.put("offer", token, msgspec.msgpack.encode(file))
                return
            except StateError as failed:
                log.warning("a file offered in Teams is kept by this instance only: %s", failed)
        _remember(self._offers, token, file, _OFFERS_KEPT)

    async def _offered(self, token: str) -> EgressFile | None:
        """The file offered under ``token``, taken: from this instance's memory, else from
        the state store (deleted as it is read, so it is uploaded once)."""
        file = self._offers.pop(token, None)
        if file is not None or self._state is None:
            return file
        stored = await self._shared(self._state.take("offer", token))
        return msgspec.msgpack.decode(stored, type=EgressFile) if stored is not None else None

    async def _shared(self, read: Awaitable[_T]) -> _T:
        """``read`` from the state store; a store that can't be read is Teams' answer later."""
        try:
            return await read
        except StateError as failed:
            raise PlatformUnavailable(
                f"The state store could not be read for a Teams reply ({failed}); try again later."
            ) from failed

    # -- files ---------------------------------------------------------------------------------

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """A shared file from its pre-authorized URL, or an image pasted in from the
        connector (with the bot's token: only the connector's own URLs get it)."""
        refuse_past(attachment.name, max_bytes, attachment.size_bytes)
        scheme, _, url = attachment.ref.partition(":")
        headers: dict[str, str] = {}
        connectors = await self._connector_urls()
        if scheme == "bearer":
            if not any(on_platform(url, api_url=c, domains=()) for c in connectors):
                raise BridgeError(
                    f"The Teams bridge sends its token only to the connector service, not "
                    f"for {attachment.name!r}."
                )
            headers["Authorization"] = "Bearer " + await self._tokens.token(self._session())
        elif scheme != "direct":
            raise BridgeError(f"{attachment.name!r} has no address the Teams bridge reads.")
        elif not any(on_platform(url, api_url=c, domains=_FILE_DOMAINS) for c in connectors):
            raise BridgeError(
                f"The Teams bridge fetches files only from SharePoint or the connector, not "
                f"{attachment.name!r} from {urlsplit(url).netloc[:80]}."
            )
        try:
            async with self._session().get(
                url, headers=headers, allow_redirects=scheme == "direct"
            ) as answer:
                if answer.status == 429 or answer.status >= 500:
                    raise PlatformUnavailable(
                        f"Teams answered {answer.status} to the download of {attachment.name!r}; "
                        "try again later."
                    )
                if answer.status != 200:
                    raise BridgeError(
                        f"Teams answered {answer.status} to the download of {attachment.name!r}."
                    )
                refuse_past(attachment.name, max_bytes, answer.content_length)
                return await read_capped(
                    answer.content.iter_chunked(_READ_CHUNK), attachment.name, max_bytes
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PlatformUnavailable(
                f"Teams could not be reached to download {attachment.name!r} "
                f"({type(exc).__name__}); try again later."
            ) from exc

    # -- replies -------------------------------------------------------------------------------

    async def start_typing(self, message: Received) -> None:
        """The typing indicator in the message's conversation."""
        route, conversation = await self._route_of(message.thread_id)
        await self.reply(route, conversation, message.message_id, typing(bot=_bot(route)))

    async def send_reply(self, to: Received, text: str, files: Sequence[EgressFile] = ()) -> None:
        """Answer in ``to``'s conversation (a channel's answer in the thread it came in),
        split at :data:`MAX_MESSAGE_CHARS`; small images inline, other files named."""
        route, conversation = await self._route_of(to.thread_id)
        parts = split(text if to.is_dm else with_file_names(text, files), MAX_MESSAGE_CHARS)
        for number, part in enumerate(parts):
            last = number == len(parts) - 1
            await self.reply(
                route,
                conversation,
                to.message_id,
                message(part, bot=_bot(route), files=files if last else ()),
            )
        if to.is_dm:
            await self.offer(route, conversation, to.message_id, files)

    async def offer(
        self, route: Route, conversation: str, reply_to: str, files: Sequence[EgressFile]
    ) -> None:
        """Offer each file that can't go inline with a file consent card (personal chats);
        kept here until the person answers, for at most :data:`_OFFERS_KEPT` files."""
        for file in files:
            if is_inline(file):
                continue
            token = secrets.token_urlsafe(16)
            await self._keep_offer(token, file)
            await self.reply(route, conversation, reply_to, consent(file, token, bot=_bot(route)))

    # -- live replies and buttons (#37) ----------------------------------------------------------

    @property
    def live_limits(self) -> LiveLimits:
        return LiveLimits(
            max_chars=MAX_MESSAGE_CHARS, edit_interval_s=_EDIT_INTERVAL_S, max_buttons=_MAX_BUTTONS
        )

    async def open_reply(
        self, to: Received, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> LiveReply:
        """A reply streamed in a personal chat (Teams' streaming: an informative typing
        activity, the text so far as numbered typing activities, a final message); elsewhere
        the typing indicator while it is written, then one message. Teams shows its own stop
        button on a stream, so ``buttons`` (our stop) are not shown."""
        route, conversation = await self._route_of(to.thread_id)
        reply = TeamsReply(
            self,
            route=route,
            conversation=conversation,
            reply_to=to.message_id,
            stream=to.is_dm,
            personal=to.is_dm,
        )
        await reply.begin(status)
        return reply

    async def send_private(self, to: Received, text: str) -> None:
        """``text`` to ``to``'s author alone: in their personal chat with the bot (made if
        needed), never into the group."""
        await self._tell(to.thread_id, to.author_id, to.is_dm, to.message_id, text)

    async def answer_press(self, press: Pressed, text: str) -> None:
        """``text`` to the presser alone, in their personal chat with the bot."""
        await self._tell(press.thread_id, press.author_id, press.is_dm, press.message_id, text)

    async def settle_press(self, press: Pressed, text: str) -> None:
        """The pressed message without its buttons, keeping its text, ``text`` under it."""
        route, conversation = await self._route_of(press.thread_id)
        kept = self._texts.pop(press.message_id, "")
        if self._state is not None:
            stored = await self._shared(self._state.take("text", press.message_id))
            kept = kept or (stored.decode() if stored is not None else "")
        update = message(kept or text, bot=_bot(route), note=text if kept else None)
        update.id = press.message_id
        await self._call(
            route,
            "update the pressed message",
            lambda client: client.conversations.update_activity(
                conversation, press.message_id, _addressed(update, conversation)
            ),
        )

    async def _tell(
        self, thread_id: str, author_id: str, is_dm: bool, message_id: str, text: str
    ) -> None:
        route, conversation = await self._route_of(thread_id)
        if is_dm:
            await self.reply(route, conversation, message_id, message(text, bot=_bot(route)))
            return
        personal = await self._recall("personal", self._personal, author_id, str)
        if personal is None:
            account = await self._recall("account", self._accounts, author_id, str)
            if account is None:
                raise BridgeError(
                    "The Teams bridge does not know this person's account yet; nothing private "
                    "was sent."
                )
            tenant, _, _ = split_thread(thread_id)
            parameters = ConversationParameters.model_validate(
                {
                    "isGroup": False,
                    "bot": {"id": route.bot_id, "name": route.bot_name or ""},
                    "members": [{"id": account}],
                    "tenantId": tenant,
                    "channelData": {"tenant": {"id": tenant}},
                }
            )
            made = await self._call(
                route,
                "open a personal chat",
                lambda client: client.conversations.create_conversation(parameters),
            )
            if not made.id:
                raise BridgeError("Teams opened no personal chat; nothing private was sent.")
            personal = made.id
            await self._keep("personal", self._personal, author_id, personal)
        chat = personal
        await self._call(
            route,
            "send a private message",
            lambda client: client.conversations.send_to_conversation(
                chat, _addressed(message(text, bot=_bot(route)), chat)
            ),
        )

    # -- the connector -------------------------------------------------------------------------

    async def _route_of(self, thread_id: str) -> tuple[Route, str]:
        """Where a reply in ``thread_id`` goes, and the conversation id Teams knows it by:
        as learnt here or by another instance (a delivery taken over)."""
        tenant, conversation, _ = split_thread(thread_id)
        route = await self._recall("route", self._routes, f"{tenant}:{conversation}", Route)
        if route is None:
            route = await self._recall("tenant", self._tenant_routes, tenant, Route)
        if route is None:
            raise BridgeError(
                "The Teams bridge has not heard from this tenant yet, so it does not know its "
                "connector's address; the answer waits for its next activity."
            )
        return route, conversation

    async def _connector_urls(self) -> list[str]:
        """The connectors' ``serviceUrl`` of the tenants heard from, here or elsewhere."""
        urls = [route.service_url for route in self._tenant_routes.values()]
        if self._state is not None:
            for stored in await self._shared(self._state.all("tenant")):
                urls.append(msgspec.msgpack.decode(stored, type=Route).service_url)
        return urls

    async def reply(
        self, route: Route, conversation: str, reply_to: str, activity: Activity
    ) -> str | None:
        """Post ``activity`` in ``conversation`` as a reply to ``reply_to``; its id."""
        answer = await self._call(
            route,
            f"post a {activity.type}",
            lambda client: client.conversations.reply_to_activity(
                conversation, reply_to, _addressed(activity, conversation, reply_to)
            ),
        )
        if activity.type == "message" and answer.id:
            pressable = any(a.content_type == ADAPTIVE_CARD for a in activity.attachments or ())
            await self.wrote(answer.id, activity.text or "", pressable=pressable)
        return answer.id

    async def wrote(self, message_id: str, text: str, *, pressable: bool) -> None:
        """Keep the text of the bot's message ``message_id`` (a stream's final message); a
        ``pressable`` one's (it has buttons) in the state store too, for a press that lands
        on another instance."""
        known = self._texts.get(message_id) == text
        _remember(self._texts, message_id, text, _TEXTS_KEPT)
        if pressable and not known and self._state is not None:
            try:
                await self._state.put("text", message_id, text.encode())
            except StateError as failed:
                log.warning("a Teams message's text was not shared: %s", failed)

    async def _call(
        self, route: Route, what: str, call: Callable[[ConnectorClient], Awaitable[_T]]
    ) -> _T:
        """One connector call with the bot's token (asked again once if refused with 401);
        failures as :class:`BridgeError` or :class:`PlatformUnavailable`."""
        for attempt in (1, 2):
            client = self._connector(route.service_url)
            token = await self._tokens.token(self._session(), fresh=attempt == 2)
            client.client.headers["Authorization"] = f"Bearer {token}"
            try:
                return await call(client)
            except aiohttp.ClientResponseError as exc:
                if exc.status == 401 and attempt == 1:
                    continue
                if exc.status == 429 or exc.status >= 500:
                    raise PlatformUnavailable(
                        f"Teams answered {exc.status} when the bot tried to {what}; try again "
                        "later.",
                        retry_after_s=_seconds(_header(exc, "Retry-After")),
                    ) from None
                raise BridgeError(
                    f"Teams refused to let the bot {what} ({exc.status}: {str(exc.message)[:200]})."
                ) from None
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise PlatformUnavailable(
                    f"Teams could not be reached to {what} ({type(exc).__name__}); try again later."
                ) from exc
            except ValueError as exc:  # pydantic's ValidationError too
                raise BridgeError(
                    f"Teams answered something unreadable when the bot tried to {what}."
                ) from exc
        raise BridgeError(f"Teams refused the bot's token when it tried to {what}.")

    def _on_service(self, service_url: str) -> bool:
        """Whether ``service_url`` is the Bot Framework's (:data:`SERVICE_DOMAINS`, over
        HTTPS) or one of ``TEAMS_SERVICE_URLS``: the one rule of :mod:`bridges.hosts`."""
        return on_platform(service_url, api_url="", domains=SERVICE_DOMAINS) or any(
            on_platform(service_url, api_url=origin, domains=()) for origin in self._service_urls
        )

    def _connector(self, service_url: str) -> ConnectorClient:
        """The SDK's connector client for ``service_url``, made on first use."""
        if self._closed:
            raise BridgeError("The Teams bridge is closed; build a new one to call Teams again.")
        client = self._connectors.get(service_url)
        if client is None or client.client.closed:
            base = service_url if service_url.endswith("/") else service_url + "/"
            session = aiohttp.ClientSession(
                base_url=base, timeout=aiohttp.ClientTimeout(total=_CALL_TIMEOUT_S)
            )
            client = ConnectorClient(base, "", session=session)
            # Teams has a handful of regional connectors, and each serviceUrl here was
            # vouched for by a token's claim: the clients are kept for the bridge's life.
            self._connectors[service_url] = client
        return client

    def _session(self) -> aiohttp.ClientSession:
        """The bridge's own HTTP session (keys, tokens, downloads), opened on first use."""
        if self._closed:
            raise BridgeError("The Teams bridge is closed; build a new one to call Teams again.")
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=_CALL_TIMEOUT_S))
        return self._http

    async def close(self) -> None:
        """Close the HTTP sessions."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        connectors = list(self._connectors.values())
        self._connectors.clear()
        for client in connectors:
            await client.close()
        http, self._http = self._http, None
        if http is not None:
            await http.close()


# -- helpers -----------------------------------------------------------------------------------


def _bot(route: Route) -> tuple[str, str | None]:
    return route.bot_id, route.bot_name


def _addressed(activity: Activity, conversation: str, reply_to: str | None = None) -> Activity:
    """``activity`` with its channel and conversation (and what it answers) filled in."""
    activity.channel_id = ChannelId("msteams")
    activity.conversation = ConversationAccount(id=conversation)
    if reply_to is not None:
        activity.reply_to_id = reply_to
    return activity


def _remember(kept: OrderedDict[_K, _V], key: _K, value: _V, most: int = _KEPT) -> None:
    """``kept[key] = value``, the least recently used entries forgotten past ``most``."""
    kept[key] = value
    kept.move_to_end(key)
    while len(kept) > most:
        kept.popitem(last=False)


def _header(error: aiohttp.ClientResponseError, name: str) -> str | None:
    headers = error.headers
    value = headers.get(name) if headers is not None and hasattr(headers, "get") else None
    return str(value) if value is not None else None


def _seconds(value: object) -> float | None:
    try:
        seconds = float(str(value))
    except ValueError:
        return None
    return seconds if 0 <= seconds < 86_400 else None
