"""A person's files: what arrives with a turn (``inbox/``), what the model gives (``outbox/``).

Both folders live in the person's private area of the vault, ``users/<quoted person key>/``
beside their notes, and never show in the wiki (the wiki sees only ``.md`` under ``notes``
and ``inferred``). A file sent with a turn is saved as ``inbox/<milliseconds>-<name>``; the
model writes ``outbox/<name>``. Names pass one rule (:func:`checked_name`): no separators,
no ``..``, no control or invisible characters, nothing hidden. Every open walks the folders
one by one with ``O_NOFOLLOW`` from the vault's root, so a symlink leads nowhere, and the
type of a file is read from its bytes (:func:`core.workspace.file_types.sniff`), never from its
name.

Exception tree::

    FileError
    ├── InvalidFileName    a name the rule refuses (the message says why)
    ├── FileTooLarge       one file, or a turn's files together, over the limit
    └── FileNotFound       no such file in the person's inbox
"""

from __future__ import annotations

import asyncio
import builtins
import os
import stat
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

import msgspec

from core.workspace.file_types import describe_size, sniff
from core.workspace.safe_paths import holds_invisible, open_folders, replace_at
from core.workspace.wiki import person_folder

if TYPE_CHECKING:
    from core.people.i18n import Translator

__all__ = [
    "INBOX",
    "OUTBOX",
    "FileError",
    "FileLimits",
    "FileNotFound",
    "FileTooLarge",
    "IncomingFile",
    "InvalidFileName",
    "PersonFiles",
    "StoredFile",
    "checked_name",
    "holds_invisible",
    "printable_name",
    "refusal_text",
]

INBOX: Final = "inbox"
OUTBOX: Final = "outbox"
Folder = Literal["inbox", "outbox"]

MAX_NAME_BYTES: Final = 200
_STEERING: Final = "/\\"
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class FileError(Exception):
    """Something about a person's files could not be done; the message says what."""


NameFault = Literal["empty", "invisible", "path", "hidden", "spaces", "long"]


class InvalidFileName(FileError):
    """A file name the rule refuses; ``fault`` says which part of the rule."""

    def __init__(self, message: str, *, name: str, fault: NameFault) -> None:
        super().__init__(message)
        self.name = name
        self.fault = fault


class FileTooLarge(FileError):
    """A file, or a turn's files together, over ``limit`` bytes (``per``: file or turn)."""

    def __init__(self, message: str, *, limit: int, per: Literal["file", "turn"]) -> None:
        super().__init__(message)
        self.limit = limit
        self.per = per


class FileNotFound(FileError):
    """No such file in the person's inbox."""


@dataclass(frozen=True, slots=True)
class FileLimits:
    """How large one file, and all the files of one turn together, may be."""

    max_file_bytes: int = 10 * 1024 * 1024
    max_turn_bytes: int = 25 * 1024 * 1024


class IncomingFile(msgspec.Struct, frozen=True):
    """A file as a channel hands it over: the name its sender gave and its bytes."""

    name: str
    data: bytes


class StoredFile(msgspec.Struct, frozen=True, kw_only=True):
    """A file of a person's inbox or outbox, as stored: name, type, size, modification time."""

    folder: Folder
    name: str
    mime_type: str
    size_bytes: int
    modified_ns: int
    inode: int = 0

    @property
    def path(self) -> str:
        """``inbox/<name>`` or ``outbox/<name>``: how the model names it."""
        return f"{self.folder}/{self.name}"


