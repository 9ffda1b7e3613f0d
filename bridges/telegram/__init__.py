"""The Telegram bridge: Bot API updates in at our webhook, replies out through the Bot API.

It drives python-telegram-bot's :class:`telegram.Bot` (on httpx) against
``TelegramSettings.api_url``, so a local Bot API server or a stand-in takes the cloud's
place by configuration alone. How Telegram maps onto the port:

* a thread is ``telegram:<chat_id>``, or ``telegram:<chat_id>:<message_thread_id>`` for a
  forum topic; a topic is a space of its own, and a chat whose id is positive is a DM;
* only new ``message`` updates are read: an edit, a channel post, a bot's message, an
  automatic forward from a linked channel and a message with nothing to read (a service
  message, a sticker) are ``ignored``;
* a ``mention`` of ``@<bot username>`` or a ``text_mention`` of the bot is written
  ``@<bot_name>``; other mentions stay as Telegram shows them;
* documents, photos (the largest size), voice notes, audio, video and video notes are
  attachments whose ``ref`` is the ``file_id``; a caption is the message's text;
* a reply is plain text (no parse mode) split at 4,096 UTF-16 units, answering the triggering
  message in a group, in its topic; files follow as documents;
* a live reply (#37) is a draft (``sendMessageDraft``) in a private chat, replaced by the
  final message, and elsewhere a message posted once there is something to show and edited
  (``editMessageText``) as the answer grows; buttons are an inline keyboard whose
  ``callback_data`` is the button's action, and a press comes back as a ``callback_query``
  update (a :class:`bridges.port.Pressed`), answered with ``answerCallbackQuery``; the stop
  button of a draft is Telegram's own (``can_stop``), reported as a
  ``stopped_message_generation`` update.

The bot's own id is the digits before the token's colon; its username comes from ``getMe``,
asked in the background on the first update and kept. A webhook's answer never waits for
Telegram: an update read before ``getMe`` answered is read again with the username by
:meth:`TelegramBridge.complete`, which the pipeline calls after the acknowledgement.

Exceptions (the port's)::

    BridgeError                  Telegram refused a call (400, 403, a bad token, a file too big)
    └── PlatformUnavailable      Telegram could not be reached, timed out, answered 5xx or 429

The package, module by module: ``bridge`` (:class:`TelegramBridge`: updates, presses,
replies, files), ``live`` (a reply as a draft or a message posted and edited), ``text``
(lengths in UTF-16 units, a long answer cut into messages, the inline keyboard).
"""

from __future__ import annotations

from bridges.telegram.bridge import LIVE_LIMITS, SECRET_HEADER, TelegramBridge
from bridges.telegram.text import MAX_MESSAGE_CHARS, split_text

__all__ = ["LIVE_LIMITS", "MAX_MESSAGE_CHARS", "SECRET_HEADER", "TelegramBridge", "split_text"]
