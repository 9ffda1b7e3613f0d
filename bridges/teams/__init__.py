"""The Microsoft Teams bridge: Bot Framework activities in at ``POST /webhooks/teams``,
replies out through the connector service, on the Microsoft 365 Agents SDK
(``microsoft-agents-activity`` for the activities, ``microsoft-agents-hosting-core``'s
``ConnectorClient`` for the connector).

Teams (through an Azure Bot) posts every activity with a Bot Framework JWT in
``Authorization``; the bridge checks it before it reads the body (:mod:`bridges.teams.auth`:
signature against the OpenID metadata's keys, issuer, audience = the app id, expiry, and the
``serviceUrl`` claim equal to the activity's), so a forged, expired, foreign or replayed-
elsewhere activity runs nothing. How Teams maps onto the port:

* a thread is ``teams:<tenant>:<conversation id>``; the space is the conversation without a
  channel thread's ``;messageid=…`` (a channel, a group chat, a personal chat); a personal
  chat (``a:…``) is a DM;
* ``message`` activities are read; the bot's ``<at>`` mention (from ``entities``) is written
  ``@<bot_name>``, another person's ``@<their name>``; the author is their Entra object id
  (``aadObjectId``) where Teams gives it;
* a shared file (``application/vnd.microsoft.teams.file.download.info``) is fetched from its
  pre-authorized ``downloadUrl``; an image pasted in from the connector, with the bot's token;
* a reply answers the activity through the connector at its ``serviceUrl``
  (``/v3/conversations/{id}/activities/{replyToId}``), with the bot's token from the token
  endpoint (client credentials); in a channel it lands in the thread;
* buttons are an Adaptive Card whose ``Action.Submit`` data carries the action; a press comes
  back as a ``message`` with that ``value`` (a :class:`bridges.port.Pressed`); what only the
  presser may read goes to their personal chat with the bot;
* a live answer streams in a personal chat (Teams' streaming activities); elsewhere the typing
  indicator shows while it is written, then it is posted once;
* images the assistant wrote go inline when small; in a personal chat other files are
  offered with a file consent card (accepted, the file is uploaded to the URL in the
  person's OneDrive Teams hands back, a ``fileConsent/invoke``); in a channel or a group chat,
  which have no such card, they are named in the answer.

Exceptions (the port's)::

    BridgeError                  the connector or the token endpoint refused a call
    └── PlatformUnavailable      Teams could not be reached, answered 5xx or 429, or the
                                 OpenID metadata or keys could not be read

The package, module by module: ``bridge`` (:class:`TeamsBridge`), ``auth`` (the tokens both
ways), ``wire`` (activities read, thread ids), ``cards`` (the activities the bot posts),
``live`` (a reply streamed or posted once), ``state`` (routes, offered files and card texts
every instance shares).
"""

from __future__ import annotations

from bridges.teams.bridge import TeamsBridge
from bridges.teams.cards import MAX_MESSAGE_CHARS

__all__ = ["MAX_MESSAGE_CHARS", "TeamsBridge"]
