"""How every webhook bridge, and every HTTP route's body, reads JSON: one decoder call, never
a crash (``channel_http.requests.decode_body`` reads every route's body through it).

msgspec refuses JSON nested deeper than the interpreter's recursion allows by raising
:class:`RecursionError`, which no bridge expects from a decoder: a signed delivery of
``[[[[…]]]]`` then answered 500. :func:`decode` turns that into the
:class:`msgspec.DecodeError` every bridge already reads as ``malformed``.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

__all__ = ["decode"]

_T = TypeVar("_T")


def decode(decoder: msgspec.json.Decoder[_T], body: bytes | msgspec.Raw) -> _T:
    """``body`` read by ``decoder``; :class:`msgspec.DecodeError` for any unreadable JSON,
    nesting too deep included (``msgspec.ValidationError`` is a ``DecodeError``)."""
    try:
        return decoder.decode(body)
    except RecursionError:
        raise msgspec.DecodeError("the JSON is nested too deeply to be read") from None
