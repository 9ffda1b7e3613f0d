"""The Slack bridge: Events API deliveries in, Web API replies out, on the official ``slack_sdk``.

Slack posts every event to ``POST /webhooks/slack``, signed with the app's signing secret
(``v0=`` HMAC-SHA256 of ``v0:<timestamp>:<body>``, at most five minutes old); the bridge
checks the signature before it reads anything else (:meth:`SlackBridge.receive`), answers
the URL verification challenge, and turns each human message into a :class:`Received`:

* ``thread_id`` is ``slack:<channel>`` for a top-level message and
  ``slack:<channel>:<thread_ts>`` for one inside a thread, so every Slack thread is a
  conversation of its channel's space;
* the bot's mention ``<@UBOT>`` becomes ``@<bot_name>``; other people's mentions, channels
  and links are written as a person reads them (``@Ada``, ``#general``, ``label (url)``);
* files arrive as :class:`Attachment` refs (their ``url_private``), downloaded only when the
  pipeline asks, with the bot token and the size cap enforced while streaming.

A reply is threaded: in a channel under the message it answers (or in that message's
thread), in a DM only when the message was in a thread. Text longer than 3,500 characters
goes as several messages cut at line or word boundaries; files follow the text through
``files_upload_v2`` (``files.getUploadURLExternal``, the upload, then
``files.completeUploadExternal`` into the same thread).

Slack has no typing indicator for Events API bots, so :meth:`SlackBridge.start_typing` does
nothing. Nothing here logs or repeats the bot token or the signing secret.

Live answers (#37, :class:`bridges.port.LiveBridge`): a reply in a thread streams natively
(``chat.startStream`` / ``chat.appendStream`` / ``chat.stopStream``, called directly: the
pacer already coalesces, so the SDK's buffering ``chat_stream`` helper would only delay),
with the thread's status (``assistant.threads.setStatus``) for "is thinking…"; a workspace
that answers the stream with ``unknown_method`` and the like gets a message posted and
edited (``chat.postMessage`` + ``chat.update``) and is remembered. Buttons are Block Kit
``actions``; their presses come to the same URL as events, as a signed form with a
``payload`` (``block_actions``), and become :class:`bridges.port.Pressed`. A press is
answered privately through its ``response_url`` (``AsyncWebhookClient``, ephemeral) and
settled by ``chat.update``; private text goes by ``chat.postEphemeral``.

Exception tree (see :mod:`bridges.port`; ``ConfigurationError`` is :mod:`core.config.settings`'s)::

    BridgeError                  Slack refused a call; the message carries Slack's error code
    └── PlatformUnavailable      Slack could not be reached, answered 5xx or rate-limited us
    ConfigurationError           the bridge was built without its bot token or signing secret
                                 (in Socket Mode: its app-level token)

Socket Mode (``SLACK_MODE=socket``, #38): the same events and presses come over WebSocket
connections the bridge opens with an app-level token (:class:`SlackSocketBridge`, a
:class:`bridges.port.GatewayBridge` run on every instance); no request URL, no signing
secret, and ``/webhooks/slack`` is not served.

The package, module by module: ``bridge`` (:class:`SlackBot`: events and presses read,
replies, files, names; :class:`SlackBridge`: signed deliveries), ``socket_mode``
(:class:`SlackSocketBridge`: Socket Mode connections), ``live`` (a reply streamed or posted
and edited), ``blocks`` (text and Block Kit), ``wire`` (the payloads Slack sends and its Web
API's failures).
"""

from __future__ import annotations

from bridges.slack.blocks import LIVE_MAX_CHARS, MAX_MESSAGE_CHARS, split_message
from bridges.slack.bridge import SlackBot, SlackBridge
from bridges.slack.socket_mode import SlackSocketBridge
from core.config.settings import SlackSettings

__all__ = [
    "LIVE_MAX_CHARS",
    "MAX_MESSAGE_CHARS",
    "SlackBot",
    "SlackBridge",
    "SlackSocketBridge",
    "slack_bridge",
    "split_message",
]


def slack_bridge(settings: SlackSettings, *, bot_name: str) -> SlackBot:
    """The Slack bridge of ``settings.mode``: webhooks (``http``) or Socket Mode (``socket``)."""
    if settings.mode == "socket":
        return SlackSocketBridge(settings, bot_name=bot_name)
    return SlackBridge(settings, bot_name=bot_name)
