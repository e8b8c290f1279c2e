"""The rules for files trainfleet writes, reads or hands over where a task's account may
have been before it.

A folder that a task's account owns (its job's working directory, an environment it
builds) may hold links it planted, and may change while trainfleet looks at it. A process
with more rights than that account (a server running as root) must neither follow those
links nor walk through them, so everything here works through directory descriptors:

- ``write_new``: a file is created new (``O_EXCL | O_NOFOLLOW``) in a directory opened
  without following a link, never rewritten in place;
- ``fresh_dir``: a folder for an account to read is made afresh (whatever was at its path
  removed first, without following), ours, and only then opened to its group;
- ``read_inside``: a file named by a user, relative to a folder, is read with no link on
  the way (a link to ``/etc/shadow`` is refused, not read), and at most ``limit`` bytes
  (``open_inside``: its descriptor, for a caller that streams it; a FIFO or a device is
  never opened);
- ``plain_files``: the regular files directly in a folder, no link, FIFO or device;
- ``own_tree``: a folder is handed to an account, or taken back from one, by a walk by
  descriptor (``os.fwalk``) that changes each entry itself, never what a link points to.

Callers make these paths under folders of their own (the data directory's), which no
account can write: only the last component can be the account's doing.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PLAIN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
NO_WRITE = ~0o022 & 0o7777
"""Mode bits kept by ``own_tree(..., read_only=True)``: group and others lose write."""


class LinkRefused(OSError):
    """A path that should be a plain file or folder is a link, or leads through one."""


def _open_dir(path: Path | str, dir_fd: int | None = None) -> int:
    """A descriptor of the folder at ``path`` (relative to ``dir_fd``), itself no link."""
    try:
        return os.open(path, _DIRECTORY, dir_fd=dir_fd)
    except NotADirectoryError:  # what O_DIRECTORY | O_NOFOLLOW says of a link, too
        if stat.S_ISLNK(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise LinkRefused(errno.ELOOP, "a link, not a folder", str(path)) from None
        raise


def remove(path: Path) -> None:
    """Remove whatever is at ``path`` (a file, a link itself, a folder and all it holds),
    following no link; nothing there is fine."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path)  # by descriptor: a link inside is removed, never followed
    else:
        path.unlink()


def fresh_dir(path: Path, mode: int = 0o700, group: int | None = None) -> None:
    """``path`` made new, this process's, with ``mode`` and (where given) ``group``;
    what was there first is removed without following a link."""
    remove(path)
    path.mkdir(mode=0o700)
    descriptor = _open_dir(path)
    try:
        if group is not None:
            os.fchown(descriptor, -1, group)
        os.fchmod(descriptor, mode)
    finally:
        os.close(descriptor)


def write_new(
    folder: Path, name: str, data: bytes, mode: int = 0o600, group: int | None = None
) -> Path:
    """Create ``folder/name`` holding ``data``: a new file (one already there, even a
    link, is an error: FileExistsError), ``mode``, ``group`` where given."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"{name!r} is not a file name")
    directory = _open_dir(folder)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        descriptor = os.open(name, flags, 0o600, dir_fd=directory)
        with os.fdopen(descriptor, "wb") as file:
            if group is not None:
                os.fchown(descriptor, -1, group)
            os.fchmod(descriptor, mode)
            file.write(data)
    finally:
        os.close(directory)
    return folder / name


def modified(path: Path) -> float:
    """When ``path`` last changed, not following a link a member may have put there; 0
    where it is not there."""
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def plain_folder(path: Path | str) -> bool:
    """Whether ``path`` is a folder itself, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def read_inside(root: Path, relative: str, limit: int) -> bytes:
    """The bytes of ``root/relative``, opened with no link anywhere below ``root``.

    Raises LinkRefused where a component is a link, ValueError past ``limit`` bytes or
    for a path that leaves ``root``, OSError where it cannot be read."""
    with os.fdopen(open_inside(root, relative), "rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{relative!r} holds more than {limit} bytes")
    return data


def open_inside(root: Path, relative: str) -> int:
    """A read-only descriptor of the regular file ``root/relative``, reached with no link
    anywhere below ``root``: a FIFO, a device or a socket is not opened (looked at first,
    then opened ``O_NONBLOCK`` and looked at again, in case it was swapped meanwhile).

    Raises LinkRefused where a component is a link, ValueError for what is no regular
    file or a path that leaves ``root``, OSError (FileNotFoundError...) otherwise."""
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"{relative!r} is not a path inside the folder")
    directory = _open_dir(root)
    try:
        for part in parts[:-1]:
            inner = _open_dir(part, dir_fd=directory)
            os.close(directory)
            directory = inner
        seen = os.stat(parts[-1], dir_fd=directory, follow_symlinks=False)
        if stat.S_ISLNK(seen.st_mode):
            raise LinkRefused(errno.ELOOP, "a link, not a file", relative)
        if not stat.S_ISREG(seen.st_mode):
            raise ValueError(f"{relative!r} is not a regular file")
        try:
            descriptor = os.open(parts[-1], _PLAIN_FILE, dir_fd=directory)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise LinkRefused(errno.ELOOP, "a link, not a file", relative) from None
            raise
    finally:
        os.close(directory)
    opened = os.fstat(descriptor)
    if not stat.S_ISREG(opened.st_mode) or not os.path.samestat(opened, seen):
        os.close(descriptor)
        raise ValueError(f"{relative!r} is not a regular file")
    return descriptor


def plain_files(folder: Path) -> Iterator[tuple[str, os.stat_result]]:
    """The regular files directly in ``folder`` (itself no link), each with its status:
    no link, folder, FIFO or device among them, nothing followed; none where ``folder``
    is missing or a link."""
    try:
        directory = _open_dir(folder)
    except (FileNotFoundError, NotADirectoryError, LinkRefused):
        return
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # gone meanwhile
                    continue
                if stat.S_ISREG(info.st_mode):
                    yield entry.name, info
    finally:
        os.close(directory)


def own_tree(
    path: Path, uid: int, gid: int, mode: int | None = None, read_only: bool = False
) -> None:
    """Give ``path`` and everything in it to ``uid:gid``, following no link (a link is
    changed itself); ``mode``: the top folder's; ``read_only``: group and others lose
    write on every entry (a built environment no task may change).

    Top-down: each folder is this owner's before anything in it is, so an account that
    owned the tree cannot swap an entry for a link once the walk has reached it."""
    top = _open_dir(path)
    try:
        os.fchown(top, uid, gid)
        os.fchmod(top, mode if mode is not None else _kept(os.fstat(top).st_mode, read_only))
        for _, folders, files, directory in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            for name in (*folders, *files):
                _own(name, directory, uid, gid, read_only)
    finally:
        os.close(top)


def _own(name: str, directory: int, uid: int, gid: int, read_only: bool) -> None:
    try:
        os.chown(name, uid, gid, dir_fd=directory, follow_symlinks=False)
        info = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:  # gone meanwhile
        return
    if read_only and (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        descriptor = os.open(name, flags, dir_fd=directory)
        try:
            os.fchmod(descriptor, _kept(info.st_mode, read_only))
        finally:
            os.close(descriptor)


def _kept(mode: int, read_only: bool) -> int:
    kept = stat.S_IMODE(mode)
    return kept & NO_WRITE if read_only else kept
