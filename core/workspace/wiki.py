"""The wiki vault on disk: the team's curated notes and each person's own, as that person sees them.

A person's view holds ``curated/**`` (shared by everyone) and their own area, stored under
``users/<quoted person key>/notes`` and ``.../inferred`` and shown as ``personal/notes/...``
and ``personal/inferred/...``. Only ``.md`` files exist in a view. Every view path passes
the same rules (:meth:`Vault.resolve`), and every open walks the folders one by one with
``O_NOFOLLOW``, so neither ``..`` nor a symlink can lead outside the view.

Exception tree::

    WikiError
    ├── InvalidPath      a view path the person may not use here (outside the view, not .md, …)
    ├── InvalidPattern   a grep pattern RE2 refuses, one longer than the cap, or one whose
    │                    compiled program is too large to search within the time budget
    ├── NoteNotFound     a note that isn't in the person's view
    └── NoteTooLarge     a note, or the content meant for one, over the 1 MiB cap
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import os
import stat
import time
import unicodedata
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import quote

import msgspec
import re2

from core.state import Database
from core.workspace.safe_paths import holds_invisible, open_child_dir, open_folders, replace_at

MAX_NOTE_BYTES: Final = 1024 * 1024
MAX_PATH_CHARS: Final = 512
MAX_PATTERN_CHARS: Final = 512
MAX_LINE_CHARS: Final = 500
#: RE2's program size is what a search costs per byte once its DFA gives up (a pattern such
#: as ``(?:.{0,100}){9}x`` is 8,105 and took 17 s over one 1 MB line); past this, refused.
MAX_PROGRAM_SIZE: Final = 1000
#: Searches running at once; more wait their turn, on threads of their own, so greps never
#: hold the threads every other wiki read runs on.
GREP_THREADS: Final = 2
LAYOUT: Final = ("curated/design", "curated/standards", "curated/decisions", "users", "raw")

_MAX_NAME_BYTES: Final = 255
_PERSONAL_KINDS: Final = ("notes", "inferred")
# Characters that steer a path; a Unicode look-alike folding into one of them is refused.
_STEERING: Final = "/.\\%"
# O_NONBLOCK: a FIFO named like a note must not hang the worker thread.
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

# A long line is searched in windows, the deadline checked between them, so one line can't
# outrun the budget by more than one window's work. Windows overlap, so a match of up to
# _WINDOW_OVERLAP bytes is found wherever it lies; RE2 sees the whole line as context, so
# ^, $ and \b keep their meaning at a window's edges.
_WINDOW_BYTES: Final = 8 * 1024
_WINDOW_OVERLAP: Final = 1024

_T = TypeVar("_T")


class WikiError(Exception):
    """Something about the wiki could not be done; the message says what and how to go on."""


class InvalidPath(WikiError):
    """A view path the person may not use for this."""


class InvalidPattern(WikiError):
    """A grep pattern that RE2 refuses, or one that is too long."""


class NoteNotFound(WikiError):
    """A note that isn't in the person's view."""


class NoteTooLarge(WikiError):
    """A note, or the content meant for one, over :data:`MAX_NOTE_BYTES`."""


class GrepMatch(msgspec.Struct, frozen=True, kw_only=True):
    """One matching line: the view path, its 1-based number and its text (cut at 500)."""

    path: str
    line: int
    text: str


class WriteResult(msgspec.Struct, frozen=True, kw_only=True):
    """Where a note was written and whether it was new (``created``) or overwritten."""

    path: str
    created: bool


class _Target(msgspec.Struct, frozen=True):
    """A view path taken apart: the folders below the vault root, and the file name."""

    view: str
    area: tuple[str, ...]
    dirs: tuple[str, ...]
    name: str

    @property
    def folders(self) -> tuple[str, ...]:
        return self.area + self.dirs

    @property
    def key(self) -> str:
        return "/".join((*self.folders, self.name))


def person_folder(person_key: str) -> str | None:
    """The folder name of a person's area under ``users/``, or None for an unusable key."""
    try:
        folder = quote(person_key, safe="")
    except UnicodeError:
        return None
    if folder in {"", ".", ".."} or len(folder) > _MAX_NAME_BYTES:
        return None
    return folder


