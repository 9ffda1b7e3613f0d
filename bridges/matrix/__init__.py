"""The Matrix bridge: a sync loop held as the bot's user through mautrix's client API.

::

    homeserver ─► /sync (long poll, from the checkpointed next_batch) ─► invites: join when the
              inviter is admitted ─► m.room.message ─► Received ─► deliver
    reply ─► m.room.message (in the thread, or replying), files uploaded as m.file,
             live answers as one message edited (m.replace) to the final text

Each room is a space (``matrix:<room id>``), a direct room (marked direct, or the bot and one
person) a DM (``matrix:dm:<room id>``), an ``m.thread`` a conversation inside its room's space
(``matrix:<room id>$<thread root>``). Encrypted rooms are not supported: nothing there runs.
"""

from __future__ import annotations

from bridges.matrix.bridge import LIVE_LIMITS, MESSAGE_LIMIT, PLATFORM, MatrixBridge

__all__ = ["LIVE_LIMITS", "MESSAGE_LIMIT", "PLATFORM", "MatrixBridge"]
