"""The rules the files and the wiki share: which characters text kept and shown again may not
hold, how a folder is opened one step at a time without following a symlink, and how a file
is written whole or not at all."""

from __future__ import annotations

import contextlib
import os
import secrets
import unicodedata
from collections.abc import Iterable
from typing import Final

__all__ = ["DIR_FLAGS", "holds_invisible", "open_child_dir", "open_folders", "replace_at"]

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


def open_folders(root: str, names: Iterable[str], *, create: bool, mode: int) -> int | None:
    """A descriptor of the folder ``names`` below ``root``, walked one step at a time without
    following a symlink (missing steps made with ``mode`` when ``create``), or None."""
    try:
        fd = os.open(root, DIR_FLAGS)
    except OSError:
        return None
    for name in names:
        try:
            child = open_child_dir(fd, name, create=create, mode=mode)
        finally:
            os.close(fd)
        if child is None:
            return None
        fd = child
    return fd


def replace_at(dir_fd: int, name: str, data: bytes, *, mode: int, durable: bool) -> None:
    """Write ``name`` in ``dir_fd`` atomically: a hidden temporary file (``mode``), then a
    rename over the name; ``durable`` syncs the file and the folder to disk as well."""
    temporary = f".tmp-{secrets.token_hex(8)}.part"

    def opener(path: str, flags: int) -> int:
        return os.open(path, flags | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)

    try:
        with open(temporary, "wb", opener=opener) as file:
            file.write(data)
            if durable:
                file.flush()
                os.fsync(file.fileno())
        os.replace(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise
    if durable:
        os.fsync(dir_fd)
