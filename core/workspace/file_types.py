"""What a file is, read from its bytes, and how large it is, as a person reads a size.

Binary formats are recognized by their signatures (``filetype`` knows about 80 of them);
bytes that are UTF-8 without NUL are text, and only then does the name's extension choose
among text types. A name alone never makes a file an image or a document.
"""

from __future__ import annotations

import os
from typing import Final

import filetype  # type: ignore[import-untyped]

__all__ = ["describe_size", "is_text", "is_textual", "sniff"]

# Text types, told apart by the extension once the bytes read as text (filetype knows none).
_TEXT_TYPES: Final = {
    ".json": "application/json",
    ".csv": "text/csv",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".xml": "application/xml",
    ".svg": "image/svg+xml",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
}


def sniff(data: bytes, name: str = "") -> str:
    """The MIME type of ``data``, read from its bytes.

    Binary formats are recognized by their signatures; bytes that are valid UTF-8 without
    NUL are text, and only then does the name's extension choose among text types.
    """
    kind = filetype.guess(data[:8192]) if data else None
    if kind is not None:
        return str(kind.mime)
    if is_text(data):
        suffix = os.path.splitext(name)[1].lower()
        return _TEXT_TYPES.get(suffix, "text/plain")
    return "application/octet-stream"


def is_text(data: bytes) -> bool:
    """Whether ``data`` reads as UTF-8 text (no NUL, at most a cut character at the end)."""
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        # A sample cut in the middle of a character is still text.
        return error.start >= len(data) - 3 and error.reason == "unexpected end of data"
    return True


def is_textual(mime_type: str) -> bool:
    """Whether a file of this type is given to the model as text."""
    return (
        mime_type.startswith("text/")
        or mime_type in {"application/json", "application/xml", "application/yaml"}
        or mime_type == "image/svg+xml"
    )


def describe_size(size: int) -> str:
    """``10 MiB``, ``512 KiB`` or ``300 bytes``: a size as a person reads it."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            value = size / factor
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} bytes"
