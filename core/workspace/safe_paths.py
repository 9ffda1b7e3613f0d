"""The rules the files and the wiki share: which characters text kept and shown again may not
hold, and how a folder is opened one step at a time without following a symlink."""

from __future__ import annotations

import contextlib
import os
import unicodedata
from typing import Final

__all__ = ["DIR_FLAGS", "holds_invisible", "open_child_dir"]

# Control, format (U+202E…), surrogate, private-use and line or paragraph separators.
_REFUSED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def holds_invisible(text: str, *, allowed: str = "") -> bool:
    """Whether ``text`` holds a control, format (U+202E…), private-use, surrogate or line
    separator character, those in ``allowed`` aside.

    The one rule for text kept and shown again: file names, wiki paths, a space's preferences
    and mute reasons and targets refuse what it finds (#34).
    """
    return any(
        unicodedata.category(char) in _REFUSED_CATEGORIES and char not in allowed for char in text
    )


def open_child_dir(parent_fd: int, name: str, *, create: bool, mode: int) -> int | None:
    """The folder ``name`` in ``parent_fd``, opened without following a symlink (made with
    ``mode`` first when ``create``), or None when it can't be opened."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            return None
    except OSError:
        return None
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, mode, dir_fd=parent_fd)
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        return None
