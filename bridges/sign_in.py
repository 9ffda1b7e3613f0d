"""A sign-in link in a chat: to its person alone, or a hint without it — one rule, every bridge.

::

    the tool needs a sign-in ─► send_private (the DM itself when the space is one; else the
                                 person's own place: an ephemeral message, a DM the bot opens)
                             ├► delivered: the model is told it was sent privately
                             └► refused (never started the bot, DMs closed) ─► a hint in the
                                 group, without the link (with a deep link to a private chat
                                 where the platform has one) ─► the model is told so

A space is a DM only while the bot and one person are its only members, joined or invited
(:func:`is_direct`): Slack's ``D…``, Telegram's private chats, Discord's one-to-one DMs,
Teams' ``a:…`` and WhatsApp's one-to-one chats are so by construction; a Matrix room is
judged from its members whenever they change, a Discord group DM from its recipients at each
message. A bridge's ``send_private`` sends into the conversation only
when it is such a DM, judged again right before sending, so a link never reaches a room
someone else can read, now or later from its history.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from bridges.port import BridgeError, LiveBridge, Received

if TYPE_CHECKING:
    from core.people.i18n import Translator
    from core.tools.registry import SignIn

__all__ = ["SIGN_IN_OPENING", "DirectLinked", "is_direct", "sign_in_for"]

#: What a link to a private chat opened for a sign-in carries (Telegram's
#: ``t.me/<bot>?start=sign-in``); the chat's opening (:attr:`Received.opening`) says it back.
SIGN_IN_OPENING: Final = "sign-in"

log = logging.getLogger("mercury.bridges")


def is_direct(members: Collection[str], *, bot: str, person: str) -> bool:
    """Whether a room whose members (joined or invited) are ``members`` is ``person``'s DM
    with ``bot``: the two of them, and nobody else."""
    return set(members) == {bot, person} and bot != person


@runtime_checkable
class DirectLinked(Protocol):
    """A platform with a link that opens a private chat with the bot (Telegram's
    ``t.me/<bot>?start=…``)."""

    async def direct_chat_link(self) -> str | None:
        """The link, or None while the bot's name is not known."""
        ...


def sign_in_for(bridge: LiveBridge, to: Received, translator: Translator) -> SignIn:
    """How a turn answering ``to`` hands a sign-in link to ``to``'s author alone."""

    async def sign_in(service: str, url: str) -> bool:
        sentence = translator.gettext("Sign in to %(service)s: %(url)s") % {
            "service": service,
            "url": url,
        }
        try:
            await bridge.send_private(to, sentence)
        except BridgeError as refused:
            log.warning("a %s sign-in link was not sent: %s", to.platform, refused)
        else:
            return True
        await _hint(bridge, to, service, translator)
        return False

    return sign_in


async def _hint(bridge: LiveBridge, to: Received, service: str, translator: Translator) -> None:
    """Tell ``to``'s author where they wrote, without the link, to open a private chat."""
    link = None
    if isinstance(bridge, DirectLinked):
        try:
            link = await bridge.direct_chat_link()
        except BridgeError:
            link = None
    values = {"name": to.author_name or to.author_id, "service": service, "link": link}
    if link:
        text = translator.gettext(
            "%(name)s, I can't send you the link to sign in to %(service)s privately. Open a "
            "private chat with me (%(link)s) and ask there."
        )
    else:
        text = translator.gettext(
            "%(name)s, I can't send you the link to sign in to %(service)s privately. Open a "
            "direct chat with me and ask there."
        )
    try:
        await bridge.send_reply(to, text % values)
    except BridgeError as failed:
        log.warning("a %s sign-in hint was not sent: %s", to.platform, failed)