def _is_safe_text(path: str) -> bool:
    if not path or len(path) > MAX_PATH_CHARS or "%" in path or "\\" in path:
        return False
    if holds_invisible(path):
        return False
    if not path.isascii():
        folded = unicodedata.normalize("NFKC", path)
        if any(folded.count(char) != path.count(char) for char in _STEERING):
            return False
    return True


def _is_safe_segment(segment: str) -> bool:
    return (
        bool(segment)
        and not segment.startswith(".")
        and len(segment.encode("utf-8")) <= _MAX_NAME_BYTES
    )


def _parse(person_key: str, view_path: str) -> _Target | None:
    """The target of ``view_path`` in the person's view, or None when it is outside it."""
    if not isinstance(view_path, str) or not _is_safe_text(view_path):
        return None
    segments = view_path.split("/")
    if not all(_is_safe_segment(segment) for segment in segments):
        return None
    if not segments[-1].endswith(".md"):
        return None
    if segments[0] == "curated" and len(segments) >= 2:
        area: tuple[str, ...] = ("curated",)
        rest = segments[1:]
    elif segments[0] == "personal" and len(segments) >= 3 and segments[1] in _PERSONAL_KINDS:
        folder = person_folder(person_key)
        if folder is None:
            return None
        area = ("users", folder, segments[1])
        rest = segments[2:]
    else:
        return None
    return _Target(view_path, area, tuple(rest[:-1]), rest[-1])


def _shown(view_path: object) -> str:
    text = view_path if isinstance(view_path, str) else repr(view_path)
    return repr(text if len(text) <= 120 else text[:120] + "…")


def _read_at(dir_fd: int, name: str, view_path: str) -> bytes | None:
    """The bytes of the regular file ``name`` in ``dir_fd``; None if missing or not regular."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    # The descriptor is read with os.read, never wrapped with open(fd): open() refuses a
    # folder named like a note with IsADirectoryError and leaves the descriptor open.
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        data = b"" if info.st_size > MAX_NOTE_BYTES else _read_all(fd, MAX_NOTE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if info.st_size > MAX_NOTE_BYTES or len(data) > MAX_NOTE_BYTES:
        raise NoteTooLarge(
            f"The note {_shown(view_path)} is larger than 1 MiB; split it into smaller notes."
        )
    return data


def _read_all(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes of the regular file open at ``fd``, to its end."""
    parts: list[bytes] = []
    left = limit
    while left > 0:
        part = os.read(fd, min(left, 1024 * 1024))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


async def _to_thread_to_the_end(function: Callable[..., _T], *args: Any) -> _T:
    """Run ``function`` in a worker thread; on cancellation, wait for it before re-raising.

    A worker thread can't be stopped, so a cancelled writer keeps its lock until the thread
    has finished: the next writer then reads what this one wrote.
    """
    task = asyncio.ensure_future(asyncio.to_thread(function, *args))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait({task})
        raise


def _compile(pattern: str) -> Any:
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidPattern(
            f"The pattern is {len(pattern)} characters long; keep it within "
            f"{MAX_PATTERN_CHARS} characters and search again."
        )
    options = re2.Options()
    options.case_sensitive = False
    options.log_errors = False
    try:
        regex = re2.compile(pattern, options)
    except re2.error as error:
        reason = error.args[0] if error.args else "unknown error"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", errors="replace")
        raise InvalidPattern(
            f"The pattern {_shown(pattern)} is not a regular expression RE2 accepts ({reason}); "
            "fix it (RE2 syntax, no backreferences or look-around) and search again."
        ) from None
    except UnicodeError:
        raise InvalidPattern(
            f"The pattern {_shown(pattern)} holds characters that are not valid text; "
            "remove them and search again."
        ) from None
    if regex.programsize > MAX_PROGRAM_SIZE:
        raise InvalidPattern(
            f"The pattern {_shown(pattern)} is too complex to search in time (its program "
            f"has {regex.programsize} steps, the limit is {MAX_PROGRAM_SIZE}); use a simpler "
            "one, for example with smaller repetition counts."
        )
    return regex


def _char_start(data: bytes, index: int) -> int:
    """``index`` moved back to the first byte of the UTF-8 character it falls in."""
    index = min(index, len(data))
    while 0 < index < len(data) and data[index] & 0xC0 == 0x80:
        index -= 1
    return index