def checked_name(name: str) -> str:
    """``name`` when the rule allows it as a file name; :class:`InvalidFileName` otherwise."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidFileName(
            "A file has no name; give every file a name such as notes.txt.",
            name="",
            fault="empty",
        )
    shown = repr(name if len(name) <= 80 else name[:80] + "…")
    if holds_invisible(name):
        raise InvalidFileName(
            f"The file name {shown} holds control or invisible characters; rename the file.",
            name=name,
            fault="invisible",
        )
    folded = unicodedata.normalize("NFKC", name)
    if any(char in folded for char in _STEERING) or folded in {".", ".."}:
        raise InvalidFileName(
            f"The file name {shown} is a path; send the file's own name, without folders.",
            name=name,
            fault="path",
        )
    if name.startswith(".") or folded.startswith("."):
        raise InvalidFileName(
            f"The file name {shown} starts with a dot (a hidden file); rename the file.",
            name=name,
            fault="hidden",
        )
    if name != name.strip():
        raise InvalidFileName(
            f"The file name {shown} starts or ends with a space; rename the file.",
            name=name,
            fault="spaces",
        )
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise InvalidFileName(
            f"The file name {shown} is longer than {MAX_NAME_BYTES} bytes; shorten it.",
            name=name,
            fault="long",
        )
    return name


def printable_name(name: str) -> str:
    """A file name as a sentence quotes it: unprintable characters as ``?``, 80 at most."""
    shown = "".join("?" if not c.isprintable() else c for c in name)
    return shown if len(shown) <= 80 else shown[:80] + "…"


def refusal_text(error: InvalidFileName, translator: Translator) -> str:
    """Why a file name was refused, in the person's language: one sentence for every
    channel (``POST /chat`` answers it, a chat bridge adds it to the reply)."""
    name = {"name": printable_name(error.name)}
    tr = translator
    messages = {
        "empty": tr.gettext("A file has no name; give every file a name such as notes.txt."),
        "invisible": tr.gettext(
            'The file name "%(name)s" holds control or invisible characters; rename the file.'
        ),
        "path": tr.gettext(
            'The file name "%(name)s" is a path; send the file\'s own name, without folders.'
        ),
        "hidden": tr.gettext(
            'The file name "%(name)s" starts with a dot (a hidden file); rename the file.'
        ),
        "spaces": tr.gettext(
            'The file name "%(name)s" starts or ends with a space; rename the file.'
        ),
        "long": tr.gettext('The file name "%(name)s" is too long; shorten it.'),
    }
    return messages[error.fault] % name


def check_sizes(files: Sequence[IncomingFile], limits: FileLimits) -> None:
    """Refuse a turn whose files break a limit, before anything is written."""
    total = 0
    for file in files:
        size = len(file.data)
        if size > limits.max_file_bytes:
            raise FileTooLarge(
                f"The file {file.name!r} is larger than the limit of "
                f"{describe_size(limits.max_file_bytes)} per file.",
                limit=limits.max_file_bytes,
                per="file",
            )
        total += size
    if total > limits.max_turn_bytes:
        raise FileTooLarge(
            f"The files are larger together than the limit of "
            f"{describe_size(limits.max_turn_bytes)} per turn.",
            limit=limits.max_turn_bytes,
            per="turn",
        )


class PersonFiles:
    """Each person's ``inbox/`` and ``outbox/`` under the vault's ``users/`` area."""

    def __init__(self, root: Path, limits: FileLimits = FileLimits()) -> None:
        self.root = root
        self.limits = limits

    # -- the walk ------------------------------------------------------------------------

    def _open_folder(self, person_key: str, folder: Folder, *, create: bool) -> int | None:
        """A descriptor of the person's ``folder``, walked without following a symlink."""
        person = person_folder(person_key)
        if person is None:
            return None
        return open_folders(
            os.path.realpath(self.root), ("users", person, folder), create=create, mode=0o700
        )

    # -- the inbox -----------------------------------------------------------------------

    async def receive(
        self, person_key: str, files: Sequence[IncomingFile], *, now_ms: int | None = None
    ) -> builtins.list[StoredFile]:
        """Save a turn's files in the person's inbox, after checking every name and size."""
        for file in files:
            checked_name(file.name)
        check_sizes(files, self.limits)
        if not files:
            return []
        stamp = int(time.time() * 1000) if now_ms is None else now_ms
        return await asyncio.to_thread(self._receive_sync, person_key, files, stamp)

    def _receive_sync(
        self, person_key: str, files: Sequence[IncomingFile], stamp: int
    ) -> builtins.list[StoredFile]:
        fd = self._open_folder(person_key, INBOX, create=True)
        if fd is None:
            raise FileError("The inbox can't be opened for this person.")
        saved: list[StoredFile] = []
        try:
            taken: set[str] = set()
            for file in files:
                name = _free_name(fd, f"{stamp}-{file.name}", taken)
                taken.add(name)
                replace_at(fd, name, file.data, mode=0o600, durable=False)
                saved.append(_stored(fd, INBOX, name, file.data))
        finally:
            os.close(fd)
        return saved

    async def list(self, person_key: str, folder: Folder = INBOX) -> builtins.list[StoredFile]:
        """The files of the person's ``folder``, newest first."""
        return await asyncio.to_thread(self._list_sync, person_key, folder)

    async def changed_since(
        self, person_key: str, before: Sequence[StoredFile]
    ) -> builtins.list[StoredFile]:
        """The outbox files created or modified since ``before`` was listed, oldest first.

        A write replaces the file (a new inode), so a file rewritten within the clock's
        granularity still counts as modified.
        """
        seen = {f.name: (f.inode, f.modified_ns, f.size_bytes) for f in before}
        found = await asyncio.to_thread(self._list_sync, person_key, OUTBOX)
        changed = [f for f in found if seen.get(f.name) != (f.inode, f.modified_ns, f.size_bytes)]
        return sorted(changed, key=lambda f: (f.modified_ns, f.name))

    def _list_sync(self, person_key: str, folder: Folder) -> builtins.list[StoredFile]:
        fd = self._open_folder(person_key, folder, create=False)
        if fd is None:
            return []
        found: list[StoredFile] = []
        try:
            for name in os.listdir(fd):
                if name.startswith("."):
                    continue
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISREG(info.st_mode):
                    continue
                head = _read_at(fd, name, 8192)
                if head is None:
                    continue
                found.append(
                    StoredFile(
                        folder=folder,
                        name=name,
                        mime_type=sniff(head, name),
                        size_bytes=info.st_size,
                        modified_ns=info.st_mtime_ns,
                        inode=info.st_ino,
                    )
                )
        finally:
            os.close(fd)
        found.sort(key=lambda f: (-f.modified_ns, f.name))
        return found

    async def read(
        self, person_key: str, name: str, folder: Folder = INBOX
    ) -> tuple[StoredFile, bytes]:
        """A file of the person's ``folder`` and its bytes; :class:`FileNotFound` if none."""
        name = _strip_folder(name, folder)
        checked_name(name)
        return await asyncio.to_thread(self._read_sync, person_key, name, folder)

    def _read_sync(self, person_key: str, name: str, folder: Folder) -> tuple[StoredFile, bytes]:
        fd = self._open_folder(person_key, folder, create=False)
        data = None if fd is None else _read_at(fd, name, self.limits.max_file_bytes + 1)
        try:
            if fd is None or data is None:
                raise FileNotFound(f"There is no file {name!r} in the {folder}.")
            if len(data) > self.limits.max_file_bytes:
                raise FileTooLarge(
                    f"The file {name!r} is larger than the limit of "
                    f"{describe_size(self.limits.max_file_bytes)} per file.",
                    limit=self.limits.max_file_bytes,
                    per="file",
                )
            return _stored(fd, folder, name, data), data
        finally:
            if fd is not None:
                os.close(fd)

    # -- the outbox ----------------------------------------------------------------------

    async def written(
        self, person_key: str, names: Sequence[str]
    ) -> builtins.list[tuple[StoredFile, bytes]]:
        """The outbox files a turn wrote (``names``, as its tools recorded them, in order),
        read back up to the per-turn limit (what an answer carries); a larger file stays
        in the outbox. Only the turn's own: another turn of the same area (a space's other
        conversation) may be writing to the same outbox at the same time (#34)."""
        budget = self.limits.max_turn_bytes
        out: builtins.list[tuple[StoredFile, bytes]] = []
        for name in dict.fromkeys(names):  # a file written twice goes once, where first
            try:
                found, data = await self.read(person_key, name, OUTBOX)
            except FileError:
                continue  # removed since, or over the per-file limit
            if len(data) > budget:
                continue  # the per-turn limit holds for answers too
            budget -= len(data)
            out.append((found, data))
        return out

    async def write_outbox(self, person_key: str, name: str, data: bytes) -> StoredFile:
        """Write (or replace) ``outbox/<name>`` for the person."""
        name = _strip_folder(name, OUTBOX)
        checked_name(name)
        if len(data) > self.limits.max_file_bytes:
            raise FileTooLarge(
                f"The file {name!r} is larger than the limit of "
                f"{describe_size(self.limits.max_file_bytes)} per file.",
                limit=self.limits.max_file_bytes,
                per="file",
            )
        return await asyncio.to_thread(self._write_outbox_sync, person_key, name, data)

    def _write_outbox_sync(self, person_key: str, name: str, data: bytes) -> StoredFile:
        fd = self._open_folder(person_key, OUTBOX, create=True)
        if fd is None:
            raise FileError("The outbox can't be opened for this person.")
        try:
            replace_at(fd, name, data, mode=0o600, durable=False)
            return _stored(fd, OUTBOX, name, data)
        finally:
            os.close(fd)


def _strip_folder(name: str, folder: Folder) -> str:
    """``inbox/x`` → ``x``: the model may name a file with its folder, as it was shown."""
    prefix = folder + "/"
    return name[len(prefix) :] if isinstance(name, str) and name.startswith(prefix) else name


def _free_name(fd: int, name: str, taken: set[str]) -> str:
    """``name``, or ``name`` with ``-2``, ``-3``… before its extension when it is in use."""
    stem, suffix = os.path.splitext(name)
    candidate, n = name, 1
    while candidate in taken or _exists(fd, candidate):
        n += 1
        candidate = f"{stem}-{n}{suffix}"
    return candidate


def _exists(fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _read_at(dir_fd: int, name: str, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of the regular file ``name``; None if missing or not regular."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    with open(fd, "rb", closefd=True) as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            return None
        return file.read(limit)


def _stored(fd: int, folder: Folder, name: str, data: bytes) -> StoredFile:
    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    return StoredFile(
        folder=folder,
        name=name,
        mime_type=sniff(data[:8192], name),
        size_bytes=len(data),
        modified_ns=info.st_mtime_ns,
        inode=info.st_ino,
    )
