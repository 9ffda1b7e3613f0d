"""What Slack sends and answers: the Events API and interactivity payloads the bridge reads
(decoded once by msgspec), and a Web API failure as the bridges' errors."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from bridges.port import (
    BridgeError,
    PlatformUnavailable,
)


class _File(msgspec.Struct, frozen=True, kw_only=True):
    id: str = ""
    name: str | None = None
    title: str | None = None
    mimetype: str | None = None
    size: int | None = None
    url_private: str | None = None


class _Profile(msgspec.Struct, frozen=True, kw_only=True):
    display_name: str | None = None
    real_name: str | None = None
    name: str | None = None


class _Message(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    subtype: str | None = None
    user: str | None = None
    bot_id: str | None = None
    text: str | None = None
    ts: str | None = None
    thread_ts: str | None = None
    parent_user_id: str | None = None
    channel: str | None = None
    files: tuple[_File, ...] = ()
    user_profile: _Profile | None = None
    #: The author's workspace (``user_team``), else the event's (``team``): a streamed
    #: answer's recipient team.
    team: str | None = None
    user_team: str | None = None


class _EventKind(msgspec.Struct, frozen=True, kw_only=True):
    type: str


class _Authorization(msgspec.Struct, frozen=True, kw_only=True):
    user_id: str | None = None
    team_id: str | None = None
    is_bot: bool = False


class _Envelope(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    challenge: str | None = None
    event_id: str | None = None
    #: When Slack says the event happened (epoch seconds): the message's age.
    event_time: int | float | None = None
    # Read in a second step: events we don't handle may carry fields (``user`` as an object
    # in ``user_change``) that the message's shape would call malformed.
    event: msgspec.Raw = msgspec.Raw(b"")  # empty: the envelope has no event
    authorizations: tuple[_Authorization, ...] = ()


class _PressUser(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str | None = None
    username: str | None = None
    team_id: str | None = None


class _PressChannel(msgspec.Struct, frozen=True, kw_only=True):
    id: str


class _PressContainer(msgspec.Struct, frozen=True, kw_only=True):
    type: str = ""
    message_ts: str | None = None
    channel_id: str | None = None
    thread_ts: str | None = None
    is_ephemeral: bool = False


class _PressMessage(msgspec.Struct, frozen=True, kw_only=True):
    ts: str | None = None
    thread_ts: str | None = None
    text: str | None = None
    blocks: tuple[dict[str, Any], ...] = ()


class _PressAction(msgspec.Struct, frozen=True, kw_only=True):
    type: str = ""
    action_id: str = ""
    block_id: str = ""
    value: str | None = None
    action_ts: str | None = None


class _Interaction(msgspec.Struct, frozen=True, kw_only=True):
    """An interactivity payload; only ``block_actions`` is read further."""

    type: str
    user: _PressUser | None = None
    channel: _PressChannel | None = None
    container: _PressContainer | None = None
    message: _PressMessage | None = None
    trigger_id: str | None = None
    response_url: str | None = None
    actions: tuple[_PressAction, ...] = ()


class _SocketEnvelope(msgspec.Struct, frozen=True, kw_only=True):
    """A Socket Mode message: ``hello``, ``disconnect``, or an envelope to acknowledge
    (``events_api``: an Events API callback as its ``payload``; ``interactive``: an
    interactivity payload)."""

    type: str
    envelope_id: str = ""
    payload: msgspec.Raw = msgspec.Raw(b"")
    retry_attempt: int | None = None
    #: Why Slack closes the connection (a ``disconnect``).
    reason: str | None = None


_ENVELOPE: Final = msgspec.json.Decoder(_Envelope)
_SOCKET_ENVELOPE: Final = msgspec.json.Decoder(_SocketEnvelope)
_EVENT_KIND: Final = msgspec.json.Decoder(_EventKind)
_MESSAGE: Final = msgspec.json.Decoder(_Message)
_INTERACTION: Final = msgspec.json.Decoder(_Interaction)


class _Refused(BridgeError):
    """Slack answered a call ``ok: false``; ``code`` is its ``error``."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


def _api_error(method: str, response: Any) -> BridgeError:
    """The failure of ``method`` as Slack answered it (status, ``error`` code, Retry-After)."""
    status = int(getattr(response, "status_code", 0) or 0)
    data = getattr(response, "data", None)
    code = data.get("error") if isinstance(data, dict) else None
    if status == 429:
        retry_after = (getattr(response, "headers", None) or {}).get("Retry-After")
        wait = f" after {retry_after} s" if retry_after else " later"
        return PlatformUnavailable(
            f"Slack rate-limited {method}; try again{wait}.", retry_after_s=_seconds(retry_after)
        )
    if status >= 500:
        return PlatformUnavailable(
            f"Slack answered {status} to {method}"
            + (f" ({code})" if code else "")
            + "; try again later."
        )
    return _Refused(f"Slack refused {method}: {code or f'HTTP {status}'}.", code=str(code or ""))


def _seconds(value: object) -> float | None:
    """A ``Retry-After`` in seconds (Slack writes whole seconds), None if unreadable."""
    try:
        seconds = float(str(value))
    except ValueError:
        return None
    return seconds if 0 <= seconds < 86_400 else None
