"""Private files: what the runtime and its jobs write that holds prompts,
answers or callback capabilities is readable by its owner only.

Every such file is made here, one way: created with mode 0600 (then set to
0600 with ``fchmod``, whatever the umask), opened without following a
symbolic link (``O_NOFOLLOW``), and refused if it is not a regular file
owned by this user. Every directory made for them is 0700.

- ``make_private_dirs(path)``: ``path`` and its missing parents, each one it
  creates 0700; directories that exist are left as they are.
- ``check_private_dir(path)``: a directory private files go into that another
  user could fill (not owned by this user, or writable by group or others)
  is refused, naming it.
- ``open_private(path, append)``: a descriptor to write one private file.
- ``replace_when_done(path)``: a text file written to ``<path>.partial`` and
  renamed over ``path`` only when the block completes.
- ``create_private_file(path)``: an empty 0600 file unless one exists (the
  SQLite journal: SQLite then opens it, and gives its ``-wal`` and ``-shm``
  files the main file's mode).
- ``unwritable(path, what)``: why this process cannot write ``path``, or None.

Stdlib only, and below every layer: ``stores``, ``runtime``, ``jobs`` and
``cli`` all use it. On a platform without ``O_NOFOLLOW`` or user ids
(Windows) the link and owner checks are skipped.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TextIO, Union

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "UnsafePathError",
    "check_private_dir",
    "create_private_file",
    "make_private_dirs",
    "open_private",
    "replace_when_done",
    "unwritable",
]

FILE_MODE = 0o600
DIR_MODE = 0o700

PathLike = Union[str, "os.PathLike[str]"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a planted FIFO fails the open instead of blocking it
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class UnsafePathError(PermissionError):
    """A path private files were to be written to could leak them or be
    redirected by another user (a symbolic link, a file or directory another
    user owns, a directory others can write): refused. The message names
    the path and says what to change."""


def _euid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None


def make_private_dirs(path: PathLike) -> None:
    """Create directory ``path`` and its missing parents, each one created
    here with mode 0700 (umask-independent). Existing directories, and links
    to directories, are left as they are.

    Raises:
        UnsafePathError: A component is a link to nothing (or to a file).
        FileExistsError: A component exists and is not a directory.
        OSError: A directory cannot be created.
    """
    missing = []
    current = os.path.abspath(os.fspath(path))
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            if os.path.isdir(directory):  # another process made it meanwhile
                continue
            if os.path.islink(directory):
                raise UnsafePathError(
                    f"{directory} is a symbolic link to {os.readlink(directory)}, which is not a directory: "
                    "refused; remove it"
                ) from None
            raise
        fd = os.open(directory, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
        try:
            if hasattr(os, "fchmod"):
                os.fchmod(fd, DIR_MODE)
        finally:
            os.close(fd)


def check_private_dir(path: PathLike, follow_link: bool = True) -> None:
    """Refuse directory ``path`` if another user could read what is written
    there by planting files or links: it must be owned by this user and
    writable by nobody else.

    Args:
        path: The directory.
        follow_link: Check the directory a link at ``path`` leads to (an
            operator's own link); else a link is refused (a name in a shared
            directory, such as ``/tmp``, that anyone could have made).

    Raises:
        UnsafePathError: It is owned by another user, or group- or
            world-writable, or a link and ``follow_link`` is False (the
            message names it and the fix).
        NotADirectoryError: It is not a directory.
        FileNotFoundError: It does not exist.
    """
    if not follow_link and os.path.islink(path):
        raise UnsafePathError(
            f"{os.fspath(path)} is a symbolic link (to {os.readlink(path)}), which anyone could have made there: "
            "refused; remove it, or set a directory of your own"
        )
    found = os.stat(path)
    if not stat.S_ISDIR(found.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", os.fspath(path))
    mode = stat.S_IMODE(found.st_mode)
    euid = _euid()
    if euid is not None and found.st_uid != euid:
        raise UnsafePathError(
            f"{os.fspath(path)} is owned by another user (uid {found.st_uid}; this process runs as uid {euid}): "
            "files written there could be read or redirected by them; use a directory of your own"
        )
    if euid is not None and mode & 0o022:
        who = "group and others" if mode & 0o022 == 0o022 else ("others" if mode & 0o002 else "its group")
        raise UnsafePathError(
            f"{os.fspath(path)} is writable by {who} (mode {mode:04o}): another user could plant files or "
            f"symbolic links there; run 'chmod go-w {os.fspath(path)}' or use a directory only you can write"
        )


def _refuse_link(error: OSError, path: PathLike) -> OSError:
    """``error`` of an ``O_NOFOLLOW`` open, as ``UnsafePathError`` when
    ``path`` is a symbolic link."""
    if error.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):
        return UnsafePathError(
            f"{os.fspath(path)} is a symbolic link (to {os.readlink(path)}): refused, private files are never "
            "written through a link; remove it"
        )
    return error


def open_private(path: PathLike, append: bool = False) -> int:
    """A descriptor writing the private file ``path``: created 0600 if
    missing; an existing one must be a regular file owned by this user (set
    to 0600, then appended to or emptied). Never follows a link at ``path``.

    Args:
        path: The file.
        append: Write at the end (``O_APPEND``); else empty the file first.

    Returns:
        An ``O_WRONLY``, close-on-exec descriptor (``os.fdopen`` it).

    Raises:
        UnsafePathError: ``path`` is a symbolic link, or a file of another user.
        OSError: It is not a regular file, or cannot be opened.
    """
    flags = os.O_WRONLY | _NOFOLLOW | _CLOEXEC | (os.O_APPEND if append else 0)
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        try:
            fd = os.open(path, flags | _NONBLOCK)
        except OSError as error:
            raise _refuse_link(error, path) from None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise OSError(errno.EINVAL, "not a regular file: refused for private output", os.fspath(path))
        euid = _euid()
        if euid is not None and found.st_uid != euid:
            raise UnsafePathError(
                f"{os.fspath(path)} is a file of another user (uid {found.st_uid}; this process runs as uid {euid}): "
                "refused, they could read what is written to it; remove it or write elsewhere"
            )
        if hasattr(os, "fchmod") and stat.S_IMODE(found.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
        if not append and found.st_size:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def replace_when_done(path: PathLike) -> Iterator[TextIO]:
    """A UTF-8 text file for ``path``, private: written to ``<path>.partial``
    (``open_private``; missing directories made with ``make_private_dirs``),
    renamed over ``path`` when the block completes, removed if it raises, so
    a failed run never destroys an earlier result. A rename does not follow
    a link at ``path``: it replaces the link.

    Raises:
        UnsafePathError: ``<path>.partial`` is a link or another user's file
            (it is left alone).
        Whatever the block raises.
    """
    target = Path(path)
    make_private_dirs(target.parent)
    partial = target.with_name(target.name + ".partial")
    sink = os.fdopen(open_private(partial), "w", encoding="utf-8")
    try:
        with sink:
            yield sink
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, target)


def create_private_file(path: PathLike) -> bool:
    """Create ``path`` empty with mode 0600 unless it exists (a file that
    exists, or a link to one, is left as it is). Used where another library
    opens the file next (SQLite).

    Returns:
        Whether it was created here.

    Raises:
        UnsafePathError: ``path`` is a link to nothing (opening it would
            create the file wherever the link points).
        OSError: It cannot be created.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, FILE_MODE)
    except FileExistsError:
        if os.path.islink(path) and not os.path.exists(path):
            raise UnsafePathError(
                f"{os.fspath(path)} is a symbolic link to {os.readlink(path)}, which does not exist: refused, "
                "the file would be created wherever the link points; remove it or point the path at a file"
            ) from None
        return False
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return True


def unwritable(path: PathLike, what: str) -> str | None:
    """Why this process cannot write ``path`` (``what`` names it in the
    answer), or None. Read-only means: ``os.access`` says this process may
    not write it (which also sees a read-only mount), or its mode has no
    write bit for anyone. The second rule holds for root too, who could
    write anyway: a location marked read-only for everyone is treated as
    read-only by everyone.

    Raises:
        OSError: ``path`` cannot be examined (``os.stat``).
    """
    found = os.stat(path)
    mode = stat.S_IMODE(found.st_mode)
    if not mode & 0o222:
        return f"{what} has mode {mode:04o} (no write permission for anyone)"
    if os.access(path, os.W_OK):
        return None
    if hasattr(os, "statvfs") and os.statvfs(path).f_flag & os.ST_RDONLY:
        return f"{what} is on a read-only file system"
    return f"{what} (mode {mode:04o}, owner uid {found.st_uid}) is not writable by this user"