def _line_matches(regex: Any, line: bytes, deadline: float) -> bool | None:
    """Whether ``regex`` matches in ``line``; None when the deadline came first."""
    if len(line) <= _WINDOW_BYTES:
        return regex.search(line) is not None
    start = 0
    while True:
        if time.monotonic() > deadline:
            return None
        end = _char_start(line, start + _WINDOW_BYTES)
        if regex.search(line, start, end) is not None:
            return True
        if end >= len(line):
            return False
        start = _char_start(line, end - _WINDOW_OVERLAP)


class Vault:
    """The wiki on disk under ``root``, seen through one person's view at a time."""

    def __init__(
        self,
        root: Path,
        *,
        grep_seconds: float = 2.0,
        grep_bytes: int = 20 * 1024 * 1024,
        db: Database | None = None,
    ) -> None:
        self.root = root
        # On a folder several instances share, a write also takes a lock per note in the
        # shared state store, so two instances' read-modify-writes never cross.
        self._db = db if db is not None and db.shared else None
        self._grep_seconds = grep_seconds
        self._grep_bytes = grep_bytes
        self._grep_threads = ThreadPoolExecutor(GREP_THREADS, thread_name_prefix="wiki-grep")
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    # -- layout -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the grep threads: a running search ends at its deadline, a queued one never runs."""
        self._grep_threads.shutdown(wait=False, cancel_futures=True)

    async def init(self) -> None:
        """Create the vault's folders if they are missing; safe to call at every start."""
        await asyncio.to_thread(self._init_sync)

    def _init_sync(self) -> None:
        for folder in LAYOUT:
            (self.root / folder).mkdir(parents=True, exist_ok=True)

    def _real_root(self) -> str:
        return os.path.realpath(self.root)

    def _open_folders(self, folders: tuple[str, ...], *, create: bool) -> int | None:
        """A descriptor of the folder ``folders`` below the root, walked without symlinks."""
        return open_folders(self._real_root(), folders, create=create, mode=0o755)

    # -- reading ------------------------------------------------------------------------

    def resolve(self, person_key: str, view_path: str) -> Path | None:
        """The file on disk an existing note of the person's view is, or None.

        None covers everything outside the view: ``..``, absolute paths, backslashes,
        ``%``, hidden or empty segments, control characters, look-alike separators,
        other people's areas, anything but ``.md``, paths through symlinks, missing files.
        """
        target = _parse(person_key, view_path)
        if target is None:
            return None
        real_root = self._real_root()
        path = real_root
        try:
            for name in target.folders:
                path = os.path.join(path, name)
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    return None
            path = os.path.join(path, target.name)
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return None
            area = os.path.join(real_root, *target.area)
            if os.path.commonpath([os.path.realpath(path), area]) != area:
                return None
        except (OSError, ValueError):
            return None
        return Path(path)

    async def list(self, person_key: str) -> builtins.list[str]:
        """Every note in the person's view, as sorted view paths."""
        return await asyncio.to_thread(self._list_sync, person_key)

    def _list_sync(self, person_key: str) -> builtins.list[str]:
        found: builtins.list[str] = []
        self._collect(person_key, ("curated",), "curated", found)
        folder = person_folder(person_key)
        if folder is not None:
            for kind in _PERSONAL_KINDS:
                self._collect(person_key, ("users", folder, kind), f"personal/{kind}", found)
        return sorted(found)

    def _collect(
        self, person_key: str, folders: tuple[str, ...], prefix: str, found: builtins.list[str]
    ) -> None:
        fd = self._open_folders(folders, create=False)
        if fd is None:
            return
        try:
            self._scan(person_key, fd, prefix, found)
        finally:
            os.close(fd)

    def _scan(self, person_key: str, dir_fd: int, prefix: str, found: builtins.list[str]) -> None:
        if len(prefix) > MAX_PATH_CHARS:
            return
        try:
            with os.scandir(dir_fd) as entries:
                children = sorted(
                    (entry.name, entry.is_dir(follow_symlinks=False))
                    for entry in entries
                    if not entry.name.startswith(".")
                    and (
                        entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False)
                    )
                )
        except OSError:  # an unreadable folder shows as empty rather than failing the list
            return
        for name, is_dir in children:
            view_path = f"{prefix}/{name}"
            if is_dir:
                child = open_child_dir(dir_fd, name, create=False, mode=0o755)
                if child is None:
                    continue
                try:
                    self._scan(person_key, child, view_path, found)
                finally:
                    os.close(child)
            elif _parse(person_key, view_path) is not None:
                # Listed paths pass the same rules as reads, so every one can be read back.
                found.append(view_path)

    def _read_target(self, target: _Target) -> bytes | None:
        fd = self._open_folders(target.folders, create=False)
        if fd is None:
            return None
        try:
            return _read_at(fd, target.name, target.view)
        finally:
            os.close(fd)

    async def read(self, person_key: str, view_path: str) -> str | None:
        """The text of a note in the person's view, or None when it isn't there.

        Raises :class:`NoteTooLarge` for a note over 1 MiB.
        """
        target = _parse(person_key, view_path)
        if target is None:
            return None
        data = await asyncio.to_thread(self._read_target, target)
        return None if data is None else data.decode("utf-8", errors="replace")

    async def note_exists(self, person_key: str, view_path: str) -> bool:
        """Whether ``view_path`` is a note in the person's view."""
        return await asyncio.to_thread(self.resolve, person_key, view_path) is not None

    async def grep(
        self, person_key: str, pattern: str, *, max_matches: int = 200
    ) -> builtins.list[GrepMatch]:
        """Lines of the person's notes matching ``pattern`` (RE2, case-insensitive).

        The search stops at ``max_matches`` lines, after scanning the byte budget, or at
        the deadline (counted from the call, so time spent waiting for a grep thread counts
        too), and answers with what it found by then.
        """
        deadline = time.monotonic() + self._grep_seconds
        search = functools.partial(self._grep_sync, person_key, pattern, max_matches, deadline)
        return await asyncio.get_running_loop().run_in_executor(self._grep_threads, search)

    def _grep_sync(
        self, person_key: str, pattern: str, max_matches: int, deadline: float
    ) -> builtins.list[GrepMatch]:
        regex = _compile(pattern)
        budget = self._grep_bytes
        matches: builtins.list[GrepMatch] = []
        if max_matches < 1:
            return matches
        for view_path in self._list_sync(person_key):
            if budget <= 0 or time.monotonic() > deadline:
                break
            target = _parse(person_key, view_path)
            if target is None:
                continue
            try:
                data = self._read_target(target)
            except NoteTooLarge:
                continue
            if data is None:
                continue
            data = data[:budget]
            budget -= len(data)
            # Searched as valid UTF-8 bytes: RE2 then needs no copy or offset mapping per window.
            text = data.decode("utf-8", errors="replace").encode("utf-8")
            for number, line in enumerate(text.split(b"\n"), start=1):
                line = line.removesuffix(b"\r")
                found = _line_matches(regex, line, deadline)
                if found is None:
                    return matches
                if found:
                    shown = line[: MAX_LINE_CHARS * 4].decode("utf-8", errors="ignore")
                    matches.append(
                        GrepMatch(path=view_path, line=number, text=shown[:MAX_LINE_CHARS])
                    )
                    if len(matches) >= max_matches:
                        return matches
                if time.monotonic() > deadline:
                    return matches
        return matches

    # -- writing ------------------------------------------------------------------------

    def _lock_for(self, target: _Target) -> asyncio.Lock:
        lock = self._locks.get(target.key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[target.key] = lock
        return lock

    def _writable(self, person_key: str, view_path: str, prefix: str) -> _Target:
        if not isinstance(view_path, str) or not view_path.startswith(prefix):
            raise InvalidPath(
                f"The wiki path {_shown(view_path)} is outside {prefix}; "
                f"choose a path like {prefix}<topic>.md."
            )
        target = _parse(person_key, view_path)
        if target is None:
            raise InvalidPath(
                f"The wiki path {_shown(view_path)} can't be used: write '/'-separated names "
                "without '..', '%', backslashes or a leading dot, ending in .md."
            )
        return target

    def _update_sync(
        self, target: _Target, build: Callable[[bytes | None], bytes], needs_current: bool
    ) -> bool:
        """Replace the note with ``build(current bytes or None)``; True if it was new."""
        fd = self._open_folders(target.folders, create=True)
        if fd is None:
            raise InvalidPath(
                f"The wiki path {_shown(target.view)} passes through something that is not "
                "a folder; choose another path."
            )
        try:
            try:
                info = os.stat(target.name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                exists = False
            else:
                exists = True
                if not stat.S_ISREG(info.st_mode):
                    raise InvalidPath(
                        f"The wiki path {_shown(target.view)} is taken by something that is not "
                        "a note; choose another path."
                    )
            current = _read_at(fd, target.name, target.view) if exists and needs_current else None
            replace_at(fd, target.name, build(current), mode=0o644, durable=True)
        finally:
            os.close(fd)
        return not exists

    async def _update(
        self,
        target: _Target,
        build: Callable[[bytes | None], bytes],
        *,
        needs_current: bool = False,
    ) -> bool:
        async with self._lock_for(target):
            if self._db is None:
                return await _to_thread_to_the_end(self._update_sync, target, build, needs_current)
            async with self._db.transaction(lock=f"wiki:{target.key}"):
                return await _to_thread_to_the_end(self._update_sync, target, build, needs_current)

    async def write_note(self, person_key: str, view_path: str, content: str) -> WriteResult:
        """Write a note under ``personal/notes/``, replacing any note already there."""
        target = self._writable(person_key, view_path, "personal/notes/")
        data = _encoded(content, view_path)
        created = await self._update(target, lambda _current: data)
        return WriteResult(path=view_path, created=created)

    async def append_note(self, person_key: str, view_path: str, content: str) -> WriteResult:
        """Add ``content`` at the end of a note under ``personal/notes/`` (on a line of its own)."""
        target = self._writable(person_key, view_path, "personal/notes/")
        addition = _encoded(content, view_path)

        def build(current: bytes | None) -> bytes:
            if not current:
                return addition
            separator = b"" if current.endswith(b"\n") else b"\n"
            data = current + separator + addition
            if len(data) > MAX_NOTE_BYTES:
                raise NoteTooLarge(
                    f"Appending to {_shown(view_path)} would take it over 1 MiB; "
                    "start a new note instead."
                )
            return data

        created = await self._update(target, build, needs_current=True)
        return WriteResult(path=view_path, created=created)

    async def update_inferred(
        self, person_key: str, name: str, build: Callable[[bytes | None], bytes]
    ) -> None:
        """Rewrite ``personal/inferred/<name>`` with ``build(current)``, read and decided
        under the note's lock (``build`` returns the current bytes to keep the note)."""
        view_path = f"personal/inferred/{name}"
        target = self._writable(person_key, view_path, "personal/inferred/")
        await self._update(target, build, needs_current=True)

    async def promote(
        self, person_key: str, personal_path: str, curated_path: str | None = None
    ) -> str:
        """Copy a personal note into ``curated/`` (by default under its own file name).

        An existing curated note at that path is replaced. Returns the curated view path.
        """
        if not isinstance(personal_path, str) or not personal_path.startswith("personal/"):
            raise InvalidPath(
                f"Only personal notes can be promoted, and {_shown(personal_path)} is not one; "
                "give a path starting with personal/."
            )
        source = _parse(person_key, personal_path)
        if source is None:
            raise NoteNotFound(
                f"There is no note {_shown(personal_path)} among yours; list the wiki to see them."
            )
        destination_path = curated_path if curated_path is not None else f"curated/{source.name}"
        destination = self._writable(person_key, destination_path, "curated/")
        data = await asyncio.to_thread(self._read_target, source)
        if data is None:
            raise NoteNotFound(
                f"There is no note {_shown(personal_path)} among yours; list the wiki to see them."
            )
        await self._update(destination, lambda _current: data)
        return destination_path


def _encoded(content: str, view_path: str) -> bytes:
    data = content.encode("utf-8", errors="replace")
    if len(data) > MAX_NOTE_BYTES:
        raise NoteTooLarge(
            f"The content for {_shown(view_path)} is larger than 1 MiB; "
            "split it into smaller notes."
        )
    return data
